"""Known-wrong: every rank sends two halos, also the first and last, which have one neighbour."""
from solutions.lab07_tensor_parallel import *  # noqa: F401,F403


def halo_bytes_per_rank(batch, channels, width, kernel, world, itemsize):
    return [2 * (kernel // 2) * batch * channels * width * itemsize for _ in range(world)]
