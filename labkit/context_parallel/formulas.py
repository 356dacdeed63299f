"""Closed forms for context parallelism: bytes one rank sends, and work per rank under a causal mask.

One *block* is one rank's share of k (or of v): B·H·(S/N)·D elements.

    ring_bytes       forward (N−1)·2 blocks; backward (N−1)·2 + N·2 blocks       (`ring`)
    ulysses_bytes    forward 4·(N−1)/N blocks; backward the same                    (`ulysses`)
    score_elements   q·kᵀ entries a rank computes in ring attention's forward, tile by tile:
                     not causal: N tiles of (S/N)²; causal, contiguous: r + 1 tiles on rank r
                     (the diagonal tile is computed whole, masked); causal, zig-zag: 2N + 1
                     tiles of (S/2N)² on every rank.
"""
from __future__ import annotations

from labkit.checks import check_int
from labkit.context_parallel.layout import check_layout


def _block(fn, batch, heads, seq, head_dim, world, itemsize) -> int:
    for name, value in (("batch", batch), ("heads", heads), ("seq", seq), ("head_dim", head_dim),
                        ("itemsize", itemsize)):
        check_int(fn, name, value, minimum=1)
    world = check_int(fn, "world", world, minimum=1)
    if seq % world:
        raise ValueError(f"{fn}: seq={seq} does not split over {world} ranks")
    return batch * heads * (seq // world) * head_dim * itemsize


def ring_bytes(batch: int, heads: int, seq: int, head_dim: int, world: int, itemsize: int = 4) -> dict:
    """{"forward", "backward"}: bytes one rank sends in ring attention (module docstring)."""
    blk = _block("ring_bytes", batch, heads, seq, head_dim, world, itemsize)
    if world == 1:
        return {"forward": 0, "backward": 0}
    return {"forward": (world - 1) * 2 * blk, "backward": (world - 1) * 2 * blk + world * 2 * blk}


def ulysses_bytes(batch: int, heads: int, seq: int, head_dim: int, world: int, itemsize: int = 4) -> dict:
    """{"forward", "backward"}: bytes one rank sends in DeepSpeed-Ulysses (module docstring)."""
    blk = _block("ulysses_bytes", batch, heads, seq, head_dim, world, itemsize)
    each = 4 * (world - 1) * blk // world
    return {"forward": each, "backward": each}


def score_elements(rank: int, world: int, seq: int, causal: bool, layout: str = "contiguous",
                   batch: int = 1, heads: int = 1) -> int:
    """q·kᵀ entries rank ``rank`` computes in ring attention's forward (module docstring)."""
    fn = "score_elements"
    check_layout(fn, layout)
    world = check_int(fn, "world", world, minimum=1)
    rank = check_int(fn, "rank", rank, minimum=0, maximum=world - 1)
    c = check_int(fn, "seq", seq, minimum=1) // world
    bh = check_int(fn, "batch", batch, minimum=1) * check_int(fn, "heads", heads, minimum=1)
    if not causal:
        return bh * world * c * c
    if layout == "contiguous":
        return bh * (rank + 1) * c * c
    return bh * (2 * world + 1) * (c // 2) ** 2
