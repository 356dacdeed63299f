"""Megatron's MLP and attention blocks, built from `labkit.model`'s modules.

- **MLP**: fc column-parallel (its output stays split), GELU on each rank's slice (element-wise,
  so no communication), proj row-parallel: one all-reduce forward (g), one backward (f).
- **Attention**: split by heads. The input x is replicated; each rank projects Q, K, V for its own
  heads with its slice of qkv (column-parallel: no Q, K or V ever moves), attends, and the output
  projection is row-parallel: again one all-reduce forward and one backward.

So a transformer layer costs 2 all-reduces of b·s·h elements forward and 2 backward.
``sequence_parallel=True`` swaps g for a reduce-scatter along the sequence and expects the input
split along the sequence (all-gathered on entry): `all_gather_seq` and `reduce_scatter_seq` of
`labkit.tensor_parallel.comm`; `labkit.tensor_parallel.parallelize` splits a whole GPT that way.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from labkit.tensor_parallel.comm import all_gather_seq, reduce_from_tp, reduce_scatter_seq
from labkit.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear, replicated, tp_rank_world


def _check_parts(fn: str, what: str, module, linears: tuple) -> None:
    if not all(isinstance(getattr(module, name, None), nn.Linear) for name in linears):
        raise TypeError(f"{fn}: {what} must have nn.Linear {' and '.join(linears)} (as labkit.model's), "
                        f"got {type(module).__name__}")


class ParallelMLP(nn.Module):
    """fc (column) → GELU → proj (row)."""

    def __init__(self, fc: ColumnParallelLinear, proj: RowParallelLinear, sequence_parallel: bool = False):
        super().__init__()
        self.fc, self.proj, self.sequence_parallel = fc, proj, sequence_parallel

    @classmethod
    def from_module(cls, mlp, sequence_parallel: bool = False) -> "ParallelMLP":
        _check_parts("ParallelMLP.from_module", "mlp", mlp, ("fc", "proj"))
        return cls(ColumnParallelLinear.from_linear(mlp.fc), RowParallelLinear.from_linear(mlp.proj), sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:            # (B, T, h) -> (B, T, h)
        if self.sequence_parallel:                                 # (B, T/t, h) -> (B, T/t, h)
            return self.proj(F.gelu(_column_sp(self.fc, x)), reduce=reduce_scatter_seq)
        return self.proj(F.gelu(self.fc(x)))


def _column_sp(layer: ColumnParallelLinear, x: torch.Tensor) -> torch.Tensor:
    """A column-parallel layer whose input arrives split along the sequence: all-gather it first
    (its backward reduce-scatters, replacing f's all-reduce)."""
    return F.linear(all_gather_seq(x), layer.weight, layer.bias)


class ParallelAttention(nn.Module):
    """Causal self-attention over this rank's heads: qkv column-parallel, proj row-parallel."""

    def __init__(self, qkv_weight, qkv_bias, proj: RowParallelLinear, heads: int, head_dim: int,
                 sequence_parallel: bool = False):
        super().__init__()
        self.qkv = ColumnParallelLinear(qkv_weight, qkv_bias)
        self.proj, self.heads, self.head_dim, self.sequence_parallel = proj, heads, head_dim, sequence_parallel

    @classmethod
    def from_module(cls, attn, sequence_parallel: bool = False) -> "ParallelAttention":
        fn = "ParallelAttention.from_module"
        _check_parts(fn, "attn", attn, ("qkv", "proj"))
        if attn.qkv.bias is None or not isinstance(getattr(attn, "heads", None), int):
            raise TypeError(f"{fn}: attn must have an int heads and a qkv with a bias (labkit.model's attention)")
        rank, world = tp_rank_world("ParallelAttention", attn.heads, "heads")
        h = attn.qkv.in_features
        if attn.qkv.out_features != 3 * h:
            raise ValueError(f"{fn}: attn.qkv must map {h} features to 3·{h}, got {attn.qkv.out_features}")
        w, b = replicated(fn, attn.qkv.named_parameters())
        w, b = w.view(3, h, h), b.view(3, h)                        # [q; k; v], heads contiguous in each
        per = h // world                                           # this rank's heads' features
        mine = slice(rank * per, (rank + 1) * per)
        return cls(w[:, mine].reshape(3 * per, h).clone(), b[:, mine].reshape(3 * per).clone(),
                   RowParallelLinear.from_linear(attn.proj), attn.heads // world, attn.head_dim,
                   sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:            # (B, T, h) -> (B, T, h)
        qkv = _column_sp(self.qkv, x) if self.sequence_parallel else self.qkv(x)
        B, T, _ = qkv.shape
        q, k, v = qkv.split(self.heads * self.head_dim, dim=-1)     # (B, T, h/t) each
        q, k, v = (t.view(B, T, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)          # (B, nh/t, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        y = (scores.masked_fill(future, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.proj(y, reduce=reduce_scatter_seq if self.sequence_parallel else reduce_from_tp)

