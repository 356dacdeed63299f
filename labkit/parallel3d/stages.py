"""One pipeline stage of `labkit.model.GPT`, with tensor parallelism inside.

Stage s of pp holds blocks s·L/pp … (s+1)·L/pp − 1, each split Megatron-style over the tensor-
parallel group (Lab 07's `ParallelBlock`: attention by heads, the MLP column-then-row). The first
stage also holds the token embedding (vocabulary-parallel: rows split over tp) and the position
embedding; the last stage holds the final LayerNorm, the output layer and the loss
(vocabulary-parallel cross-entropy: the full logits never exist).

**The tied weight.** GPT's output layer reuses the token embedding (logits = x·Eᵀ). With pp > 1
its two uses sit on different ranks, so — as Megatron-LM does (Shoeybi et al. 2019; Narayanan et
al. 2021) — the first and the last stage each keep a copy of their tp shard of E, the copies start
equal, and after every backward their gradients are summed over the *embedding group* (the
pipeline's first and last rank: `grid.embedding_groups`). Both copies then take the same
optimizer step and stay equal. With pp = 1 the one stage uses one parameter twice, as GPT does.

Build it inside ``with tp_group(grid.tp_group):`` (the Lab 07 layers slice for the group's rank).
`shard_state` names this rank's pieces after the full model's parameters and `gather_full_state`
puts all ranks' pieces back into ``GPT(cfg).state_dict()`` shapes.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from labkit.model import GPT, GPTConfig
from labkit.tensor_parallel.comm import copy_to_tp
from labkit.tensor_parallel.parallelize import ParallelBlock
from labkit.tensor_parallel.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy

__all__ = ["stage_layers", "GPTStage", "shard_state", "gather_full_state"]


def stage_layers(layers: int, pp: int, stage: int) -> range:
    """The (global) block indices of ``stage``: an equal share, layers/pp blocks each."""
    per = layers // pp
    return range(stage * per, (stage + 1) * per)


class GPTStage(nn.Module):
    """Stage ``stage`` of ``num_stages`` of ``model``, this tp rank's share of it.

    forward: stage 0 takes tokens (b, s) int64, others an activation (b, s, h); the last stage
    returns this rank's vocabulary slice of the logits (b, s, V/t), the others (b, s, h).
    ``loss(logits, targets)``: mean cross-entropy over the b·s positions (same on all tp ranks).
    """

    def __init__(self, model: GPT, stage: int, num_stages: int):
        super().__init__()
        cfg = model.cfg
        self.cfg, self.stage, self.num_stages = cfg, stage, num_stages
        self.first, self.last = stage == 0, stage == num_stages - 1
        self.layers = stage_layers(cfg.layers, num_stages, stage)
        if self.first:
            self.tok_emb = VocabParallelEmbedding.from_embedding(model.tok_emb)
            self.pos_emb = copy.deepcopy(model.pos_emb)
        self.blocks = nn.ModuleList(ParallelBlock(model.blocks[i], False) for i in self.layers)
        if self.last:
            self.ln_f = copy.deepcopy(model.ln_f)
            if not self.first:   # Megatron's copy of the word embeddings on the last stage
                self.head = VocabParallelEmbedding.from_embedding(model.tok_emb)

    @property
    def tied(self) -> VocabParallelEmbedding | None:
        """The module holding this rank's shard of the tied embedding / output weight, if any."""
        if self.first:
            return self.tok_emb
        return self.head if self.last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            T = x.shape[1]
            x = self.tok_emb(x) + self.pos_emb(torch.arange(T, device=x.device))   # (b, s, h)
        for block in self.blocks:
            x = block(x)                                                          # (b, s, h)
        if not self.last:
            return x
        x = copy_to_tp(self.ln_f(x))              # f: the replicated hidden states enter the split
        return x @ self.tied.weight.t()           # (b, s, V/t): this rank's vocabulary columns

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Vocabulary-parallel mean cross-entropy of logits (b, s, V/t) against targets (b, s)."""
        b, s = targets.shape
        return vocab_parallel_cross_entropy(logits.reshape(b * s, -1), targets.reshape(-1), self.tied.start)


# --------------------------------------------------------------------------- shards <-> full model

_COLUMN = ("attn.qkv", "mlp.fc")          # split along output features (dim 0 of the weight)
_ROW = ("attn.proj", "mlp.proj")           # weight split along input features (dim 1); bias whole


def shard_state(stage: GPTStage) -> dict[str, torch.Tensor]:
    """This rank's parameters, keyed by the full GPT's parameter names (block indices global);
    the last stage's copy of the tied weight is keyed ``"tok_emb.weight@last"``."""
    out = {}
    for name, p in stage.named_parameters():
        if name.startswith("blocks."):
            _, j, rest = name.split(".", 2)
            name = f"blocks.{stage.layers[int(j)]}.{rest}"
        elif name.startswith("head."):
            name = "tok_emb.weight@last"
        out[name] = p.detach().clone()
    return out


def _join(name: str, parts: list[torch.Tensor], cfg: GPTConfig) -> torch.Tensor:
    """The full tensor of parameter ``name`` from its tp shards (in tp order)."""
    if name.startswith("tok_emb"):
        return torch.cat(parts, dim=0)                          # vocabulary rows
    if ".attn.qkv." in name:                                    # [q; k; v], each split by heads
        h = cfg.hidden
        pieces = [p.reshape(3, -1, *p.shape[1:]) for p in parts]   # (3, h/t[, h])
        return torch.cat(pieces, dim=1).reshape(3 * h, *parts[0].shape[1:])
    if any(f".{k}." in name for k in _COLUMN):
        return torch.cat(parts, dim=0)
    if any(f".{k}.weight" in name for k in _ROW):
        return torch.cat(parts, dim=1)
    return parts[0]                                             # replicated (LayerNorms, biases, pos_emb)


def gather_full_state(cfg: GPTConfig, tp: int, shards: dict[tuple[int, int], dict[str, torch.Tensor]]
                      ) -> dict[str, torch.Tensor]:
    """Reassemble one replica: ``shards[(pp_index, tp_index)]`` is that rank's `shard_state`.
    Returns {name: tensor} with the names and shapes of ``GPT(cfg).state_dict()`` (the first
    stage's copy of the tied weight)."""
    names: dict[str, list] = {}
    for (s, t), state in sorted(shards.items()):
        for name, value in state.items():
            if name.endswith("@last"):
                continue
            names.setdefault(name, [None] * tp)[t] = value
    return {name: _join(name, parts, cfg) for name, parts in names.items()}
