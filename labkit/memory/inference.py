"""Memory outside a GPT's training step: a forward-only pass, the KV cache, a CNN and an RNN.

**Activation lifetime without autograd.** Under ``torch.no_grad()`` nothing is saved for backward,
so an activation lives only until the next layer has read it. For a chain of layers with outputs
a₁, …, a_L (bytes), while layer i + 1 writes a_{i+1} its input a_i is still alive, and a_i is freed
as soon as the layer returns. The peak is the largest sum of two neighbours:

    forward-only peak = max(a₁, max_i (a_i + a_{i+1}))          (two buffers suffice)
    training forward  keeps what each op needs for backward      (for Linear+ReLU pairs: every ReLU
                                                                  output, a sum that grows with depth)

(the caller's input is not counted). `chain_peaks` measures both with the exact tracker of
`labkit.memory.tracker` and `chain_lifetimes` records which activations are alive after each layer.

**The KV cache.** Generating token t + 1 needs every earlier token's keys and values in every layer.
Keeping them costs, per token of one sequence, ``2 · layers · kv_heads · head_dim · element_size``
bytes (K and V; kv_heads = heads for multi-head attention, fewer with grouped-query attention).
`KVCache` keeps them for our GPT (`labkit.model.GPT`) and `generate` decodes with it; the logits
equal the full forward's, and the bytes it holds after t tokens are ``t`` times the closed form.

**A small CNN and an RNN, trained.** What autograd keeps at the end of forward, by op (element size
e, bytes; indices of max-pooling are int64, 8 bytes each): a convolution keeps its input; ReLU and
tanh keep their output; max-pooling keeps its input (ReLU's output, already counted) and the
argmax index of each output, plus the output the next layer keeps; a Linear keeps its input. So:

    CNN  conv(3→c1) ReLU pool2 conv(c1→c2) ReLU pool2 flatten Linear(→k), input B×3×H×W:
         B·[c1·H·W·e + c1·(H/2)(W/2)·(8 + e) + c2·(H/2)(W/2)·e + c2·(H/4)(W/4)·(8 + e) + k·e]
    RNN  h_t = tanh(x_t W + h_{t-1} U + b) over T steps from h₀ = 0, then Linear(→k), x: B×T×I:
         B·[T·I·e (x, which the per-step views keep) + (T + 1)·H·e (h₀ … h_T) + k·e]

`cnn_activation_bytes` and `rnn_activation_bytes` are these closed forms; `measure_training_forward`
measures the same bytes with the tracker (tests/test_memory_inference.py: equal to the byte).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from labkit.checks import check_int
from labkit.memory.tracker import ActivationPeakTracker, MemoryTracker

__all__ = ["chain", "chain_peaks", "chain_peak_formula", "forward_only_peak", "chain_lifetimes", "Lifetimes", "KVCache", "generate",
           "kv_cache_bytes_per_token", "measure_kv_cache", "SmallCNN", "ElmanRNN", "cnn_activation_bytes",
           "rnn_activation_bytes", "measure_training_forward", "PUBLISHED_KV"]


# ---------------------------------------------------------------------------- forward-only lifetime
def chain(widths, seed: int = 0) -> nn.Sequential:
    """Linear(w₀→w₁), ReLU, Linear(w₁→w₂), ReLU, …: a chain whose activations have widths w₁, w₁, w₂, w₂, …"""
    widths = [check_int("chain", "width", w, minimum=1) for w in widths]
    if len(widths) < 2:
        raise ValueError("chain: widths needs at least an input and an output width")
    g = torch.Generator().manual_seed(seed)
    layers = []
    for a, b in zip(widths, widths[1:]):
        lin = nn.Linear(a, b)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g) / math.sqrt(a))
            lin.bias.zero_()
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers)


def _activation_bytes(widths, batch: int, itemsize: int) -> list[int]:
    """Bytes of each layer's output of `chain` (Linear and ReLU outputs alike)."""
    return [batch * w * itemsize for w in widths[1:] for _ in range(2)]


def chain_peak_formula(widths, batch: int, itemsize: int = 4) -> dict:
    """For `chain(widths)` on ``batch`` rows: {"inference_peak": max(a₁, max_i(a_i + a_{i+1})) over the
    outputs a_i of its modules, "training_kept": what autograd keeps at the end of forward, the ReLU
    outputs B·e·Σ_{i≥1} w_i (a Linear keeps its input, the previous ReLU's output; a ReLU its own
    output; each Linear's output is freed once its ReLU has run)} in bytes."""
    a = _activation_bytes(widths, check_int("chain_peak_formula", "batch", batch, minimum=1), itemsize)
    return {"inference_peak": forward_only_peak(a), "training_kept": sum(a[1::2])}


def _forward_only_peak(activation_bytes):
    """Peak bytes of a chain's activations in a forward pass without autograd (an int).

    activation_bytes: the sizes a_1, ..., a_L (ints, bytes) of the outputs of a chain's layers,
    in order (layer i reads a_{i-1} and writes a_i; the caller's input a_0 is not counted). With
    no graph to keep, a layer's input is freed as soon as the layer returns, but while layer i
    writes its output its input is still alive. Return max(a_1, max over i of a_i + a_{i+1}).
    Raise ValueError for an empty list.
    """
    # BEGIN SOLUTION
    # HINT: without a graph, only a layer's input and output are alive at once: look at neighbours.
    a = list(activation_bytes)
    if not a:
        raise ValueError("forward_only_peak: need at least one activation")
    return max([a[0]] + [x + y for x, y in zip(a, a[1:])])
    # END SOLUTION


def forward_only_peak(activation_bytes) -> int:
    """max(a₁, max_i(a_i + a_{i+1})): the peak of a chain's outputs a₁..a_L (bytes) run without autograd."""
    return _forward_only_peak([check_int("forward_only_peak", "activation", v, minimum=0) for v in activation_bytes])


def chain_peaks(widths, batch: int, seed: int = 0) -> dict:
    """Measured on `chain(widths)` with a (batch, widths[0]) float32 input: {"inference_peak": peak
    activation bytes of one forward under torch.no_grad(), "training_kept": activation bytes live at
    the end of one forward with autograd}."""
    model = chain(widths, seed)
    x = torch.randn(batch, widths[0], generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad(), ActivationPeakTracker(model) as t:
        y = model(x)
    out = {"inference_peak": t.peak_activation_bytes}
    del y
    out["training_kept"] = measure_training_forward(model, x)
    return out


@dataclass(frozen=True)
class Lifetimes:
    """The outputs of `chain`'s modules over one forward, in two modes ("inference": no_grad, and
    "training"): frames[mode] is a list of (label, alive, live_bytes): after each module returns but
    while its caller still holds the input ("module j ran"), and after the caller moved on to its
    output ("input released"); alive[j] says whether output j's storage still exists (a weak
    reference), live_bytes is the tracker's activation bytes then. sizes[j]: output j's bytes."""
    sizes: tuple
    frames: dict


def chain_lifetimes(widths, batch: int, seed: int = 0) -> Lifetimes:
    """Run `chain(widths)` module by module in both modes and record `Lifetimes`."""
    model = chain(widths, seed)
    x = torch.randn(batch, widths[0], generator=torch.Generator().manual_seed(seed + 1))
    names = [type(m).__name__ for m in model]
    frames = {}
    for mode in ("inference", "training"):
        refs, rows = [], []
        ctx = torch.no_grad() if mode == "inference" else torch.enable_grad()
        with ctx, ActivationPeakTracker(model) as t:
            h = x
            for j, m in enumerate(model):
                out = m(h)
                refs.append(weakref.ref(out.untyped_storage()))
                pad = (False,) * (len(model) - len(refs))
                rows.append((f"{names[j]} {j + 1} ran: its input and output exist",
                             tuple(r() is not None for r in refs) + pad, t.live_activation_bytes()))
                h = out
                del out
                rows.append((f"input of {names[j]} {j + 1} released",
                             tuple(r() is not None for r in refs) + pad, t.live_activation_bytes()))
            del h
        frames[mode] = rows
    return Lifetimes(tuple(_activation_bytes(widths, batch, 4)), frames)


# ---------------------------------------------------------------------------- the KV cache
PUBLISHED_KV = {
    # name: (layers, heads, kv_heads, head_dim, bytes per element) from the models' papers / configs
    "GPT-3 175B (Brown+ 2020)": (96, 96, 96, 128, 2),
    "Llama 2 7B (Touvron+ 2023)": (32, 32, 32, 128, 2),
    "Llama 2 70B, GQA (Touvron+ 2023)": (80, 64, 8, 128, 2),
}


def kv_cache_bytes(layers, heads, kv_heads, head_dim, tokens, batch, itemsize):
    """Bytes of a decoder's KV cache after ``tokens`` tokens of ``batch`` sequences (an int).

    Every layer keeps a key and a value vector of kv_heads * head_dim elements per token and
    sequence, itemsize bytes each. kv_heads == heads is multi-head attention; fewer is
    grouped-query attention (kv_heads must divide heads; 1 is multi-query attention).
    Raise ValueError if kv_heads does not divide heads or a size is < 1 (tokens may be 0).
    """
    # BEGIN SOLUTION
    # HINT: what is cached per token, per sequence and per layer? Only the key/value heads are stored,
    # HINT: whatever the number of query heads.
    if min(layers, heads, kv_heads, head_dim, batch, itemsize) < 1 or tokens < 0:
        raise ValueError("kv_cache_bytes: sizes must be >= 1 (tokens >= 0)")
    if heads % kv_heads:
        raise ValueError(f"kv_cache_bytes: kv_heads ({kv_heads}) must divide heads ({heads})")
    return 2 * layers * kv_heads * head_dim * tokens * batch * itemsize
    # END SOLUTION


# BEGIN SOLUTION (lab09_memory: per token and sequence, it answers kv_cache_bytes)
def kv_cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """2 · layers · kv_heads · head_dim · itemsize: K and V of one token of one sequence, every layer."""
    fn = "kv_cache_bytes_per_token"
    return 2 * check_int(fn, "layers", layers, minimum=1) * check_int(fn, "kv_heads", kv_heads, minimum=1) * \
        check_int(fn, "head_dim", head_dim, minimum=1) * check_int(fn, "itemsize", itemsize, minimum=1)
# END SOLUTION


class KVCache:
    """Keys and values of every layer of a `labkit.model.GPT` for the tokens seen so far:
    k[l], v[l] of shape (B, heads, t, head_dim), grown by one token per decoding step."""

    def __init__(self, layers: int):
        self.k: list = [None] * layers
        self.v: list = [None] * layers

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Add (B, heads, n, head_dim) keys and values; return the layer's whole cache (k, v)."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k.contiguous(), v.contiguous()
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]

    @property
    def tokens(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def nbytes(self) -> int:
        """Bytes of the storages the cache holds."""
        return sum(t.untyped_storage().nbytes() for t in self.k + self.v if t is not None)


def _block_step(block, x: torch.Tensor, cache: KVCache, layer: int, start: int) -> torch.Tensor:
    """One GPT block on new tokens x (B, n, H) at positions start.., attending to the cache too."""
    attn = block.attn
    B, n, H = x.shape
    qkv = attn.qkv(block.ln1(x))
    q, k, v = (t.view(B, n, attn.heads, attn.head_dim).transpose(1, 2) for t in qkv.split(H, dim=-1))
    K, V = cache.append(layer, k, v)                                          # (B, nh, start+n, hd)
    scores = q @ K.transpose(-2, -1) / math.sqrt(attn.head_dim)               # (B, nh, n, start+n)
    future = torch.ones(n, start + n, dtype=torch.bool, device=x.device).triu(start + 1)
    y = (scores.masked_fill(future, float("-inf")).softmax(-1) @ V).transpose(1, 2).reshape(B, n, H)
    x = x + block.drop(attn.proj(y))
    return x + block.drop(block.mlp(block.ln2(x)))


def decode_step(model, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Logits (B, n, vocab) of new ``tokens`` (B, n) that follow the cache's tokens; extends the cache."""
    start = cache.tokens
    n = tokens.shape[1]
    if start + n > model.cfg.seq_len:
        raise ValueError(f"decode_step: {start + n} tokens exceed the model's seq_len {model.cfg.seq_len}")
    pos = torch.arange(start, start + n, device=tokens.device)
    x = model.drop(model.tok_emb(tokens) + model.pos_emb(pos))
    for i, block in enumerate(model.blocks):
        x = _block_step(block, x, cache, i, start)
    return model.ln_f(x) @ model.tok_emb.weight.t()


@torch.no_grad()
def generate(model, prompt: torch.Tensor, steps: int) -> tuple[torch.Tensor, KVCache, list]:
    """Greedy decoding with a KV cache: (tokens (B, P + steps), the cache, [logits of each step])."""
    steps = check_int("generate", "steps", steps, minimum=0)
    cache = KVCache(model.cfg.layers)
    logits = decode_step(model, prompt, cache)
    out, all_logits = prompt, [logits]
    for _ in range(steps):
        nxt = logits[:, -1:].argmax(-1)
        out = torch.cat([out, nxt], dim=1)
        if _ == steps - 1:
            break
        logits = decode_step(model, nxt, cache)
        all_logits.append(logits)
    return out, cache, all_logits


@dataclass(frozen=True)
class KVMeasure:
    """per_token: closed form (bytes per token, whole batch); held[t]: the cache's bytes after t + 1
    tokens (t = 0 .. tokens - 1); tracker_growth[t]: live bytes the tracker saw added by token t + 2
    (everything else of a step is freed before the next); same_logits: cached decoding's logits equal
    the full forward's (within ``tolerance``)."""
    per_token: int
    held: tuple
    tracker_growth: tuple
    same_logits: bool
    max_error: float
    tolerance: float


def measure_kv_cache(cfg=None, batch: int = 2, tokens: int = 12, seed: int = 0) -> KVMeasure:
    """Decode ``tokens`` tokens one at a time into a cache (no prompt beyond the first token) under the
    tracker; compare the cache's bytes with the closed form and the logits with one full forward."""
    from labkit.model import GPT, GPTConfig

    cfg = cfg or GPTConfig(layers=3, hidden=48, heads=4, seq_len=32, vocab=64)
    batch = check_int("measure_kv_cache", "batch", batch, minimum=1)
    tokens = check_int("measure_kv_cache", "tokens", tokens, minimum=2, maximum=cfg.seq_len)
    model = GPT(cfg, seed=seed).eval()
    seq = torch.randint(0, cfg.vocab, (batch, tokens), generator=torch.Generator().manual_seed(seed))
    cache = KVCache(cfg.layers)
    held, growth, logits = [], [], []
    with torch.no_grad(), MemoryTracker(model) as t:
        before = None
        for i in range(tokens):
            logits.append(decode_step(model, seq[:, i:i + 1], cache)[:, -1].clone())
            held.append(cache.nbytes())
            live = t.live_bytes_except(*logits, seq)
            if before is not None:
                growth.append(live - before)
            before = live
        full = model(seq)
    err = float((torch.stack(logits, 1) - full).abs().max())
    per_token = batch * kv_cache_bytes_per_token(cfg.layers, cfg.heads, cfg.head_dim, 4)
    tol = 1e-5
    return KVMeasure(per_token, tuple(held), tuple(growth), err <= tol, err, tol)


# ---------------------------------------------------------------------------- a CNN and an RNN
class SmallCNN(nn.Module):
    """conv3x3(3→c1) ReLU maxpool2 conv3x3(c1→c2) ReLU maxpool2 flatten Linear(→classes); 'same' padding."""

    def __init__(self, c1: int = 8, c2: int = 16, size: int = 16, classes: int = 10, seed: int = 0):
        super().__init__()
        if size % 4:
            raise ValueError(f"SmallCNN: size must be a multiple of 4 (two 2x2 poolings), got {size}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.conv1, self.conv2 = nn.Conv2d(3, c1, 3, padding=1), nn.Conv2d(c1, c2, 3, padding=1)
            self.fc = nn.Linear(c2 * (size // 4) ** 2, classes)
        self.c1, self.c2, self.size, self.classes = c1, c2, size, classes

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


class ElmanRNN(nn.Module):
    """h_t = tanh(x_t·W + h_{t-1}·U + b) from h₀ = 0 over a (B, T, I) input; Linear(H→classes) on h_T."""

    def __init__(self, inputs: int = 8, hidden: int = 32, classes: int = 10, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.ih, self.hh = nn.Linear(inputs, hidden), nn.Linear(hidden, hidden, bias=False)
            self.fc = nn.Linear(hidden, classes)
        self.hidden = hidden

    def forward(self, x):
        h = torch.zeros(x.shape[0], self.hidden, dtype=x.dtype, device=x.device)
        for t in range(x.shape[1]):
            h = torch.tanh(self.ih(x[:, t]) + self.hh(h))
        return self.fc(h)


def cnn_activation_bytes(batch: int, c1: int, c2: int, size: int, classes: int, itemsize: int = 4) -> dict:
    """What `SmallCNN` keeps at the end of a training forward, by tensor (module doc); "total"."""
    B, e, H = batch, itemsize, size
    out = {"relu1 output": B * c1 * H * H * e, "pool1 indices (int64)": B * c1 * (H // 2) ** 2 * 8,
           "pool1 output": B * c1 * (H // 2) ** 2 * e, "relu2 output": B * c2 * (H // 2) ** 2 * e,
           "pool2 indices (int64)": B * c2 * (H // 4) ** 2 * 8, "pool2 output": B * c2 * (H // 4) ** 2 * e,
           "logits": B * classes * e}
    out["total"] = sum(out.values())
    return out


def rnn_activation_bytes(batch: int, steps: int, inputs: int, hidden: int, classes: int, itemsize: int = 4) -> dict:
    """What `ElmanRNN` keeps at the end of a training forward (module doc); "total"."""
    B, e = batch, itemsize
    out = {"input (viewed by every step)": B * steps * inputs * e, "h_0 .. h_T": (steps + 1) * B * hidden * e,
           "logits": B * classes * e}
    out["total"] = sum(out.values())
    return out


def measure_training_forward(model: nn.Module, x: torch.Tensor) -> int:
    """Live activation bytes at the end of one forward with autograd (what backward would use), by the tracker."""
    with ActivationPeakTracker(model) as t:
        y = model(x)
        held = t.live_activation_bytes()
    del y
    return held
