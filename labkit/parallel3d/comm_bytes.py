"""Bytes one training step sends along each dimension of the dp × tp × pp grid, in closed form,
and the same numbers taken from a recorded run (`labkit.collectives.counting`).

Notation: h hidden, s sequence length, V vocabulary, L layers, f = mlp_ratio·h, B the global batch,
m micro-batches per replica, b = B/(dp·m) sequences per micro-batch, w bytes per element, and
ring(p, n) = 2(p−1)/p · n · w, the bytes one rank sends in a ring all-reduce of n elements
(Lab 05). Per rank on pipeline stage k (one of pp), per step:

- **tp** (Megatron, Shoeybi et al. 2019): per micro-batch, each of the stage's L/pp layers does
  2 all-reduces of b·s·h in forward (attention and MLP outputs, g) and 2 in backward (their
  inputs, f). Stage 0 adds the vocabulary-parallel embedding's forward all-reduce of b·s·h; the
  last stage adds the backward all-reduce of the hidden states entering the output layer (f,
  b·s·h) and the cross-entropy's 3 forward all-reduces of b·s numbers (max, sum of exps, target
  logit):  m · [(4L/pp + [k=0] + [k=pp−1])·ring(tp, b·s·h) + [k=pp−1]·3·ring(tp, b·s)].
- **pp**: each micro-batch's activation (b·s·h) goes forward over every stage boundary and its
  gradient (b·s·h) comes back: a rank sends m·b·s·h·w to the next stage (unless last) and
  m·b·s·h·w to the previous one (unless first). Every tp rank of a stage sends the full
  activation here (Narayanan et al. 2021 split it by tp and all-gather on arrival; we do not).
- **dp**: one all-reduce of every gradient element the rank holds: ring(dp, P_k), P_k from
  `stage_parameter_count` (this rank's tp shard of its stage, tied weight included).
- **embedding**: with pp > 1, the first and last stage all-reduce the tied weight's gradient
  (their V/tp rows) over the embedding group of 2 ranks: ring(2, V·h/tp) = V·h/tp · w.
"""
from __future__ import annotations

from fractions import Fraction

from labkit.checks import check_int
from labkit.model import GPTConfig
from labkit.parallel3d.grid import check_grid, coord_of

__all__ = ["DIMENSIONS", "ring_bytes", "stage_parameter_count", "rank_bytes_per_step", "bytes_per_step",
           "bytes_by_dimension"]

DIMENSIONS = ("dp", "tp", "pp", "embedding")


def ring_bytes(p: int, numel: int, itemsize: int) -> float:
    """Bytes one rank sends in a ring all-reduce of ``numel`` elements over p ranks: 2(p−1)/p·n·w."""
    fn = "ring_bytes"
    p, numel = check_int(fn, "p", p, minimum=1), check_int(fn, "numel", numel, minimum=0)
    itemsize = check_int(fn, "itemsize", itemsize, minimum=1)
    return float(Fraction(2 * (p - 1) * numel * itemsize, p))


def stage_parameter_count(cfg: GPTConfig, tp: int, pp: int, stage: int) -> int:
    """Parameters (elements) one tp rank of pipeline ``stage`` holds: per block 2 LayerNorms (4h),
    its qkv slice (3h·h/tp + 3h/tp), proj (h·h/tp + h), fc (f·h/tp + f/tp), MLP proj (h·f/tp + h);
    stage 0 adds V/tp·h + s·h (embeddings), the last stage 2h (ln_f) and, when it is not also the
    first, its own V/tp·h copy of the tied weight."""
    h, f = cfg.hidden, cfg.ffn
    block = 4 * h + (3 * h * h + 3 * h) // tp + (h * h) // tp + h + (f * h + f) // tp + (h * f) // tp + h
    n = cfg.layers // pp * block
    if stage == 0:
        n += cfg.vocab // tp * h + cfg.seq_len * h
    if stage == pp - 1:
        n += 2 * h + (cfg.vocab // tp * h if pp > 1 else 0)
    return n


def rank_bytes_per_step(cfg: GPTConfig, dp: int, tp: int, pp: int, global_batch: int, micro_batches: int,
                        itemsize: int, rank: int) -> dict[str, float]:
    """Bytes global ``rank`` sends in one step, per dimension (module docstring):
    {"dp": ..., "tp": ..., "pp": ..., "embedding": ...}."""
    fn = "rank_bytes_per_step"
    check_grid(fn, dp * tp * pp, dp, tp, pp)
    m = check_int(fn, "micro_batches", micro_batches, minimum=1)
    B = check_int(fn, "global_batch", global_batch, minimum=1)
    w = check_int(fn, "itemsize", itemsize, minimum=1)
    if B % (dp * m):
        raise ValueError(f"{fn}: global_batch ({B}) must be divisible by dp·micro_batches ({dp * m})")
    k = coord_of(rank, dp, tp, pp).pp
    first, last = k == 0, k == pp - 1
    b = B // (dp * m)
    act, tokens = b * cfg.seq_len * cfg.hidden, b * cfg.seq_len
    tp_bytes = m * ((4 * cfg.layers // pp + first + last) * ring_bytes(tp, act, w)
                    + last * 3 * ring_bytes(tp, tokens, w))
    pp_bytes = m * act * w * ((not last) + (not first))
    dp_bytes = ring_bytes(dp, stage_parameter_count(cfg, tp, pp, k), w)
    emb = ring_bytes(2, cfg.vocab // tp * cfg.hidden, w) if pp > 1 and (first or last) else 0.0
    return {"dp": dp_bytes, "tp": float(tp_bytes), "pp": float(pp_bytes), "embedding": emb}


def bytes_per_step(cfg: GPTConfig, dp: int, tp: int, pp: int, global_batch: int, micro_batches: int,
                   itemsize: int) -> dict[str, float]:
    """Bytes all dp·tp·pp ranks together send in one training step, per dimension:
    {"dp": ..., "tp": ..., "pp": ..., "embedding": ...} — the sum of `rank_bytes_per_step` over
    the ranks. A rank's bytes depend only on its pipeline stage, so each stage's rank (k·dp·tp) is
    counted dp·tp times: pp evaluations, whatever the grid's size."""
    dp, tp, pp = (check_int("bytes_per_step", n, v, minimum=1) for n, v in (("dp", dp), ("tp", tp), ("pp", pp)))
    total = dict.fromkeys(DIMENSIONS, 0.0)
    for k in range(pp):
        for dim, v in rank_bytes_per_step(cfg, dp, tp, pp, global_batch, micro_batches, itemsize, k * dp * tp).items():
            total[dim] += dp * tp * v
    return total


def bytes_by_dimension(records, groups: dict[str, list[int]]) -> dict[str, float]:
    """Split one rank's recorded `Collective`s by dimension: a "send" is pipeline traffic; a
    collective belongs to the dimension whose group (global ranks, ``groups[dim]``: this rank's
    "dp", "tp" and "embedding" groups) has exactly its ranks. Anything else raises ValueError."""
    out = dict.fromkeys(DIMENSIONS, 0.0)
    lookup = {tuple(sorted(ranks)): dim for dim, ranks in groups.items() if dim != "pp" and len(ranks) > 1}
    for rec in records:
        if rec.op == "send":
            out["pp"] += rec.bytes_sent
            continue
        dim = lookup.get(tuple(sorted(rec.ranks)))
        if dim is None:
            raise ValueError(f"bytes_by_dimension: a {rec.op} over ranks {rec.ranks} is in no group of {groups}")
        out[dim] += rec.bytes_sent
    return out
