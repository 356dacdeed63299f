"""Local SGD / FedAvg: take H steps alone, then average the parameters (McMahan et al. 2017).

Each rank runs H plain SGD steps on its own data, then the ranks average their parameters with one
all-reduce. Communication falls H-fold (one model-sized all-reduce per H steps instead of one per
step); the price is that the replicas drift apart between averages. With H = 1 and plain SGD it
*is* synchronous data parallelism: averaging p − lr·g_r over ranks gives p − lr·mean(g_r), the
same step (tests/test_dp_compression.py checks it to rounding in float64).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.checks import check_int
from labkit.dist import device
from labkit.model import GPT, GPTConfig, batch


def _rank(rank, world, cfg, local_steps, rounds, per_rank, lr, dtype):
    dev = device()
    model = GPT(cfg, seed=0, dtype=dtype).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    eval_tokens, eval_targets = (t.to(dev) for t in batch(cfg, 64, seed=10**6))
    losses, nbytes = [], 0
    for r in range(rounds):
        for h in range(local_steps):
            step = r * local_steps + h
            tokens, targets = (t.to(dev) for t in batch(cfg, per_rank, seed=step * world + rank))
            opt.zero_grad()
            model(tokens, targets)[1].backward()
            opt.step()
        with torch.no_grad():
            params = list(model.parameters())
            flat = torch.cat([p.reshape(-1) for p in params])          # one message per average
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            nbytes += 2 * (world - 1) / world * flat.numel() * flat.element_size()   # ring all-reduce
            losses.append(model(eval_tokens, eval_targets)[1].item())
    return {"losses": losses, "bytes": nbytes, "params": [p.detach().clone() for p in model.parameters()]}


def local_sgd(cfg: GPTConfig, local_steps: int, rounds: int, world: int = 2, per_rank: int = 8,
              lr: float = 0.5, dtype: torch.dtype = torch.float32) -> dict:
    """Run local SGD on ``world`` ranks (gloo, or NCCL with a GPU each); rank 0's {"losses": held-out loss after each
    average, "bytes": sent per rank in all, "params": final parameters}."""
    from labkit.dist import launch

    check_int("local_sgd", "local_steps", local_steps, minimum=1)
    check_int("local_sgd", "rounds", rounds, minimum=1)
    return launch(_rank, world, cfg, local_steps, rounds, per_rank, lr, dtype, timeout=300)[0]
