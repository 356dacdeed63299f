"""Known wrong: slice length (stop - start) // step (floor) instead of ceil, and no clamping."""
from solutions.lab02_strides import *  # noqa: F401,F403


def slice_view(shape, strides, offset, dim, start, stop, step):
    new_shape, new_strides = list(shape), list(strides)
    new_shape[dim] = max(min(stop, shape[dim]) - start, 0) // step
    new_strides[dim] = strides[dim] * step
    return tuple(new_shape), tuple(new_strides), offset + start * strides[dim]
