"""Known-wrong: f all-reduces in forward and passes the gradient through (f and g swapped)."""
from solutions.lab07_tensor_parallel import *  # noqa: F401,F403
from solutions.lab07_tensor_parallel import _PlainReduceFromTP


def copy_to_tp(x):
    return _PlainReduceFromTP.apply(x)  # BUG: the all-reduce is in the wrong direction
