"""Gradient compression with error feedback: send less than the whole gradient, remember the rest.

Two compressors of a flat gradient g (n elements):

- **top-k** (as in Deep Gradient Compression, Lin et al. 2018): keep the k entries of largest
  magnitude, send (values, indices) — k·(4 + 8) bytes for float32 values and int64 indices;
- **1-bit / sign** (1-bit SGD, Seide et al. 2014): send the signs, one bit each, and one scale
  (the mean |g|) — ⌈n/8⌉ + 4 bytes; decompressed as scale·sign.

Both lose information. **Error feedback** keeps the loss: each rank adds its residual e (what it
did not send so far) before compressing and keeps the new residual, c = g + e, sent = C(c),
e ← c − sent. Over steps, everything is sent eventually (sum of sent + final residual = sum of
gradients, exactly).

Compressed payloads are not summable in place, so the ranks all-gather them (a ring all-gather
sends (p − 1) payloads per rank) and each rank averages the p decompressed gradients; a dense
ring all-reduce sends 2(p − 1)/p · 4n bytes per rank.
"""
from __future__ import annotations

import math
import statistics

import torch
import torch.distributed as dist

from labkit.checks import check_int, check_real
from labkit.dist import device
from labkit.model import GPT, GPTConfig, batch

METHODS = ("dense", "topk", "topk+ef", "sign+ef")


def topk_compress(g: torch.Tensor, k: int):
    """(values, indices) of the k largest-magnitude entries of the 1-D tensor g."""
    k = check_int("topk_compress", "k", k, minimum=1, maximum=g.numel())
    idx = g.abs().topk(k).indices
    return g[idx], idx


def topk_decompress(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor:
    return values.new_zeros(numel).index_put((indices,), values)


def sign_compress(g: torch.Tensor):
    """(packed sign bits as uint8, scale = mean |g|); a zero counts as +."""
    bits = (g < 0).to(torch.uint8)
    pad = (-g.numel()) % 8
    bits = torch.cat([bits, bits.new_zeros(pad)]).view(-1, 8)
    packed = (bits << torch.arange(8, dtype=torch.uint8, device=bits.device)).sum(dim=1, dtype=torch.uint8)
    return packed, g.abs().mean()


def sign_decompress(packed: torch.Tensor, scale: torch.Tensor, numel: int) -> torch.Tensor:
    bits = (packed[:, None] >> torch.arange(8, dtype=torch.uint8, device=packed.device)) & 1
    sign = 1.0 - 2.0 * bits.reshape(-1)[:numel].to(scale.dtype)
    return scale * sign


class ErrorFeedback:
    """Residual memory for one tensor: ``sent = step(g)`` compresses g + residual with
    ``roundtrip`` (compress then decompress) and keeps what was not sent."""

    def __init__(self, roundtrip):
        self.roundtrip, self.residual = roundtrip, None

    def step(self, g: torch.Tensor) -> torch.Tensor:
        c = g if self.residual is None else g + self.residual
        sent = self.roundtrip(c)
        self.residual = c - sent
        return sent


def payload_bytes(method: str, numel: int, k: int, itemsize: int = 4) -> int:
    """Bytes one rank contributes per step: a compressed payload, or the dense gradient."""
    if method == "dense":
        return numel * itemsize
    if method.startswith("topk"):
        return k * (itemsize + 8)
    return math.ceil(numel / 8) + itemsize


def bytes_sent_per_rank(method: str, numel: int, k: int, world: int, itemsize: int = 4) -> float:
    """Per step: dense ring all-reduce 2(p−1)/p·S; compressed ring all-gather (p−1)·payload."""
    if method == "dense":
        return 2 * (world - 1) / world * numel * itemsize
    return (world - 1) * payload_bytes(method, numel, k, itemsize)


def _all_gather(t: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t.contiguous())
    return out


def compressed_mean(g: torch.Tensor, method: str, k: int, feedback: ErrorFeedback | None) -> torch.Tensor:
    """The mean over ranks of the (compressed) flat gradient g, on every rank."""
    n, world = g.numel(), dist.get_world_size()
    if method == "dense":
        dist.all_reduce(g)
        return g / world
    src = feedback.step(g) if feedback else g     # with feedback: what it decided to send, as a dense tensor
    if method.startswith("topk"):
        vals, idx = topk_compress(src, k)
        parts = [topk_decompress(v, i, n) for v, i in zip(_all_gather(vals), _all_gather(idx))]
    else:
        packed, scale = sign_compress(src)
        parts = [sign_decompress(p, s, n) for p, s in zip(_all_gather(packed), _all_gather(scale.reshape(1)))]
    return torch.stack(parts).mean(dim=0)


def _train_rank(rank, world, cfg, method, ratio, steps, per_rank, lr, dtype):
    dev = device()
    model = GPT(cfg, seed=0, dtype=dtype).to(dev)
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    k = max(1, int(ratio * n))
    roundtrip = {"topk+ef": lambda c: topk_decompress(*topk_compress(c, k), n),
                 "sign+ef": lambda c: sign_decompress(*sign_compress(c), n)}.get(method)
    feedback = ErrorFeedback(roundtrip) if roundtrip else None
    losses = []
    for step in range(steps):
        tokens, targets = (t.to(dev) for t in batch(cfg, per_rank, seed=step * world + rank))
        model.zero_grad()
        loss = model(tokens, targets)[1]
        loss.backward()
        losses.append(loss.item())
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        mean = compressed_mean(flat, method, k, feedback)
        with torch.no_grad():
            offset = 0
            for p in params:
                p -= lr * mean[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
    eval_tokens, eval_targets = (t.to(dev) for t in batch(cfg, 64, seed=10**6))
    with torch.no_grad():
        final = model(eval_tokens, eval_targets)[1].item()
    return {"final_loss": final, "train_loss": statistics.fmean(losses[-5:]), "numel": n, "k": k,
            "params": [p.detach().clone() for p in params]}


def train_compressed(cfg: GPTConfig, method: str, world: int = 2, ratio: float = 0.01, steps: int = 40,
                     per_rank: int = 8, lr: float = 0.5, dtype: torch.dtype = torch.float32) -> dict:
    """SGD on ``world`` ranks (gloo, or NCCL with a GPU each) with gradients averaged by ``method`` (METHODS); top-k keeps
    ``ratio`` of the entries. Returns rank 0's {"final_loss" (on a held-out batch), "train_loss"
    (mean of the last 5 steps), "numel", "k", "params", "bytes_per_step" (sent per rank)}."""
    from labkit.dist import launch

    if method not in METHODS:
        raise ValueError(f"train_compressed: method must be one of {', '.join(METHODS)}, got {method!r}")
    check_real("train_compressed", "ratio", ratio, positive=True)
    out = launch(_train_rank, world, cfg, method, ratio, steps, per_rank, lr, dtype, timeout=300)[0]
    out["bytes_per_step"] = bytes_sent_per_rank(method, out["numel"], out["k"], world,
                                                torch.empty((), dtype=dtype).element_size())
    return out
