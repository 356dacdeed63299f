"""Lab 09 exercises: memory.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

- ``checkpointed_forward``: activation checkpointing of a chain of layers, written by hand;
- ``checkpoint_policy``: which activations to keep under a memory budget, recomputing the least;
- ``forward_only_peak``: the activation peak of a chain run without autograd (inference);
- ``kv_cache_bytes``: the bytes of a decoder's key/value cache (section 12).
"""
from __future__ import annotations

import itertools
import math

import torch


def _run(layers: Sequence[nn.Module]) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x):
        for layer in layers:
            x = layer(x)
        return x
    return run


class _Segment(torch.autograd.Function):
    """Forward without a graph (only x and the RNG state kept); backward recomputes, then
    back-propagates. The parameters are inputs so that the output requires grad."""

    @staticmethod
    def forward(ctx, run, x, *params):
        ctx.run, ctx.rng = run, torch.get_rng_state()
        ctx.save_for_backward(x)
        with torch.no_grad():
            return run(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x = x.detach().requires_grad_(ctx.needs_input_grad[1])
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(ctx.rng)
            with torch.enable_grad():
                out = ctx.run(x)
        torch.autograd.backward(out, grad)
        return (None, x.grad) + (None,) * (len(ctx.needs_input_grad) - 2)


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
    layers = list(layers)
    for i in range(0, len(layers), segment):
        part = layers[i:i + segment]
        params = [p for m in part for p in m.parameters() if p.requires_grad]
        x = _Segment.apply(_run(part), x, *params)
    return x


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
    best = {0: (0, ())}                       # kept bytes -> (avoided FLOPs, kept indices)
    for i, (size, cost) in enumerate(zip(sizes, costs)):
        for used, (value, kept) in list(best.items()):
            total = used + size
            if total <= budget and (total not in best or best[total][0] < value + cost):
                best[total] = (value + cost, kept + (i,))
    return sorted(max(best.values())[1])


def forward_only_peak(activation_bytes):
    """Peak bytes of a chain's activations in a forward pass without autograd (an int).

    activation_bytes: the sizes a_1, ..., a_L (ints, bytes) of the outputs of a chain's layers,
    in order (layer i reads a_{i-1} and writes a_i; the caller's input a_0 is not counted). With
    no graph to keep, a layer's input is freed as soon as the layer returns, but while layer i
    writes its output its input is still alive. Return max(a_1, max over i of a_i + a_{i+1}).
    Raise ValueError for an empty list.
    """
    a = list(activation_bytes)
    if not a:
        raise ValueError("forward_only_peak: need at least one activation")
    return max([a[0]] + [x + y for x, y in zip(a, a[1:])])


def kv_cache_bytes(layers, heads, kv_heads, head_dim, tokens, batch, itemsize):
    """Bytes of a decoder's KV cache after ``tokens`` tokens of ``batch`` sequences (an int).

    Every layer keeps a key and a value vector of kv_heads * head_dim elements per token and
    sequence, itemsize bytes each. kv_heads == heads is multi-head attention; fewer is
    grouped-query attention (kv_heads must divide heads; 1 is multi-query attention).
    Raise ValueError if kv_heads does not divide heads or a size is < 1 (tokens may be 0).
    """
    if min(layers, heads, kv_heads, head_dim, batch, itemsize) < 1 or tokens < 0:
        raise ValueError("kv_cache_bytes: sizes must be >= 1 (tokens >= 0)")
    if heads % kv_heads:
        raise ValueError(f"kv_cache_bytes: kv_heads ({kv_heads}) must divide heads ({heads})")
    return 2 * layers * kv_heads * head_dim * tokens * batch * itemsize
