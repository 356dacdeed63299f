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
    if not isinstance(mixed_precision, bool):
        raise TypeError(f"model_state_bytes_per_param: mixed_precision must be True or False, got {mixed_precision!r}")
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
    if h % a:
        raise ValueError(f"{fn}: hidden ({h}) must be divisible by heads ({a})")
    if a % t:
        raise ValueError(f"{fn}: heads ({a}) must be divisible by tensor_parallel ({t}): each rank keeps "
                         f"whole heads")
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


def _check_config(fn: str, cfg) -> None:
    from labkit.model import GPTConfig

    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"{fn}: cfg must be a labkit.model.GPTConfig, got {type(cfg).__name__}")


def gpt_layer_saved_bytes(cfg, batch_size: int, seq: int, itemsize: int,
                          recompute: str = "none") -> int:
    """Bytes one Block of `labkit.model.GPT` keeps for backward on CPU, counted exactly, with
    b = batch_size, s = seq, h = hidden, a = heads, r = mlp_ratio, e = ``itemsize`` (bytes per
    element of the model's dtype):

        none        (8 + 2r)·b·s·h·e  +  4·b·s·e  +  a·b·s²·e  +  s²
        selective   (8 + 2r)·b·s·h·e  +  4·b·s·e                 (the attention core recomputed)
        full        b·s·h·e                                      (only the block's input)

    (8 + 2r)·b·s·h·e: the inputs of both LayerNorms, of qkv, of the output projection and of fc
    (5), the copies of q, k and v that the batched matmuls make (3), GELU's input and the MLP
    projection's input (r each); 4·b·s·e: mean and 1/std of both LayerNorms (CPU keeps them in the
    model's dtype); a·b·s²·e: softmax's output; s²: the bool causal mask, shared by the batch.
    Selective recomputation keeps the qkv output instead of the q, k, v copies — the same bytes —
    and drops the last two terms.
    """
    fn = "gpt_layer_saved_bytes"
    _check_config(fn, cfg)
    b, s = check_int(fn, "batch_size", batch_size, minimum=1), check_int(fn, "seq", seq, minimum=1)
    e = check_int(fn, "itemsize", itemsize, minimum=1)
    if recompute not in RECOMPUTE:
        raise ValueError(f"{fn}: recompute must be one of {', '.join(RECOMPUTE)}, "
                         f"got {recompute!r}")
    h, a, r = cfg.hidden, cfg.heads, cfg.mlp_ratio
    if recompute == "full":
        return b * s * h * e
    kept = (8 + 2 * r) * b * s * h * e + 4 * b * s * e
    return kept if recompute == "selective" else kept + a * b * s * s * e + s * s
def gpt_saved_activation_bytes(cfg, batch_size: int, seq: int | None = None, dtype=None,
                               recompute: str = "none") -> dict:
    """Bytes autograd keeps for backward after ``GPT(cfg, dtype=dtype)(tokens, targets)`` on CPU,
    counted exactly (each storage once, parameters left out), by part: "layers" (L times
    `gpt_layer_saved_bytes` under ``recompute``) and, once per model, "final LayerNorm"
    b·s·h·e + 2·b·s·e, "head input" b·s·h·e, "log-softmax" b·s·V·max(e, 4) (the loss is computed
    in float32 for a bf16 model), "token ids" 8·b·s (the embedding keeps its indices) + 8·s (the
    positions), "targets" 8·b·s plus the loss's 0-d weight max(e, 4); and their "total".

    Against Korthikanti et al.'s 34·s·b·h + 5·a·s²·b per layer (16-bit): our model has no dropout
    — no masks (2·s·b·h + a·s²·b bytes) and no dropout output (2·a·s²·b) — so 32·s·b·h + 2·a·s²·b,
    plus the LayerNorm statistics and the mask, which the paper leaves out as small.
    """
    import torch

    fn = "gpt_saved_activation_bytes"
    _check_config(fn, cfg)
    b = check_int(fn, "batch_size", batch_size, minimum=1)
    s = cfg.seq_len if seq is None else check_int(fn, "seq", seq, minimum=1, maximum=cfg.seq_len)
    e = torch.empty((), dtype=torch.float32 if dtype is None else dtype).element_size()
    h, V = cfg.hidden, cfg.vocab
    wide = max(e, 4)
    parts = {
        "layers": cfg.layers * gpt_layer_saved_bytes(cfg, b, s, e, recompute),
        "final LayerNorm": b * s * h * e + 2 * b * s * e,
        "head input": b * s * h * e,
        "log-softmax": b * s * V * wide,
        "token ids": 8 * b * s + 8 * s,
        "targets": 8 * b * s + wide,
    }
    parts["total"] = sum(parts.values())
    return parts
