"""How a sequence of S positions is cut over N ranks, for context parallelism.

- ``"contiguous"``: rank r holds positions [r·S/N, (r+1)·S/N) — one chunk.
- ``"zigzag"``: the sequence is cut into 2N equal chunks and rank r holds chunks r and 2N−1−r,
  concatenated in that order — one from the start, one from the end. Under a causal mask early
  positions attend to few keys and late ones to many, so each rank gets one cheap and one dear
  chunk and every rank does the same work (Brandon et al. 2023's striping, Llama 3's zig-zag).

A rank's positions are a list of ``Span``s (contiguous ranges of global positions); its tensors
hold those positions in span order along the sequence dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.checks import check_int

LAYOUTS = ("contiguous", "zigzag")


@dataclass(frozen=True)
class Span:
    """Global positions ``start`` .. ``stop`` − 1, held at local offsets ``offset`` .. on the rank."""

    start: int
    stop: int
    offset: int

    @property
    def length(self) -> int:
        return self.stop - self.start


def check_layout(fn: str, layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return layout


def spans(rank: int, world: int, seq: int, layout: str = "contiguous") -> list[Span]:
    """The global positions rank ``rank`` of ``world`` holds of a ``seq``-long sequence."""
    fn = "spans"
    check_layout(fn, layout)
    world = check_int(fn, "world", world, minimum=1)
    rank = check_int(fn, "rank", rank, minimum=0, maximum=world - 1)
    pieces = world if layout == "contiguous" else 2 * world
    seq = check_int(fn, "seq", seq, minimum=pieces)
    if seq % pieces:
        raise ValueError(f"{fn}: a {layout} layout over {world} ranks needs the sequence length divisible "
                         f"by {pieces}, got {seq}")
    c = seq // pieces
    chunks = [rank] if layout == "contiguous" else [rank, pieces - 1 - rank]
    return [Span(i * c, (i + 1) * c, k * c) for k, i in enumerate(chunks)]


def positions(rank: int, world: int, seq: int, layout: str = "contiguous") -> torch.Tensor:
    """(seq/N,) int64: the global position of each local row, in local order."""
    return torch.cat([torch.arange(s.start, s.stop) for s in spans(rank, world, seq, layout)])


def shard(x: torch.Tensor, world: int, layout: str = "contiguous", dim: int = 2) -> list[torch.Tensor]:
    """Each rank's piece of the whole-sequence tensor ``x`` (sequence along ``dim``), in rank order."""
    seq = x.shape[dim]
    return [x.index_select(dim, positions(r, world, seq, layout).to(x.device)) for r in range(world)]


def unshard(pieces: list[torch.Tensor], layout: str = "contiguous", dim: int = 2) -> torch.Tensor:
    """The whole-sequence tensor from every rank's piece (the inverse of `shard`)."""
    world, seq = len(pieces), sum(p.shape[dim] for p in pieces)
    cat = torch.cat(pieces, dim=dim)
    order = torch.cat([positions(r, world, seq, layout) for r in range(world)]).to(cat.device)
    return cat.index_select(dim, torch.argsort(order))
