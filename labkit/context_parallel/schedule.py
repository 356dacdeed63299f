"""Ring attention's schedule as data: which block each rank holds at each step, and which tiles
it computes (what the Lab 14 animation draws; `ring.ring_attention` follows the same plan).

``ring_schedule(world, seq, causal, layout)`` returns one `Step` per ring step s = 0 … N−1: for
each rank r the block it holds (the one that started on rank (r − s) mod N) and its tiles —
(query span, key span, kind) with kind "whole" or "diagonal" (skipped tiles are listed with kind
"skip"), spans as in `layout.spans`. ``work(schedule)`` adds up the q·kᵀ entries each rank
computes (skipped tiles cost nothing), which tests/test_context_parallel.py checks against the
real ring's count and against `formulas.score_elements`.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.context_parallel.attention import tile_kind
from labkit.context_parallel.layout import check_layout, spans


@dataclass(frozen=True)
class Step:
    """``index`` s; per rank r: ``source[r]`` the rank whose block r holds, ``tiles[r]`` its
    (q_span, k_span, kind) tiles in this step."""

    index: int
    source: tuple
    tiles: tuple


def ring_schedule(world: int, seq: int, causal: bool = True, layout: str = "contiguous") -> list[Step]:
    """The N steps of ring attention over ``seq`` positions on ``world`` ranks (module docstring)."""
    check_layout("ring_schedule", layout)
    out = []
    for s in range(world):
        source = tuple((r - s) % world for r in range(world))
        tiles = tuple(tuple((qs, ks, tile_kind(qs, ks, causal)) for qs in spans(r, world, seq, layout)
                            for ks in spans(source[r], world, seq, layout)) for r in range(world))
        out.append(Step(s, source, tiles))
    return out


def work(schedule: list[Step]) -> list[int]:
    """q·kᵀ entries each rank computes over all steps (per batch and head)."""
    world = len(schedule[0].source)
    return [sum(qs.length * ks.length for step in schedule for qs, ks, kind in step.tiles[r] if kind != "skip")
            for r in range(world)]
