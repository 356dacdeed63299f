"""The Lab 08 notebook's one-liners, and its "check your work" pictures.

    zero_bubble_makespan(p, m, v, TF, TI, TW)   the zero-bubble step, with per-stage (per-rank) times
    zero_bubble_table(cases)                    that formula next to the simulator
    peak_table(p, m, v)                         activation sets in flight per rank, per schedule
    executor_table(cases)                       real ranks vs one process vs torch.distributed.pipelining
    training_table(kind, p, m, steps)           a pipeline trained for several SGD steps vs one process
    measure(kind, cfg)                          a timed real step next to the simulator fed its times
    picture(exercise)                           a learner's function drawn the way the lab draws ours

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass
from fractions import Fraction

import torch

from labkit.table import Table
from labkit.pipeline.schedules import ScheduleError, check_schedule, normalized, schedule
from labkit.pipeline.simulate import SimResult, time_schedule

WIDTH = 100


def wrap(text: str) -> str:
    """``text`` wrapped to lines of at most 100 characters (for long error messages)."""
    return "\n".join(textwrap.wrap(str(text), WIDTH, subsequent_indent="  "))


# --------------------------------------------------------------------------- zero bubble

def zero_bubble_makespan(p: int, m: int, v: int, TF, TI, TW) -> Fraction:
    """Step time of `interleaved_zb` (m >= p): m(TF+TI+TW) + (p-1)(TF+TI-TW)/v, exact.

    TF, TI, TW are *per-stage* times in the sense of one rank's whole share of the model (all
    its v virtual stages together); each virtual stage takes TF/v, TI/v, TW/v. Needs
    TW <= TF and TW <= TI. In per-virtual-stage times tF = TF/v, ...: v·m(tF+tI+tW) + (p-1)(tF+tI-tW).
    """
    TF, TI, TW = Fraction(TF), Fraction(TI), Fraction(TW)
    return m * (TF + TI + TW) + Fraction(p - 1) * (TF + TI - TW) / v


def simulate_zero_bubble(p: int, m: int, v: int, TF, TI, TW) -> SimResult:
    """Simulate `interleaved_zb` with per-rank-share times TF, TI, TW (each virtual stage: 1/v of them)."""
    TF, TI, TW = Fraction(TF), Fraction(TI), Fraction(TW)
    return time_schedule(schedule("interleaved_zb", p, m, v), TF / v, (TI + TW) / v, weight_time=TW / v)


def zero_bubble_table(cases) -> Table:
    """Per (p, m, v, TF, TI, TW): simulated step, the formula with per-stage times, and the same
    formula misread with per-virtual-stage times (TF/v, ... plugged into m(·) + (p-1)(·)/v)."""
    rows = []
    for p, m, v, TF, TI, TW in cases:
        sim = simulate_zero_bubble(p, m, v, TF, TI, TW).makespan
        right = zero_bubble_makespan(p, m, v, TF, TI, TW)
        tF, tI, tW = (Fraction(x) / v for x in (TF, TI, TW))
        misread = m * (tF + tI + tW) + Fraction(p - 1) * (tF + tI - tW) / v
        rows.append((p, m, v, f"{TF}/{TI}/{TW}", sim, right, sim == right, misread))
    return Table(["p", "m", "v", "TF/TI/TW", "simulated", "per-stage formula", "equal",
                  "per-virtual-stage misread"], rows)


# --------------------------------------------------------------------------- memory

def peak_table(p: int = 4, m: int = 8, v: int = 2) -> Table:
    """Peak activation sets in flight per rank (forward start to backward / W end), and the largest
    peak in units of a rank's share of the model (a set is 1/v of a share), for 1F1B, interleaved
    1F1B with v = 1 and with v, and interleaved zero bubble with v. Forward 1/v, backward 2/v
    (zero bubble: I 1/v + W 1/v)."""
    runs = [("1f1b", 1, time_schedule(schedule("1f1b", p, m), 1, 2)),
            ("interleaved_1f1b", 1, time_schedule(schedule("interleaved_1f1b", p, m, 1), 1, 2)),
            ("interleaved_1f1b", v, time_schedule(schedule("interleaved_1f1b", p, m, v), Fraction(1, v),
                                                  Fraction(2, v))),
            ("interleaved_zb", v, time_schedule(schedule("interleaved_zb", p, m, v), Fraction(1, v), Fraction(2, v),
                                           weight_time=Fraction(1, v)))]
    rows = []
    for kind, vv, r in runs:
        peaks = [r.peak_inflight[k] for k in range(p)]
        rows.append((kind, vv, peaks, max(peaks), str(Fraction(max(peaks), vv)), str(r.makespan)))
    return Table(["schedule", "v", "peak sets per rank", "max", "max in rank-shares", "makespan"], rows)


# --------------------------------------------------------------------------- the real executor

EXECUTOR_CASES = (("gpipe", 4, 4, 1), ("1f1b", 4, 6, 1), ("interleaved_1f1b", 2, 4, 2), ("interleaved_zb", 2, 4, 2))


def executor_table(cases=EXECUTOR_CASES) -> Table:
    """Each schedule on real gloo ranks (float64 MLP): loss, and whether loss and gradients equal
    one process's full-batch step and PyTorch's torch.distributed.pipelining step (to 1e-12)."""
    from labkit.pipeline.executor import MLPConfig, reference_step, run_pipeline
    from labkit.pipeline.torch_ref import torch_step

    rows = []
    for kind, p, m, v in cases:
        cfg = MLPConfig(num_stages=p * v, num_microbatches=m, width=16, batch=4 * m)
        run = run_pipeline(schedule(kind, p, m, v), cfg)
        loss, grads = reference_step(cfg)
        err = max((a - b).abs().max().item() for s in range(cfg.num_stages) for a, b in zip(run.grads[s], grads[s]))
        lt, gt, _ = torch_step(kind, cfg, num_ranks=p)
        err_t = max((a - b).abs().max().item() for s in range(cfg.num_stages) for a, b in zip(run.grads[s], gt[s]))
        rows.append((kind, p, m, v, round(run.loss, 10), abs(loss - run.loss) < 1e-12 and err < 1e-12,
                     abs(lt - run.loss) < 1e-12 and err_t < 1e-12))
    return Table(["schedule", "p", "m", "v", "loss", "= one process", "= PyTorch"], rows,
                 formats={"loss": ".10f"})


def _train_rank(rank, world, kind, cfg, steps, lr):
    """``steps`` SGD steps of ``schedule(kind, world, m)`` on this rank's stages: each step runs the
    schedule (`executor.run_step`) on that step's batch, then updates the rank's own stages.
    Returns ({stage: parameters after training}, [loss per step] on the last stage's rank)."""
    import torch.distributed as dist

    from labkit.pipeline.executor import build_stages, run_step

    stages = build_stages(cfg)
    mine = {s: stages[s] for s in range(cfg.num_stages) if s % world == rank}
    params = [p for m in mine.values() for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    actions = schedule(kind, world, cfg.num_microbatches)[rank]
    rows, losses = cfg.microbatch_rows(), []
    for step in range(steps):
        x, y = _step_batch(cfg, step)
        opt.zero_grad(set_to_none=True)
        rec = run_step(actions, mine, cfg.num_stages, cfg.num_microbatches,
                       list(x.split(rows)) if 0 in mine else None,
                       list(y.split(rows)) if cfg.num_stages - 1 in mine else None, (rows, cfg.width), cfg.dtype)
        opt.step()
        if rec.losses:
            losses.append(sum(rec.losses.values()) / len(rec.losses))
        dist.barrier()
    return {s: [p.detach().clone() for p in m.parameters()] for s, m in mine.items()}, losses


def _step_batch(cfg, step: int):
    """(inputs, targets) of training step ``step``: fresh inputs, and as targets what a "teacher"
    MLP of the same shape (another seed) makes of them — something the pipeline can learn."""
    import dataclasses

    from labkit.pipeline.executor import build_stages

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(cfg.batch, cfg.width, generator=g, dtype=cfg.dtype)       # (batch, width)
    y = x
    with torch.no_grad():
        for stage in build_stages(dataclasses.replace(cfg, seed=cfg.seed + 7)):
            y = stage(y)
    return x, y


def training_table(kind: str = "gpipe", p: int = 4, m: int = 4, steps: int = 10, lr: float = 0.5) -> Table:
    """Train the executor's MLP for ``steps`` SGD steps with ``kind`` on ``p`` gloo ranks (``m``
    microbatches a step), and the same MLP in one process on whole batches: the loss at each step
    of both, and the largest parameter difference at the end (float64)."""
    from labkit.dist import launch
    from labkit.pipeline.executor import MLPConfig, build_stages, loss_fn

    cfg = MLPConfig(num_stages=p, num_microbatches=m, width=16, batch=4 * m)
    out = launch(_train_rank, p, kind, cfg, steps, lr, backend="gloo", timeout=120, quiet=True)
    piped = {s: ps for params, _ in out for s, ps in params.items()}
    losses = next(ls for _, ls in out if ls)
    stages = build_stages(cfg)
    opt = torch.optim.SGD([q for st in stages for q in st.parameters()], lr=lr)
    ref = []
    for step in range(steps):
        x, y = _step_batch(cfg, step)
        opt.zero_grad(set_to_none=True)
        for st in stages:
            x = st(x)
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()
        ref.append(loss.item())
    diff = max((a - b.detach()).abs().max().item() for s, st in enumerate(stages) for a, b in zip(piped[s], st.parameters()))
    rows = [(k + 1, a, b) for k, (a, b) in enumerate(zip(losses, ref))]
    table = Table(["step", f"loss, {kind} on {p} ranks", "loss, one process"], rows,
                  formats={f"loss, {kind} on {p} ranks": ".6f", "loss, one process": ".6f"},
                  title=f"{steps} SGD steps (lr {lr}), {m} microbatches a step; max |param difference| at the end "
                        f"{diff:.1e}")
    table.data = {"losses": losses, "reference": ref, "max_param_diff": diff}
    return table


@dataclass
class Measured:
    """A timed real step (`run`, a PipelineRun) and the simulator fed its median stage times."""

    kind: str
    tf: list
    tb: list
    run: object
    sim: SimResult

    def lines(self) -> str:
        from labkit.pipeline.executor import measured_bubble

        p, m = len(self.tf), len({a.microbatch for tl in self.run.timeline.values() for a, _, _ in tl})
        return "\n".join([
            f"{self.kind}: forward {[round(x * 1e3, 1) for x in self.tf]} ms, "
            f"backward {[round(x * 1e3, 1) for x in self.tb]} ms per stage",
            f"  step: measured {self.run.makespan * 1e3:.1f} ms, simulated {float(self.sim.makespan) * 1e3:.1f} ms",
            f"  bubble: measured {measured_bubble(self.run.timeline):.3f}, simulated "
            f"{float(self.sim.bubble_fraction):.3f}, (p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.3f}"])


def measure(kind: str, cfg, repeats: int = 3) -> Measured:
    """Run ``kind`` (one stage per rank) for ``cfg`` on real ranks, take each stage's median forward
    and backward time from the recorded timeline, and simulate the schedule with those times."""
    from labkit.pipeline.executor import run_pipeline

    p, m = cfg.num_stages, cfg.num_microbatches
    run = run_pipeline(schedule(kind, p, m), cfg, repeats=repeats)

    def median(st, k):
        return statistics.median([e - s for tl in run.timeline.values() for a, s, e in tl
                                  if a.stage == st and a.kind == k])

    tf, tb = [median(st, "F") for st in range(p)], [median(st, "B") for st in range(p)]
    return Measured(kind, tf, tb, run, time_schedule(schedule(kind, p, m), tf, tb))


# --------------------------------------------------------------------------- your functions, through the lab's pictures

def _display_figure(fig) -> None:
    from IPython.display import HTML, display

    from labkit.viz.player import figure_to_html

    display(HTML(figure_to_html(fig)))


def schedule_picture(fn, p: int = 4, m: int = 8):
    """Your ``schedule_1f1b(p, m)``: checked, simulated (forward 1, backward 2) and drawn as the lab's
    Gantt chart; compared with labkit's 1F1B. Returns the SimResult (None if it cannot run)."""
    from labkit.viz import pipeline as V

    got = fn(p, m)
    try:
        sched = normalized(got)
        check_schedule(sched)
    except ScheduleError as e:
        print(wrap(f"your schedule_1f1b({p}, {m}) cannot run: {e}"))
        return None
    res = time_schedule(sched, 1, 2)
    _display_figure(V.gantt(res, f"your schedule_1f1b, p={p} m={m} (forward 1, backward 2)"))
    want = schedule("1f1b", p, m)
    print(f"same order as 1F1B on every rank: {sched == want} | makespan {res.makespan} "
          f"(1F1B: (m+p-1)·3 = {(m + p - 1) * 3})")
    print(f"peak activation sets per rank: {[res.peak_inflight[r] for r in range(p)]} "
          f"(1F1B: p - r = {[p - r for r in range(p)]})")
    return res


BUBBLE_CASES = ((4, 1, 1), (4, 8, 1), (8, 32, 1), (4, 8, 2), (2, 4, 2), (4, 16, 4))


def bubble_picture(fn, cases=BUBBLE_CASES) -> Table:
    """Your ``bubble_fraction(p, m, v)`` next to the simulator (GPipe for v = 1, interleaved 1F1B
    otherwise; forward 1/v, backward 2/v per stage) for each case; prints and returns the table."""
    rows = []
    for p, m, v in cases:
        kind = "gpipe" if v == 1 else "interleaved_1f1b"
        sim = time_schedule(schedule(kind, p, m, v), Fraction(1, v), Fraction(2, v)).bubble_fraction
        yours = fn(p, m, v)
        rows.append((p, m, v, str(yours), str(sim), yours == sim))
    table = Table(["p", "m", "v", "your bubble_fraction", "simulated", "equal"], rows)
    print(table)
    return table


SLICING_CASES = ((10, 4), (16, 4), (32, 8))


def slicing_picture(fn, cases=SLICING_CASES) -> Table:
    """Your ``optimal_slicing(L, K, cost)`` (TeraPipe, default `SliceCost`) per (L, K): the latency it
    returns, the latency of the slices it returns (the formula), the least (brute force over all
    2^(L-1) slicings for L <= 12, labkit's DP beyond) and the whole sequence's; prints and returns."""
    from labkit.pipeline import terapipe

    rows = []
    for L, K in cases:
        latency, slices = fn(L, K, terapipe.SliceCost())
        least = (terapipe.brute_force_slicing if L <= 12 else terapipe.optimal_slicing)(L, K)[0]
        theirs = terapipe.latency_formula(slices, K) if sum(slices) == L else None
        rows.append((L, K, str(latency), " ".join(map(str, slices)), str(theirs), str(least),
                     str(terapipe.latency_formula([L], K)), "yes" if latency == theirs == least else "NO"))
    table = Table(["L", "K", "your latency", "your slices", "their latency", "least", "whole", "right"], rows,
                  title="your optimal_slicing (least: brute force for L <= 12, else labkit's DP)")
    print(table)
    return table


def backward_picture(fn, timeout: float = 30.0):
    """Your ``stage_backward`` plugged into the real executor: one 1F1B step on 2 gloo ranks (float64
    MLP, 4 microbatches), its measured timeline drawn, loss and gradients vs one process."""
    from labkit.pipeline.executor import MLPConfig, reference_step, run_pipeline
    from labkit.viz import pipeline as V

    cfg = MLPConfig(num_stages=2, num_microbatches=4, width=16, batch=16)
    run = run_pipeline(schedule("1f1b", 2, 4), cfg, backward_fn=fn, timeout=timeout)
    loss, grads = reference_step(cfg)
    err = max((a - b).abs().max().item() for s in range(2) for a, b in zip(run.grads[s], grads[s]))
    _display_figure(V.gantt(run.timeline, "1F1B on 2 real ranks with your stage_backward", time_unit="seconds"))
    print(f"your stage_backward, 1F1B p=2 m=4: loss {run.loss:.10f} (one process {loss:.10f})")
    print(f"max |grad - one process's grad| = {err:.1e}: {'equal' if err < 1e-12 else 'DIFFERENT'} (to 1e-12)")
    return run


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab08_pipeline.py."""
    return {"schedule_1f1b": schedule_picture, "bubble_fraction": bubble_picture,
            "stage_backward": backward_picture, "optimal_slicing": slicing_picture}[exercise]


__all__ = ["zero_bubble_makespan", "simulate_zero_bubble", "zero_bubble_table", "peak_table", "executor_table",
           "measure", "Measured", "schedule_picture", "bubble_picture", "backward_picture", "slicing_picture",
           "picture", "wrap"]
