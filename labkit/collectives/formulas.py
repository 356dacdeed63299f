"""Closed-form bytes and rounds per rank for each labkit algorithm.

All sizes: ``n_elements`` elements of ``itemsize`` bytes (S = n_elements *
itemsize bytes). Chunk sizes follow `chunk_sizes` (first L mod N chunks get
one extra element). Each function returns (bytes_sent, bytes_received) for
one rank; tests assert the real CommStats and the simulator's trace equal
these exactly.

Ring all-reduce, rank r, chunk bytes c_i:
    sent(r) = 2S - c_r - c_{(r+1)%N},   received(r) = 2S - c_{(r-1)%N} - c_r
so the sum over ranks is exactly 2(N-1)·S, and each rank is within 2
elements of 2(N-1)/N·S (exactly equal when N divides L). Per-rank rounding
rule: a rank's bytes are the bytes of the chunks it actually forwards; no
padding is ever sent.
"""
from __future__ import annotations

from labkit.collectives.chunking import chunk_sizes


def ring_all_reduce_bytes(rank: int, world_size: int, n_elements: int, itemsize: int) -> tuple[int, int]:
    """(sent, received) bytes of rank ``rank`` in a ring all-reduce of n_elements elements."""
    if world_size == 1:
        return 0, 0
    c = [s * itemsize for s in chunk_sizes(n_elements, world_size)]
    total, n = sum(c), world_size
    return 2 * total - c[rank] - c[(rank + 1) % n], 2 * total - c[(rank - 1) % n] - c[rank]


def ring_reduce_scatter_bytes(rank: int, world_size: int, n_elements: int, itemsize: int) -> tuple[int, int]:
    """(sent, received) bytes of a ring reduce-scatter of an n_elements buffer: all chunks but one each way."""
    if world_size == 1:
        return 0, 0
    c = [s * itemsize for s in chunk_sizes(n_elements, world_size)]
    return sum(c) - c[rank], sum(c) - c[(rank - 1) % world_size]


def ring_all_gather_bytes(rank: int, world_size: int, n_elements: int, itemsize: int) -> tuple[int, int]:
    """(sent, received) bytes of a ring all-gather producing an n_elements buffer."""
    if world_size == 1:
        return 0, 0
    c = [s * itemsize for s in chunk_sizes(n_elements, world_size)]
    return sum(c) - c[(rank + 1) % world_size], sum(c) - c[rank]


def tree_children(v: int, world_size: int) -> list[int]:
    """Children (relative ranks) of relative rank v in the binomial tree: v + 2^k for 2^k > v, v + 2^k < N."""
    out, step = [], 1
    while step < world_size:
        if v < step and v + step < world_size:
            out.append(v + step)
        step <<= 1
    return out


def tree_broadcast_bytes(rank: int, world_size: int, n_elements: int, itemsize: int, root: int = 0):
    """(sent, received): S per child sent; S received unless this is the root."""
    s, v = n_elements * itemsize, (rank - root) % world_size
    return s * len(tree_children(v, world_size)), (0 if v == 0 else s)


def tree_reduce_bytes(rank: int, world_size: int, n_elements: int, itemsize: int, root: int = 0):
    """(sent, received): S sent unless root; S received per child."""
    sent, recv = tree_broadcast_bytes(rank, world_size, n_elements, itemsize, root)
    return recv, sent


def recursive_doubling_bytes(rank: int, world_size: int, n_elements: int, itemsize: int):
    """(sent, received): log2(P)·S for ranks < P, plus S each way for a fold/unfold pair (P = 2^floor(log2 N))."""
    s = n_elements * itemsize
    p = 1 << (world_size.bit_length() - 1)
    if rank >= p:
        return s, s
    base = (p.bit_length() - 1) * s
    extra = s if rank + p < world_size else 0
    return base + extra, base + extra


BYTES = {
    "ring_all_reduce": ring_all_reduce_bytes,
    "ring_reduce_scatter": ring_reduce_scatter_bytes,
    "ring_all_gather": ring_all_gather_bytes,
    "tree_broadcast": tree_broadcast_bytes,
    "tree_reduce": tree_reduce_bytes,
    "recursive_doubling_all_reduce": recursive_doubling_bytes,
}
