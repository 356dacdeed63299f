"""The Lab 10 notebook's one-liners, and its "check your work" pictures.

    stage_table(num_params, world)       model-state bytes per rank at each stage; real vs "4x / 8x"
    equivalence_table(worlds)            each stage (and PyTorch's) trained on N ranks vs one process
    memory_table(world)                  bytes a rank holds after a step (vs the formula) and at its peak
    traffic_table(world)                 what one step sends, counted, vs the closed forms (and PyTorch's ZeRO-1)
    accumulation_table(world, k)         the same with k micro-batches per step: ZeRO-2 reduce-scatters each
    fsdp_trace(world)                    FSDP's gathers and frees in order; bf16 halves the gathers
    fsdp2_placements(world)              how PyTorch's fully_shard lays out every parameter, 1-D ones too
    picture(exercise)                    a learner's function next to the lab's measurement

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from functools import partial

import torch

from labkit.checks import check_int, check_real
from labkit.collectives.counting import count_collectives
from labkit.dist import device, launch
from labkit.model import DATA_PARALLEL_GPT, GPT, GPTConfig, batch, parameter_count
from labkit.table import Table
from labkit.zero.formulas import comm_bytes_per_step, model_state_bytes, reduction
from labkit.zero.training import reference_params, train_rank

GB = 1e9


def stage_table(num_params: float = 7.5e9, world: int = 64) -> Table:
    """Bytes per rank at each stage for Ψ parameters on N ranks (mixed-precision Adam: 2 + 2 + 12),
    and how many times less than DDP that is at N = 8, at N, and as N grows."""
    psi = check_real("stage_table", "num_params", num_params, positive=True)
    n = check_int("stage_table", "world", world, minimum=1)
    names = ("0: DDP", "1: optimizer states", "2: + gradients", "3: + parameters")
    rows = [(names[s], model_state_bytes(psi, n, s) / GB, reduction(8, s), reduction(n, s),
             "1" if s == 0 else "4" if s == 1 else "8" if s == 2 else "N") for s in range(4)]
    return Table(["stage", "GB per rank", "x less, N=8", f"x less, N={n}", "x less, N→∞"], rows,
                 formats={"GB per rank": ".2f", "x less, N=8": ".2f", f"x less, N={n}": ".2f"},
                 title=f"Ψ = {psi / 1e9:g}B parameters on N = {n} ranks, 16 bytes per parameter")


def _quiet(fn):
    def run(*args, **kwargs):
        warnings.simplefilter("ignore", FutureWarning)
        return fn(*args, **kwargs)
    return run


def equivalence_table(worlds=(1, 2, 4), cfg: GPTConfig = DATA_PARALLEL_GPT, torch_world: int = 2) -> Table:
    """Three AdamW steps (float64) with each method on N ranks, each rank on its slice of the same
    batches: the largest difference of any parameter from one process on the whole batches."""
    global_batch = math.lcm(*worlds, torch_world)
    want = reference_params(cfg, global_batch=global_batch)
    rows = []
    for method in ("zero1", "zero2", "fsdp", "torch-zero1", "torch-fsdp2"):
        ns = (torch_world,) if method.startswith("torch") else worlds
        for n in ns:
            runs = launch(partial(train_rank, global_batch=global_batch), n, method, cfg, timeout=120, quiet=True)
            err = max((r.params[k] - want[k]).abs().max().item() for r in runs for k in want)
            rows.append((method, n, err))
    return Table(["method", "ranks", "max |param - one process|"], rows, formats={"max |param - one process|": ".1e"},
                 title=f"3 AdamW steps, float64, global batch {global_batch}; GPT with {parameter_count(cfg):,} "
                       "parameters")


def _held_rank(rank, world, method, cfg, dtype):     # train_rank silences torch's FutureWarnings
    return train_rank(rank, world, method, cfg, steps=1, global_batch=world, dtype=dtype)


def memory_table(world: int = 4, cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """Bytes rank 0 holds after a step (MemoryTracker), float32, next to the formula with our
    padding rule (Ψ' = Σ padded groups): DDP (4 + 4 + 8)Ψ; ZeRO-1 (4 + 4)Ψ + 12Ψ'/N and ZeRO-2
    4Ψ + (4 + 12)Ψ'/N (a float32 master shard: K = 4 + 8); FSDP by its default policy: matrices
    sharded, 16Ψ'/N, 1-D parameters whole, 16Ψ₁. Plus Adam's 4-byte step counter per tensor it
    steps. The last column is the peak of the step itself (all tracked bytes: model states,
    activations, and what is in flight — full gradients before a reduce-scatter, a gathered unit)."""
    psi = parameter_count(cfg)
    whole = sum(p.numel() for p in GPT(cfg).parameters() if p.dim() == 1)
    rows = []
    for method in ("ddp", "zero1", "zero2", "fsdp"):
        run = launch(_held_rank, world, method, cfg, torch.float32, timeout=120)[0]
        pad = run.padded_numel
        formula = {"ddp": 16 * psi, "zero1": 8 * psi + 12 * pad / world, "zero2": 4 * psi + 16 * pad / world,
                   "fsdp": 16 * pad / world + 16 * whole}[method] + 4 * run.stepped_tensors
        held = run.held
        rows.append((method, held["parameters"], held["gradients"], held["optimizer"],
                     held["parameters"] + held["gradients"] + held["optimizer"], int(formula), run.peak))
    return Table(["method", "params B", "grads B", "optimizer B", "total B", "formula B", "step peak B"], rows,
                 title=f"rank 0 of N = {world} after a step, float32, Ψ = {psi:,}; and the step's peak")


def _torch_zero1_rank(rank, world, cfg):
    """One step of PyTorch's DDP + ZeroRedundancyOptimizer (after a warm-up step), the collectives
    of its backward and optimizer step read from torch.profiler: {op: elements} ("all_reduce" of
    the gradients by DDP, "broadcast" of the updated parameters by ZeRO). The forward is left out:
    there DDP broadcasts two tiny tensors of its own bookkeeping (30 elements here)."""
    from torch.profiler import ProfilerActivity, profile

    from labkit.zero.training import build

    warnings.simplefilter("ignore")
    model, opt = build("torch-zero1", cfg, torch.float32)
    tokens, targets = batch(cfg, world, seed=0)

    for profiled in (False, True):                        # a warm-up step, then the profiled one
        opt.zero_grad()
        loss = model(tokens[rank:rank + 1], targets[rank:rank + 1])[1]
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) if profiled else nullcontext() as prof:
            loss.backward()
            opt.step()
    ops: dict[str, int] = {}
    for e in prof.events():
        if e.name in ("gloo:all_reduce", "gloo:broadcast") and e.input_shapes:
            op = e.name.split(":", 1)[1]
            ops[op] = ops.get(op, 0) + math.prod(e.input_shapes[0])
    return ops


def traffic_table(world: int = 4, cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """Elements moved in one step by each kind of collective (counted at labkit's collectives;
    PyTorch's DDP + ZeroRedundancyOptimizer read from torch.profiler's gloo events), and the
    bytes one rank sends in a ring (a broadcast of S bytes: (N−1)/N·S per rank, as pipelined
    through the ranks), next to the closed form (float32) for Ψ' padded elements; FSDP's whole 1-D
    parameters are all-reduced, as DDP does."""
    psi = parameter_count(cfg)
    matrices = sum(p.numel() for p in GPT(cfg).parameters() if p.dim() >= 2)
    ring = (world - 1) / world * 4
    rows = []
    for method in ("ddp", "zero1", "zero2", "fsdp", "torch-zero1"):
        if method == "torch-zero1":
            ops = launch(_quiet(_torch_zero1_rank), world, cfg, backend="gloo", timeout=120, quiet=True)[0]
            formula = 3 * ring * psi                            # DDP's all-reduce + ZeRO's broadcasts
        else:
            run = launch(_quiet(_held_rank), world, method, cfg, torch.float32, timeout=120)[0]
            ops = run.comm[0]
            stage = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3}[method]
            sharded = run.padded_numel or psi                 # Ψ' after our padding rule (Ψ for DDP)
            formula = comm_bytes_per_step(sharded, world, stage, 4) + \
                (2 * ring * (psi - matrices) if stage == 3 else 0)
        sent = ring * (2 * ops.get("all_reduce", 0) + ops.get("all_gather", 0) + ops.get("reduce_scatter", 0)
                       + ops.get("broadcast", 0))
        rows.append((method, ops.get("all_reduce", 0), ops.get("reduce_scatter", 0), ops.get("all_gather", 0),
                     ops.get("broadcast", 0), round(sent), round(formula), sent / (2 * ring * psi)))
    return Table(["method", "all-reduce", "red.-scatter", "all-gather", "broadcast", "bytes sent", "formula",
                  "x DDP"], rows, formats={"x DDP": ".2f"},
                 title=f"one step on N = {world}, float32, Ψ = {psi:,} ({matrices:,} in matrices); elements "
                       "per collective kind")


def _accumulation_rank(rank, world, method, cfg, micro_batches):
    """One step of ``micro_batches`` micro-batches (one sequence per rank each) with labkit's DDP
    (reductions skipped with ``no_sync`` until the last backward), ZeRO-1 or ZeRO-2: the
    collectives it ran, {op: (calls, elements)}, and Ψ' of the sharded optimizer."""
    from labkit.zero.training import build

    warnings.simplefilter("ignore", FutureWarning)
    model, opt = build(method, cfg, torch.float32)
    tokens, targets = batch(cfg, world * micro_batches, seed=0)
    with count_collectives() as recs:
        opt.zero_grad()
        for i in range(micro_batches):
            mine = slice(i * world + rank, i * world + rank + 1)
            last = i == micro_batches - 1
            with model.no_sync() if method == "ddp" and not last else nullcontext():
                (model(tokens[mine], targets[mine])[1] / micro_batches).backward()
        finish = getattr(model, "finish_gradient_synchronization", None)
        if finish is not None:
            finish()
        opt.step()
    ops: dict[str, tuple] = {}
    for c in recs:
        calls, numel = ops.get(c.op, (0, 0))
        ops[c.op] = (calls + 1, numel + c.numel)
    return ops, getattr(opt, "padded_numel", 0)


def accumulation_table(world: int = 4, micro_batches=(1, 4), cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """What one step sends with k micro-batches per step (gradient accumulation), counted: labkit's
    DDP all-reduces once (``no_sync`` until the last backward), ZeRO-1 reduce-scatters once in
    ``step``, ZeRO-2 reduce-scatters every bucket after every micro-batch's backward — it keeps only
    gradient shards, so it cannot add micro-batches up before reducing. Closed forms per rank, in
    elements sent: DDP 2(N−1)/N·Ψ, ZeRO-1 2(N−1)/N·Ψ', ZeRO-2 (k + 1)(N−1)/N·Ψ'."""
    psi = parameter_count(cfg)
    ring = (world - 1) / world * 4
    rows = []
    for k in micro_batches:
        check_int("accumulation_table", "micro_batches", k, minimum=1)
        ddp_sent = None
        for method in ("ddp", "zero1", "zero2"):
            ops, pad = launch(_quiet(_accumulation_rank), world, method, cfg, k, backend="gloo", timeout=120,
                              quiet=True)[0]
            rs_calls, rs = ops.get("reduce_scatter", (0, 0))
            sent = ring * (2 * ops.get("all_reduce", (0, 0))[1] + ops.get("all_gather", (0, 0))[1] + rs)
            ddp_sent = sent if method == "ddp" else ddp_sent
            formula = {"ddp": 2 * psi, "zero1": 2 * pad, "zero2": (k + 1) * pad}[method] * ring
            rows.append((k, method, ops.get("all_reduce", (0, 0))[0], rs_calls, rs, round(sent), round(formula),
                         sent / ddp_sent))
    return Table(["k", "method", "all-reduces", "reduce-scatters", "RS elements", "bytes sent", "formula", "x DDP"],
                 rows, formats={"x DDP": ".2f"},
                 title=f"one step of k micro-batches on N = {world}, float32, Ψ = {psi:,}")


def _placements_rank(rank, world, cfg):
    from labkit.zero.training import build

    warnings.simplefilter("ignore")
    model, _ = build("torch-fsdp2", cfg, torch.float32)
    return [(n, tuple(p.shape), str(p.placements[0]), tuple(p.to_local().shape)) for n, p in model.named_parameters()]


def fsdp2_placements(world: int = 2, cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """How PyTorch's ``fully_shard`` (FSDP2) holds each parameter on rank 0 of ``world``: a DTensor
    with its placement and the local piece's shape, 1-D parameters (biases, LayerNorm) included."""
    rows = launch(_quiet(_placements_rank), world, cfg, backend="gloo", timeout=120, quiet=True)[0]
    return Table(["parameter", "global shape", "placement", "rank 0's piece"], rows,
                 title=f"PyTorch fully_shard on N = {world}: every parameter a DTensor")


def _fsdp_trace_rank(rank, world, cfg, compute_dtype):
    from labkit.zero.fsdp import FSDP

    warnings.simplefilter("ignore", FutureWarning)
    model = FSDP(GPT(cfg).to(device()), compute_dtype=compute_dtype)
    with count_collectives() as recs:
        model(*(t.to(device()) for t in batch(cfg, 2, seed=rank)))[1].backward()
        model.finish_gradient_synchronization()
    gathered = sum(c.bytes_sent for c in recs if c.op == "all_gather")
    kept = sorted({str(t.dtype)[6:] for p in model.parameters() for t in (p, p.grad) if t is not None})
    return model.events, gathered, kept


def fsdp_trace(world: int = 2, cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """FSDP's events in one forward + backward, in the order they happen, with the units whole at
    that moment (root "" = embeddings, final LayerNorm and the tied head); and the all-gather
    bytes one rank sends with float32 and with bfloat16 compute."""
    events, fp32, _ = launch(_fsdp_trace_rank, world, cfg, None, timeout=60)[0]
    _, bf16, kept = launch(_fsdp_trace_rank, world, cfg, torch.bfloat16, timeout=60)[0]
    whole, rows = [], []
    for what, unit, phase in events:
        name = unit or "root"
        if what == "gather":
            whole.append(name)
        elif what == "free":
            whole.remove(name)
        rows.append((len(rows) + 1, phase, what, name, " + ".join(whole) or "-"))
    return Table(["#", "pass", "event", "unit", "whole now"], rows,
                 title=f"N = {world}; gathered bytes/rank fp32 {fp32:.0f}, bf16 {bf16:.0f} ({fp32 / bf16:.1f}x); "
                       f"bf16 run keeps shards, grads in {', '.join(kept)}")


# ---------------------------------------------------------------------- check your work
def state_bytes_picture(fn):
    """Your ``model_state_bytes`` for the ZeRO paper's 7.5B model at N = 1, 8, 64, next to labkit's."""
    rows = []
    for n in (1, 8, 64):
        for s in range(4):
            yours, want = fn(7.5e9, n, s), model_state_bytes(7.5e9, n, s)
            rows.append((n, s, yours / GB, want / GB, math.isclose(yours, want, rel_tol=1e-12)))
    table = Table(["N", "stage", "yours GB", "labkit GB", "equal"], rows, formats={"yours GB": ".3f", "labkit GB": ".3f"})
    print(table)
    return table


def _zero1_picture_rank(rank, world, fn, psi, steps):
    state, param = {}, torch.linspace(-1, 1, psi, dtype=torch.float64)
    for step in range(steps):
        grad = torch.randn(psi, dtype=torch.float64, generator=torch.Generator().manual_seed(100 * step + rank))
        fn(param, grad, state, 0.1, 0.9)
    return param, sum(v.numel() for v in state.values() if isinstance(v, torch.Tensor))


def zero1_picture(fn, psi: int = 10, steps: int = 3):
    """Your ``zero1_step`` on 1-4 ranks (P = 10: padding at N = 3, 4) vs momentum SGD in one process."""
    rows = []
    for n in (1, 2, 3, 4):
        runs = launch(_quiet(_zero1_picture_rank), n, fn, psi, steps, backend="gloo", timeout=60, quiet=True)
        p, v = torch.linspace(-1, 1, psi, dtype=torch.float64), None
        for step in range(steps):
            g = sum(torch.randn(psi, dtype=torch.float64, generator=torch.Generator().manual_seed(100 * step + r))
                    for r in range(n)) / n
            v = g if v is None else 0.9 * v + g
            p = p - 0.1 * v
        err = max((param - p).abs().max().item() for param, _ in runs)
        rows.append((n, f"{err:.1e}", [k for _, k in runs], math.ceil(psi / n)))
    table = Table(["ranks", "max |param error|", "state sizes per rank", "a shard: ceil(P/N)"], rows)
    print(table)
    return table


def _fsdp_picture_rank(rank, world, fn):
    from labkit.memory.tracker import MemoryTracker

    o, i = 6, 5
    w = torch.randn(o, i, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    size = math.ceil(o * i / world)
    flat = torch.cat([w.reshape(-1), w.new_zeros(world * size - o * i)])
    shard = flat[rank * size:(rank + 1) * size].clone().requires_grad_()
    x = torch.randn(3, i, dtype=torch.float64, generator=torch.Generator().manual_seed(2 + rank)).requires_grad_()
    bias = torch.zeros(o, dtype=torch.float64, requires_grad=True)
    tracker = MemoryTracker()
    with tracker:
        y = fn(x, shard, bias, o, i)
        kept = tracker.settled_bytes_except(o * i * 8, x, shard, bias, y)
    y.sum().backward()
    return y.detach(), x.grad, shard.grad, kept


def fsdp_linear_picture(fn, world: int = 2):
    """Your ``fsdp_linear`` on 2 ranks: output and gradients vs the unsharded layer, and the bytes
    forward leaves alive (the gathered weight must not be among them)."""
    runs = launch(_quiet(_fsdp_picture_rank), world, fn, backend="gloo", timeout=60, quiet=True)
    o, i = 6, 5
    w = torch.randn(o, i, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
    rows = []
    size = math.ceil(o * i / world)
    xs = [torch.randn(3, i, dtype=torch.float64, generator=torch.Generator().manual_seed(2 + r)).requires_grad_()
          for r in range(world)]
    sum(x @ w.t() for x in xs).sum().backward()
    dw = torch.cat([w.grad.reshape(-1), w.grad.new_zeros(world * size - o * i)])
    for r, (y, xg, sg, kept) in enumerate(runs):
        errs = [(y - xs[r].detach() @ w.detach().t()).abs().max().item(), (xg - xs[r].grad).abs().max().item(),
                (sg - dw[r * size:(r + 1) * size]).abs().max().item()]
        rows.append((r, f"{max(errs):.1e}", kept, o * i * 8))
    table = Table(["rank", "max error (y, dx, dW shard)", "bytes kept after forward", "full W bytes"], rows)
    print(table)
    return table


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab10_zero.py."""
    return {"model_state_bytes": state_bytes_picture, "zero1_step": zero1_picture,
            "fsdp_linear": fsdp_linear_picture}[exercise]
