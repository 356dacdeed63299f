"""Known wrong: compares with row-major strides exactly, so size-1 dims with any other stride fail."""
from solutions.lab02_strides import *  # noqa: F401,F403


def is_contiguous(shape, strides):
    expected, want = 1, []
    for size in reversed(shape):
        want.append(expected)
        expected *= max(size, 1)
    return tuple(strides) == tuple(reversed(want))
