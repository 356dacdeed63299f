"""Binomial-tree broadcast and reduce, built only from isend/irecv.

Ranks are renumbered relative to the root: v = (rank - root) % N, and
K = ceil(log2 N) rounds. The children of v are v + 2^k for every k with
2^k > v and v + 2^k < N (so the root's children are 1, 2, 4, ...).
- broadcast, rounds k = 0..K-1: every v < 2^k that has a child v + 2^k sends
  it the whole tensor. After round k ranks 0..2^(k+1)-1 have it.
- reduce, rounds k = K-1..0 (the broadcast played backwards): v + 2^k sends
  its partial sum to v, which adds it. The root ends with the sum.
Each non-root rank receives (broadcast) or sends (reduce) the whole tensor
exactly once, so the total over ranks is (N-1)·S bytes; the root's share is
children(0) = K messages of S bytes. See labkit.collectives.formulas.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.p2p import check_rank, check_tensor, exchange, flat_view, group_info
from labkit.collectives.stats import CommStats


def n_rounds(world_size: int) -> int:
    """K = ceil(log2 world_size): rounds of a binomial tree (0 for one rank)."""
    return (world_size - 1).bit_length()


def tree_broadcast(tensor: torch.Tensor, src: int) -> CommStats:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank (in place), binomial tree.

    ceil(log2 N) rounds; each rank receives S bytes once (except src) and
    sends S bytes to each of its children.
    """
    _, n = group_info("tree_broadcast")
    check_tensor(tensor, "tree_broadcast")
    check_rank(src, n, "tree_broadcast", "src")
    with flat_view(tensor) as flat:
        return _tree_broadcast(flat, src)


def _tree_broadcast(tensor, src):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank, in place, with a binomial tree.

    With relative rank v = (rank - src) % N and rounds k = 0, 1, ..., ceil(log2 N) - 1:
    in round k every v < 2^k with v + 2^k < N sends the whole tensor to relative rank
    v + 2^k (real rank (v + 2^k + src) % N), which receives it.
    tensor: contiguous, any shape. Returns CommStats: every rank except src receives
    S bytes once; src sends ceil(log2 N) messages.
    """
    # BEGIN SOLUTION
    # HINT: a binomial tree: relabel ranks so the root is 0; the number of ranks holding the data
    # HINT: doubles every round (`exchange`).
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    v = (rank - src) % n
    step = 1
    while step < n:
        if v < step and v + step < n:
            exchange(stats, send=tensor, dst=(v + step + src) % n)
        elif step <= v < 2 * step:
            exchange(stats, recv=tensor, src=(v - step + src) % n)
        step *= 2
    return stats
    # END SOLUTION


def tree_reduce(tensor: torch.Tensor, dst: int) -> CommStats:
    """Sum ``tensor`` over all ranks into rank ``dst``'s ``tensor`` (in place), binomial tree.

    Other ranks' tensors are left unchanged. ceil(log2 N) rounds; each rank
    except dst sends S bytes once and receives S bytes from each child.
    """
    rank, n = group_info("tree_reduce")
    check_tensor(tensor, "tree_reduce")
    check_rank(dst, n, "tree_reduce", "dst")
    stats = CommStats()
    v = (rank - dst) % n
    with flat_view(tensor) as flat:
        acc, tmp = flat, None
        for k in reversed(range(n_rounds(n))):
            step = 1 << k
            if v < step and v + step < n:
                if tmp is None:
                    tmp = torch.empty_like(flat)
                    if v != 0:
                        acc = flat.clone()  # keep a non-root's own tensor unchanged
                exchange(stats, recv=tmp, src=(v + step + dst) % n)
                acc.add_(tmp)
            elif step <= v < 2 * step:
                exchange(stats, send=acc, dst=(v - step + dst) % n)
    return stats
