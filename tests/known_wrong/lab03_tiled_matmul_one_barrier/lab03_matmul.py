"""Known-wrong: tiled_matmul without the second syncthreads(): a fast thread overwrites the shared
tiles for the next k step while its neighbours still multiply from them (a race; on a GPU the
result is often right, which is why the simulator checks every access)."""
import numpy as np

from labkit.gpu_model.cuda_sim import cuda
from solutions.lab03_matmul import *  # noqa: F401,F403


def tiled_matmul(A, B, C, M, N, K):
    sA = cuda.shared.array((TILE, TILE), np.float32)
    sB = cuda.shared.array((TILE, TILE), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    acc = 0.0
    for t in range((K + TILE - 1) // TILE):
        k = t * TILE + tx
        sA[ty, tx] = A[row, k] if row < M and k < K else 0.0
        k = t * TILE + ty
        sB[ty, tx] = B[k, col] if k < K and col < N else 0.0
        cuda.syncthreads()
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
        # bug: no cuda.syncthreads() here
    if row < M and col < N:
        C[row, col] = acc
