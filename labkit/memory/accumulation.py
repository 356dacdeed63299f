"""Gradient accumulation: the gradient of a large batch, computed a micro-batch at a time.

A batch of B rows is cut into n = B / m micro-batches of m rows. Each micro-batch runs forward and
backward on its own; ``backward`` *adds* into ``.grad``, so after the n backwards ``.grad`` holds
the sum of what each one contributed. The model's loss is a mean over the micro-batch's m·T
positions, and every micro-batch has the same number of positions, so the full batch's mean loss
is the average of the n micro-batch means:

    L(batch) = (1/n) · Σᵢ L(micro-batch i)        ⇒   ∇L(batch) = Σᵢ ∇( L(micro-batch i) / n )

so each micro-batch's loss is divided by n — the number of micro-batches, not the micro-batch
size m — before its backward. Forgetting the 1/n gives a gradient n times too large, which
silently behaves like an n times larger learning rate.

**Memory.** Activations exist for one micro-batch at a time, so the peak activation bytes are
affine in m: peak(m) = c₀ + m·c₁ exactly, c₁ being what one row keeps until the loss's backward
and c₀ what does not depend on the micro-batch (the causal masks, the whole batch's token ids,
the positions) — `accumulation_peak_bytes` gives both for `labkit.model.GPT`. With a tiny
micro-batch and a small vocabulary the peak moves to a moment deeper in backward whose bytes
hardly depend on m (weight-gradient temporaries), so in general peak(m) is the larger of two
affine functions. The model states (parameters, gradients) do not depend on m at all. The price:
n smaller forwards and backwards instead of one large one — the same FLOPs, but small matmuls
use the hardware less well.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from labkit.checks import check_int
from labkit.memory.estimate import gpt_layer_saved_bytes
from labkit.memory.tracker import ActivationPeakTracker
from labkit.table import Table


def accumulate_gradients(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                         micro_batch: int) -> float:
    """Add to ``.grad`` the gradient of the mean loss of the whole batch (tokens, targets), each
    (B, T), computed in B / micro_batch forward/backward passes of ``micro_batch`` rows; return
    the batch's mean loss (a float). Zero the gradients first (``model.zero_grad()``), as for one
    ``loss.backward()``. ``model(tokens, targets)`` must return (logits, mean loss), as
    `labkit.model.GPT` does."""
    fn = "accumulate_gradients"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{fn}: model must be an nn.Module, got {type(model).__name__}")
    for name, t in (("tokens", tokens), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{fn}: {name} must have shape (batch, seq), got {tuple(t.shape)}")
    if tokens.shape != targets.shape:
        raise ValueError(f"{fn}: tokens {tuple(tokens.shape)} and targets {tuple(targets.shape)} "
                         f"differ in shape")
    rows = tokens.shape[0]
    m = check_int(fn, "micro_batch", micro_batch, minimum=1, maximum=rows)
    if rows % m:
        raise ValueError(f"{fn}: micro_batch ({m}) must divide the batch ({rows} rows)")
    n = rows // m
    total = 0.0
    for i in range(n):
        rows_i = slice(i * m, (i + 1) * m)                       # tokens[rows_i]: (m, T), a view
        loss = model(tokens[rows_i], targets[rows_i])[1]         # mean over the m·T positions
        (loss / n).backward()                                    # adds ∇(L_i / n) into .grad
        total += loss.item()
    return total / n


def accumulation_peak(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                      micro_batch: int) -> dict:
    """Run `accumulate_gradients` under `ActivationPeakTracker` (gradients set to None first):
    {"activations": peak activation bytes, "parameters": bytes, "gradients": bytes live at the
    end, "loss": mean loss}; the gradients are left in ``.grad``."""
    model.zero_grad(set_to_none=True)
    tracker = ActivationPeakTracker(model)
    with tracker:
        loss = accumulate_gradients(model, tokens, targets, micro_batch)
        live = tracker.live_by_category()
    return {"activations": tracker.peak_activation_bytes, "parameters": live["parameters"],
            "gradients": live["gradients"], "loss": loss}


def accumulation_table(cfg, batch: int = 8, micro_batches: Sequence[int] = (1, 2, 4, 8),
                       seed: int = 0) -> Table:
    """For each micro-batch size m: the number of passes, the peak activation bytes (measured, and
    `accumulation_peak_bytes`, which it equals or exceeds), the model states' bytes and
    max |grad − full-batch grad| on `labkit.model.GPT` (cfg, float64)."""
    from labkit.model import GPT, GPTConfig, batch as make_batch

    fn = "accumulation_table"
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a GPTConfig, got {type(cfg).__name__}")
    b = check_int(fn, "batch", batch, minimum=1)
    check_int(fn, "seed", seed)
    for m in micro_batches:
        check_int(fn, "micro_batch", m, minimum=1, maximum=b)
        if b % m:
            raise ValueError(f"{fn}: micro_batch ({m}) must divide the batch ({b} rows)")
    model = GPT(cfg, seed=seed, dtype=torch.float64)
    tokens, targets = make_batch(cfg, b, seed=seed + 1)
    model(tokens, targets)[1].backward()                             # the full batch, one pass
    full = [p.grad.clone() for p in model.parameters()]
    rows = []
    for m in micro_batches:
        got = accumulation_peak(model, tokens, targets, m)
        err = max(float((p.grad - g).abs().max()) for p, g in zip(model.parameters(), full))
        rows.append([m, b // m, got["activations"], accumulation_peak_bytes(cfg, b, m, 8),
                     got["parameters"] + got["gradients"], err])
    model.zero_grad(set_to_none=True)
    return Table(["micro-batch", "passes", "peak act. bytes", "closed form", "params+grads bytes",
                  "max |dgrad|"], rows,
                 formats={"max |dgrad|": ".1e"},
                 title=f"GPT layers={cfg.layers} h={cfg.hidden} T={cfg.seq_len}, batch {b}, float64")


def accumulation_peak_bytes(cfg, batch: int, micro_batch: int, itemsize: int) -> int:
    """Activation bytes live when the first micro-batch's backward reaches the loss's log-softmax
    (`labkit.model.GPT`, CPU; e = itemsize, T = seq_len, h, f = ffn, nh, V = vocab, L = layers):

        c₁ = [L·((8h + 2f)·T + 4T + nh·T²) + 2hT + 2T + 3TV]·e        per row of the micro-batch
        c₀ = L·T² + 16·batch·T + 8T + 3e                               independent of the micro-batch

    c₁: every layer's saved tensors (`labkit.memory.estimate.gpt_layer_saved_bytes`),
    the final LayerNorm's input, output, mean and 1/σ, and three (T, V) tensors: the log-softmax
    output, the gradient arriving at it and the gradient it produces. c₀: the L bool masks, the
    whole batch's int64 tokens and targets (the micro-batches are views of them), the int64
    positions, and three scalars (the loss, the cross-entropy's weight sum, the seed gradient).

    That moment is always reached, so the measured peak is at least this; it *is* the peak when
    the loss head is the largest thing in flight (a vocabulary large next to the hidden size, or
    a micro-batch not too small) — otherwise the peak is at a batch-independent moment deeper in
    backward, and peak(m) is the larger of two affine functions of m."""
    from labkit.model import GPTConfig

    fn = "accumulation_peak_bytes"
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a GPTConfig, got {type(cfg).__name__}")
    b = check_int(fn, "batch", batch, minimum=1)
    m = check_int(fn, "micro_batch", micro_batch, minimum=1, maximum=b)
    e = check_int(fn, "itemsize", itemsize, minimum=1)
    L, T, h, V = cfg.layers, cfg.seq_len, cfg.hidden, cfg.vocab
    layer_row = gpt_layer_saved_bytes(cfg, 1, T, e) - T * T         # one row's share (the mask is in c0)
    per_row = L * layer_row + (2 * h * T + 2 * T + 3 * T * V) * e
    fixed = L * T * T + 16 * b * T + 8 * T + 3 * e
    return fixed + m * per_row
