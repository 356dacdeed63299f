"""Column- and row-parallel linear layers (Megatron-LM, Shoeybi et al. 2019).

A linear layer y = x·Wᵀ + b with W of shape (out, in) splits two ways over t ranks:

- **column-parallel**: rank r keeps rows r·out/t … of W (output features) and of b. Its input is
  the full x (entering through f: identity forward, all-reduce backward); its output is this rank's
  slice of y's features — kept split by default (``gather_output=False``), as Megatron does when a
  row-parallel layer follows.
- **row-parallel**: rank r keeps columns r·in/t … of W (input features). Its input is already
  split (``input_is_parallel=True``: the previous column-parallel output); each rank's product is a
  partial sum, added up by g (all-reduce forward, identity backward); b is added once, after.

`from_linear(linear)` takes this rank's slice of a full ``nn.Linear``, so a test can compare the
split layer with the unsplit one. Every rank passes its own copy of the full layer: the shapes and
dtypes are checked to agree on every rank (one collective) and the values are broadcast from the
group's first rank, as PyTorch's ``distribute_tensor`` does — ranks seeded differently still split
one and the same layer.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from labkit.checks import check_same_on_ranks
from labkit.tensor_parallel.comm import copy_to_tp, current_group, gather_last, reduce_from_tp, split_last


def tp_rank_world(fn: str, size: int, what: str) -> tuple[int, int]:
    """(rank, world) in the current tensor-parallel group (the default group unless inside
    `comm.tp_group`); one-line ValueError unless ``size`` splits evenly."""
    if not dist.is_initialized():
        raise RuntimeError(f"{fn}: no process group; run inside labkit.dist.launch (or torchrun)")
    group = current_group()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if size % world:
        raise ValueError(f"{fn}: {what} ({size}) must be divisible by the number of ranks ({world})")
    return rank, world


def replicated(fn: str, named_tensors) -> list[torch.Tensor]:
    """Copies of the (name, tensor) pairs, equal on every rank of the tensor-parallel group to its
    first rank's: shapes and dtypes checked (`labkit.checks.check_same_on_ranks`), then broadcast."""
    group = current_group()
    named = [(n, t) for n, t in named_tensors]
    check_same_on_ranks(fn, "the full tensors", named, group)
    out = [t.detach().clone().contiguous() for _, t in named]
    if dist.get_world_size(group) > 1:
        for t in out:
            dist.broadcast(t, group=group, group_src=0)
    return out


def replicate_(fn: str, named_tensors) -> None:
    """Make the (name, tensor) pairs equal, in place, to the first rank's of the group (checked first)."""
    named = list(named_tensors)
    with torch.no_grad():
        for (_, t), new in zip(named, replicated(fn, named)):
            t.copy_(new)


def _check_linear(fn: str, linear) -> None:
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"{fn}.from_linear: linear must be a torch.nn.Linear, got {type(linear).__name__}")


def _check_width(fn: str, x: torch.Tensor, width: int) -> None:
    if x.shape[-1] != width:
        raise ValueError(f"{fn}: input has {x.shape[-1]} features in its last dim, this rank expects {width}")


# BEGIN SOLUTION (labkit's split layers: they answer column_parallel_linear and row_parallel_linear)
class ColumnParallelLinear(nn.Module):
    """This rank's output features of a linear layer: weight (out/t, in), bias (out/t,)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, gather_output: bool = False):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None
        self.gather_output = gather_output

    @classmethod
    def from_linear(cls, linear: nn.Linear, gather_output: bool = False) -> "ColumnParallelLinear":
        _check_linear("ColumnParallelLinear", linear)
        rank, world = tp_rank_world("ColumnParallelLinear", linear.out_features, "out_features")
        weight, *bias = replicated("ColumnParallelLinear.from_linear", linear.named_parameters())
        w = weight.chunk(world, dim=0)[rank].clone()
        b = bias[0].chunk(world)[rank].clone() if bias else None
        return cls(w, b, gather_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (..., in) -> (..., out/t) or (..., out)
        _check_width("ColumnParallelLinear", x, self.weight.shape[1])
        y = F.linear(copy_to_tp(x), self.weight, self.bias)
        return gather_last(y) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """This rank's input features of a linear layer: weight (out, in/t); the full bias (out,)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, input_is_parallel: bool = True):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None
        self.input_is_parallel = input_is_parallel

    @classmethod
    def from_linear(cls, linear: nn.Linear, input_is_parallel: bool = True) -> "RowParallelLinear":
        _check_linear("RowParallelLinear", linear)
        rank, world = tp_rank_world("RowParallelLinear", linear.in_features, "in_features")
        weight, *bias = replicated("RowParallelLinear.from_linear", linear.named_parameters())
        w = weight.chunk(world, dim=1)[rank].clone()
        return cls(w, bias[0] if bias else None, input_is_parallel)

    def forward(self, x: torch.Tensor, reduce=reduce_from_tp) -> torch.Tensor:
        # (..., in/t) -> (..., out)
        if not self.input_is_parallel:
            x = split_last(x)
        _check_width("RowParallelLinear", x, self.weight.shape[1])
        y = reduce(F.linear(x, self.weight))                        # partial sums added over ranks
        return y if self.bias is None else y + self.bias
# END SOLUTION


def column_parallel_linear(x, weight, bias):
    """This rank's output features of y = x·Wᵀ + b.

    x: (..., in), the same on every rank; weight: (out/t, in), this rank's rows of W; bias:
    (out/t,), this rank's part of b (the grader always passes one; torch.nn.functional.linear
    would take None as well). Returns (..., out/t). The gradient reaching x must be the full one
    (every rank's part added up): pass x through your copy_to_tp first. The grader runs this with
    its own copy_to_tp in place of yours, so only this function is graded here.
    """
    # BEGIN SOLUTION
    # HINT: x is replicated, so its gradient must be summed over ranks in backward: which of your
    # HINT: two functions does that? What remains is an ordinary linear layer on this rank's shard.
    return torch.nn.functional.linear(copy_to_tp(x), weight, bias)
    # END SOLUTION


def row_parallel_linear(x, weight, bias):
    """The whole y = x·Wᵀ + b from input features split over ranks.

    x: (..., in/t), this rank's input features; weight: (out, in/t), this rank's columns of W;
    bias: (out,), the whole bias (the same on every rank; the grader always passes one, so
    bias=None need not be handled). Returns (..., out), the same on every rank: the ranks'
    partial products summed with your reduce_from_tp, the bias added once. The grader runs this
    with its own reduce_from_tp in place of yours, so only this function is graded here.
    """
    # BEGIN SOLUTION
    # HINT: each rank's product is a partial sum over its own input features: which of your two
    # HINT: functions adds partial sums across ranks? The bias belongs to the whole sum, once.
    return reduce_from_tp(torch.nn.functional.linear(x, weight)) + bias
    # END SOLUTION
