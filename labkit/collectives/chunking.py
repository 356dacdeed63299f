"""How a buffer of L elements is cut into N chunks (the course's one rule).

Chunk i has ``L // N + 1`` elements if ``i < L % N`` else ``L // N`` elements
(the first ``L mod N`` chunks get one extra element), laid out in order. This
is the same rule as ``torch.tensor_split(x, N)``.
"""
from __future__ import annotations


def chunk_sizes(n_elements: int, world_size: int) -> list[int]:
    """Element counts of the ``world_size`` chunks of an ``n_elements`` buffer."""
    if not isinstance(n_elements, int) or n_elements < 0:
        raise ValueError(f"n_elements must be an int >= 0, got {n_elements!r}")
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    q, rem = divmod(n_elements, world_size)
    return [q + 1 if i < rem else q for i in range(world_size)]


def chunk_bounds(n_elements: int, world_size: int) -> list[int]:
    """Offsets ``b`` (length world_size + 1): chunk i is elements ``b[i]:b[i+1]``."""
    bounds = [0]
    for size in chunk_sizes(n_elements, world_size):
        bounds.append(bounds[-1] + size)
    return bounds
