"""The Lab 06 notebook's one-liners, and its "check your work" pictures.

    equivalence_table(worlds)          DDP on N ranks vs one process on the whole batch
    bucket_table(cfg, cap_mb)          our buckets next to the ones PyTorch's DDP forms
    torch_bucket_history(cfg, caps)    PyTorch DDP's buckets at construction and after the first step
    measure_overlap(cfg, ...)          naive / per-parameter / bucketed steps timed on real ranks
    overlap_table(measured)            those times next to the overlap model's predictions
    fitted_alpha_beta(measured)        α, β of the all-reduce, fitted to the measured bucket times
    ps_compare(...)                    BSP, ASP, SSP on a real parameter server, with a straggler
    ps_lr_table(...)                   the same runs over a grid of learning rates: each one's best
    server_bytes_table(...)            bytes on the server's link vs on any link of a ring
    scaling_tables(cfg, ...)           strong and weak scaling measured, Amdahl/Gustafson fitted
    large_batch_table(cfg, ...)        loss after a fixed number of samples vs batch and LR rule
    compression_table(cfg, ...)        dense vs top-k / 1-bit (with error feedback): bytes and loss
    local_sgd_table(cfg, ...)          FedAvg: average every H steps; bytes and loss
    picture(exercise)                  a learner's function drawn the way the lab draws ours
                                       (bucketed_ddp_hooks: also timed against per-parameter and naive)

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import statistics

import torch

from labkit.collectives.alpha_beta import fit_alpha_beta
from labkit.data_parallel.buckets import assign_buckets, cap_bytes_of
from labkit.data_parallel.ddp import DDP
from labkit.data_parallel.overlap import naive_step_time, overlap_step_time
from labkit.data_parallel.param_server import PSConfig, run_many, server_bytes_per_step
from labkit.data_parallel.ssp import ssp_makespan, ssp_start_times
from labkit.data_parallel.step_timing import Measured, interleaved_steps, time_ddp_steps
from labkit.dist import device, launch
from labkit.model import DATA_PARALLEL_GPT, GPT, GPTConfig, batch, parameter_count
from labkit.table import Table

BATCH, STEPS, LR = 24, 3, 0.5


# --------------------------------------------------------------------------- equivalence

def _train(model, rank, world, cfg, finish=None):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    dev = next(model.parameters()).device
    for step in range(STEPS):
        tokens, targets = (t.to(dev) for t in batch(cfg, BATCH, seed=step))
        lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
        opt.zero_grad()
        model(tokens[lo:hi], targets[lo:hi])[1].backward()
        if finish is not None:
            finish()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _ddp_rank(rank, world, cfg, cap_mb):
    model = DDP(GPT(cfg, seed=0, dtype=torch.float64).to(device()), bucket_cap_mb=cap_mb)
    return _train(model, rank, world, cfg, model.finish_gradient_synchronization)


def equivalence_table(worlds=(1, 2, 4), cap_mb: float | None = 0.004, cfg: GPTConfig = DATA_PARALLEL_GPT) -> Table:
    """Largest |parameter difference| after STEPS SGD steps (float64) between DDP on N ranks — each
    on 1/N of every batch of BATCH sequences — and one process on the whole batch."""
    want = _train(GPT(cfg, seed=0, dtype=torch.float64), 0, 1, cfg)
    rows = []
    for n in worlds:
        got = launch(_ddp_rank, n, cfg, cap_mb, timeout=120)
        err = max((a - b).abs().max().item() for per_rank in got for a, b in zip(per_rank, want))
        rows.append((n, BATCH // n, err, err < 1e-12))
    return Table(["ranks", "sequences per rank", "max |DDP - one process|", "equal to 1e-12"], rows,
                 formats={"max |DDP - one process|": ".1e"},
                 title=f"{STEPS} SGD steps, float64, bucket cap {cap_mb} MiB")


def _pytorch_buckets_rank(rank, world, cfg, cap_mb):
    from torch.nn.parallel import DistributedDataParallel

    dev = device()
    model = DistributedDataParallel(GPT(cfg, seed=0, dtype=torch.float64).to(dev), bucket_cap_mb=cap_mb,
                                    device_ids=[dev] if dev.type == "cuda" else None)
    for step in range(3):                         # PyTorch rebuilds its buckets in step 2, logs them in 3
        model.zero_grad()
        model(*(t.to(dev) for t in batch(cfg, 2, seed=step)))[1].backward()
    data = model._get_ddp_logging_data()
    return [[int(i) for i in b.split()] for b in data["rebuilt_per_bucket_param_indices"].split(",")]


def bucket_table(cfg: GPTConfig = DATA_PARALLEL_GPT, cap_mb: float = 0.004) -> Table:
    """Our buckets (closing order; member names, bytes) and whether PyTorch's DDP forms the same set."""
    model = GPT(cfg, dtype=torch.float64)
    names = [n for n, _ in model.named_parameters()]
    params = list(model.parameters())
    ours = assign_buckets(params, cap_bytes_of(cap_mb))
    theirs = launch(_pytorch_buckets_rank, 2, cfg, cap_mb, timeout=60)[0]
    same = {tuple(sorted(b)) for b in ours} == {tuple(sorted(b)) for b in theirs}
    rows = []
    for k, b in enumerate(ours):
        members = [names[i].replace("blocks.", "b").replace(".weight", ".w").replace(".bias", ".b") for i in b]
        text = ", ".join(members)
        rows.append((k, sum(params[i].numel() * params[i].element_size() for i in b),
                     text if len(text) <= 60 else text[:57] + "...", tuple(sorted(b)) in
                     {tuple(sorted(t)) for t in theirs}))
    return Table(["bucket", "bytes", "parameters (in the order added)", "PyTorch has it"], rows,
                 title=f"cap {cap_mb} MiB = {cap_bytes_of(cap_mb)} bytes; same buckets as PyTorch: {same}")


def _torch_history_rank(rank, world, cfg, caps):
    from torch.nn.parallel import DistributedDataParallel

    out = []
    for cap in caps:
        model = DistributedDataParallel(GPT(cfg, seed=0), bucket_cap_mb=cap)
        built = model._get_ddp_logging_data()["bucket_sizes"]
        for step in range(3):                     # rebuilt in step 2 from step 1's order, logged in 3
            model.zero_grad()
            model(*batch(cfg, 2, seed=step))[1].backward()
        data = model._get_ddp_logging_data()
        out.append(([int(b) for b in built.split(",")], [int(b) for b in data["rebuilt_bucket_sizes"].split(",")],
                    int(data["bucket_cap_bytes"])))
    return out


def torch_bucket_history(cfg: GPTConfig, caps=(None, 1.0)) -> list[dict]:
    """PyTorch's `DistributedDataParallel` on 2 gloo ranks, once per ``bucket_cap_mb`` in ``caps``
    (None = its default): the bucket sizes (bytes) it builds at construction, the sizes it rebuilds
    after the first iteration (in the order the gradients arrived), its cap in bytes, and our
    `assign_buckets` for the same cap, largest parameters last-layer first."""
    got = launch(_torch_history_rank, 2, cfg, tuple(caps), backend="gloo", timeout=120)[0]
    params = list(GPT(cfg).parameters())
    rows = []
    for cap, (built, rebuilt, cap_bytes) in zip(caps, got):
        ours = None if cap is None else [sum(params[i].numel() * params[i].element_size() for i in b)
                                         for b in assign_buckets(params, cap_bytes_of(cap))]
        rows.append({"cap_mb": cap, "cap_bytes": cap_bytes, "at_construction": built, "after_first_step": rebuilt,
                     "ours": ours})
    return rows


# --------------------------------------------------------------------------- overlap

def measure_overlap(cfg: GPTConfig, batch_per_rank: int = 8, cap_mb: float = 1.0, world: int = 2,
                    steps: int = 5) -> Measured:
    """Every variant timed on ``world`` real ranks (see `step_timing.time_ddp_steps`): gloo on CPU,
    NCCL with a GPU per rank."""
    return launch(time_ddp_steps, world, cfg, batch_per_rank, cap_mb, steps, timeout=300)[0]


def comm_times(m: Measured, bucketed: bool) -> list[float]:
    """Measured all-reduce seconds of each bucket (or each parameter), in the order they become ready."""
    if bucketed:
        return [m.comm[sum(m.nbytes[i] for i in b)] for b in m.buckets]
    return [m.comm[n] for n in reversed(m.nbytes)]


def predicted_step(m: Measured, name: str) -> float:
    """The model's step time (s) for variant ``name`` from the parts measured alone, plus the
    variant's measured ``lag`` (the ranks do not finish backward together, and no all-reduce
    completes before the last rank joins it): naive T_fwd + T_bwd + lag + the burst of its
    all-reduces (`Measured.burst`); overlapped, the lower bound
    T_fwd + max(T_bwd, T_comm − t_last) + t_last + lag."""
    v = m.variants[name]
    if name == "naive":
        return m.fwd + m.bwd + v.lag + m.burst
    return overlap_step_time(m.fwd, m.bwd, comm_times(m, name == "bucketed")) + v.lag


def overlap_table(m: Measured) -> Table:
    """Measured step parts (ms) of each variant next to `predicted_step`."""
    rows = []
    for name, v in m.variants.items():
        comm = m.burst if name == "naive" else sum(comm_times(m, name == "bucketed"))
        pred = predicted_step(m, name)
        rows.append((name, len(v.events), v.fwd * 1e3, v.bwd * 1e3, v.wait * 1e3, v.lag * 1e3, v.step * 1e3,
                     comm * 1e3, pred * 1e3, v.step / pred))
    return Table(["variant", "ARs", "fwd", "bwd", "wait", "lag", "step", "comm", "model",
                  "meas/model"], rows, formats={k: ".1f" for k in ("fwd", "bwd", "wait", "lag", "step",
                                                                   "comm", "model")}
                 | {"meas/model": ".2f"},
                 title=f"{m.world} ranks, ms; compute alone: fwd {m.fwd * 1e3:.1f}, bwd {m.bwd * 1e3:.1f}")


def fitted_alpha_beta(m: Measured) -> tuple[float, float]:
    """(α s, β s/byte) fitted (Lab 05's fit, ring all-reduce model) to the all-reduce times measured alone."""
    return fit_alpha_beta([("ring_all_reduce", m.world, n, t) for n, t in m.comm.items()])


# --------------------------------------------------------------------------- parameter server

PS_LRS = (0.05, 0.1, 0.2, 0.4, 0.8)


def _ps_runs(workers, steps, compute_s, straggler_s, staleness, lrs):
    """{(name, lr): PSResult} for BSP, ASP and SSP(staleness) at each lr, worker 1 slowed by
    ``straggler_s`` per iteration; all runs in one launch."""
    modes = {"BSP": ("bsp", 0), "ASP": ("asp", 0), f"SSP s={staleness}": ("ssp", staleness)}
    keys = [(name, lr) for lr in lrs for name in modes]
    cfgs = [PSConfig(mode=modes[name][0], staleness=modes[name][1], steps=steps, lr=lr, compute_s=compute_s,
                     stragglers={1: straggler_s}) for name, lr in keys]
    return dict(zip(keys, run_many(cfgs, workers)))


def ps_compare(workers: int = 3, steps: int = 20, compute_s: float = 0.004, straggler_s: float = 0.008,
               staleness: int = 2, lr: float = 0.05, lrs=()):
    """BSP, ASP and SSP(staleness) on a real parameter server, worker 1 slowed by ``straggler_s``
    per iteration. Returns (Table, {name: PSResult}, {(name, lr): PSResult}); the table puts each
    run's wall time next to the clock rule's prediction from the iteration times alone
    (`ssp_makespan`), at learning rate ``lr``; the runs at the other ``lrs`` (same launch) feed
    `ps_lr_table`."""
    durations = [[compute_s + (straggler_s if k == 0 else 0.0)] * steps for k in range(workers)]
    sweep = _ps_runs(workers, steps, compute_s, straggler_s, staleness, tuple(dict.fromkeys((lr, *lrs))))
    rule = {"BSP": 0, "ASP": None}
    results, rows = {}, []
    for (name, at), r in sweep.items():
        if at != lr:
            continue
        results[name] = r
        waits = [r.wait_s[k] for k in sorted(r.wait_s)]
        rows.append((name, r.seconds, ssp_makespan(durations, rule.get(name, staleness)), max(r.staleness),
                     sum(r.staleness) / len(r.staleness), r.loss[-1], waits[-1]))
    return Table(["run", "seconds", "clock rule", "max staleness", "mean staleness", "final loss",
                  "fast waited s"], rows,
                 formats={"seconds": ".3f", "clock rule": ".3f", "mean staleness": ".2f", "final loss": ".2e",
                          "fast waited s": ".3f"},
                 title=f"{workers} workers x {steps} iterations of {compute_s * 1e3:g} ms; "
                       f"worker 1 +{straggler_s * 1e3:g} ms each; lr {lr:g}"), results, sweep


def ps_lr_table(sweep: dict) -> Table:
    """Final loss of each consistency model at each learning rate of ``sweep`` (from `ps_compare`),
    its updates applied, and its best learning rate; "diverged" where the loss ended above where
    it started."""
    names = list(dict.fromkeys(name for name, _ in sweep))
    lrs = sorted({lr for _, lr in sweep})
    rows = []
    for name in names:
        losses = {lr: sweep[name, lr].loss for lr in lrs}
        final = [losses[lr][-1] if losses[lr][-1] < losses[lr][0] else None for lr in lrs]
        best = min((f, lr) for f, lr in zip(final, lrs) if f is not None)
        rows.append([name, sweep[name, lrs[0]].updates] + ["diverged" if f is None else f"{f:.1e}" for f in final]
                    + [best[1], best[0]])
    return Table(["run", "updates"] + [f"lr {lr:g}" for lr in lrs] + ["best lr", "best loss"], rows,
                 formats={"best loss": ".1e"},
                 title="final loss after the same iterations (initial loss "
                       f"{next(iter(sweep.values())).loss[0]:.1f}); diverged: ended above it")


def server_bytes_table(workers=(2, 4, 8, 16, 64), params: int = 10**8, itemsize: int = 4) -> Table:
    """GB per step through the server's one link (every worker pushes and pulls everything) vs
    what one rank's link carries in a ring all-reduce, 2(W−1)/W · bytes."""
    rows = []
    for w in workers:
        server = server_bytes_per_step(w, params, itemsize) / 1e9
        ring = 2 * (w - 1) / w * params * itemsize / 1e9
        rows.append((w, server, ring, server / ring))
    return Table(["workers", "server link GB/step", "ring link GB/step", "ratio"], rows,
                 formats={"server link GB/step": ".1f", "ring link GB/step": ".2f", "ratio": ".1f"},
                 title=f"{params:.0e} parameters of {itemsize} bytes")


# --------------------------------------------------------------------------- scaling, large batch

def scaling_tables(cfg: GPTConfig, worlds=(1, 2), global_batch: int = 16, per_rank: int = 8):
    """(strong Table, weak Table, s_amdahl, s_gustafson): DDP steps measured on real ranks, speedup
    and efficiency η, with the serial fractions fitted to them (clipped to [0, 1]: a busy machine
    can make 2 ranks slower than 1) and each law's prediction."""
    from labkit.data_parallel import scaling as S

    strong = S.measure_scaling(cfg, worlds, global_batch=global_batch)
    weak = S.measure_scaling(cfg, worlds, per_rank=per_rank)
    ns = [p.world for p in strong]
    speedups = [p.world * weak[0].step_s / p.step_s for p in weak]
    fits = [S.fit_amdahl(ns, [p.step_s for p in strong]), S.fit_gustafson(ns, speedups)]
    # a busy machine can make more ranks slower than one (a fitted s above 1): say so, and clip
    notes = ["" if 0 <= s <= 1 else f" (fit {s:.2f} clipped: busy machine)" for s in fits]
    s_a, s_g = (min(max(s, 0.0), 1.0) for s in fits)
    rows = [(p.world, p.per_rank, p.step_s * 1e3, strong[0].step_s / p.step_s,
             S.amdahl_speedup(s_a, p.world), strong[0].step_s / p.step_s / p.world) for p in strong]
    t_strong = Table(["ranks", "per rank", "step ms", "speedup", "Amdahl fit", "efficiency"], rows,
                     formats={"step ms": ".1f", "speedup": ".2f", "Amdahl fit": ".2f", "efficiency": ".2f"},
                     title=f"strong scaling, {global_batch} sequences in all: serial fraction s = {s_a:.2f}"
                           + notes[0])
    rows = [(p.world, p.per_rank, p.step_s * 1e3, sp, S.gustafson_speedup(s_g, p.world), sp / p.world)
            for p, sp in zip(weak, speedups)]
    t_weak = Table(["ranks", "per rank", "step ms", "scaled speedup", "Gustafson fit", "efficiency"], rows,
                   formats={"step ms": ".1f", "scaled speedup": ".2f", "Gustafson fit": ".2f", "efficiency": ".2f"},
                   title=f"weak scaling, {per_rank} sequences per rank: serial fraction s = {s_g:.2f}" + notes[1])
    return t_strong, t_weak, s_a, s_g


LB_CFG = GPTConfig(layers=2, hidden=32, heads=2, seq_len=16, vocab=32)


def large_batch_table(cfg: GPTConfig = LB_CFG, samples: int = 2048, batches=(8, 32, 128, 512),
                      lr0: float = 0.1, base_batch: int = 8) -> Table:
    """Held-out loss after ``samples`` sequences, per batch size and LR rule (inf = diverged)."""
    from labkit.data_parallel.large_batch import RULES, loss_after, scaled_lr

    rows = []
    for b in batches:
        lrs = [scaled_lr(rule, lr0, b, base_batch) for rule in RULES]
        runs = {lr: loss_after(cfg, samples, b, lr) for lr in set(lrs)}   # at the base batch all rules agree
        losses = [runs[lr] for lr in lrs]
        rows.append((b, samples // b, *[f"{x:.3f}" if x < 10 else "diverged" for x in losses], lrs[1]))
    return Table(["batch", "steps", "lr fixed", "lr linear", "lr sqrt", "linear lr"], rows,
                 formats={"linear lr": ".2f"},
                 title=f"loss after {samples} sequences (ln 4 = 1.386 is the floor); base lr {lr0} at batch {base_batch}")


def compression_table(cfg: GPTConfig = LB_CFG, steps: int = 60, ratio: float = 0.01) -> Table:
    """Dense vs compressed gradient averaging on 2 ranks: bytes sent per rank per step, and loss."""
    from labkit.data_parallel.compression import METHODS, train_compressed

    rows = []
    for m in METHODS:
        r = train_compressed(cfg, m, steps=steps, ratio=ratio)
        rows.append((m, r["bytes_per_step"], r["final_loss"]))
    dense = rows[0][1]
    return Table(["method", "bytes/rank/step", "held-out loss", "bytes vs dense"],
                 [(m, int(b), loss, f"1/{dense / b:.0f}" if b < dense else "1") for m, b, loss in rows],
                 formats={"held-out loss": ".3f"},
                 title=f"2 ranks, {steps} SGD steps, top-k keeps {ratio:.0%} of the entries")


def local_sgd_table(cfg: GPTConfig = LB_CFG, total_steps: int = 64, local_steps=(1, 4, 16)) -> Table:
    """Local SGD on 2 ranks for the same number of steps, averaging every H: bytes and loss."""
    from labkit.data_parallel.local_sgd import local_sgd

    rows = []
    for h in local_steps:
        r = local_sgd(cfg, h, total_steps // h)
        rows.append((h, total_steps // h, int(r["bytes"]), r["losses"][-1]))
    return Table(["H (steps between averages)", "averages", "bytes sent per rank", "held-out loss"], rows,
                 formats={"held-out loss": ".3f"}, title=f"2 ranks, {total_steps} SGD steps each")


# --------------------------------------------------------------------------- check your work

def bucket_picture(fn, cfg: GPTConfig = DATA_PARALLEL_GPT, caps=(1, 2000, 6000, 10**9)) -> Table:
    """Your ``bucket_indices`` on the model's parameters for several caps, next to DDP's buckets."""
    params = list(GPT(cfg).parameters())
    sizes = [p.numel() * p.element_size() for p in params]
    dtypes = [str(p.dtype).removeprefix("torch.") for p in params]
    rows = []
    for cap in caps:
        yours, ours = fn(sizes, dtypes, cap), assign_buckets(params, cap)
        rows.append((cap, len(yours), len(ours), [len(b) for b in yours][:6], yours == ours))
    table = Table(["cap (bytes)", "your buckets", "DDP's", "your first sizes (params)", "equal"], rows)
    print(table)
    return table


def _hooks_rank(rank, world, fn, cfg):
    model = GPT(cfg, seed=rank, dtype=torch.float64)         # replicas start different
    finish = fn(model)
    return _train(model, rank, world, cfg, finish)


def hooks_picture(fn, cfg: GPTConfig = DATA_PARALLEL_GPT, world: int = 2):
    """Your ``data_parallel_hooks`` training the small GPT on 2 real ranks vs one process."""
    want = _train(GPT(cfg, seed=0, dtype=torch.float64), 0, 1, cfg)
    got = launch(_hooks_rank, world, fn, cfg, backend="gloo", timeout=60, quiet=True)
    err = max((a - b).abs().max().item() for per_rank in got for a, b in zip(per_rank, want))
    print(f"your hooks on {world} ranks, {STEPS} SGD steps: max |difference from one process| = {err:.1e}: "
          f"{'equal' if err < 1e-12 else 'DIFFERENT'} (to 1e-12)")
    return err


TIMING_GPT = GPTConfig(layers=4, hidden=128, heads=4, seq_len=64, vocab=256)   # section 3's model


def _bucketed_rank(rank, world, fn, cfg, cap_mb, timing_cfg, timing_cap_mb, batch_per_rank, steps):
    import torch.distributed as dist

    model = GPT(cfg, seed=rank, dtype=torch.float64)         # replicas start different
    params = [p for p in model.parameters() if p.requires_grad]
    equal = _train(model, rank, world, cfg, fn(model, assign_buckets(params, cap_bytes_of(cap_mb))))

    yours = GPT(timing_cfg, seed=0).to(device())
    finish = fn(yours, assign_buckets([p for p in yours.parameters() if p.requires_grad],
                                      cap_bytes_of(timing_cap_mb)))
    per_param = DDP(GPT(timing_cfg, seed=0).to(device()))
    naive = DDP(GPT(timing_cfg, seed=0).to(device()), overlap=False)
    variants = {"yours (bucketed)": (yours, finish),
                "per-parameter": (per_param, per_param.finish_gradient_synchronization),
                "naive": (naive, naive.finish_gradient_synchronization)}
    calls = {name: [] for name in variants}          # per variant: each all-reduce, True if during backward
    now_running = ["", False]                        # variant, in backward (from forward's end to finish)
    original = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        calls[now_running[0]].append(now_running[1])
        return original(tensor, *args, **kwargs)

    def flagged(name, model, finish):
        forward = model.forward

        def watched_forward(*args, **kwargs):
            out = forward(*args, **kwargs)
            now_running[:] = [name, True]
            return out

        def watched_finish():
            now_running[1] = False
            finish()

        model.forward = watched_forward
        return model, watched_finish

    dist.all_reduce = counted
    try:
        rows = interleaved_steps({name: flagged(name, *v) for name, v in variants.items()},
                                 timing_cfg, batch_per_rank, rank, world, steps)
    finally:
        dist.all_reduce = original
    counts = {name: (len(c) // (steps + 1), sum(c) // (steps + 1)) for name, c in calls.items()}
    times = {name: [statistics.median(r[k] for r in rs[1:]) for k in range(4)] for name, rs in rows.items()}
    return equal, counts, times


def bucketed_picture(fn, cfg: GPTConfig = DATA_PARALLEL_GPT, cap_mb: float = 0.004, world: int = 2,
                     timing_cfg: GPTConfig = TIMING_GPT, timing_cap_mb: float = 1.0, batch_per_rank: int = 8,
                     steps: int = 5) -> Table:
    """Your ``bucketed_ddp_hooks`` on 2 real gloo ranks (CPU tensors, like the other pictures): trained (float64, buckets of ``cap_mb``) against
    one process; then timed on section 3's GPT (float32, ``timing_cap_mb`` buckets) against labkit's
    per-parameter overlapped DDP and the naive one (every all-reduce after backward), steps
    interleaved, medians of ``steps`` steps after a warm-up (ms). Returns the timing table (rank 0's
    times; all-reduces counted per step, and how many of them started during backward)."""
    want = _train(GPT(cfg, seed=0, dtype=torch.float64), 0, 1, cfg)
    got = launch(_bucketed_rank, world, fn, cfg, cap_mb, timing_cfg, timing_cap_mb, batch_per_rank, steps,
                 backend="gloo", timeout=300, quiet=True)
    err = max((a - b).abs().max().item() for equal, _, _ in got for a, b in zip(equal, want))
    print(f"your buckets on {world} ranks, {STEPS} SGD steps: max |difference from one process| = {err:.1e}: "
          f"{'equal' if err < 1e-12 else 'DIFFERENT'} (to 1e-12)")
    _, counts, times = got[0]
    rows = [(name, *counts[name], *[t * 1e3 for t in times[name]]) for name in times]
    table = Table(["variant", "all-reduces", "in backward", "fwd", "bwd", "wait", "step"], rows,
                  formats={k: ".1f" for k in ("fwd", "bwd", "wait", "step")},
                  title=f"{world} ranks, {parameter_count(timing_cfg):,} parameters, ms (medians of {steps} "
                        f"steps; {timing_cap_mb} MiB buckets)")
    print(table)
    return table


def ssp_picture(fn, durations=((1, 1, 1, 1), (3, 1, 3, 1), (1, 2, 1, 2)), staleness: int = 1):
    """Your ``ssp_start_times`` drawn as the lab's timeline, next to labkit's for ASP, SSP(s), BSP."""
    from IPython.display import HTML, display

    from labkit.viz.player import figure_to_html
    from labkit.viz import data_parallel as V

    rows = []
    for s in (None, staleness, 0):
        yours = fn([list(d) for d in durations], s)
        rows.append(("ASP" if s is None else f"s={s}", yours, yours == ssp_start_times(durations, s)))
    display(HTML(figure_to_html(V.ssp_figure([list(d) for d in durations], staleness, fn))))
    table = Table(["rule", "your start times", "equal"], rows)
    print(table)
    return table


def noise_scale_picture(fn, ranks: int = 16, per_rank: int = 64):
    """Your ``noise_scale`` on the gradient norms of the section's data-parallel run, next to
    labkit's; and the steps your B_simple predicts, S_min·(1 + B_simple/B), against the measured."""
    from labkit.data_parallel import noise_scale as N

    _, sw, (s_min, _, b_crit), run_ = batch_size_study(per_rank=per_rank, ranks=ranks)
    args = (sum(run_.small_sq) / len(run_.small_sq), sum(run_.big_sq) / len(run_.big_sq), per_rank, ranks * per_rank)
    yours, ours = fn(*args), N.noise_scale(*args)
    rows = [("yours", *[float(v) for v in yours]), ("labkit's", *ours)]
    table = Table(["", "|G|^2", "tr(Sigma)", "B_simple"], rows,
                  formats={"|G|^2": ".4g", "tr(Sigma)": ".4g", "B_simple": ".2f"},
                  title=f"run of {ranks} ranks x {per_rank} examples ({len(run_.small_sq)} steps); "
                        f"the fitted bend B_crit is {b_crit:.1f}")
    print(table)
    b = float(yours[2])
    names = [str(B) for B in sw.batches[::2]]
    print(Table(["batch B", *names], [("measured steps", *sw.steps[::2]),
                                      ("your S_min(1 + B_simple/B)", *[s_min * (1 + b / B) for B in sw.batches[::2]])],
                formats={n: ".0f" for n in names}))
    return table


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab06_data_parallel.py."""
    return {"bucket_indices": bucket_picture, "data_parallel_hooks": hooks_picture,
            "bucketed_ddp_hooks": bucketed_picture,
            "ssp_start_times": ssp_picture, "noise_scale": noise_scale_picture}[exercise]


# --------------------------------------------------------------------------- convergence (section 7)

def staleness_runs(workers: int = 4, steps: int = 40, lrs=(0.1, 0.2), bounds=(0, 1, 2, 4, 8, None),
                   timelines: int = 10, target: float = 1e-3):
    """The server's SGD simulated on ``timelines`` seeded timelines of busy-now-and-then workers
    (`convergence.jittery_durations`), for every learning rate and staleness bound (None = ASP;
    0 = BSP with the W gradients of a clock applied one by one, which is the averaged update at
    W·lr). Every gradient is applied with the same lr. Returns (Table, {(lr, label): Run on
    timeline 0}): per lr and bound, the largest and mean staleness, and the medians over timelines
    of the gradients and the time the loss needs to fall to ``target`` × its start; next to Ho et
    al.'s factor √(s + 1)."""
    import math
    import statistics

    from labkit.data_parallel.convergence import jittery_durations, simulate

    timeline = [jittery_durations(workers, steps, k) for k in range(timelines)]
    rows, shown = [], {}
    for lr in lrs:
        for s in bounds:
            label = "ASP" if s is None else ("BSP (s=0)" if s == 0 else f"SSP s={s}")
            grads, times, worst, mean = [], [], 0, []
            for k in range(timelines):
                cfg = PSConfig(mode="asp" if s is None else "ssp", staleness=s or 0, steps=steps, lr=lr, seed=k)
                run_k = simulate(cfg, timeline[k])
                goal = run_k.loss[0] * target
                grads.append(run_k.first_below(goal, "gradients"))
                times.append(run_k.first_below(goal, "time"))
                worst = max(worst, max(run_k.staleness))
                mean.append(sum(run_k.staleness) / len(run_k.staleness))
                if k == 0:
                    shown[(lr, label)] = run_k
            rows.append((lr, label, worst, statistics.mean(mean), statistics.median(grads), statistics.median(times),
                         math.sqrt(s + 1) if s is not None else math.inf))
    table = Table(["lr", "rule", "max stale", "mean stale", "gradients to target", "time to target",
                   "sqrt(s+1)"], rows,
                  formats={"mean stale": ".2f", "gradients to target": ".1f", "time to target": ".2f",
                           "sqrt(s+1)": ".2f"},
                  title=f"{workers} workers x {steps} iterations; loss to {target:g} x its start; "
                        f"medians over {timelines} timelines")
    return table, shown


def real_staleness_runs(workers: int = 4, steps: int = 30, lr: float = 0.2, unit_s: float = 0.004,
                        bounds=(0, 2, None), seed: int = 0) -> Table:
    """The same timeline played by the real parameter server (gloo ranks; every iteration sleeps
    its duration × ``unit_s``), for each bound; each run replayed from the order in which its
    server took the gradients (`convergence.replay`): the losses must be the real ones, bit for
    bit. Wall times vary from run to run; the clock rule's prediction is printed next to them."""
    from labkit.data_parallel.convergence import jittery_durations, replay

    durations = jittery_durations(workers, steps, seed)
    sleeps = tuple(tuple(d * unit_s for d in row) for row in durations)
    rows = []
    cfgs = [PSConfig(mode="asp" if s is None else "ssp", staleness=s or 0, steps=steps, lr=lr, seed=seed,
                     sleeps=sleeps) for s in bounds]
    for s, cfg, r in zip(bounds, cfgs, run_many(cfgs, workers)):
        again = replay(cfg, workers, r.received)
        rows.append(("ASP" if s is None else ("BSP (s=0)" if s == 0 else f"SSP s={s}"), r.seconds,
                     ssp_makespan(durations, s) * unit_s, max(r.staleness), r.loss[-1],
                     "yes" if again.loss == r.loss else "NO"))
    return Table(["rule", "wall s", "clock rule s", "max staleness", "final loss", "replay = real, bit for bit"],
                 rows, formats={"wall s": ".3f", "clock rule s": ".3f", "final loss": ".2e"},
                 title=f"real server, {workers} workers x {steps} iterations, timeline 0 at {unit_s * 1e3:g} ms "
                       "per unit")


def delay_table(taus=(0, 1, 2, 4, 8)) -> Table:
    """Largest stable η·λ with gradients τ updates stale: the closed form next to a bisection on
    the iteration's spectral radius, and π/(2τ + 1), the closed form's large-τ shape."""
    import math

    from labkit.data_parallel.convergence import delay_step_limit, largest_stable_step

    rows = [(t, delay_step_limit(t), largest_stable_step(t), math.pi / (2 * t + 1)) for t in taus]
    return Table(["tau", "2 sin(pi/(2(2tau+1)))", "bisection", "pi/(2tau+1)"], rows,
                 formats={"2 sin(pi/(2(2tau+1)))": ".6f", "bisection": ".6f", "pi/(2tau+1)": ".4f"},
                 title="largest stable step x curvature when every gradient is tau updates stale")


def batch_size_study(problem=None, per_rank: int = 64, ranks: int = 16):
    """Steps to the target against the batch (`noise_scale.sweep`), the fitted bend, and the
    noise scale estimated from a data-parallel run of ranks × per_rank at its best learning rate.
    Returns (Table, sweep, (S_min, E_min, B_crit), NoiseScaleRun)."""
    from labkit.data_parallel import noise_scale as N

    problem = problem or N.Problem()
    sw = N.sweep(problem)
    s_min, e_min, b_crit = N.critical_batch_fit(sw.batches, sw.steps)
    big = ranks * per_rank
    lr = sw.lrs[sw.batches.index(big)] if big in sw.batches else sw.lrs[-1]
    run_ = N.noise_scale_of_run(problem, ranks, per_rank, lr, sw.fraction)
    b_simple = run_.b_simple
    rows = [(b, s, s * b, lr_, s_min * (1 + b_simple / b)) for b, s, lr_ in zip(sw.batches, sw.steps, sw.lrs)]
    table = Table(["batch B", "steps S", "examples S*B", "best lr", "S_min(1 + B_simple/B)"], rows,
                  formats={"best lr": ".3f", "S_min(1 + B_simple/B)": ".1f"},
                  title=f"steps until 6 runs all have the loss at {sw.fraction:g} x its start; "
                        f"S_min {s_min:.1f}, B_crit {b_crit:.1f}, B_simple {b_simple:.1f}")
    return table, sw, (s_min, e_min, b_crit), run_


def adascale_table(problem=None, base_batch: int = 2, lr0: float = 0.125, scales=(4, 16, 64, 256),
                   seeds: int = 6):
    """The base run (batch ``base_batch``, ``lr0``, as many steps as it needs to reach the sweep's
    target) against the linear rule and AdaScale at each scale: medians over ``seeds`` of the steps
    and the final loss above the minimum ("blew up" when above the start), and AdaScale's mean gain.
    Returns (Table, {scale: AdaScale run on seed 0})."""
    import math
    import statistics

    from labkit.data_parallel import noise_scale as N

    problem = problem or N.Problem()
    T, _ = N.steps_to_target(problem, base_batch, [lr0])
    start = float(problem.excess(-problem.w_star))
    base = statistics.median(N.scaled_run(problem, "base", 1, base_batch, lr0, T, seed=k).final for k in range(seeds))

    def final(r):
        return r.final if not r.diverged and r.final < start else math.inf

    rows, shown = [("base", 1, T, base, "-", 1.0)], {}
    for S in scales:
        lin = [N.scaled_run(problem, "linear", S, base_batch, lr0, T, seed=k) for k in range(seeds)]
        ada = [N.scaled_run(problem, "adascale", S, base_batch, lr0, T, seed=k) for k in range(seeds)]
        shown[S] = ada[0]
        lin_final = statistics.median(final(r) for r in lin)
        rows.append(("scale", S, statistics.median(r.steps for r in ada), statistics.median(final(r) for r in ada),
                     "blew up" if math.isinf(lin_final) else f"{lin_final:.2e}",
                     statistics.mean(statistics.mean(r.gains) for r in ada)))
    table = Table(["run", "S", "AdaScale steps", "AdaScale final", "linear rule final", "AdaScale mean gain"],
                  rows, formats={"AdaScale steps": ".0f", "AdaScale final": ".2e", "AdaScale mean gain": ".2f"},
                  title=f"base batch {base_batch} at lr {lr0} for {T} steps; batch S x {base_batch}; "
                        f"medians over {seeds} seeds; loss above the minimum")
    return table, shown


def gap_table(problem=None, n_train: int = 256, small=(8, 0.4), large=(128, 1.2), epochs: int = 1,
              seeds: int = 8) -> Table:
    """Training and test loss, and their gap, over a fixed training set of ``n_train`` examples
    (label noise σ² = 1): the small batch and the large one for the same ``epochs``, and the
    large one for as many steps as the small one took. Means over ``seeds`` draws of the data."""
    import statistics

    from labkit.data_parallel import noise_scale as N

    problem = problem or N.Problem(sigma2=1.0)
    (b1, lr1), (b2, lr2) = small, large
    more = epochs * b2 // b1
    rows = []
    for b, lr, ep, label in ((b1, lr1, epochs, "small batch"), (b2, lr2, epochs, "large, same epochs"),
                             (b2, lr2, more, "large, same steps")):
        runs = [N.finite_data_run(problem, n_train, b, lr, ep, seed=k) for k in range(seeds)]
        rows.append((label, b, lr, ep, runs[0].steps, statistics.mean(r.train for r in runs),
                     statistics.mean(r.test for r in runs), statistics.mean(r.gap for r in runs)))
    return Table(["run", "batch", "lr", "epochs", "steps", "train loss", "test loss", "gap"], rows,
                 formats={"train loss": ".3f", "test loss": ".3f", "gap": ".3f"},
                 title=f"{n_train} training examples, label noise 1 (the best possible loss is 0.5); "
                       f"means over {seeds} data sets")
