"""A small GPT that Labs 06, 07, 09, 10, 11 and 12 all parallelise.

    cfg = GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)
    model = GPT(cfg, seed=0)                         # same seed, same weights, on any machine
    tokens, targets = batch(cfg, batch_size=8, seed=1)   # (8, 32) int64 each
    logits, loss = model(tokens, targets)            # (8, 32, 128), scalar

Architecture (GPT-2 style, pre-norm): token + position embedding; ``layers`` blocks of
``x + attn(ln1(x))`` then ``x + mlp(ln2(x))`` with causal multi-head self-attention and a GELU
MLP of width ``mlp_ratio * hidden``; a final LayerNorm; an LM head *tied* to the token
embedding (logits = x @ tok_emb.weightᵀ, no bias); mean cross-entropy over all positions.

Parameter count (tested exactly against ``sum(p.numel())``), with h = hidden, f = mlp_ratio·h:

    vocab·h + seq_len·h                       embeddings (the head reuses tok_emb)
    + layers · (4h² + 4h  +  2h·f + f + h  +  4h)    attention (qkv + proj), MLP, two LayerNorms
    + 2h                                      final LayerNorm

which is layers·(12h² + 13h) + (vocab + seq_len + 2)·h for mlp_ratio = 4.

Module names follow nanoGPT/Megatron so that tensor-parallel plans can name them:
``blocks.{i}.attn.qkv``, ``blocks.{i}.attn.proj``, ``blocks.{i}.mlp.fc``, ``blocks.{i}.mlp.proj``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake
from torch import nn

from labkit.checks import check_int, check_real

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of the model: ``layers`` blocks, ``hidden`` features (divisible by ``heads``),
    sequences of at most ``seq_len`` tokens from a vocabulary of ``vocab``; MLP width
    ``mlp_ratio * hidden``; ``dropout`` (a probability) on the embeddings and on each residual
    branch in training mode — 0 by default, when no dropout op runs at all. Invalid sizes raise a
    one-line TypeError/ValueError."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    seq_len: int = 32
    vocab: int = 128
    mlp_ratio: int = 4
    dropout: float = 0.0

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "mlp_ratio"):
            check_int("GPTConfig", name, getattr(self, name), minimum=1)
        p = check_real("GPTConfig", "dropout", self.dropout)
        if not 0 <= p < 1:
            raise ValueError(f"GPTConfig: dropout must be in [0, 1), got {p}")
        if self.hidden % self.heads:
            raise ValueError(f"GPTConfig: hidden ({self.hidden}) must be divisible by heads ({self.heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def ffn(self) -> int:
        """Width of the MLP's hidden layer (elements)."""
        return self.mlp_ratio * self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters (elements) of one block: qkv, projection, the MLP's two layers (weights and
        biases) and two LayerNorms."""
        h, f = self.hidden, self.ffn
        return (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h) + 2 * (2 * h)

    @property
    def params(self) -> int:
        """Parameters (elements) of ``GPT(self)``, from the closed form in the module docstring: the
        blocks, the word and position embeddings (the word one shared with the logit layer) and the
        final LayerNorm."""
        h = self.hidden
        return self.layers * self.layer_params + (self.vocab + self.seq_len) * h + 2 * h


# The labs' small models, one per purpose (their printed numbers depend on these exact sizes).
DATA_PARALLEL_GPT = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32)
"""Labs 06 and 10: trains for a few steps in well under a second on 2–4 gloo ranks."""
TENSOR_PARALLEL_GPT = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=32)
"""Lab 07: 4 heads, so 2 or 4 tensor-parallel ranks each own whole heads."""
MEMORY_GPT = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=64)
"""Lab 09: big enough that activations, parameters and optimizer state are all visible to the tracker."""
PARALLEL3D_GPT = GPTConfig(layers=4, hidden=32, heads=4, seq_len=8, vocab=64)
"""Lab 11: 4 layers split into 2 pipeline stages, 4 heads over 2 tensor-parallel ranks."""


def parameter_count(cfg: GPTConfig) -> int:
    """Number of parameters (elements) of ``GPT(cfg)``: ``cfg.params``."""
    return cfg.params


def attention_core(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Causal attention between the two projections: qkv (B, T, 3H) -> y (B, T, H). Scores QKᵀ/√hd,
    positions after t masked, softmax, att·V, heads put back side by side. (Lab 09 recomputes
    exactly this function for selective activation recomputation.)"""
    B, T, H3 = qkv.shape
    H = H3 // 3
    head_dim = H // heads
    q, k, v = qkv.split(H, dim=-1)                                           # (B, T, H) each
    q, k, v = (t.view(B, T, -1, head_dim).transpose(1, 2) for t in (q, k, v))   # (B, nh, T, hd)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)                   # (B, nh, T, T)
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
    att = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, -1)                       # (B, T, H)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t attends to positions <= t."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.core(self.qkv(x)))                                 # (B, T, H)

    def core(self, qkv: torch.Tensor) -> torch.Tensor:
        """`attention_core` with this layer's number of heads."""
        return attention_core(qkv, self.heads)


class MLP(nn.Module):
    """fc (hidden → ffn), GELU, proj (ffn → hidden)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden, cfg.ffn)
        self.proj = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


def _dropout(p: float) -> nn.Module:
    """nn.Dropout(p), or nothing at all for p = 0 (no op, no saved mask)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class Block(nn.Module):
    """One pre-norm transformer block: x + drop(attn(ln1(x))), then x + drop(mlp(ln2(x)))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.hidden), CausalSelfAttention(cfg)
        self.ln2, self.mlp = nn.LayerNorm(cfg.hidden), MLP(cfg)
        self.drop = _dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    """The model; ``GPT(cfg, seed=s, dtype=d)`` gives the same weights for the same (cfg, s, d).

    Weights are drawn from N(0, 0.02²) with a private generator (the global RNG is untouched);
    the two output projections of each block (attn.proj, mlp.proj) use 0.02/√(2·layers), as
    GPT-2 does; biases start at 0, LayerNorms at (1, 0).
    """

    def __init__(self, cfg: GPTConfig, seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"GPT: cfg must be a GPTConfig, got {type(cfg).__name__}")
        if dtype not in DTYPES:
            raise TypeError(f"GPT: dtype must be one of {', '.join(map(str, DTYPES))}, got {dtype}")
        check_int("GPT", "seed", seed)
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):   # nn.Linear's own init draws from the global RNG
            self.tok_emb = nn.Embedding(cfg.vocab, cfg.hidden)
            self.pos_emb = nn.Embedding(cfg.seq_len, cfg.hidden)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.hidden)
        self.drop = _dropout(cfg.dropout)
        self._init_weights(seed)
        self.to(dtype)

    def _init_weights(self, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        out_std = 0.02 / math.sqrt(2 * self.cfg.layers)
        with torch.no_grad():
            for name, p in self.named_parameters():   # registration order: fixed, so seed-stable
                if name.endswith("bias") or ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0 if (".ln" in name or name.startswith("ln_f")) and name.endswith("weight") else 0.0)
                else:
                    std = out_std if name.endswith("proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        """tokens: (B, T) int64 with T <= seq_len. Returns logits (B, T, vocab), or
        (logits, loss) when ``targets`` (B, T) is given; loss = mean cross-entropy, in the model's
        dtype (float32 for a 16-bit model)."""
        check_tokens("GPT", "tokens", tokens, self.cfg)
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(pos))                  # (B, T, H)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok_emb.weight.t()                          # (B, T, V), tied head
        if targets is None:
            return logits
        check_tokens("GPT", "targets", targets, self.cfg, like=tokens)
        wide = logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits   # 16-bit: in float32
        loss = F.cross_entropy(wide.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


def check_tokens(fn: str, name: str, t, cfg: GPTConfig, like: torch.Tensor | None = None) -> None:
    """One-line TypeError/ValueError unless ``t`` is a (B, T) integer tensor of token ids < vocab, T <= seq_len."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor of token ids, got {type(t).__name__}")
    if t.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{fn}: {name} must hold integer token ids (int64), got {t.dtype}")
    if t.dim() != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{fn}: {name} must have shape (batch, seq) with both >= 1, got {tuple(t.shape)}")
    if like is not None and t.shape != like.shape:
        raise ValueError(f"{fn}: {name} has shape {tuple(t.shape)}, tokens have {tuple(like.shape)}")
    if t.shape[1] > cfg.seq_len:
        raise ValueError(f"{fn}: {name} has {t.shape[1]} positions, the model has seq_len={cfg.seq_len}")
    if t.device.type == "meta" or is_fake(t):   # shapes only (meta, FakeTensorMode): no values to check
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= cfg.vocab:
        raise ValueError(f"{fn}: {name} holds ids in {lo}..{hi}, the vocabulary is 0..{cfg.vocab - 1}")


def batch(cfg: GPTConfig, batch_size: int, seed: int = 0, seq: int | None = None):
    """A learnable synthetic batch: (tokens, targets), each (batch_size, seq) int64 (seq defaults
    to cfg.seq_len); targets are tokens shifted left by one.

    Sequences follow a fixed random bigram table (drawn from seed 12345, the same for every
    batch), with each next token one of 4 likely successors — so the loss can fall from
    ln(vocab) towards ln(4) as the model learns. ``seed`` picks the sequences.
    """
    check_int("batch", "batch_size", batch_size, minimum=1)
    check_int("batch", "seed", seed)
    seq = cfg.seq_len if seq is None else check_int("batch", "seq", seq, minimum=1, maximum=cfg.seq_len)
    table = torch.randint(cfg.vocab, (cfg.vocab, 4), generator=torch.Generator().manual_seed(12345))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.empty(batch_size, seq + 1, dtype=torch.int64)
    ids[:, 0] = torch.randint(cfg.vocab, (batch_size,), generator=gen)
    choice = torch.randint(4, (batch_size, seq), generator=gen)
    for t in range(seq):
        ids[:, t + 1] = table[ids[:, t], choice[:, t]]
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
