"""Known-wrong: tiled counts the L1 -> register level as if register tiles ran over the whole of C
(ignoring the cache-block edges), i.e. the register_tiled count M*K*ceil(N/v2), ceil(M/v1)*K*N.
Right whenever v divides b; wrong when register tiles would straddle a cache block."""
from labkit.matmul import Traffic, TwoLevelTraffic
from solutions.lab03_matmul import *  # noqa: F401,F403
from solutions.lab03_matmul import cache_tiled, register_tiled


def tiled(A, B, b1, b2, v1, v2):
    C, dram = cache_tiled(A, B, b1, b2)
    _, reg = register_tiled(A, B, v1, v2, 1)      # bug: tiles cross cache-block boundaries
    return C, TwoLevelTraffic(dram, Traffic(reg.a_reads, reg.b_reads, reg.c_writes))
