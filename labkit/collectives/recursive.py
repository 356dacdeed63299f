"""Recursive-doubling all-reduce, built only from isend/irecv, for any world size.

Let P be the largest power of two <= N and R = N - P ("extra" ranks P..N-1).
1. fold (only if R > 0): extra rank P+i sends its tensor to rank i, which adds it.
2. log2 P rounds among ranks 0..P-1: in round k rank r swaps its whole
   partial sum with partner r XOR 2^k and adds. Addition is commutative in
   IEEE arithmetic, so both partners hold bit-identical sums.
3. unfold (only if R > 0): rank i sends the result back to extra rank P+i.
Every message is the whole tensor (S bytes): latency-friendly (log2 P (+2)
rounds) but each rank moves log2 P·S bytes, more than the ring's
2(N-1)/N·S once N > 2 — not bandwidth-optimal. (Rabenseifner's variant,
recursive-halving reduce-scatter + recursive-doubling all-gather, is.)
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from labkit.collectives.p2p import check_tensor, exchange, flat_view, group_info
from labkit.collectives.stats import CommStats


def largest_power_of_two(world_size: int) -> int:
    """P = 2^floor(log2 world_size)."""
    return 1 << (world_size.bit_length() - 1)


def recursive_doubling_all_reduce(tensor: torch.Tensor) -> CommStats:
    """Sum ``tensor`` over all ranks, in place, by recursive doubling (with fold/unfold for N not a power of 2)."""
    group_info("recursive_doubling_all_reduce")
    check_tensor(tensor, "recursive_doubling_all_reduce")
    with flat_view(tensor) as flat:
        return _recursive_doubling_all_reduce(flat)


def _recursive_doubling_all_reduce(tensor):
    """Sum ``tensor`` over all ranks, in place, by recursive doubling; any world size.

    Let P be the largest power of two <= N. (1) Fold: rank P+i (i < N-P) sends its
    tensor to rank i, which adds it. (2) For mask = 1, 2, 4, ... < P, each rank r < P
    swaps its whole tensor with rank r XOR mask and adds what it received.
    (3) Unfold: rank i sends the result back to rank P+i.
    tensor: contiguous, any shape. Returns CommStats: a rank r < P sends log2(P)
    whole tensors, plus one more if it has a fold partner; ranks >= P send one.
    """
    # BEGIN SOLUTION
    # HINT: recursive doubling works on a power of two ranks: deal with the extra ranks before and
    # HINT: after; in each round every rank swaps with a partner found from its rank's bits
    # HINT: (`exchange`).
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    p = 1
    while p * 2 <= n:
        p *= 2
    if rank >= p:
        exchange(stats, send=tensor, dst=rank - p)
        exchange(stats, recv=tensor, src=rank - p)
        return stats
    incoming = torch.empty_like(tensor)
    if rank + p < n:
        exchange(stats, recv=incoming, src=rank + p)
        tensor += incoming
    mask = 1
    while mask < p:
        partner = rank ^ mask
        exchange(stats, send=tensor, dst=partner, recv=incoming, src=partner)
        tensor += incoming
        mask *= 2
    if rank + p < n:
        exchange(stats, send=tensor, dst=rank + p)
    return stats
    # END SOLUTION
