"""Flat shards: a group of parameters laid end to end, padded, and cut into N equal shards.

ZeRO (Rajbhandari et al. 2020) and PyTorch's FSDP treat a group of parameters as one flat vector
of Ψ_g elements. To cut it into N equal shards — so that reduce-scatter and all-gather move equal
pieces — the vector is padded with zeros to

    Ψ'_g = ⌈Ψ_g / N⌉ · N   elements,

and rank r owns elements [r·Ψ'_g/N, (r+1)·Ψ'_g/N). **The padding rule of this course:** every
group (a gradient bucket in ZeRO-1/2, a wrapped unit in FSDP) is padded on its own, so a rank
holds Σ_g Ψ'_g / N elements of every sharded state; the padding costs at most N − 1 elements per
group. `padded_numel` is Ψ'_g.

    layout = FlatLayout.of([w1, w2], world=4)
    flat = layout.flatten([w1, w2])          # (Ψ',) with zeros at the end
    lo, hi = layout.shard_range(rank)        # this rank's slice of flat
    w1_view, w2_view = layout.unflatten(flat)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from labkit.checks import check_int


def padded_numel(numel: int, world: int) -> int:
    """Ψ' = ⌈Ψ / N⌉ · N: the group's length (elements) after padding to a multiple of ``world``."""
    check_int("padded_numel", "numel", numel, minimum=0)
    world = check_int("padded_numel", "world", world, minimum=1)
    return math.ceil(numel / world) * world


@dataclass(frozen=True)
class FlatLayout:
    """Where each of a group's tensors lies in the group's flat, padded vector (elements)."""

    shapes: tuple[torch.Size, ...]
    world: int

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor], world: int) -> "FlatLayout":
        if not tensors:
            raise ValueError("FlatLayout: a group needs at least one tensor")
        return cls(tuple(t.shape for t in tensors), check_int("FlatLayout", "world", world, minimum=1))

    @property
    def sizes(self) -> list[int]:
        return [math.prod(s) for s in self.shapes]

    @property
    def offsets(self) -> list[int]:
        out, at = [], 0
        for n in self.sizes:
            out.append(at)
            at += n
        return out

    @property
    def numel(self) -> int:
        """Ψ_g: the group's elements before padding."""
        return sum(self.sizes)

    @property
    def padded(self) -> int:
        """Ψ'_g: the flat vector's length after padding."""
        return padded_numel(self.numel, self.world)

    @property
    def shard_numel(self) -> int:
        """Elements each rank owns: Ψ'_g / N."""
        return self.padded // self.world

    def shard_range(self, rank: int) -> tuple[int, int]:
        """[lo, hi) of rank ``rank``'s shard in the flat vector."""
        check_int("FlatLayout.shard_range", "rank", rank, minimum=0, maximum=self.world - 1)
        return rank * self.shard_numel, (rank + 1) * self.shard_numel

    def flatten(self, tensors: Sequence[torch.Tensor | None], dtype: torch.dtype | None = None) -> torch.Tensor:
        """A new (Ψ',) tensor: ``tensors`` end to end (None counts as zeros), then zero padding."""
        if len(tensors) != len(self.shapes):
            raise ValueError(f"FlatLayout.flatten: expected {len(self.shapes)} tensors, got {len(tensors)}")
        ref = next((t for t in tensors if t is not None), None)
        if ref is None:
            raise ValueError("FlatLayout.flatten: every tensor is None; pass a dtype and zeros instead")
        out = torch.zeros(self.padded, dtype=dtype or ref.dtype, device=ref.device)
        for t, at, n, shape in zip(tensors, self.offsets, self.sizes, self.shapes):
            if t is not None:
                if t.shape != shape:
                    raise ValueError(f"FlatLayout.flatten: a tensor of shape {tuple(t.shape)} where the layout "
                                     f"has {tuple(shape)}")
                out[at:at + n].copy_(t.reshape(-1))
        return out

    def unflatten(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views of ``flat`` ((Ψ',) or longer) with the group's shapes; no copy."""
        if flat.dim() != 1 or flat.numel() < self.numel:
            raise ValueError(f"FlatLayout.unflatten: need a 1-D tensor of >= {self.numel} elements, "
                             f"got shape {tuple(flat.shape)}")
        return [flat[at:at + n].view(shape) for at, n, shape in zip(self.offsets, self.sizes, self.shapes)]
