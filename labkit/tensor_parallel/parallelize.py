"""`parallelize(model)`: `labkit.model.GPT` split over the ranks of the current process group.

Per block: attention split by heads and the MLP split Megatron-style (`blocks`); the vocabulary
split for the embedding, the tied output layer and the loss (`vocab`); position embedding and
LayerNorms replicated. Forward and backward move, per transformer layer, 2 + 2 all-reduces of
B·T·h elements; plus one all-reduce of B·T·h for the embedding (forward), one for the hidden
states entering the output layer (backward), and three of B·T numbers in the loss (forward).

``sequence_parallel=True`` (Korthikanti et al. 2022): between the tensor-parallel regions — the
LayerNorms, residual adds, position embedding — every rank keeps only its T/t positions. Each
all-reduce becomes a reduce-scatter (leaving a region) or an all-gather (entering one): same bytes
in a ring, and the activations of those regions shrink t-fold. The replicated parameters then
see only their rank's positions, so their gradients must be summed over ranks after backward:
call `sync_sequence_parallel_grads()` (Megatron does the same for its LayerNorms).
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn

from labkit.model import GPT, check_tokens
from labkit.tensor_parallel.blocks import ParallelAttention, ParallelMLP
from labkit.tensor_parallel.comm import _record, all_gather_seq, copy_to_tp, current_group, reduce_scatter_seq
from labkit.tensor_parallel.layers import replicate_, tp_rank_world
from labkit.tensor_parallel.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy


class ParallelBlock(nn.Module):
    def __init__(self, block, sequence_parallel: bool):
        super().__init__()
        self.ln1, self.ln2 = copy.deepcopy(block.ln1), copy.deepcopy(block.ln2)
        self.attn = ParallelAttention.from_module(block.attn, sequence_parallel)
        self.mlp = ParallelMLP.from_module(block.mlp, sequence_parallel)

    def forward(self, x):                                          # (B, T, h), or (B, T/t, h) with SP
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TensorParallelGPT(nn.Module):
    """This rank's share of a GPT; ``forward(tokens, targets)`` returns (local logits (B, T, V/t),
    loss) like GPT's (logits alone without targets)."""

    def __init__(self, model: GPT, sequence_parallel: bool = False):
        super().__init__()
        cfg = model.cfg
        self.cfg, self.sequence_parallel = cfg, sequence_parallel
        self.rank, self.world = tp_rank_world("parallelize", cfg.heads, "heads")
        tp_rank_world("parallelize", cfg.vocab, "vocab")
        tp_rank_world("parallelize", cfg.ffn, "ffn")
        self.tok_emb = VocabParallelEmbedding.from_embedding(model.tok_emb)
        self.pos_emb = copy.deepcopy(model.pos_emb)
        self.blocks = nn.ModuleList(ParallelBlock(b, sequence_parallel) for b in model.blocks)
        self.ln_f = copy.deepcopy(model.ln_f)
        mine = {id(p) for p in self.replicated_parameters()}          # the split ones were broadcast
        replicate_("parallelize", [(n, p) for n, p in self.named_parameters() if id(p) in mine])

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        check_tokens("TensorParallelGPT", "tokens", tokens, self.cfg)
        B, T = tokens.shape
        if self.sequence_parallel:
            if T % self.world:
                raise ValueError(f"TensorParallelGPT: sequence parallelism needs T ({T}) divisible by "
                                 f"the number of ranks ({self.world})")
            x = self._embed_sp(tokens)                              # (B, T/t, h)
        else:
            x = self.tok_emb(tokens) + self.pos_emb(torch.arange(T, device=tokens.device))  # (B, T, h)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        x = all_gather_seq(x) if self.sequence_parallel else copy_to_tp(x)   # (B, T, h), f
        logits = x @ self.tok_emb.weight.t()                       # (B, T, V/t), tied
        if targets is None:
            return logits
        check_tokens("TensorParallelGPT", "targets", targets, self.cfg, like=tokens)
        loss = vocab_parallel_cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), self.tok_emb.start)
        return logits, loss

    def _embed_sp(self, tokens):
        emb = self.tok_emb
        rows = emb.weight.shape[0]
        mine = (tokens >= emb.start) & (tokens < emb.start + rows)
        local = nn.functional.embedding((tokens - emb.start).clamp(0, rows - 1), emb.weight) * mine.unsqueeze(-1)
        x = reduce_scatter_seq(local)                               # replaces the embedding's all-reduce
        T = tokens.shape[1] // self.world
        return x + self.pos_emb(torch.arange(self.rank * T, (self.rank + 1) * T, device=tokens.device))

    def replicated_parameters(self) -> list[nn.Parameter]:
        """Parameters every rank holds whole: position embedding, LayerNorms, row-parallel biases."""
        out = [*self.pos_emb.parameters(), *self.ln_f.parameters()]
        for b in self.blocks:
            out += [*b.ln1.parameters(), *b.ln2.parameters(), b.attn.proj.bias, b.mlp.proj.bias]
        return out

    def sync_sequence_parallel_grads(self) -> None:
        """With sequence parallelism: sum the replicated parameters' gradients over ranks (one
        flat all-reduce). Without it they are already equal on every rank; nothing to do."""
        if not self.sequence_parallel or self.world == 1:
            return
        params = [p for p in self.replicated_parameters() if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        group = current_group()
        _record("all_reduce", "after backward", flat, group)
        dist.all_reduce(flat, group=group)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def parallelize(model: GPT, sequence_parallel: bool = False) -> TensorParallelGPT:
    """Split ``model`` over the current process group (each rank passes the same weights)."""
    if not isinstance(model, GPT):
        raise TypeError(f"parallelize: model must be a labkit.model.GPT, got {type(model).__name__}")
    if model.cfg.dropout:
        raise ValueError("parallelize: dropout is not supported here (each rank would draw its own "
                         f"masks); use GPTConfig(dropout=0), got {model.cfg.dropout}")
    return TensorParallelGPT(model, sequence_parallel)
