"""Known wrong: allows a view only when the whole tensor is contiguous (torch allows more)."""
from solutions.lab02_strides import *  # noqa: F401,F403


def view_strides(shape, strides, new_shape):
    if not is_contiguous(shape, strides):
        return None
    out, acc = [], 1
    for size in reversed(new_shape):
        out.append(acc)
        acc *= size
    return tuple(reversed(out))
