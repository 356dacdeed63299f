"""A mixture-of-experts layer trained with and without the router's auxiliary losses.

The task: regress a fixed random teacher network on inputs x ~ N(μ, I) with a shared offset μ.
The offset gives every token nearly the same router logits at the start, so a router trained
on the task alone keeps sending most tokens to the same few experts (the rich get richer: the
experts it favours learn fastest). With Switch's balance loss (α · `load_balancing_loss`) the
router spreads the tokens; the z-loss (β · `router_z_loss`) keeps its logits small.

`train_router(cfg, alpha, beta)` trains the layer (Adam, full-batch, float64, seeded) and
reports on held-out tokens: the choices each expert receives (load), max/mean load, the
coefficient of variation (std/mean), the fraction of choices dropped at capacity factors 1.0
and 1.25, the task loss, and the two auxiliary losses' values.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from labkit.checks import check_int, check_real
from labkit.tensor_parallel.experts import (MoE, MoEConfig, expert_load, load_balancing_loss, moe_reference, route,
                                            router_z_loss)

CFG = MoEConfig(hidden=16, experts=8, ffn=16, top_k=2, capacity_factor=2.0)


@dataclass(frozen=True)
class BalanceRun:
    """One training run's numbers, measured on held-out tokens (module docstring)."""

    alpha: float
    beta: float
    load: tuple                 # choices per expert
    max_over_mean: float
    cv: float
    dropped: dict               # capacity factor -> fraction of choices dropped
    task_loss: float
    z_loss: float               # router_z_loss on the held-out tokens
    balance_loss: float         # load_balancing_loss on the held-out tokens


def _data(cfg: MoEConfig, tokens: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    offset = 3.0 * torch.ones(cfg.hidden, dtype=torch.float64)
    return torch.randn(tokens, cfg.hidden, dtype=torch.float64, generator=g) + offset        # (T, h)


def _teacher(cfg: MoEConfig, x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    w1 = torch.randn(cfg.hidden, 32, dtype=torch.float64, generator=g) / cfg.hidden ** 0.5
    w2 = torch.randn(32, cfg.hidden, dtype=torch.float64, generator=g) / 32 ** 0.5
    return torch.tanh((x - 3.0) @ w1) @ w2


def train_router(cfg: MoEConfig = CFG, alpha: float = 0.0, beta: float = 0.0, steps: int = 100,
                 tokens: int = 256, lr: float = 1e-2, seed: int = 0) -> BalanceRun:
    """Train `MoE(cfg)` on the task with loss = task + α·balance + β·z; measure (module docstring)."""
    fn = "train_router"
    alpha, beta = check_real(fn, "alpha", alpha), check_real(fn, "beta", beta)
    steps = check_int(fn, "steps", steps, minimum=0)
    tokens = check_int(fn, "tokens", tokens, minimum=cfg.experts)
    moe = MoE(cfg, seed=seed)
    opt = torch.optim.Adam(moe.parameters(), lr=lr)
    x, x_eval = _data(cfg, tokens, seed + 1), _data(cfg, tokens, seed + 2)
    y, y_eval = _teacher(cfg, x), _teacher(cfg, x_eval)
    for _ in range(steps):
        opt.zero_grad()
        logits = moe.router(x)
        loss = F.mse_loss(moe_reference(moe, x)[0], y)
        if alpha:
            loss = loss + alpha * load_balancing_loss(logits, cfg.top_k)
        if beta:
            loss = loss + beta * router_z_loss(logits)
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = moe.router(x_eval)
        r = route(moe.router, x_eval, cfg)
        load = expert_load(r.expert, cfg.experts).double()
        dropped = {f: route(moe.router, x_eval, replace(cfg, capacity_factor=f)).dropped / (tokens * cfg.top_k)
                   for f in (1.0, 1.25)}
        task = F.mse_loss(moe_reference(moe, x_eval)[0], y_eval).item()
        return BalanceRun(alpha, beta, tuple(int(v) for v in load), (load.max() / load.mean()).item(),
                          (load.std(unbiased=False) / load.mean()).item(), dropped, task,
                          router_z_loss(logits).item(), load_balancing_loss(logits, cfg.top_k).item())
