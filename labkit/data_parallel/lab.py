"""The Lab 06 notebook's one-liners, and its "check your work" pictures.

    equivalence_table(worlds)          DDP on N ranks vs one process on the whole batch
    bucket_table(cfg, cap_mb)          our buckets next to the ones PyTorch's DDP forms
    measure_overlap(cfg, ...)          naive / per-parameter / bucketed steps timed on real ranks
    overlap_table(measured)            those times next to the overlap model's predictions
    fitted_alpha_beta(measured)        α, β of the all-reduce, fitted to the measured bucket times
    ps_compare(...)                    BSP, ASP, SSP on a real parameter server, with a straggler
    server_bytes_table(...)            bytes on the server's link vs on any link of a ring
    picture(exercise)                  a learner's function drawn the way the lab draws ours

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import torch

from labkit.collectives.alpha_beta import fit_alpha_beta
from labkit.data_parallel.buckets import assign_buckets, cap_bytes_of
from labkit.data_parallel.ddp import DDP
from labkit.data_parallel.overlap import naive_step_time, overlap_step_time
from labkit.data_parallel.param_server import PSConfig, run, server_bytes_per_step
from labkit.data_parallel.ssp import ssp_makespan, ssp_start_times
from labkit.data_parallel.step_timing import Measured, time_ddp_steps
from labkit.dist import launch
from labkit.model import GPT, GPTConfig, batch
from labkit.table import Table

SMALL = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32)
BATCH, STEPS, LR = 24, 3, 0.5


# --------------------------------------------------------------------------- equivalence

def _train(model, rank, world, cfg, finish=None):
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        tokens, targets = batch(cfg, BATCH, seed=step)
        lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
        opt.zero_grad()
        model(tokens[lo:hi], targets[lo:hi])[1].backward()
        if finish is not None:
            finish()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _ddp_rank(rank, world, cfg, cap_mb):
    model = DDP(GPT(cfg, seed=0, dtype=torch.float64), bucket_cap_mb=cap_mb)
    return _train(model, rank, world, cfg, model.finish_gradient_synchronization)


def equivalence_table(worlds=(1, 2, 4), cap_mb: float | None = 0.004, cfg: GPTConfig = SMALL) -> Table:
    """Largest |parameter difference| after STEPS SGD steps (float64) between DDP on N ranks — each
    on 1/N of every batch of BATCH sequences — and one process on the whole batch."""
    want = _train(GPT(cfg, seed=0, dtype=torch.float64), 0, 1, cfg)
    rows = []
    for n in worlds:
        got = launch(_ddp_rank, n, cfg, cap_mb, backend="gloo", timeout=120)
        err = max((a - b).abs().max().item() for per_rank in got for a, b in zip(per_rank, want))
        rows.append((n, BATCH // n, err, err < 1e-12))
    return Table(["ranks", "sequences per rank", "max |DDP - one process|", "equal to 1e-12"], rows,
                 formats={"max |DDP - one process|": ".1e"},
                 title=f"{STEPS} SGD steps, float64, bucket cap {cap_mb} MiB")


def _pytorch_buckets_rank(rank, world, cfg, cap_mb):
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(GPT(cfg, seed=0, dtype=torch.float64), bucket_cap_mb=cap_mb)
    for step in range(3):                         # PyTorch rebuilds its buckets in step 2, logs them in 3
        model.zero_grad()
        model(*batch(cfg, 2, seed=step))[1].backward()
    data = model._get_ddp_logging_data()
    return [[int(i) for i in b.split()] for b in data["rebuilt_per_bucket_param_indices"].split(",")]


def bucket_table(cfg: GPTConfig = SMALL, cap_mb: float = 0.004) -> Table:
    """Our buckets (closing order; member names, bytes) and whether PyTorch's DDP forms the same set."""
    model = GPT(cfg, dtype=torch.float64)
    names = [n for n, _ in model.named_parameters()]
    params = list(model.parameters())
    ours = assign_buckets(params, cap_bytes_of(cap_mb))
    theirs = launch(_pytorch_buckets_rank, 2, cfg, cap_mb, backend="gloo", timeout=60)[0]
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


# --------------------------------------------------------------------------- overlap

def measure_overlap(cfg: GPTConfig, batch_per_rank: int = 8, cap_mb: float = 1.0, world: int = 2,
                    steps: int = 5) -> Measured:
    """Every variant timed on ``world`` real gloo ranks (see `step_timing.time_ddp_steps`)."""
    return launch(time_ddp_steps, world, cfg, batch_per_rank, cap_mb, steps, backend="gloo", timeout=300)[0]


def comm_times(m: Measured, bucketed: bool) -> list[float]:
    """Measured all-reduce seconds of each bucket (or each parameter), in the order they become ready."""
    if bucketed:
        return [m.comm[sum(m.nbytes[i] for i in b)] for b in m.buckets]
    return [m.comm[n] for n in reversed(m.nbytes)]


def overlap_table(m: Measured) -> Table:
    """Measured step parts (ms) of each variant next to the model's prediction from the parts
    measured alone: naive T_fwd + T_bwd + ΣT_comm; overlapped T_fwd + max(T_bwd, T_comm − t_last) + t_last."""
    rows = []
    for name, v in m.variants.items():
        comm = comm_times(m, name == "bucketed")
        pred = naive_step_time(m.fwd, m.bwd, comm) if name == "naive" else overlap_step_time(m.fwd, m.bwd, comm)
        rows.append((name, len(v.events), v.fwd * 1e3, v.bwd * 1e3, v.wait * 1e3, v.step * 1e3, sum(comm) * 1e3,
                     pred * 1e3, v.step / pred))
    return Table(["variant", "all-reduces", "fwd", "bwd", "wait after", "step", "T_comm alone", "model",
                  "measured/model"], rows, formats={k: ".1f" for k in ("fwd", "bwd", "wait after", "step",
                                                                       "T_comm alone", "model")}
                 | {"measured/model": ".2f"},
                 title=f"{m.world} ranks, ms; compute alone: fwd {m.fwd * 1e3:.1f}, bwd {m.bwd * 1e3:.1f}")


def fitted_alpha_beta(m: Measured) -> tuple[float, float]:
    """(α s, β s/byte) fitted (Lab 05's fit, ring all-reduce model) to the all-reduce times measured alone."""
    return fit_alpha_beta([("ring_all_reduce", m.world, n, t) for n, t in m.comm.items()])


# --------------------------------------------------------------------------- parameter server

def ps_compare(workers: int = 3, steps: int = 20, compute_s: float = 0.004, straggler_s: float = 0.008,
               staleness: int = 2, lr: float = 0.05):
    """BSP, ASP and SSP(staleness) on a real parameter server, worker 1 slowed by ``straggler_s``
    per iteration. Returns (Table, {name: PSResult}); the table puts each run's wall time next to
    the clock rule's prediction from the iteration times alone (`ssp_makespan`)."""
    durations = [[compute_s + (straggler_s if k == 0 else 0.0)] * steps for k in range(workers)]
    runs = {"BSP": ("bsp", 0, 0), "ASP": ("asp", 0, None), f"SSP s={staleness}": ("ssp", staleness, staleness)}
    results, rows = {}, []
    for name, (mode, s, rule) in runs.items():
        cfg = PSConfig(mode=mode, staleness=s, steps=steps, lr=lr, compute_s=compute_s,
                       stragglers={1: straggler_s})
        r = run(cfg, workers)
        results[name] = r
        waits = [r.wait_s[k] for k in sorted(r.wait_s)]
        rows.append((name, r.seconds, ssp_makespan(durations, rule), max(r.staleness),
                     sum(r.staleness) / len(r.staleness), r.loss[-1], waits[-1]))
    return Table(["run", "seconds", "clock rule", "max staleness", "mean staleness", "final loss",
                  "fast worker waited (s)"], rows,
                 formats={"seconds": ".3f", "clock rule": ".3f", "mean staleness": ".2f", "final loss": ".2e",
                          "fast worker waited (s)": ".3f"},
                 title=f"{workers} workers x {steps} iterations of {compute_s * 1e3:g} ms; "
                       f"worker 1 +{straggler_s * 1e3:g} ms each"), results


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


# --------------------------------------------------------------------------- check your work

def bucket_picture(fn, cfg: GPTConfig = SMALL, caps=(1, 2000, 6000, 10**9)) -> Table:
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


def hooks_picture(fn, cfg: GPTConfig = SMALL, world: int = 2):
    """Your ``data_parallel_hooks`` training the small GPT on 2 real ranks vs one process."""
    from labkit.dist import RankError

    want = _train(GPT(cfg, seed=0, dtype=torch.float64), 0, 1, cfg)
    try:
        got = launch(_hooks_rank, world, fn, cfg, backend="gloo", timeout=60, quiet=True)
    except RankError as e:
        if e.exc_type == "NotImplementedError":
            raise NotImplementedError("data_parallel_hooks") from None
        raise
    err = max((a - b).abs().max().item() for per_rank in got for a, b in zip(per_rank, want))
    print(f"your hooks on {world} ranks, {STEPS} SGD steps: max |difference from one process| = {err:.1e}: "
          f"{'equal' if err < 1e-12 else 'DIFFERENT'} (to 1e-12)")
    return err


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


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab06_data_parallel.py."""
    return {"bucket_indices": bucket_picture, "data_parallel_hooks": hooks_picture,
            "ssp_start_times": ssp_picture}[exercise]
