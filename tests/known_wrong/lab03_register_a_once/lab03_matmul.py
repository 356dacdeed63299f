"""Known-wrong: register_tiled counts each A tile only the first time (as if A stayed in registers
across column tiles), so a_reads comes out as M*K instead of M*K*ceil(N/v2)."""
import numpy as np

from labkit.matmul import Traffic
from solutions.lab03_matmul import *  # noqa: F401,F403


def register_tiled(A, B, v1, v2, v3):
    if A.shape[1] != B.shape[0] or min(v1, v2, v3) < 1:
        raise ValueError("bad input")
    (M, K), N = A.shape, B.shape[1]
    C, t = np.zeros((M, N)), Traffic()
    for i in range(0, M, v1):
        for j in range(0, N, v2):
            c = np.zeros((min(v1, M - i), min(v2, N - j)))
            for k in range(0, K, v3):
                a, b = A[i:i + v1, k:k + v3], B[k:k + v3, j:j + v2]
                if j == 0:                        # bug: A is reloaded for every column tile
                    t.a_reads += a.size
                t.b_reads += b.size
                c += a @ b
            C[i:i + v1, j:j + v2] = c
            t.c_writes += c.size
    return C, t
