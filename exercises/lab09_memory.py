"""Lab 09 exercises: memory.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``checkpointed_forward``: activation checkpointing of a chain of layers, written by hand;
- ``block_activation_bytes``: the bytes one block of the course's GPT keeps for backward;
- ``forward_only_peak``: the activation peak of a chain run without autograd (inference);
- ``kv_cache_bytes``: the bytes of a decoder's key/value cache (section 12).
"""
from __future__ import annotations

import math  # noqa: F401

import torch  # noqa: F401


def checkpointed_forward(layers, x, segment):
    """Run the chain ``layers`` on ``x``, keeping for backward only each segment's input.

    layers: a list of torch.nn.Module, each mapping (B, w) -> (B, w) (they may contain dropout);
    x: (B, w) tensor (it may require grad); segment: k >= 1, the number of consecutive layers
    per segment (the last segment may be shorter). Every segment, the last one too, runs in
    forward under torch.no_grad() — nothing of it is saved but its input — and is run again in
    backward, with grad, to back-propagate through it. Return the chain's output (B, w).

    The gradients of x and of every parameter must equal those of the plain chain, dropout
    included: save the random-number generator's state (torch.get_rng_state()) before a
    segment's forward and restore it before recomputing it (inside torch.random.fork_rng(), so
    the random stream after the step is not disturbed). Let the recomputation's backward
    (torch.autograd.backward) put the parameters' gradients straight into their .grad, as
    PyTorch's reentrant checkpoint does. Do not use torch.utils.checkpoint.
    """
    raise NotImplementedError("hint: a torch.autograd.Function per segment: forward under torch.no_grad(), keeping the input and torch.get_rng_state(); backward reruns the segment with grad inside torch.random.fork_rng after torch.set_rng_state, then torch.autograd.backward. Pass the parameters as inputs too.")


def block_activation_bytes(batch, seq, hidden, heads, mlp_ratio, itemsize, recompute="none"):
    """Bytes one block of ``labkit.model.GPT`` keeps for backward, on CPU (an int).

    A block is x + attn(ln1(x)), then x + mlp(ln2(x)); its tensors have b = batch rows of
    s = seq positions of h = hidden features, a = heads attention heads, an MLP of width
    r·h (r = mlp_ratio), e = itemsize bytes per element. Count, once each:
    - the input of each LayerNorm, and each LayerNorm's mean and 1/std (b·s numbers each, in the
      model's dtype: e bytes each, as PyTorch keeps them on a CPU);
    - the input of every Linear (qkv, the attention's output projection, fc, the MLP's proj);
    - the copies of q, k and v that the batched matmuls make (b·s·h each);
    - softmax's output (b·a·s·s) and the causal mask (s·s booleans of 1 byte);
    - GELU's input.
    recompute="selective": the attention core (scores, mask, softmax, att·V) is recomputed: its
    q, k, v copies are replaced by the qkv output (same size), softmax's output and the mask are
    not kept. recompute="full": only the block's input is kept.
    """
    raise NotImplementedError("hint: add up, in bytes, every tensor the list names: most are b·s·h elements or r times that; the LayerNorm statistics are b·s; softmax's output is per head and s × s; the mask is bool.")


def forward_only_peak(activation_bytes):
    """Peak bytes of a chain's activations in a forward pass without autograd (an int).

    activation_bytes: the sizes a_1, ..., a_L (ints, bytes) of the outputs of a chain's layers,
    in order (layer i reads a_{i-1} and writes a_i; the caller's input a_0 is not counted). With
    no graph to keep, a layer's input is freed as soon as the layer returns, but while layer i
    writes its output its input is still alive. Return max(a_1, max over i of a_i + a_{i+1}).
    Raise ValueError for an empty list.
    """
    raise NotImplementedError("hint: without a graph, only a layer's input and output are alive at once: look at neighbours.")


def kv_cache_bytes(layers, heads, kv_heads, head_dim, tokens, batch, itemsize):
    """Bytes of a decoder's KV cache after ``tokens`` tokens of ``batch`` sequences (an int).

    Every layer keeps a key and a value vector of kv_heads * head_dim elements per token and
    sequence, itemsize bytes each. kv_heads == heads is multi-head attention; fewer is
    grouped-query attention (kv_heads must divide heads; 1 is multi-query attention).
    Raise ValueError if kv_heads does not divide heads or a size is < 1 (tokens may be 0).
    """
    raise NotImplementedError("hint: what is cached per token, per sequence and per layer? Only the key/value heads are stored, whatever the number of query heads.")
