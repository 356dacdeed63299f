"""Known-wrong: block_sum with its syncthreads() inside `if t < stride`: the other threads never
reach it (barrier divergence: a hang or garbage on a GPU, an error in the simulator)."""
import numpy as np

from labkit.gpu_model.cuda_sim import cuda
from solutions.lab03_matmul import *  # noqa: F401,F403


def block_sum(x, out, n):
    s = cuda.shared.array(BLOCK, np.float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    s[t] = x[i] if i < n else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            s[t] += s[t + stride]
            cuda.syncthreads()          # bug: inside the branch
        stride //= 2
    if t == 0:
        cuda.atomic.add(out, 0, s[0])
