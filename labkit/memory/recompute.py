"""Recomputation inside the GPT: selective (the attention core) and full (whole blocks).

**Selective recomputation** (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models"): recompute only the attention core, whose saved tensors grow as s², and keep
the rest. ``recompute(model, "selective")`` checkpoints (`labkit.memory.activation_checkpointing.
checkpoint_segment`), in every block, the model's own `labkit.model.attention_core` — from the
qkv projection's output (B, s, 3h) to the output projection's input (B, s, h). Per layer that
frees exactly

    softmax output  a·b·s²·e   +   causal mask  s² bytes (bool)

and nothing else: the copies of q, k and v that the two batched matmuls save (3·b·s·h·e) are
replaced by the saved qkv output, which has the same size (`labkit.memory.estimate.
gpt_layer_saved_bytes` has the closed forms). The price is one more QKᵀ and att·V: 4·b·s²·h
FLOPs per layer (`gpt_extra_flops`). Megatron's 5·a·s²·b also counts attention dropout's mask
and output, which this GPT does not have.

**Full recomputation**: ``recompute(model, "full")`` checkpoints each whole Block. A block then
keeps only its input, b·s·h·e, but runs every Linear twice: 2·b·s·(4h² + 2h·f) + 4·b·s²·h more
FLOPs per layer (f = mlp_ratio·h).

Loss and every gradient are bit for bit those of the plain model (`recompute_table` checks).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from labkit.checks import check_int
from labkit.memory.activation_checkpointing import checkpoint_segment
from labkit.memory.estimate import RECOMPUTE, gpt_layer_saved_bytes
from labkit.memory.tracker import ActivationPeakTracker
from labkit.model import GPT, GPTConfig, attention_core, batch
from labkit.table import Table


def _check_gpt(fn: str, model) -> None:
    if not isinstance(model, GPT):
        raise TypeError(f"{fn}: model must be a labkit.model.GPT, got {type(model).__name__}")


def _check_policy(fn: str, policy) -> None:
    if policy not in RECOMPUTE:
        raise ValueError(f"{fn}: policy must be one of {', '.join(RECOMPUTE)}, got {policy!r}")


@contextlib.contextmanager
def recompute(model: GPT, policy: str = "selective"):
    """Within the block, every Block of ``model`` recomputes in backward: ``"selective"`` its
    attention core, ``"full"`` the whole block, ``"none"`` nothing. The instances' methods are
    patched and restored on exit."""
    _check_gpt("recompute", model)
    _check_policy("recompute", policy)
    patches = []
    for block in model.blocks:
        if policy == "selective":
            attn = block.attn
            patches.append((attn, "core", lambda qkv, attn=attn: checkpoint_segment(
                lambda t: attention_core(t, attn.heads), qkv)))                   # (B, s, 3h) kept
        elif policy == "full":
            plain, params = block.forward, list(block.parameters())
            patches.append((block, "forward", lambda x, plain=plain, params=params: checkpoint_segment(
                plain, x, params=params)))                                        # (B, s, h) kept
    if any(name in vars(m) for m, name, _ in patches):
        raise RuntimeError("recompute: the model is already patched (nested recompute blocks?)")
    try:
        for module, name, fn in patches:
            setattr(module, name, fn)
        yield model
    finally:
        for module, name, _ in patches:
            vars(module).pop(name, None)


@dataclass(frozen=True)
class GPTStep:
    """One forward + backward of the GPT under a recomputation ``policy``: ``saved_bytes`` =
    activation bytes live after forward (what backward will use, plus logits and loss),
    ``peak_bytes`` = peak activation bytes over forward + backward, ``flops`` (FlopCounterMode,
    matmuls only), ``loss`` and ``grads`` (parameter name -> gradient) to compare."""

    policy: str
    saved_bytes: int
    peak_bytes: int
    flops: int
    loss: torch.Tensor
    grads: dict


def measure_gpt_step(model: GPT, tokens: torch.Tensor, targets: torch.Tensor, policy: str = "none") -> GPTStep:
    """Run forward + backward of ``model`` on (tokens, targets) (B, s) under ``recompute(model,
    policy)``: once with `ActivationPeakTracker`, once with ``FlopCounterMode``. The model's
    gradients are None before and after (the step's gradients are returned)."""
    _check_gpt("measure_gpt_step", model)
    _check_policy("measure_gpt_step", policy)
    model.zero_grad(set_to_none=True)
    tracker = ActivationPeakTracker(model)
    with recompute(model, policy), tracker:
        _, loss = model(tokens, targets)
        saved = tracker.live_by_category()["activations"]
        loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    with recompute(model, policy), FlopCounterMode(display=False) as counter:
        model(tokens, targets)[1].backward()
    model.zero_grad(set_to_none=True)
    return GPTStep(policy, saved, tracker.peak_activation_bytes, counter.get_total_flops(), loss.detach(), grads)


def gpt_extra_flops(cfg: GPTConfig, batch_size: int, seq: int, policy: str = "selective") -> int:
    """Matmul FLOPs recomputation adds to one step, all layers (module docstring)."""
    fn = "gpt_extra_flops"
    b, s = check_int(fn, "batch_size", batch_size, minimum=1), check_int(fn, "seq", seq, minimum=1)
    _check_policy(fn, policy)
    h, f = cfg.hidden, cfg.ffn
    core = 4 * b * s * s * h
    per_layer = {"none": 0, "selective": core, "full": 2 * b * s * (4 * h * h + 2 * h * f) + core}[policy]
    return cfg.layers * per_layer


def recompute_table(cfg: GPTConfig, batch_size: int = 4, dtype: torch.dtype = torch.float32, seed: int = 0) -> Table:
    """The GPT under each policy: bytes one layer keeps (closed form), activation bytes kept after
    forward and their peak (measured), extra FLOPs (measured and closed form), and whether loss
    and every gradient are bit for bit those of the plain step."""
    check_int("recompute_table", "batch_size", batch_size, minimum=1)
    model = GPT(cfg, seed=seed, dtype=dtype)
    tokens, targets = batch(cfg, batch_size, seed=seed + 1)
    e = torch.empty((), dtype=dtype).element_size()
    steps = {p: measure_gpt_step(model, tokens, targets, p) for p in RECOMPUTE}
    ref = steps["none"]
    rows = []
    for p, st in steps.items():
        same = torch.equal(st.loss, ref.loss) and all(torch.equal(st.grads[n], g) for n, g in ref.grads.items())
        rows.append([p, gpt_layer_saved_bytes(cfg, batch_size, cfg.seq_len, e, p), st.saved_bytes, st.peak_bytes,
                     st.flops - ref.flops, gpt_extra_flops(cfg, batch_size, cfg.seq_len, p), "yes" if same else "NO"])
    return Table(["policy", "per layer", "kept after fwd", "peak act.", "extra FLOPs", "closed form", "bitwise"],
                 rows, title=f"GPT layers={cfg.layers} h={cfg.hidden} heads={cfg.heads} s={cfg.seq_len}, "
                             f"batch {batch_size}, {str(dtype).replace('torch.', '')}; bytes")
