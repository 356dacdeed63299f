"""Known wrong: applies the inverse permutation (old dim i goes to position dims[i])."""
from solutions.lab02_strides import *  # noqa: F401,F403


def permute_view(shape, strides, offset, dims):
    new_shape, new_strides = [0] * len(dims), [0] * len(dims)
    for i, d in enumerate(dims):
        new_shape[d], new_strides[d] = shape[i], strides[i]
    return tuple(new_shape), tuple(new_strides), offset
