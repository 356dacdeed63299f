"""Closed forms for a training step's memory: model states per parameter, activations per layer.

**Model states** with Adam, per parameter (bytes):

- fp32 training: parameter 4 + gradient 4 + Adam's m 4 and v 4 = **16**;
- mixed precision (Micikevicius et al. 2018; ZeRO's accounting): bf16/fp16 parameter 2 + gradient
  2, and fp32 master copy 4 + m 4 + v 4 = **16** as well — the 12 fp32 bytes are the "optimizer
  states" K = 12 of the ZeRO paper. (Quoting "3N × sizeof" — one copy each of weights, m, v at the
  training dtype — leaves out the gradient and the fp32 master weights.)

**Activations** of one transformer layer, 16-bit, from Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (2022), with s = sequence length, b = micro-batch,
h = hidden size, a = attention heads, t = tensor-parallel size (dropout masks of 1 byte included):

    no parallelism                    s·b·h·(34 + 5·a·s/h)
    tensor parallel                   s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel        s·b·h·(34/t + 5·a·s/(h·t))
    selective recomputation           drops the 5·a·s/h term (attention scores recomputed)
    full recomputation                s·b·h·2 (only each layer's input is kept; /t with SP)
"""
from __future__ import annotations

from labkit.checks import check_int

RECOMPUTE = ("none", "selective", "full")


def model_state_bytes_per_param(mixed_precision: bool) -> dict:
    """{"params", "grads", "optimizer", "total"} bytes per parameter for Adam (module docstring)."""
    if mixed_precision:
        out = {"params": 2, "grads": 2, "optimizer": 4 + 4 + 4}
    else:
        out = {"params": 4, "grads": 4, "optimizer": 4 + 4}
    out["total"] = sum(out.values())
    return out


def activation_bytes_per_layer(seq_len: int, micro_batch: int, hidden: int, heads: int, tensor_parallel: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Bytes of 16-bit activations one transformer layer keeps for backward, per rank (module doc)."""
    fn = "activation_bytes_per_layer"
    s, b = check_int(fn, "seq_len", seq_len, minimum=1), check_int(fn, "micro_batch", micro_batch, minimum=1)
    h, a = check_int(fn, "hidden", hidden, minimum=1), check_int(fn, "heads", heads, minimum=1)
    t = check_int(fn, "tensor_parallel", tensor_parallel, minimum=1)
    if recompute not in RECOMPUTE:
        raise ValueError(f"{fn}: recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    if sequence_parallel and t == 1:
        raise ValueError(f"{fn}: sequence parallelism needs tensor_parallel > 1")
    sbh = s * b * h
    if recompute == "full":
        return sbh * 2 / (t if sequence_parallel else 1)
    attention = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    if sequence_parallel:
        return sbh * (34 / t + attention)
    return sbh * (10 + 24 / t + attention)
