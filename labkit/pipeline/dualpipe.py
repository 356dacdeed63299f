"""DualPipe (DeepSeek-V3 technical report, 2024): a bidirectional pipeline with overlapped chunks.

Like Chimera, DualPipe feeds micro-batches from both ends of PP ranks, so each rank holds two
stages (model stage r for the micro-batches entering at rank 0, model stage PP-1-r for those
entering at rank PP-1): twice 1F1B's parameters. Two ideas of its own:

* **F&B**: in the steady state a rank runs the forward of one direction together with the
  backward of the other as one overlapped block, so one block's all-to-all / send time hides
  behind the other's compute. Its time, F&B, is at most F + B.
* **split backward** (as zero bubble): near the ends of the step a backward runs as I (input
  gradient, what the neighbour waits for) now and W (weight gradient) later, to fill gaps.

`dualpipe_schedule(PP, m)` replays the per-rank step list of DeepSeek's reference
implementation (github.com/deepseek-ai/DualPipe, dualpipe/dualpipe.py, `DualPipe.step`: steps
1-8, "nF0", "nF0F1", "nB1W1F1", "nF0B1F1B0", "nB1F1B0", "nB1B0", "nWB0", "nW") as plain
`Action` lists on `bidirectional_layout(PP, m)`, and `dualpipe_pairs` says which neighbouring
actions run overlapped. The simplification: data arrive the moment the action that makes them
ends (no send/receive time, no batching of sends into the next step's communication call).

`comparison_table(cases)` puts 1F1B, ZB1P (the lab's zero bubble with v = 1), Chimera and
DualPipe side by side in the simulator, next to the report's bubble formulas
(1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W), DualPipe (PP/2-1)(F&B+B-3W)) and activations
(PP, PP, PP+1 micro-batches' worth).
"""
from __future__ import annotations

from fractions import Fraction

from labkit.checks import check_int
from labkit.pipeline.chimera import (bidirectional_layout, check_placed, chimera_idle,
                                     chimera_schedule, simulate_placed)
from labkit.pipeline.schedules import Action, schedule
from labkit.pipeline.simulate import SimResult, check_seconds, time_schedule
from labkit.table import Table

__all__ = ["dualpipe_schedule", "dualpipe_pairs", "simulate_dualpipe", "report_bubble",
           "report_activations", "compare", "comparison_table", "METHODS"]

METHODS = ("1F1B", "ZB1P", "Chimera", "DualPipe")


MAX_RANKS_TIMES_MICROBATCHES = 16384   # e.g. 64 ranks x 256 micro-batches: a few seconds to simulate


def _check(fn: str, num_ranks, num_microbatches) -> tuple:
    PP = check_int(fn, "num_ranks", num_ranks, minimum=2)
    m = check_int(fn, "num_microbatches", num_microbatches, minimum=2)
    if PP % 2 or m % 2:
        raise ValueError(f"{fn}: DualPipe needs an even number of ranks and of micro-batches "
                         f"(half enter at each end), got PP={PP}, m={m}")
    if m < 2 * PP:
        raise ValueError(f"{fn}: DualPipe needs num_microbatches >= 2 * num_ranks (as the reference "
                         f"implementation), got m={m} for PP={PP}")
    if PP * m > MAX_RANKS_TIMES_MICROBATCHES:
        raise ValueError(f"{fn}: num_ranks * num_microbatches must be <= {MAX_RANKS_TIMES_MICROBATCHES} "
                         f"(the schedule is built and simulated action by action), got {PP} * {m}")
    return PP, m


class _RankProgram:
    """Rank r's action list as DualPipe's steps append to it. Phase 0 is the direction in which rank
    r sits in the first half of the pipeline (the rank's early stage), phase 1 the other."""

    def __init__(self, r: int, PP: int, m: int):
        self.r, self.PP, self.H = r, PP, m // 2
        self.half_ranks = PP // 2
        self.h = min(r, PP - 1 - r)                  # distance from the nearer end
        self.second = r >= self.half_ranks
        self.middle = self.h == self.half_ranks - 1
        self.nf, self.nb = [0, 0], [0, 0]
        self.pending_w: list[Action] = []            # split backwards still owing their W, FIFO
        self.acts: list[Action] = []
        self.pairs: list[int] = []

    def stage(self, phase: int) -> int:
        direction = phase ^ self.second              # 0: entered at rank 0, 1: entered at rank PP-1
        return self.r if direction == 0 else self.PP + (self.PP - 1 - self.r)

    def first_mb(self, phase: int) -> int:
        return 0 if phase ^ self.second == 0 else self.H

    def F(self, phase: int) -> None:
        self.acts.append(Action(self.stage(phase), "F", self.first_mb(phase) + self.nf[phase]))
        self.nf[phase] += 1

    def Bk(self, phase: int, zb: bool = False) -> None:
        i = self.first_mb(phase) + self.nb[phase]
        self.nb[phase] += 1
        self.acts.append(Action(self.stage(phase), "I" if zb else "B", i))
        if zb:
            self.pending_w.append(Action(self.stage(phase), "W", i))

    def W(self) -> None:
        self.acts.append(self.pending_w.pop(0))

    def FB(self, phase_f: int, phase_b: int) -> None:   # one overlapped block: F of one, B of the other
        self.pairs.append(len(self.acts))
        self.F(phase_f)
        self.Bk(phase_b)


def _rank_steps(r: int, PP: int, m: int) -> tuple:
    """Rank r's actions and the positions of its overlapped pairs, following the reference's
    eight steps (`_warmup`: 1-3, `_steady`: 4-5, `_cooldown`: 6-8)."""
    prog = _RankProgram(r, PP, m)
    _warmup(prog)
    _steady(prog)
    _cooldown(prog)
    assert not prog.pending_w and prog.nf == [prog.H, prog.H] and prog.nb == [prog.H, prog.H]
    return prog.acts, prog.pairs


def _warmup(p: _RankProgram) -> None:
    for _ in range((p.half_ranks - p.h - 1) * 2):   # step 1: nF0
        p.F(0)
    for _ in range(p.h + 1):                        # step 2: nF0F1
        p.F(0)
        p.F(1)
    for _ in range(p.half_ranks - p.h - 1):         # step 3: nB1W1F1 (zero bubble)
        p.Bk(1, zb=True)
        p.W()
        p.F(1)


def _steady(p: _RankProgram) -> None:
    for i in range(p.H - p.PP + p.h + 1):           # step 4 (main): nF0B1F1B0
        if i == 0 and p.middle:                     # the reference does not overlap this one
            p.F(0)
            p.Bk(1)
        else:
            p.FB(0, 1)
        p.FB(1, 0)
    for _ in range(p.half_ranks - p.h - 1):         # step 5: nB1F1B0
        p.Bk(1)
        p.FB(1, 0)


def _cooldown(p: _RankProgram) -> None:
    zb = False
    for i in range(p.h + 1):                        # step 6: nB1B0, second half split
        if i == (p.h + 1) // 2 and p.h % 2 == 1:
            zb = True
        p.Bk(1, zb)
        if i == (p.h + 1) // 2 and p.h % 2 == 0:
            zb = True
        p.Bk(0, zb)
    for _ in range(p.half_ranks - p.h - 1):         # step 7: nWB0 (zero bubble)
        p.W()
        p.Bk(0, zb=True)
    for _ in range(p.h + 1):                        # step 8: nW
        p.W()


def dualpipe_schedule(num_ranks: int, num_microbatches: int) -> dict:
    """DualPipe's per-rank order on `bidirectional_layout(PP, m)` (stage r: model stage r of the
    direction entering at rank 0; stage PP + j: model stage j of the other direction, on rank
    PP-1-j). Overlapped F&B blocks are two neighbouring actions; `dualpipe_pairs` lists them."""
    PP, m = _check("dualpipe_schedule", num_ranks, num_microbatches)
    return {r: _rank_steps(r, PP, m)[0] for r in range(PP)}


def dualpipe_pairs(num_ranks: int, num_microbatches: int) -> dict:
    """{rank: positions i} such that actions i and i+1 of that rank run as one overlapped F&B."""
    PP, m = _check("dualpipe_pairs", num_ranks, num_microbatches)
    return {r: set(_rank_steps(r, PP, m)[1]) for r in range(PP)}


def simulate_dualpipe(num_ranks: int, num_microbatches: int, F, B, W, FB=None) -> SimResult:
    """Time DualPipe with forward F, full backward B, weight-gradient W (I = B - W) per chunk and
    F&B = ``FB`` per overlapped block (default F + B: overlapping saves nothing)."""
    PP, m = _check("simulate_dualpipe", num_ranks, num_microbatches)
    for name, v in (("F", F), ("B", B), ("W", W)):
        check_seconds(v, name)
    if FB is not None:
        check_seconds(FB, "FB")
    sched, pairs = dualpipe_schedule(PP, m), dualpipe_pairs(PP, m)
    layout = bidirectional_layout(PP, m)
    check_placed(sched, layout, pairs)
    return simulate_placed(sched, layout, F, B, weight_time=W, pairs=pairs, pair_time=FB)


# --------------------------------------------------------------------------- the report's table

def report_bubble(method: str, PP: int, m: int, F, B, W, FB=None):
    """The closed-form bubble (idle time of the least busy rank) of ``method``.

    1F1B (PP-1)(F+B) and ZB1P (PP-1)(F+B-2W) and DualPipe (PP/2-1)(F&B+B-3W) are the report's
    (F&B defaults to F + B). Our simulator reproduces DualPipe's exactly, on the middle ranks,
    when I = B - W equals F and W <= F (the zero-bubble papers' usual F = I setting); with
    F >= I >= W it finds (PP/2-1)(F&B+F-2W) instead. Chimera is not in the report's table; this
    gives `chimera_idle` (the paper's D-2 slots when F = B). ``m`` matters only for Chimera.
    """
    F, B, W = (Fraction(x) for x in (F, B, W))
    FB = F + B if FB is None else Fraction(FB)
    if method == "Chimera":
        return chimera_idle(PP, m, F, B)
    return {"1F1B": (PP - 1) * (F + B), "ZB1P": (PP - 1) * (F + B - 2 * W),
            "DualPipe": (Fraction(PP, 2) - 1) * (FB + B - 3 * W)}[method]


def report_activations(method: str, PP: int) -> int:
    """Activation sets per device in the report's table (1F1B and ZB1P: PP, DualPipe: PP+1);
    Chimera's paper: up to D (ranks in the middle), D/2 + 1 at the ends."""
    return {"1F1B": PP, "ZB1P": PP, "DualPipe": PP + 1, "Chimera": PP}[method]


def compare(PP: int, m: int, F, B, W, FB=None) -> dict:
    """Simulate the four methods on PP ranks and m micro-batches. Per method: the SimResult, the
    bubble = the largest idle time of a rank (makespan - its compute; with F&B < F + B DualPipe's
    ranks differ, the middle ones idle most) and the largest peak of activation sets.

    ZB1P is ``schedule("interleaved_zb", PP, m, 1)`` with W deferred; Chimera needs m a multiple
    of PP and runs F and B unsplit (its overlap is not modelled: F&B only applies to DualPipe).
    """
    fn = "compare"
    PP = check_int(fn, "PP", PP, minimum=2)
    m = check_int(fn, "m", m, minimum=1)
    F, B, W = (Fraction(check_seconds(x, n)) for x, n in ((F, "F"), (B, "B"), (W, "W")))
    if W > B:
        raise ValueError(f"{fn}: W (weight-gradient part of B) must be <= B, got W={W}, B={B}")
    runs = {"1F1B": time_schedule(schedule("1f1b", PP, m), F, B),
            "ZB1P": time_schedule(schedule("interleaved_zb", PP, m, 1), F, B, weight_time=W)}
    if m % PP == 0 and PP % 2 == 0:
        runs["Chimera"] = simulate_placed(chimera_schedule(PP, m), bidirectional_layout(PP, m), F, B)
    runs["DualPipe"] = simulate_dualpipe(PP, m, F, B, W, FB)
    out = {}
    for name, r in runs.items():
        out[name] = {"result": r, "bubble": max(r.makespan - b for b in r.busy.values()),
                     "peak": max(r.peak_inflight.values())}
    return out


def comparison_table(cases) -> Table:
    """One row per (PP, m, F, B, W, F&B) and method: simulated makespan, bubble (the largest idle
    time of a rank) next to the closed form (`report_bubble`), peak activation sets next to the
    report's, and stages (weights) per rank. F&B may be None (= F + B)."""
    rows = []
    for PP, m, F, B, W, FB in cases:
        got = compare(PP, m, F, B, W, FB)
        for name in METHODS:
            if name not in got:
                continue
            g = got[name]
            rows.append((PP, m, f"{F}/{B}/{W}/{FB if FB is not None else F + B}", name,
                         str(g["result"].makespan), str(g["bubble"]), str(report_bubble(name, PP, m, F, B, W, FB)),
                         g["peak"], report_activations(name, PP), 2 if name in ("Chimera", "DualPipe") else 1))
    return Table(["PP", "m", "F/B/W/F&B", "method", "makespan", "bubble", "formula",
                  "peak act.", "report", "stages/rank"], rows)
