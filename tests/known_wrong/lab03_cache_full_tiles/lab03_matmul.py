"""Known-wrong: cache_tiled counts every tile at its nominal size (b1*K, K*b2), even the short edge tiles."""
import numpy as np

from labkit.matmul import Traffic
from solutions.lab03_matmul import *  # noqa: F401,F403


def cache_tiled(A, B, b1, b2):
    if A.shape[1] != B.shape[0] or b1 < 1 or b2 < 1:
        raise ValueError("bad input")
    (M, K), N = A.shape, B.shape[1]
    C, t = np.zeros((M, N)), Traffic()
    for i in range(0, M, b1):
        t.a_reads += b1 * K                      # bug: the last row block may be shorter
        for j in range(0, N, b2):
            t.b_reads += K * b2                  # bug: the last column block may be narrower
            C[i:i + b1, j:j + b2] = A[i:i + b1] @ B[:, j:j + b2]
            t.c_writes += C[i:i + b1, j:j + b2].size
    return C, t
