"""The sizes of a GPT, its exact parameter count, and the FLOPs of one training iteration.

Notation (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM"): l layers, h hidden size, a attention heads, s sequence length, V vocabulary,
B global batch (sequences per iteration), r the MLP's width ratio ``mlp_ratio`` (4 in the paper).

**Parameters** (elements) of `labkit.model.GPT` — the same architecture as Megatron's GPT, with a
word-embedding matrix shared by the input and the logit layer:

    per layer   qkv 3h² + 3h,  proj h² + h,  fc r·h² + r·h,  fc proj r·h² + h,  2 LayerNorms 4h
    once        word embedding V·h,  position embedding s·h,  final LayerNorm 2h

For r = 4 that is l·(12h² + 13h) + (V + s + 2)·h. The paper writes 12·l·h²·(1 + 13/(12h) +
(V + s)/(12·l·h)) (`megatron_params`), which leaves out the final LayerNorm's 2h.

**FLOPs** (one multiply-add = 2 FLOPs; matrix multiplications only). Forward, per sequence:

    per layer   qkv 6sh²,  scores QKᵀ 2s²h,  att·V 2s²h,  proj 2sh²,  MLP 2·2r·sh²
                = (8 + 4r)·sh² + 4s²h            (= 24sh² + 4s²h for r = 4)
    logit layer 2shV

The backward pass computes two products for each forward one (gradient of the input and of the
weight), so forward + backward = 3 × forward. Recomputation adds forward work inside the layers
only — never in the logit layer, which is not checkpointed:

    recompute="none"       72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))
    recompute="selective"  72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) + 4·B·s²·h·l   (QKᵀ and att·V again)
    recompute="full"       96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))                (eq. 3 of the paper)

With full recomputation the logit layer still costs 3 × 2BshV = 6BshV; written over 96·B·s·l·h²
that is V/(16·l·h) — the paper's last term. Without recomputation 6BshV over 72·B·s·l·h² is
V/(12·l·h). LayerNorm, softmax, GELU, bias additions and the loss are not counted (they are not
matrix multiplications; the paper leaves them out too).
"""
from __future__ import annotations

from labkit.checks import check_int
from labkit.model import GPTConfig

RECOMPUTE = ("none", "selective", "full")


Model = GPTConfig
"""A GPT's sizes, for the planner: `labkit.model.GPTConfig` itself (l = ``layers``, h = ``hidden``,
a = ``heads``, s = ``seq_len``, V = ``vocab``, r = ``mlp_ratio``), so a plan and the real model share
one config and one parameter count (``params``, ``layer_params``)."""


def megatron_params(model: Model) -> float:
    """Narayanan et al.'s closed form 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) (elements); it
    assumes mlp_ratio 4 and omits the final LayerNorm, so for mlp_ratio 4 it is ``params − 2h``."""
    _check_model("megatron_params", model)
    l, h, V, s = model.layers, model.hidden, model.vocab, model.seq_len
    return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


def recompute_name(fn: str, recompute) -> str:
    """``recompute`` as one of "none", "selective", "full" (True means "full", False "none")."""
    if recompute is True:
        return "full"
    if recompute is False:
        return "none"
    if recompute not in RECOMPUTE:
        raise ValueError(f"{fn}: recompute must be True, False or one of {', '.join(RECOMPUTE)}, "
                         f"got {recompute!r}")
    return recompute


# BEGIN SOLUTION (labkit's count for a planner Model: it answers flops_per_iteration)
def layer_forward_flops(model: Model, sequences: int) -> int:
    """Forward FLOPs of one transformer layer for ``sequences`` sequences: s·((8 + 4r)·h² + 4sh)
    each (the attention scores are the full s × s matrix, as `labkit.model` computes them)."""
    s, h, r = model.seq_len, model.hidden, model.mlp_ratio
    return sequences * s * ((8 + 4 * r) * h * h + 4 * s * h)


def logit_forward_flops(model: Model, sequences: int) -> int:
    """Forward FLOPs of the logit layer (hidden states × word-embeddingᵀ): 2·s·h·V per sequence."""
    return sequences * 2 * model.seq_len * model.hidden * model.vocab


def recompute_forward_flops(model: Model, sequences: int, recompute) -> int:
    """Extra forward FLOPs of one layer that recomputation adds: the whole layer ("full"), QKᵀ and
    att·V, 4·s²·h per sequence ("selective"), nothing ("none")."""
    recompute = recompute_name("recompute_forward_flops", recompute)
    if recompute == "full":
        return layer_forward_flops(model, sequences)
    if recompute == "selective":
        return sequences * 4 * model.seq_len ** 2 * model.hidden
    return 0


def flops_per_iteration(model: Model, global_batch: int, recompute=True) -> int:
    """FLOPs of one training iteration over ``global_batch`` sequences (matrix multiplications,
    forward + backward, plus the forward work recomputation repeats; module docstring). With
    ``recompute=True`` ("full") and mlp_ratio 4 this is eq. 3 of Narayanan et al. 2021,
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); with False ("none") 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    fn = "flops_per_iteration"
    _check_model(fn, model)
    B = check_int(fn, "global_batch", global_batch, minimum=1)
    recompute = recompute_name(fn, recompute)
    per_layer = 3 * layer_forward_flops(model, B) + recompute_forward_flops(model, B, recompute)
    return model.layers * per_layer + 3 * logit_forward_flops(model, B)
# END SOLUTION


def _check_model(fn: str, model) -> None:
    if not isinstance(model, Model):
        raise TypeError(f"{fn}: model must be a labkit.planner.Model (a labkit.model.GPTConfig), "
                        f"got {type(model).__name__}")


def _flops_per_iteration(layers, hidden, seq_len, vocab, global_batch, recompute):
    """Matrix-multiplication FLOPs of one training iteration of a GPT, forward + backward.

    layers l, hidden h, seq_len s, vocab V, global_batch B sequences; MLP width 4h; attention
    scores are the full s × s matrix. recompute: True (full activation recomputation: every
    transformer layer's forward runs twice, the logit layer's once) or False.
    Per sequence, forward: each layer 24·s·h² (QKV 6sh², output 2sh², MLP 16sh²) + 4·s²·h
    (scores and their product with V); the logit layer 2·s·h·V. Backward costs twice the
    forward. Returns an int.
    With recompute this is Narayanan et al.'s 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
    """
    # BEGIN SOLUTION
    # HINT: count one forward per sequence (every layer's matmuls, its attention, the logit
    # HINT: layer); backward costs two forwards; full recomputation adds one more forward of the layers, not
    # HINT: of the logits.
    s, h, B = seq_len, hidden, global_batch
    layer = 24 * s * h * h + 4 * s * s * h
    passes = 4 if recompute else 3
    return B * (layers * passes * layer + 3 * 2 * s * h * vocab)
    # END SOLUTION
