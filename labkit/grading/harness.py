"""Trusted labkit code that the worker runs *next to* a submission, for what a plain call cannot show.

Each harness takes the submission module first, runs it the way its lab
does (a Triton launch under the access recorder, collectives on real gloo
ranks, a pipeline step), and returns plain data: the judge compares that
data with its own reference. What a harness measures inside the worker
(bytes on the wire, launches and accesses seen by the recorder) is
best-effort: the submission shares the process and could tamper with it;
the static checks of `labkit.grading.static` are the guard on that side.
"""
from __future__ import annotations

import contextlib

import numpy as np

GUARD = 64  # elements of NaN guard on each side of a kernel's output


# ------------------------------------------------------------------ Lab 04: Triton kernels
def triton_kernel(module, kernel: str, grid, args: list, constexprs: dict, out_index: int, out_shape,
                  out_dtype: str, watch: tuple = ()):
    """Launch ``module.<kernel>[grid](*args, **constexprs)`` with ``args[out_index]`` a fresh NaN-filled output.

    An argument given as ``("t", tensor)`` is passed as ``tensor.t()`` (a strided view).
    Returns {"out": output, "guard_intact": nothing written outside it, "recorded": whether the
    interpreter's recorder ran, and then "launches", "out_of_bounds" (first 3), "n_out_of_bounds",
    "masked_stores" (on the output), "counts" {(name, kind): per-element counts} for the output and
    each name in ``watch``, "owner" (program that stored each output element)}.
    """
    import torch
    import triton

    from labkit.kernels.record import record

    from triton.runtime.interpreter import InterpretedFunction

    fn = getattr(module, kernel, None)
    if type(fn) not in (triton.runtime.jit.JITFunction, InterpretedFunction):
        raise TypeError(f"{kernel} must be a @triton.jit kernel, got {type(fn).__name__}")
    dev = "cpu"   # the recorder interprets the kernel on CPU tensors, on a GPU box too
    dtype = getattr(torch, out_dtype)
    n = int(np.prod(out_shape))
    buf = torch.full((n + 2 * GUARD,), float("nan"), dtype=dtype, device=dev)
    out = buf[GUARD:GUARD + n].view(tuple(out_shape))
    real = []
    for i, a in enumerate(args):
        if i == out_index:
            real.append(out)
        elif isinstance(a, tuple) and len(a) == 2 and a[0] == "t":
            real.append(a[1].to(dev).t())
        elif isinstance(a, torch.Tensor):
            real.append(a.to(dev))
        else:
            real.append(a)
    with record() as rec:
        fn[tuple(grid)](*real, **constexprs)
    result = {"out": out.cpu(), "recorded": rec is not None,
              "guard_intact": bool(torch.isnan(buf[:GUARD]).all() and torch.isnan(buf[-GUARD:]).all())}
    if rec is None:
        return result
    out_name = list(rec.launches[-1].tensors)[out_index] if rec.launches else ""
    names = [out_name, *watch]
    result.update(
        launches=len(rec.launches),
        out_name=out_name,
        out_of_bounds=[(a.kind, a.tensor, a.pid, a.oob_offsets[:4].tolist()) for a in rec.out_of_bounds[:3]],
        n_out_of_bounds=len(rec.out_of_bounds),
        masked_stores=rec.n_masked("store", out_name) if rec.launches else 0,
        counts={(t, kind): rec.counts(t, kind) for t in names for kind in ("load", "store")} if rec.launches else {},
        owner=rec.owner(out_name) if rec.launches else np.zeros(0, np.int64),
    )
    return result


# ------------------------------------------------------------------ Lab 05: collectives on gloo ranks
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_to_all_single",
                "_all_gather_base", "_reduce_scatter_base", "all_gather_object", "broadcast_object_list",
                "all_gather_single", "reduce_scatter_single", "all_gather_coalesced", "all_reduce_coalesced")
_PG_METHODS = ("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "_allgather_base",
               "broadcast", "reduce", "reduce_scatter", "_reduce_scatter_base", "alltoall", "alltoall_base",
               "gather", "scatter")


def _forbid_builtin_collectives() -> None:
    import torch.distributed as dist

    def forbidden(*args, **kwargs):
        raise RuntimeError("built-in torch.distributed collectives are not allowed in this lab; "
                           "use exchange / isend / irecv")

    for name in _COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, forbidden)
    for name in _PG_METHODS:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(dist.ProcessGroup, name, forbidden)


class _Wire:
    """Counts the payload bytes of every point-to-point call made through torch.distributed."""

    def __init__(self):
        import torch.distributed as dist

        self.sent = self.received = self.messages = 0
        for name, kind in (("isend", "send"), ("send", "send"), ("irecv", "recv"), ("recv", "recv")):
            setattr(dist, name, self._wrap(getattr(dist, name), kind))

    def _wrap(self, original, kind):
        def counted(*args, **kwargs):
            tensor = args[0] if args else kwargs.get("tensor")
            nbytes = tensor.numel() * tensor.element_size()
            if kind == "send":
                self.sent += nbytes
                self.messages += 1
            else:
                self.received += nbytes
            return original(*args, **kwargs)
        return counted

    def take(self) -> dict:
        out = {"bytes_sent": self.sent, "bytes_received": self.received, "messages": self.messages}
        self.sent = self.received = self.messages = 0
        return out


def _stats_data(stats) -> dict | str:
    keys = ("bytes_sent", "bytes_received", "messages", "steps")
    try:
        return {k: int(getattr(stats, k)) for k in keys}
    except Exception:  # noqa: BLE001 - whatever the submission returned
        return f"not a CommStats: {type(stats).__name__}"


def _collective_rank(rank, world_size, module, fn_name, cases):
    wire = _Wire()
    _forbid_builtin_collectives()
    fn = getattr(module, fn_name)
    out = []
    for per_rank in cases:
        args = list(per_rank[rank])
        stats = fn(*args)
        out.append({"result": args[0].clone(), "stats": _stats_data(stats), "wire": wire.take()})
    return out


def lab05_collective(module, fn_name: str, world_size: int, cases: list, timeout: float = 45.0):
    """Run ``module.<fn_name>(*cases[c][rank])`` on ``world_size`` gloo ranks for each case c.

    Built-in collectives are disabled on the ranks and every isend/irecv/send/recv
    is counted. Returns per rank a list over cases of {"result": the first argument
    after the call, "stats": the CommStats returned (as a dict), "wire": bytes and
    messages counted at torch.distributed}.
    """
    from labkit.dist import launch

    return launch(_collective_rank, world_size, module, fn_name, cases, backend="gloo", timeout=timeout,
                  quiet=True)


# ------------------------------------------------------------------ Lab 08: a real pipeline step
def lab08_stage_backward(module, sched: dict, config: dict, timeout: float = 25.0):
    """One pipeline step of ``sched`` ({rank: [(stage, kind, microbatch), ...]}) with the submission's
    ``stage_backward``; returns {"loss": float, "grads": per stage, per parameter tensors}."""
    from labkit.pipeline.executor import MLPConfig, run_pipeline
    from labkit.pipeline.schedules import Action

    plan = {int(r): [Action(*a) for a in acts] for r, acts in sched.items()}
    run = run_pipeline(plan, MLPConfig(**config), backward_fn=module.stage_backward, timeout=timeout)
    return {"loss": float(run.loss), "grads": [list(g) for g in run.grads]}


# ------------------------------------------------------------------ Lab 06: DDP from backward hooks
class TiedNet:
    """Builds the graded model: token embedding -> Linear -> tanh -> frozen Linear -> output layer
    that shares the embedding's weight (a tied parameter held by two modules), float64."""

    VOCAB, HIDDEN = 11, 6

    @classmethod
    def build(cls, seed: int, mids: int = 1):
        """The net with ``mids`` trainable Linear+tanh layers between the embedding and the frozen
        layer (registered in that order: emb.weight, then each layer's weight and bias)."""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(cls.VOCAB, cls.HIDDEN)
                if mids == 1:
                    self.mid = nn.Linear(cls.HIDDEN, cls.HIDDEN)
                else:
                    self.mids = nn.ModuleList(nn.Linear(cls.HIDDEN, cls.HIDDEN) for _ in range(mids))
                self.frozen = nn.Linear(cls.HIDDEN, cls.HIDDEN)
                self.head = nn.Linear(cls.HIDDEN, cls.VOCAB, bias=False)
                self.head.weight = self.emb.weight                       # tied: one tensor, two modules
                self.frozen.requires_grad_(False)

            def forward(self, tokens, targets):
                x = self.emb(tokens)
                for layer in [self.mid] if mids == 1 else self.mids:
                    x = torch.tanh(layer(x))
                x = self.frozen(x)
                return nn.functional.cross_entropy(self.head(x), targets)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return Net().double()

    @classmethod
    def data(cls, seed: int, step: int, batch: int):
        import torch

        g = torch.Generator().manual_seed(seed * 1000 + step)
        return torch.randint(cls.VOCAB, (batch,), generator=g), torch.randint(cls.VOCAB, (batch,), generator=g)


def _ddp_rank(rank, world, module, seed, steps, batch, lr):
    import torch
    import torch.distributed as dist

    calls = []
    in_backward = [False]
    original = dist.all_reduce

    def watched(tensor, *args, **kwargs):
        calls.append({"numel": tensor.numel(), "in_backward": in_backward[0],
                      "async": bool(kwargs.get("async_op", args[2] if len(args) > 2 else False))})
        return original(tensor, *args, **kwargs)

    dist.all_reduce = watched
    model = TiedNet.build(seed + 1 + rank)             # replicas start different: broadcast is needed
    finish = module.data_parallel_hooks(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    per_step = []
    for step in range(steps):
        tokens, targets = TiedNet.data(seed, step, batch)
        lo, hi = rank * batch // world, (rank + 1) * batch // world
        opt.zero_grad()
        loss = model(tokens[lo:hi], targets[lo:hi])
        in_backward[0] = True
        loss.backward()
        in_backward[0] = False
        finish()
        opt.step()
        per_step.append(calls[:])
        calls.clear()
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "calls": per_step}


def lab06_ddp(module, world_size: int, seed: int, steps: int = 2, batch: int = 12, lr: float = 0.5,
              timeout: float = 45.0):
    """Train `TiedNet` for ``steps`` SGD steps on ``world_size`` gloo ranks with the submission's
    ``data_parallel_hooks``, each rank on its slice of every batch. Returns per rank {"params":
    {name: tensor}, "calls": per step, the dist.all_reduce calls seen (numel, in_backward, async)}."""
    from labkit.dist import launch

    return launch(_ddp_rank, world_size, module, seed, steps, batch, lr, backend="gloo", timeout=timeout,
                  quiet=True)


def _bucketed_rank(rank, world, module, seed, steps, batch, lr, mids, cases):
    import torch
    import torch.distributed as dist

    calls, ready = [], []
    in_backward = [False]
    original = dist.all_reduce

    def watched(tensor, *args, **kwargs):
        calls.append({"nbytes": tensor.numel() * tensor.element_size(), "in_backward": in_backward[0],
                      "async": bool(kwargs.get("async_op", args[2] if len(args) > 2 else False)),
                      "ready": len(ready)})
        return original(tensor, *args, **kwargs)

    dist.all_reduce = watched
    out = []
    for buckets in cases:
        model = TiedNet.build(seed + 1 + rank, mids)      # replicas start different: broadcast is needed
        params = [p for p in model.parameters() if p.requires_grad]
        index = {id(p): i for i, p in enumerate(params)}
        for p in params:   # registered before the submission's hooks, so they run first
            p.register_post_accumulate_grad_hook(lambda p: ready.append(index[id(p)]))
        finish = module.bucketed_ddp_hooks(model, [list(b) for b in buckets])
        opt = torch.optim.SGD(params, lr=lr)
        per_step = []
        for step in range(steps):
            tokens, targets = TiedNet.data(seed, step, batch)
            lo, hi = rank * batch // world, (rank + 1) * batch // world
            opt.zero_grad()
            loss = model(tokens[lo:hi], targets[lo:hi])
            in_backward[0] = True
            loss.backward()
            in_backward[0] = False
            finish()
            opt.step()
            per_step.append({"calls": calls[:], "order": ready[:]})
            calls.clear()
            ready.clear()
        out.append({"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "steps": per_step})
    return out


def lab06_bucketed_ddp(module, world_size: int, seed: int, cases: list, mids: int = 3, steps: int = 2,
                       batch: int = 12, lr: float = 0.5, timeout: float = 45.0):
    """Train `TiedNet` (``mids`` middle layers) for ``steps`` SGD steps on ``world_size`` gloo ranks
    with the submission's ``bucketed_ddp_hooks``, once per bucket list in ``cases`` (each a fresh
    model). Returns per rank, per case {"params": {name: tensor}, "steps": per step {"calls": the
    dist.all_reduce calls (nbytes, in_backward, async, "ready": how many gradients backward had
    accumulated when it was called), "order": the trainable parameters' indices in the order their
    gradients were accumulated}}."""
    from labkit.dist import launch

    return launch(_bucketed_rank, world_size, module, seed, steps, batch, lr, mids, cases, backend="gloo",
                  timeout=timeout, quiet=True)


# ------------------------------------------------------------------ Lab 07: tensor-parallel pieces on gloo ranks
def lab07_tp(module, exercise: str, world_size: int, cases: list, timeout: float = 45.0):
    """Run one Lab 07 exercise (``exercise`` in copy, reduce, column, row, ce; the split layers
    with the grader's own f and g) on ``world_size`` gloo ranks for every case in one launch; per
    rank, per case: outputs, gradients and the collectives called (name, elements, whether
    during backward)."""
    from labkit.dist import launch
    from labkit.tensor_parallel.check import exercise_rank

    return launch(exercise_rank, world_size, module, exercise, cases, backend="gloo", timeout=timeout, quiet=True)


# ------------------------------------------------------------------ Lab 10: ZeRO-1 and FSDP on gloo ranks
def _zero1_rank(rank, world, module, cases):
    import torch

    from labkit.collectives.counting import watch_collectives

    phase = {"now": "step"}
    log = watch_collectives(phase, module)
    out = []
    for case in cases:
        param = case["param"].clone()
        state: dict = {}
        for step in range(case["steps"]):
            module.zero1_step(param, case["grads"][step][rank].clone(), state, case["lr"], case["momentum"])
        kept = sum(v.numel() for v in state.values() if isinstance(v, torch.Tensor))
        out.append({"param": param, "state_numel": kept, "calls": log[:]})
        log.clear()
    return out


def lab10_zero1(module, world_size: int, cases: list, timeout: float = 45.0):
    """Run ``module.zero1_step`` for each case's steps on ``world_size`` gloo ranks (rank r gets
    ``case["grads"][step][r]``); per rank, per case: the parameters after the last step, the
    elements of the tensors kept in ``state``, and the collectives called (name, elements, phase)."""
    from labkit.dist import launch

    return launch(_zero1_rank, world_size, module, cases, backend="gloo", timeout=timeout, quiet=True)


def _fsdp_rank(rank, world, module, cases):
    import torch

    from labkit.collectives.counting import watch_collectives
    from labkit.memory.tracker import MemoryTracker

    phase = {"now": "forward"}
    log = watch_collectives(phase, module)
    out = []
    for case in cases:
        o, i = case["weight"].shape
        n = world
        size = -(-o * i // n)
        flat = torch.cat([case["weight"].reshape(-1), case["weight"].new_zeros(n * size - o * i)])
        shard = flat[rank * size:(rank + 1) * size].clone().requires_grad_()
        bias = case["bias"].clone().requires_grad_()
        x = case["x"][rank].clone().requires_grad_()
        phase["now"] = "forward"
        tracker = MemoryTracker()
        with tracker:
            y = module.fsdp_linear(x, shard, bias, o, i)
            kept = tracker.settled_bytes_except(o * i * case["weight"].element_size(), x, shard, bias, y)
        phase["now"] = "backward"
        (y * case["upstream"][rank]).sum().backward()
        out.append({"y": y.detach(), "x_grad": x.grad, "shard_grad": shard.grad, "bias_grad": bias.grad,
                    "kept_bytes": int(kept), "calls": log[:]})
        log.clear()
    return out


def lab10_fsdp_linear(module, world_size: int, cases: list, timeout: float = 45.0):
    """Run ``module.fsdp_linear`` forward and backward on ``world_size`` gloo ranks for each case
    (rank r's input ``case["x"][r]``, upstream gradient ``case["upstream"][r]``; the full weight is
    cut into padded flat shards here). Per rank, per case: output, gradients of x, of the weight
    shard and of the bias, the bytes created in forward and still alive after it apart from the
    output (MemoryTracker), and the collectives called (name, elements, pass)."""
    from labkit.dist import launch

    return launch(_fsdp_rank, world_size, module, cases, backend="gloo", timeout=timeout, quiet=True)


# ------------------------------------------------------------------ Lab 14: Ulysses' all-to-all, router balance
def lab14_all_to_all(module, world_size: int, cases: list, timeout: float = 45.0):
    """Run ``module.all_to_all_4d(case["x"][rank], case["scatter"], case["gather"])`` on
    ``world_size`` gloo ranks for each case; per rank, per case: the result and the collectives
    called (kind, elements, pass)."""
    from labkit.dist import launch
    from labkit.context_parallel.check import all_to_all_rank

    return launch(all_to_all_rank, world_size, module, cases, backend="gloo", timeout=timeout, quiet=True)


def lab14_ulysses(module, world_size: int, case: dict, timeout: float = 45.0):
    """Ulysses attention on ``world_size`` gloo ranks with the submission's ``all_to_all_4d`` as
    both exchanges (and, swapped, as their backward): per rank the output chunk and the
    gradients of its q, k, v chunks, for the case's whole-sequence q, k, v, upstream gradient."""
    from labkit.dist import launch
    from labkit.context_parallel.check import ulysses_rank

    return launch(ulysses_rank, world_size, module, case, backend="gloo", timeout=timeout, quiet=True)


def lab14_balance(module, cases: list):
    """``module.load_balancing_loss(logits, top_k)`` and its gradient (of loss · scale) for each
    case {logits, top_k, scale}: per case {"loss", "grad" (None if none reached the logits)}."""
    out = []
    for case in cases:
        logits = case["logits"].clone().requires_grad_()
        loss = module.load_balancing_loss(logits, case["top_k"])
        if getattr(loss, "requires_grad", False):
            (loss * case["scale"]).backward()
        out.append({"loss": loss.detach().reshape(()) if hasattr(loss, "detach") else loss, "grad": logits.grad})
    return out


# ------------------------------------------------------------------ Lab 09: a checkpointed chain
def lab09_checkpoint(module, cases: list):
    """Run ``module.checkpointed_forward`` on `labkit.memory.activation_checkpointing.make_chain` chains, one
    forward + backward of ``out.sum()`` per case ({n_layers, segment, batch, width, dropout, seed};
    the global RNG is seeded with ``seed`` first). Per case: gradients of x and of every parameter,
    the peak activation bytes (`ActivationPeakTracker`) and the matmul FLOPs (FlopCounterMode)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from labkit.memory.activation_checkpointing import make_chain
    from labkit.memory.tracker import ActivationPeakTracker

    out = []
    for case in cases:
        layers = make_chain(case["n_layers"], case["width"], dropout=case["dropout"], seed=case["seed"])
        x = torch.randn(case["batch"], case["width"], dtype=torch.float64,
                        generator=torch.Generator().manual_seed(case["seed"])).requires_grad_()
        holder = torch.nn.ModuleList(layers)
        tracker = ActivationPeakTracker(holder)
        torch.manual_seed(case["seed"])
        with tracker:
            module.checkpointed_forward(list(layers), x, case["segment"]).sum().backward()
        grads = [x.grad] + [p.grad for p in holder.parameters()]
        holder.zero_grad(set_to_none=True)
        x.grad = None
        torch.manual_seed(case["seed"])
        with FlopCounterMode(display=False) as counter:
            module.checkpointed_forward(list(layers), x, case["segment"]).sum().backward()
        out.append({"grads": grads, "peak": tracker.peak_activation_bytes, "flops": counter.get_total_flops()})
    return out


# ------------------------------------------------------------------ Lab 12: crashes and resumes
def lab12_atomic_save(module, cases: list):
    """``module.atomic_save`` killed at each case's crash point (`labkit.checkpoint.experiments.
    crash_test`); cases are (old contents as hex or None, new contents as hex, crash point). Per
    case: what was found at the path, the child's exit, whether it wrote in place."""
    from labkit.checkpoint.experiments import crash_test

    unhex = lambda h: None if h is None else bytes.fromhex(h)   # noqa: E731 - bytes do not cross the codec
    return crash_test(module.atomic_save, [(unhex(old), unhex(new), point) for old, new, point in cases])


def lab12_resume(module, steps: int = 8, stop: int = 4):
    """Train whole, and as two processes handing over through ``module.resume_state``
    (`labkit.checkpoint.experiments.resume_experiment`); both runs' parameters."""
    from labkit.checkpoint.experiments import resume_experiment

    return resume_experiment(module.resume_state, steps, stop)


# ------------------------------------------------------------------ Lab 08: TeraPipe's slicing
def lab08_slicing(module, cases: list):
    """``module.optimal_slicing(L, K, cost)`` per case ``(L, K, (overhead, per_token, per_pair))``, with
    cost a `labkit.pipeline.terapipe.SliceCost` built here (a callable does not cross to the worker):
    {"result": what it returned, "error": None} or {"result": None, "error": "<type>: message"}."""
    from labkit.pipeline.terapipe import SliceCost

    out = []
    for L, K, coefficients in cases:
        try:
            out.append({"result": module.optimal_slicing(L, K, SliceCost(*coefficients)), "error": None})
        except Exception as e:  # noqa: BLE001 - the submission's failure is reported as data
            out.append({"result": None, "error": f"{type(e).__name__}: {e}"[:300]})
    return out


# ------------------------------------------------------------------ Lab 13: graph passes
def lab13_fx_pass(module, fn_name: str, cases: list, seed: int):
    """Run ``module.<fn_name>`` (a pass GraphModule -> GraphModule) on each `labkit.compiler.fx_cases`
    case. Per case: the result's nodes as (op, target) strings, its outputs on the case's inputs
    drawn from ``seed`` (torch's RNG seeded with ``seed`` before the call), whether the given module
    still computes and prints as before, and the error if the pass raised."""
    from torch import fx

    from labkit.compiler import fx_cases

    out = []
    for case in cases:
        gm = fx_cases.build(case)
        code = gm.code
        try:
            result = getattr(module, fn_name)(gm)
            if not isinstance(result, fx.GraphModule):
                raise TypeError(f"{fn_name} returned {type(result).__name__}, not a GraphModule")
            outputs = fx_cases.run(result, fx_cases.inputs(case, seed), seed)
            out.append({"nodes": fx_cases.summary(result), "outputs": list(outputs), "unchanged": gm.code == code,
                        "error": None})
        except Exception as e:  # noqa: BLE001 - the submission's failure is reported as data
            out.append({"nodes": [], "outputs": [], "unchanged": gm.code == code,
                        "error": f"{type(e).__name__}: {e}"[:300]})
    return out


def lab13_dynamo(module, fn_name: str, cases: list):
    """Per case ``(x, max_norm)``: ``module.<fn_name>``'s graphs and breaks under
    ``torch._dynamo.explain`` (`labkit.compiler.inside_compile.graph_breaks`, which resets Dynamo
    before and after), its eager output, and its output compiled with ``fullgraph=True`` on the
    "eager" backend (Dynamo's capture, no code generation), or the error each raised."""
    import contextlib
    import io

    import torch

    from labkit.compiler.inside_compile import graph_breaks

    fn = getattr(module, fn_name)
    out = []
    for x, max_norm in cases:
        res = {"graphs": None, "breaks": None, "reasons": [], "eager": None, "compiled": None, "error": None}
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                res["eager"] = fn(x.clone(), max_norm)
                report = graph_breaks(fn, x.clone(), max_norm)
                res.update(graphs=report.graphs, breaks=report.breaks, reasons=report.reasons[:3])
                torch._dynamo.reset()
                try:
                    res["compiled"] = torch.compile(fn, backend="eager", fullgraph=True)(x.clone(), max_norm)
                finally:
                    torch._dynamo.reset()
        except Exception as e:  # noqa: BLE001 - the submission's failure is reported as data
            res["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
        out.append(res)
    return out


# ------------------------------------------------------------------ Lab 03: CUDA kernels, simulated
def lab03_cuda_kernel(module, kernel: str, grid, block, args: list):
    """Launch ``module.<kernel>`` with `labkit.gpu_model.cuda_sim.launch` on ``args`` (numpy arrays are
    copied, then written in place). Returns {"error": "" or "<KernelError type>: message" (a race, a
    barrier divergence, an index out of range, or the kernel's own exception), "arrays": the array
    arguments after the launch, "global_loads", "shared_loads", "atomics", "shared_bytes"}."""
    import types

    from labkit.gpu_model.cuda_sim import KernelError, launch

    fn = getattr(module, kernel, None)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{kernel} must be a Python function (a kernel written with cuda.threadIdx etc.)")
    real = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
    try:
        run = launch(fn, tuple(grid), tuple(block), tuple(real))
    except KernelError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"error": "", "arrays": [a for a in real if isinstance(a, np.ndarray)], "global_loads": run.global_loads,
            "shared_loads": run.shared_loads, "atomics": run.atomics, "shared_bytes": run.shared_bytes}
