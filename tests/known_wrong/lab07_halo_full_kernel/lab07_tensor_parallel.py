"""Known-wrong: the halo taken as kernel rows instead of kernel // 2 (3 rows for a 3 x 3 kernel)."""
from solutions.lab07_tensor_parallel import *  # noqa: F401,F403


def halo_bytes_per_rank(batch, channels, width, kernel, world, itemsize):
    return [((r > 0) + (r < world - 1)) * kernel * batch * channels * width * itemsize for r in range(world)]
