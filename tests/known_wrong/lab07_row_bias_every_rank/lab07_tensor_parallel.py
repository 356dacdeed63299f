"""Known-wrong: every rank adds the bias before the all-reduce, so it is added t times."""
from solutions.lab07_tensor_parallel import *  # noqa: F401,F403
from solutions.lab07_tensor_parallel import reduce_from_tp, torch


def row_parallel_linear(x, weight, bias):
    return reduce_from_tp(torch.nn.functional.linear(x, weight, bias))  # BUG: bias inside the sum
