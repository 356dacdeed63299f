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

from labkit.collectives.p2p import check_tensor, exchange, flat_view, group_info
from labkit.collectives.stats import CommStats


def largest_power_of_two(world_size: int) -> int:
    """P = 2^floor(log2 world_size)."""
    return 1 << (world_size.bit_length() - 1)


def recursive_doubling_all_reduce(tensor: torch.Tensor) -> CommStats:
    """Sum ``tensor`` over all ranks, in place, by recursive doubling (with fold/unfold for N not a power of 2)."""
    rank, n = group_info("recursive_doubling_all_reduce")
    check_tensor(tensor, "recursive_doubling_all_reduce")
    stats = CommStats()
    p = largest_power_of_two(n)
    with flat_view(tensor) as flat:
        if rank >= p:                       # extra rank: fold in, wait for the answer
            exchange(stats, send=flat, dst=rank - p)
            exchange(stats, recv=flat, src=rank - p)
            return stats
        tmp = torch.empty_like(flat)
        if rank + p < n:                    # fold: absorb my extra partner's tensor
            exchange(stats, recv=tmp, src=rank + p)
            flat.add_(tmp)
        mask = 1
        while mask < p:
            partner = rank ^ mask
            exchange(stats, send=flat, dst=partner, recv=tmp, src=partner)
            flat.add_(tmp)
            mask <<= 1
        if rank + p < n:                    # unfold
            exchange(stats, send=flat, dst=rank + p)
    return stats
