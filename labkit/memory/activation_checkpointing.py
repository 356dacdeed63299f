"""Activation checkpointing, built by hand (Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost"), measured byte for byte, and compared with ``torch.utils.checkpoint``.

**The idea.** Backward needs what forward computed. Instead of keeping every layer's output,
cut the N layers into segments of k and keep only each segment's *input* (the "checkpoint").
In backward, before a segment's gradients are needed, run the segment's forward again from its
checkpoint — now recording the graph — and back-propagate through the fresh graph.

`checkpoint_segment(fn, x)` is one such segment: a ``torch.autograd.Function`` whose forward runs
``fn`` under ``torch.no_grad()`` (nothing saved but ``x``) and whose backward recomputes ``fn(x)``
with grad enabled and calls ``torch.autograd.backward`` on it. The segment's parameters are
handed to the Function as extra inputs, so the output requires grad even when ``x`` does not
(the first segment's input is data); their gradients go straight into ``.grad`` from the inner
backward (as in PyTorch's *reentrant* checkpoint), so call ``loss.backward()``, not
``torch.autograd.grad``, through it. `checkpointed_chain(layers, x, k)` checkpoints **every**
segment, the last (possibly shorter) one included; ``torch.utils.checkpoint.checkpoint_sequential``
instead runs its last segment normally (it would be recomputed at once anyway), and its argument
is the number of segments, not their length.

**Randomness.** A common mistake is to say that checkpointing "is numerically inconsistent for
stochastic layers". It is not, as long as the recomputation draws the same random numbers: forward
saves the CPU generator's state (and every CUDA generator's, once CUDA is initialised); backward
restores it before recomputing — inside ``torch.random.fork_rng``, so the training's random
stream goes on as if nothing had been recomputed. Dropout then draws the same mask and the
gradients are bit-for-bit those of the plain network. ``preserve_rng_state=False`` shows the
mistake: new masks, wrong gradients. (Other side effects of forward, such as BatchNorm's running
statistics, do happen twice.)

**Cost in FLOPs.** Every segment is run forward twice, so a checkpointed step costs exactly
forward + backward + one more forward (`step_flops`, counted by ``FlopCounterMode``).

**Peak memory of a chain**, with N blocks ``Linear(w, w) + Tanh`` on a (B, w) input, e bytes per
element, a = B·w·e (one (B, w) tensor), g = (w² + w)·e (one layer's weight + bias gradient) and
s = e (a scalar). "Activation bytes" are everything live that is neither a parameter nor a
parameter's ``.grad`` (the `MemoryTracker` category "activations"); the input is made inside the
step and counts, like any checkpoint; the peak is the largest value after any op of forward +
backward (`ActivationPeakTracker`). With S = ⌈N/k⌉ segments, the last of m = N − (S − 1)·k
layers (`chain_peak_bytes`, asserted equal to the measurement for every k):

    no checkpointing            (N + 2)·a + g + 2s
    ours, every segment         (S + k + 2)·a + g + 2s
    torch.utils.checkpoint      max((S + m + 1)·a + g,  (S + k)·a + g,  (S + k + 1)·a) + 2s
      (non-reentrant, S ≥ 2; S = 1 gives (N + 2)·a + g + 2s, the same as no checkpointing)

No checkpointing, the peak is in the last layer's backward, when dW and db have just been
computed (they count as activations until autograd moves them into ``.grad``): the input and the
N − 1 earlier outputs are saved, plus the gradient through tanh and the gradient for the layer's
input; 2s are the loss and its seed gradient. Ours peaks the same way in the backward of the
second-to-last segment: S − 1 checkpoints, the segment's k recomputed outputs, the same two
(B, w) temporaries and dW, db — and one a more, the gradient arriving at the segment, which the
Function's ``backward`` holds until it returns; likewise it holds the recomputed segment's
output, one a more for the last segment. PyTorch's non-reentrant checkpoint recomputes *inside*
the ordinary backward (saved-tensor hooks), so it holds neither and is up to 2a lower; its third
term is the recomputation's forward with the incoming gradient still alive. Both have the shape
(N/k + k)·a, smallest near k = √N (`sqrt_rule`, `best_segments`): memory O(√N) for one forward.

Recomputation inside the GPT (selective: the attention core only; full: whole blocks) is in
`labkit.memory.recompute`, built on `checkpoint_segment`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from labkit.bench import median_time
from labkit.checks import MAX_ENUMERATED, check_int, check_numel
from labkit.memory.tracker import ActivationPeakTracker
from labkit.table import Table

IMPLS = ("none", "ours", "torch")

MAX_CHAIN = 10_000   # layers of a test chain built (and run) here


# ---------------------------------------------------------------------- the checkpoint itself
def _rng_devices() -> list[int]:
    """CUDA devices whose generators we must save: all of them once CUDA is initialised."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


# BEGIN SOLUTION (labkit's checkpointing: CUDA generators too, optional RNG; it answers checkpointed_forward)
class _Checkpoint(torch.autograd.Function):
    """Forward: ``fn(x)`` without a graph, saving x (and the RNG state). Backward: recompute, then
    back-propagate through the recomputed graph. ``params`` are inputs only so that the output
    requires grad; their gradients reach ``.grad`` from the inner backward."""

    @staticmethod
    def forward(ctx, fn, preserve_rng_state, x, *params):
        ctx.fn, ctx.preserve = fn, preserve_rng_state
        if preserve_rng_state:
            ctx.cpu_state = torch.get_rng_state()
            ctx.devices = _rng_devices()
            ctx.cuda_states = [torch.cuda.get_rng_state(d) for d in ctx.devices]
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        x_in = x.detach().requires_grad_(ctx.needs_input_grad[2])   # same storage, a fresh leaf
        devices = ctx.devices if ctx.preserve else []
        with torch.random.fork_rng(devices=devices, enabled=ctx.preserve):
            if ctx.preserve:
                torch.set_rng_state(ctx.cpu_state)
                for d, state in zip(ctx.devices, ctx.cuda_states):
                    torch.cuda.set_rng_state(state, d)
            with torch.enable_grad():
                out = ctx.fn(x_in)
        if out.requires_grad:
            torch.autograd.backward(out, grad_out)
        n_params = len(ctx.needs_input_grad) - 3
        return (None, None, x_in.grad if ctx.needs_input_grad[2] else None) + (None,) * n_params


def checkpoint_segment(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *,
                       params: Iterable[torch.Tensor] | None = None,
                       preserve_rng_state: bool = True) -> torch.Tensor:
    """``fn(x)`` with only ``x`` saved for backward; ``fn`` is run again in backward.

    ``params``: the parameters ``fn`` uses (default: ``fn.parameters()`` if ``fn`` is an
    nn.Module, else none). ``fn`` must return one tensor computed from ``x``.
    """
    if not callable(fn):
        raise TypeError(f"checkpoint_segment: fn must be callable, got {type(fn).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"checkpoint_segment: x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(preserve_rng_state, bool):
        raise TypeError(f"checkpoint_segment: preserve_rng_state must be a bool, "
                        f"got {type(preserve_rng_state).__name__}")
    if params is None:
        params = fn.parameters() if isinstance(fn, nn.Module) else ()
    params = [p for p in params if p.requires_grad]
    return _Checkpoint.apply(fn, preserve_rng_state, x, *params)


def _check_chain(fn: str, layers, x, segment) -> list:
    if isinstance(layers, nn.Module) and not isinstance(layers, (nn.Sequential, nn.ModuleList)):
        raise TypeError(f"{fn}: layers must be a sequence of nn.Module, got one {type(layers).__name__}")
    layers = list(layers) if isinstance(layers, (Sequence, nn.Sequential, nn.ModuleList)) else None
    if not layers or not all(isinstance(m, nn.Module) for m in layers):
        raise TypeError(f"{fn}: layers must be a non-empty sequence of nn.Module")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: x must be a torch.Tensor, got {type(x).__name__}")
    check_int(fn, "segment", segment, minimum=1, maximum=len(layers))
    return layers


def _run(layers: Sequence[nn.Module]) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x):
        for layer in layers:
            x = layer(x)
        return x
    return run


def checkpointed_chain(layers: Sequence[nn.Module], x: torch.Tensor, segment: int, *,
                       preserve_rng_state: bool = True) -> torch.Tensor:
    """Run ``layers`` on ``x`` in segments of ``segment`` consecutive layers (the last one may be
    shorter), **every** segment checkpointed with `checkpoint_segment`."""
    layers = _check_chain("checkpointed_chain", layers, x, segment)
    for i in range(0, len(layers), segment):
        part = layers[i:i + segment]
        x = checkpoint_segment(_run(part), x, params=[p for m in part for p in m.parameters()],
                               preserve_rng_state=preserve_rng_state)
    return x
# END SOLUTION


# BEGIN SOLUTION
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
# END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: a segment is a torch.autograd.Function whose forward keeps nothing but what it needs to
    # HINT: run the segment again (its input, and the random state for dropout), and whose backward
    # HINT: recomputes with grad enabled and back-propagates through the recomputation.
    # HINT: torch.random.fork_rng keeps the restore from disturbing later draws.
    layers = list(layers)
    for i in range(0, len(layers), segment):
        part = layers[i:i + segment]
        params = [p for m in part for p in m.parameters() if p.requires_grad]
        x = _Segment.apply(_run(part), x, *params)
    return x
    # END SOLUTION


def torch_checkpointed_chain(layers: Sequence[nn.Module], x: torch.Tensor, segment: int) -> torch.Tensor:
    """The same segments, each through PyTorch's ``torch.utils.checkpoint.checkpoint(...,
    use_reentrant=False)`` (recomputation driven by saved-tensor hooks), for comparison."""
    layers = _check_chain("torch_checkpointed_chain", layers, x, segment)
    for i in range(0, len(layers), segment):
        x = torch.utils.checkpoint.checkpoint(_run(layers[i:i + segment]), x, use_reentrant=False)
    return x


# ---------------------------------------------------------------------- the test chain
class TanhLayer(nn.Module):
    """One block of the test chain: Linear(w, w), Tanh, then Dropout(p) when p > 0."""

    def __init__(self, width: int, dropout: float = 0.0):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:       # (B, w) -> (B, w)
        y = torch.tanh(self.linear(x))
        return self.dropout(y) if self.dropout is not None else y


def make_chain(n_layers: int, width: int, dropout: float = 0.0, seed: int = 0,
               dtype: torch.dtype = torch.float64) -> nn.ModuleList:
    """N identical `TanhLayer` blocks with weights drawn from ``seed`` (global RNG untouched)."""
    fn = "make_chain"
    check_int(fn, "n_layers", n_layers, minimum=1, maximum=MAX_CHAIN)
    check_numel(fn, "width²", check_int(fn, "width", width, minimum=1) ** 2)
    check_int(fn, "seed", seed, minimum=0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"{fn}: dropout must be a probability in [0, 1), got {dropout!r}")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{fn}: dtype must be torch.float32 or torch.float64, got {dtype}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.ModuleList(TanhLayer(width, dropout) for _ in range(n_layers)).to(dtype)


def chain_loss(layers: Sequence[nn.Module], x: torch.Tensor, segment: int | None = None,
               impl: str = "ours", preserve_rng_state: bool = True) -> torch.Tensor:
    """Scalar loss = sum of the chain's output: plain (``segment=None`` or ``impl="none"``),
    ``impl="ours"`` (`checkpointed_chain`) or ``impl="torch"`` (`torch_checkpointed_chain`)."""
    if impl not in IMPLS:
        raise ValueError(f"chain_loss: impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    if segment is None or impl == "none":
        return _run(list(layers))(x).sum()
    if impl == "ours":
        return checkpointed_chain(layers, x, segment, preserve_rng_state=preserve_rng_state).sum()
    return torch_checkpointed_chain(layers, x, segment).sum()


# ---------------------------------------------------------------------- closed forms
def num_segments(n_layers: int, segment: int) -> int:
    """S = ⌈N/k⌉ segments of k layers (the last one may be shorter)."""
    n = check_int("num_segments", "n_layers", n_layers, minimum=1)
    k = check_int("num_segments", "segment", segment, minimum=1, maximum=n)
    return -(-n // k)


def chain_peak_bytes(n_layers: int, segment: int | None, batch: int, width: int, itemsize: int,
                     impl: str = "ours") -> int:
    """Closed form of the peak activation bytes of one forward + backward of the test chain (the
    table in the module docstring; a = batch·width·itemsize, g = (width² + width)·itemsize,
    s = itemsize): ``segment=None`` or impl="none" for no checkpointing, impl="ours" for
    `checkpointed_chain`, impl="torch" for `torch_checkpointed_chain`."""
    fn = "chain_peak_bytes"
    n = check_int(fn, "n_layers", n_layers, minimum=1)
    b, w = check_int(fn, "batch", batch, minimum=1), check_int(fn, "width", width, minimum=1)
    e = check_int(fn, "itemsize", itemsize, minimum=1)
    if impl not in IMPLS:
        raise ValueError(f"{fn}: impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    a, g, s = b * w * e, (w * w + w) * e, e
    if segment is None or impl == "none":
        return (n + 2) * a + g + 2 * s
    k = check_int(fn, "segment", segment, minimum=1, maximum=n)
    S = num_segments(n, k)
    if impl == "ours":
        return (S + k + 2) * a + g + 2 * s
    m = n - (S - 1) * k
    if S == 1:
        return (S + m + 1) * a + g + 2 * s
    return max((S + m + 1) * a + g, (S + k) * a + g, (S + k + 1) * a) + 2 * s


def best_segments(n_layers: int) -> tuple[int, ...]:
    """Every k in 1..N that minimises ⌈N/k⌉ + k, i.e. `chain_peak_bytes` (the rest does not
    depend on k)."""
    n = check_int("best_segments", "n_layers", n_layers, minimum=1, maximum=MAX_ENUMERATED)
    cost = {k: -(-n // k) + k for k in range(1, n + 1)}
    low = min(cost.values())
    return tuple(k for k, c in cost.items() if c == low)


def sqrt_rule(n_layers: int) -> int:
    """The rule of thumb k = round(√N): segments of about √N layers, memory O(√N) layers."""
    n = check_int("sqrt_rule", "n_layers", n_layers, minimum=1)
    r = math.isqrt(n)
    return r + 1 if (r + 1) * (r + 1) - n < n - r * r else r   # nearer integer to √n


# ---------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class ChainMeasurement:
    """One forward + backward of the test chain: ``peak_activation_bytes`` (measured, bytes),
    ``closed_form`` (bytes, `chain_peak_bytes`), ``flops`` (counted by
    FlopCounterMode), ``forward_flops`` (one plain forward)."""

    n_layers: int
    segment: int | None
    impl: str
    peak_activation_bytes: int
    closed_form: int
    flops: int
    forward_flops: int


def _chain_args(fn, n_layers, segment, batch, width, impl):
    n = check_int(fn, "n_layers", n_layers, minimum=1, maximum=MAX_CHAIN)
    if segment is not None:
        check_int(fn, "segment", segment, minimum=1, maximum=n)
    check_int(fn, "batch", batch, minimum=1)
    check_int(fn, "width", width, minimum=1)
    check_numel(fn, "batch·width and width²", max(batch, width) * width)
    if impl not in IMPLS:
        raise ValueError(f"{fn}: impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    return n


def step_flops(layers: Sequence[nn.Module], x: torch.Tensor, segment: int | None = None,
               impl: str = "ours") -> int:
    """FLOPs of one forward + backward (``FlopCounterMode``: matmuls only; tanh is not counted)."""
    counter = FlopCounterMode(display=False)
    with counter:
        chain_loss(layers, x, segment, impl).backward()
    return counter.get_total_flops()


def measure_chain(n_layers: int, segment: int | None, batch: int = 4, width: int = 8,
                  impl: str = "ours", dtype: torch.dtype = torch.float64) -> ChainMeasurement:
    """Peak activation bytes and FLOPs of one step of ``make_chain(n_layers, width)`` on a
    (batch, width) input that requires grad; ``segment=None`` (or impl="none"): no checkpointing."""
    n = _chain_args("measure_chain", n_layers, segment, batch, width, impl)
    if impl == "none":
        segment = None
    layers = make_chain(n, width, dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    tracker = ActivationPeakTracker(nn.ModuleList(layers))
    with tracker:                      # the input is made inside: it counts, like any checkpoint
        x = torch.randn(batch, width, dtype=dtype, generator=gen).requires_grad_()    # (B, w)
        chain_loss(layers, x, segment, impl).backward()
    flops = step_flops(layers, x, segment, impl)
    itemsize = torch.empty((), dtype=dtype).element_size()
    closed = chain_peak_bytes(n, segment, batch, width, itemsize, impl)
    with FlopCounterMode(display=False) as counter:
        with torch.no_grad():
            chain_loss(layers, x)
    return ChainMeasurement(n, segment, impl, tracker.peak_activation_bytes, closed, flops,
                            counter.get_total_flops())


def checkpoint_table(n_layers: int = 16, width: int = 8, batch: int = 4) -> Table:
    """For every k = 1..N: measured peak activation bytes, the closed form, and the extra FLOPs
    over a plain step (one forward); ``*`` marks the k with the least measured peak."""
    n = _chain_args("checkpoint_table", n_layers, 1, batch, width, "ours")
    plain = measure_chain(n, None, batch, width, impl="none")
    runs = [measure_chain(n, k, batch, width) for k in range(1, n + 1)]
    low = min(r.peak_activation_bytes for r in runs)
    rows = [["none", plain.peak_activation_bytes, plain.closed_form, 0, ""]]
    rows += [[r.segment, r.peak_activation_bytes, r.closed_form, r.flops - plain.flops,
              "*" if r.peak_activation_bytes == low else ""] for r in runs]
    return Table(["k", "peak act. bytes", "closed form", "extra FLOPs", "best"], rows,
                 title=f"{n} layers Linear({width},{width})+Tanh, batch {batch}, float64; "
                       f"one forward = {plain.forward_flops} FLOPs; sqrt rule k = {sqrt_rule(n)}")


def compare_table(n_layers: int = 16, width: int = 64, batch: int = 32,
                  segments: Sequence[int] = (1, 2, 4, 8), repeat: int = 5) -> Table:
    """Ours vs ``torch.utils.checkpoint`` (non-reentrant) vs none: peak activation bytes and the
    median time of one forward + backward (`labkit.bench.median_time`), for each k."""
    n = _chain_args("compare_table", n_layers, 1, batch, width, "ours")
    check_int("compare_table", "repeat", repeat, minimum=1)
    layers = make_chain(n, width)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, width, dtype=torch.float64, generator=gen).requires_grad_()    # (B, w)

    def timed(segment, impl):
        return median_time(lambda: chain_loss(layers, x, segment, impl).backward(), repeat=repeat)

    plain = measure_chain(n, None, batch, width, impl="none")
    rows = [["none", "-", plain.peak_activation_bytes, timed(None, "none") * 1e3]]
    for k in segments:
        check_int("compare_table", "segment", k, minimum=1, maximum=n)
        for impl in ("ours", "torch"):
            rows.append([k, impl, measure_chain(n, k, batch, width, impl=impl).peak_activation_bytes,
                         timed(k, impl) * 1e3])
    return Table(["k", "impl", "peak act. bytes", "step ms"], rows, formats={"step ms": ".3f"},
                 title=f"{n} layers Linear({width},{width})+Tanh, batch {batch}, float64")
