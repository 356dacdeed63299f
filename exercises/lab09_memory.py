"""Lab 09 exercises: memory.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``checkpointed_forward``: activation checkpointing of a chain of layers, written by hand;
- ``checkpoint_policy``: which activations to keep under a memory budget, recomputing the least;
- ``forward_only_peak``: the activation peak of a chain run without autograd (inference);
- ``kv_cache_bytes``: the bytes of a decoder's key/value cache (section 12).
"""
from __future__ import annotations

import itertools  # noqa: F401
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

    What the grader relies on: it calls ``checkpointed_forward(...).sum().backward()`` once per
    chain and then reads x.grad and every parameter's .grad — so the recomputed segment's
    gradients must reach .grad during that one backward, which the reentrant form (a
    torch.autograd.Function whose backward reruns the segment and calls torch.autograd.backward)
    does by construction. The peak it checks counts every live tensor storage (labkit's
    tracker), so a segment may keep nothing but its input between forward and backward; a form
    built on torch.autograd.graph.saved_tensors_hooks (non-reentrant) is accepted only if it
    stays within that bound too, which a forward run with grad makes hard.
    """
    raise NotImplementedError("hint: a segment is a torch.autograd.Function whose forward keeps nothing but what it needs to run the segment again (its input, and the random state for dropout), and whose backward recomputes with grad enabled and back-propagates through the recomputation. torch.random.fork_rng keeps the restore from disturbing later draws.")


def checkpoint_policy(sizes, costs, budget):
    """Which tensors to keep for backward so that their bytes fit ``budget`` and the least is
    recomputed.

    ``sizes[i]``: bytes tensor i takes if kept; ``costs[i]``: FLOPs to recompute it in backward if
    it is not kept (costs add: each dropped tensor is recomputed once). ``budget``: bytes. All
    are ints ≥ 0. Return the indices to keep, as a sorted list, such that the kept sizes sum to at
    most ``budget`` and the costs of the tensors *not* kept sum to as little as possible (any
    such set, when several tie). The grader gives up to 12 tensors, compares the recomputed
    FLOPs of your choice with the least possible, and checks that it fits the budget.
    """
    raise NotImplementedError("hint: this is the 0/1 knapsack problem: the budget is the capacity, sizes the weights, and the FLOPs you avoid recomputing are the value. Twelve tensors make 4096 subsets: trying them all (itertools.combinations, or the bits of a counter) is fast enough, and exact.")


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
