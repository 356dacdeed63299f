"""Known-wrong: block_sum's tree lets thread t = stride add too (t <= stride): it writes s[stride]
while thread 0 reads it in the same step (a race), and reads past the active half."""
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
        if t <= stride:                 # bug: one thread too many
            s[t] += s[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        cuda.atomic.add(out, 0, s[0])
