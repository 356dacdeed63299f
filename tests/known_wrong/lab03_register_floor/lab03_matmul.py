"""Known-wrong: register_tiled loops over n // v tiles (floor), dropping the edge tiles."""
import numpy as np

from labkit.matmul import Traffic
from solutions.lab03_matmul import *  # noqa: F401,F403


def register_tiled(A, B, v1, v2, v3):
    if A.shape[1] != B.shape[0] or min(v1, v2, v3) < 1:
        raise ValueError("bad input")
    (M, K), N = A.shape, B.shape[1]
    C, t = np.zeros((M, N)), Traffic()
    for i in range(0, (M // v1) * v1, v1):        # bug: floor drops the last partial tiles
        for j in range(0, (N // v2) * v2, v2):
            c = np.zeros((v1, v2))
            for k in range(0, (K // v3) * v3, v3):
                a, b = A[i:i + v1, k:k + v3], B[k:k + v3, j:j + v2]
                t.a_reads += a.size
                t.b_reads += b.size
                c += a @ b
            C[i:i + v1, j:j + v2] = c
            t.c_writes += c.size
    return C, t
