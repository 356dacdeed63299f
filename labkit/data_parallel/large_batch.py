"""Large batches: how the learning rate should grow with the batch, tried on the small GPT.

Data parallelism with N ranks of b sequences is one process with a batch of N·b (Section 1 of the
lab shows it to rounding), so one process suffices to study batch size. For a fixed number of
training *samples*, a batch B takes samples/B steps; with the learning rate unchanged, larger
batches take fewer steps of the same size and fall behind. The two usual rules scale the rate
from a base (B0, lr0): **linear**, lr = lr0·B/B0 (Goyal et al. 2017, for SGD), and **square root**,
lr = lr0·√(B/B0) (Krizhevsky 2014; Hoffer et al. 2017). Both stop working past some batch size,
where the step becomes too large to be stable.
"""
from __future__ import annotations

import math

import torch

from labkit.checks import check_int, check_real
from labkit.model import GPT, GPTConfig, batch

RULES = ("none", "linear", "sqrt")


def scaled_lr(rule: str, lr0: float, batch_size: int, base_batch: int) -> float:
    """The learning rate ``rule`` gives a batch of ``batch_size`` from (base_batch, lr0)."""
    if rule not in RULES:
        raise ValueError(f"scaled_lr: rule must be one of {', '.join(RULES)}, got {rule!r}")
    ratio = check_int("scaled_lr", "batch_size", batch_size, minimum=1) / check_int(
        "scaled_lr", "base_batch", base_batch, minimum=1)
    return check_real("scaled_lr", "lr0", lr0, positive=True) * {"none": 1.0, "linear": ratio,
                                                                 "sqrt": math.sqrt(ratio)}[rule]


def loss_after(cfg: GPTConfig, samples: int, batch_size: int, lr: float, seed: int = 0) -> float:
    """Held-out loss after SGD over ``samples`` sequences in batches of ``batch_size``."""
    check_int("loss_after", "samples", samples, minimum=1)
    if samples % batch_size:
        raise ValueError(f"loss_after: samples ({samples}) must be a multiple of batch_size ({batch_size})")
    model = GPT(cfg, seed=seed, dtype=torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(samples // batch_size):
        opt.zero_grad()
        loss = model(*batch(cfg, batch_size, seed=step * 1000 + batch_size))[1]
        if not torch.isfinite(loss):
            return float("inf")
        loss.backward()
        opt.step()
    with torch.no_grad():
        final = model(*batch(cfg, 64, seed=10**6))[1].item()
    return final if math.isfinite(final) else float("inf")
