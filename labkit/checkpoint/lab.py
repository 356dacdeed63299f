"""The Lab 12 notebook's one-liners, and its "check your work" pictures.

    crash_table(saves)                  each save function killed at each moment: what is left; its fsyncs
    resume_table(worlds)                stop + resume in fresh processes vs uninterrupted; each state forgotten
    failure_demo(world, steps, kill)    a rank killed mid-run, the supervisor's restart, the result
    fewer_table(world, steps, kill)     going on with one rank less: batch, learning rate, losses
    torchrun_demo(world, steps, fail)   the same under torchrun --max-restarts
    picture(exercise)                   a learner's function next to the lab's measurement

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from labkit.checkpoint import io
from labkit.checkpoint.experiments import CRASH_POINTS, crash_test, resume_experiment
from labkit.checkpoint.failures import continue_on_fewer, smaller, supervise
from labkit.checkpoint.resume import FORGETTABLE, RunConfig, train
from labkit.checkpoint.state import equal_state
from labkit.dist import RankError, launch
from labkit.table import Table

RUN = RunConfig()
ROOT = Path(__file__).resolve().parents[2]


def compare_runs(full: dict, resumed: dict) -> dict:
    """A resumed run (`train`'s result) against the uninterrupted one, bit for bit: the parameters,
    the optimizer's state (moments, step counts, learning rates), and the loss of every step the
    resumed process computed itself (steps ``resumed_from + 1`` on; the earlier losses came from
    the checkpoint and prove nothing). "first": the first of those steps whose loss differs."""
    start = resumed["resumed_from"]
    mine, theirs = resumed["losses"][start:], full["losses"][start:len(resumed["losses"])]
    first = next((start + k + 1 for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
    out = {"params": equal_state(full["params"], resumed["params"]),
           "optimizer": equal_state(full["optimizer"], resumed["optimizer"]),
           "losses": len(mine) > 0 and mine == theirs, "recomputed": len(mine), "first": first}
    out["same"] = out["params"] and out["optimizer"] and out["losses"]
    return out


def _in_place(data: bytes, path: str) -> None:
    """The common mistake: open the checkpoint's own name and write."""
    with open(path, "wb") as f:
        f.write(data)


def _no_fsync(data: bytes, path: str) -> None:
    """Temp file + rename with no fsync at all: whole after any kill, not after a power cut."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".labkit-", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _labkit_save(data: bytes, path: str) -> None:
    """labkit's atomic write, fed raw bytes (the checkpoint format's header and checksum aside)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".labkit-", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    io._fsync_dir(Path(folder))


SAVES = {"in place": _in_place, "temp + rename, no fsync": _no_fsync, "temp + fsync + rename": _labkit_save}


def crash_table(saves: dict | None = None, size: int = 1 << 16) -> Table:
    """Each save function (name -> fn(data, path)) killed before its first byte, half way, after its
    last byte and just before a rename, over an old file: what each leaves at the path. Then, left
    to finish, whether it fsync-ed the new file whole before the rename and the folder after it
    (`crash_test`): what a kill cannot show, since a killed process's writes survive it."""
    saves = saves or SAVES
    old, new = b"o" * size, b"n" * (size + 1)
    points = CRASH_POINTS[1:]
    rows = []
    for name, fn in saves.items():
        *found, done = crash_test(fn, [(old, new, p) for p in points] + [(old, new, "none")])
        yes = lambda flag: "yes" if flag else "NO"  # noqa: E731
        rows.append([name] + [f["found"] for f in found] + [done["found"], yes(done["fsync_file"]),
                                                             yes(done["fsync_dir"])])
    return Table(["save", *points, "finished", "fsync file", "fsync folder"], rows,
                 title=f"old file {size} B, new {size + 1} B: what is at the path when killed at...; "
                       "left to finish")


def resume_table(worlds=(1, 2), steps: int = 8, stop: int = 4) -> Table:
    """Stop after ``stop`` steps, resume in fresh processes, finish ``steps``: equal to the
    uninterrupted run (`compare_runs`: parameters, optimizer state, and the losses the resumed
    processes computed), on every rank? On each of ``worlds``; then, on the first, with one state
    left out at a time."""
    rows = []
    yes = lambda flag: "equal" if flag else "DIFFER"  # noqa: E731
    for world in worlds:
        full = launch(train, world, RUN, steps, quiet=True)
        for forget in ((), *((f,) for f in FORGETTABLE)) if world == worlds[0] else ((),):
            with tempfile.TemporaryDirectory(prefix="labkit-resume-") as folder:
                launch(train, world, RUN, steps, folder, False, stop, quiet=True)
                res = launch(train, world, RUN, steps, folder, True, None, None, forget, quiet=True)
            cmp = [compare_runs(full[r], res[r]) for r in range(world)]
            firsts = [c["first"] for c in cmp if c["first"] is not None]
            rows.append((world, "nothing" if not forget else forget[0], yes(all(c["params"] for c in cmp)),
                         yes(all(c["optimizer"] for c in cmp)), yes(all(c["losses"] for c in cmp)),
                         min(firsts) if firsts else "-"))
    return Table(["ranks", "left out", "parameters", "optimizer state", f"losses {stop + 1}-{steps}",
                  "first loss that differs"], rows,
                 title=f"{steps} steps; stopped after {stop}; resumed in fresh processes; every rank vs the "
                       "uninterrupted run")


def failure_demo(world: int = 4, steps: int = 10, kill: tuple = (2, 7)):
    """A rank SIGKILLed after a step; the supervisor restarts; prints its log. Returns the
    `Supervised` record and rank 0's `compare_runs` against the uninterrupted run."""
    full = launch(train, world, RUN, steps, quiet=True)[0]
    with tempfile.TemporaryDirectory(prefix="labkit-fail-") as folder:
        run = supervise(world, RUN, steps, folder, kill=kill)
    for line in run.log:
        print(line)
    return run, compare_runs(full, run.result)


def fewer_table(world: int = 4, steps: int = 12, kill: tuple = (3, 5)) -> Table:
    """The global loss (the whole batch's: the mean over the ranks) of the uninterrupted run on
    ``world`` ranks, next to the run that lost a rank after step ``kill[1]`` and went on with
    ``world − 1`` from the last checkpoint (batch and learning rate scaled: `smaller`). Up to that
    checkpoint the second run's losses are those its first, killed, attempt saved."""
    full = launch(train, world, RUN, steps, quiet=True)[0]
    with tempfile.TemporaryDirectory(prefix="labkit-fewer-") as folder:
        run = continue_on_fewer(world, RUN, steps, folder, kill=kill)
    less = smaller(RUN, world, world - 1)
    start = run.result["resumed_from"]
    rows = [(k + 1, world if k < start else world - 1, a, b)
            for k, (a, b) in enumerate(zip(full["global_losses"], run.result["global_losses"]))]
    return Table(["step", "ranks", f"global loss, {world} ranks", "global loss, lost one"], rows,
                 formats={f"global loss, {world} ranks": ".4f", "global loss, lost one": ".4f"},
                 title=f"{run.log[0]}; resumed from step {start}; batch {RUN.batch} -> {less.batch}, "
                       f"lr {RUN.lr:g} -> {less.lr:g}")


def torchrun_command(world: int, steps: int, folder: str, out: str, fail: tuple | None) -> list[str]:
    """The command line that runs `labkit.checkpoint.elastic` under torchrun on this machine."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    cmd = [torchrun, "--standalone", "--nproc-per-node", str(world), "--max-restarts", "3",
           "-m", "labkit.checkpoint.elastic", "--folder", folder, "--steps", str(steps), "--out", out]
    return cmd + (["--fail", str(fail[0]), str(fail[1])] if fail else [])


def torchrun_demo(world: int = 2, steps: int = 6, fail: tuple = (1, 3)):
    """Run the training under torchrun with a rank killed in the first attempt; prints the restarts.
    Returns what rank 0 wrote (`train`'s result and "attempt") and its `compare_runs` against the
    uninterrupted run."""
    with tempfile.TemporaryDirectory(prefix="labkit-torchrun-") as folder:
        out = os.path.join(folder, "final.pt")
        done = subprocess.run(torchrun_command(world, steps, os.path.join(folder, "ckpt"), out, fail), cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
        if done.returncode != 0:
            raise RuntimeError(f"torchrun_demo: torchrun exited {done.returncode}: {done.stderr.strip()[-300:]}")
        final = torch.load(out)
    full = launch(train, world, RUN, steps, quiet=True)[0]
    print(f"torchrun: {final['attempt']} restart(s); the last attempt resumed from step {final['resumed_from']}")
    return final, compare_runs(full, final)


def overwrite_demo(size: int = 1000) -> dict:
    """A DCP save with ``overwrite=True`` into the folder of an older checkpoint, killed (in a forked
    child) as it opens its second data file: the old ``.metadata`` is still there, next to one data
    file already rewritten. Both checkpoints hold {"a": (size,), "b": (size,)}, one item per file;
    the old one is all 1s, the new all 2s. Returns {"files": names left, "a", "b": the value each
    tensor loads with, "error": what loading said (None: nothing)}."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import filesystem

    def save(value: float, folder: str) -> None:
        state = {"a": torch.full((size,), value), "b": torch.full((size,), value)}
        writer = dcp.FileSystemWriter(folder, single_file_per_rank=False, sync_files=True, overwrite=True)
        dcp.save(state, storage_writer=writer, no_dist=True)

    with tempfile.TemporaryDirectory(prefix="labkit-overwrite-") as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(1.0, folder)
        pid = os.fork()
        if pid == 0:                                    # the second save, killed mid-way
            try:
                real, opened = filesystem.FileSystem.create_stream, []

                def create_stream(self, path, mode):
                    if str(path).endswith(".distcp") and opened:
                        os._exit(9)
                    opened.append(path)
                    return real(self, path, mode)

                filesystem.FileSystem.create_stream = create_stream
                save(2.0, folder)
            finally:
                os._exit(3)
        os.waitpid(pid, 0)
        state, error = {"a": torch.zeros(size), "b": torch.zeros(size)}, None
        try:
            dcp.load(state, storage_reader=dcp.FileSystemReader(folder), no_dist=True)
        except Exception as e:  # noqa: BLE001 - what loading says is the result
            error = f"{type(e).__name__}: {e}"
        values = {k: sorted(set(v.tolist())) for k, v in state.items()}
        return {"files": sorted(os.listdir(folder)), **values, "error": error}


# ---------------------------------------------------------------------- check your work
def atomic_save_picture(fn):
    """Your ``atomic_save`` killed at each moment, next to writing in place."""
    table = crash_table({"yours": fn, "in place": _in_place})
    print(table)
    return table


def resume_picture(fn):
    """A run handed over through your ``resume_state`` to a fresh, differently seeded process."""
    runs = resume_experiment(fn)
    differ = [n for n in runs["whole"] if not torch.equal(runs["whole"][n], runs["resumed"][n])]
    print(f"resumed with your resume_state: {len(differ)} of {len(runs['whole'])} parameters differ from the "
          "uninterrupted run" + ("" if differ else " (bit-identical)"))
    return differ


def young_picture(fn):
    """Your ``young_interval`` for a few (C, M), next to √(2CM) and to Daly's and the exact optimum."""
    from labkit.checkpoint.interval import daly_interval, exact_interval

    rows = []
    for c, m in ((60.0, 15768.0), (300.0, 6 * 3600.0), (300.0, 900.0)):
        rows.append((c, m / 3600, fn(c, m) / 60, math.sqrt(2 * c * m) / 60, daly_interval(c, m) / 60,
                     exact_interval(c, m) / 60))
    table = Table(["C s", "M h", "yours min", "√(2CM) min", "Daly min", "exact min"], rows,
                  formats={k: ".2f" for k in ("M h", "yours min", "√(2CM) min", "Daly min", "exact min")})
    print(table)
    return table


def simulate_picture(fn):
    """Your ``simulate_wall_time`` next to the closed form and labkit's simulator."""
    from labkit.checkpoint.interval import expected_wall_time, simulate_job

    job = (4 * 3600.0, 1200.0, 60.0, 300.0, 3 * 3600.0)
    mean, se = fn(*job, 1000, 0)
    ref = simulate_job(*job, runs=1000, seed=0)
    want = expected_wall_time(*job).wall_s
    table = Table(["", "mean wall s", "standard error s"],
                  [("yours", mean, se), ("labkit's simulator", ref.wall_mean_s, ref.wall_se_s),
                   ("closed form", want, 0.0)], formats={"mean wall s": ".0f", "standard error s": ".1f"},
                  title="4 h of work, τ = 20 min, C = 1 min, R = 5 min, M = 3 h; 1000 runs")
    print(table)
    return table


def abft_picture(fn):
    """Your ``abft_locate`` on a corrupted 6×5 product, and on a clean one."""
    from labkit.checkpoint.abft import abft_matmul, inject

    gen = torch.Generator().manual_seed(3)
    p = abft_matmul(torch.randn(6, 4, generator=gen, dtype=torch.float64),
                    torch.randn(4, 5, generator=gen, dtype=torch.float64))
    rows = [("clean", fn(p.full, 1e-9), None)]
    for i, j in ((2, 3), (5, 0)):
        rows.append((f"+1.0 at {(i, j)}", fn(inject(p, i, j, 1.0).full, 1e-9), (i, j)))
    table = Table(["product", "your answer", "right answer"], rows)
    print(table)
    return table


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab12_fault_tolerance.py."""
    return {"atomic_save": atomic_save_picture, "resume_state": resume_picture, "young_interval": young_picture,
            "simulate_wall_time": simulate_picture, "abft_locate": abft_picture, "peer_ranks": peer_picture}[exercise]


# ---------------------------------------------------------------------- beyond one checkpoint (section 10)
HOUR_S = 3600.0


def tiers_demo(world: int = 4, per_node: int = 2, steps: int = 8, fail: tuple = (1, 7), disk_every: int = 4,
               peers=None):
    """Train with memory, peer and disk tiers (`hierarchical.train_tiered`), kill rank ``fail[0]``
    after step ``fail[1]``, lose what each failure kind loses (`hierarchical.lose`), and resume.
    Returns (Table, timings): per failure kind, the folders lost, the tier each rank resumed from,
    the step, the steps done again — next to a disk-only scheme, which resumes from the last disk
    checkpoint — and whether every rank's result equals the uninterrupted run's bit for bit; timings
    {kind: restore seconds per rank}, plus "stall" (seconds per step of snapshot and peer copy)
    and "persist" (seconds per background disk write), both from the first attempt."""
    from collections import Counter

    from labkit.checkpoint import hierarchical as H

    full = launch(train, world, RUN, steps, quiet=True)
    rows, timings = [], {}
    for kind in ("process", "node", "job"):
        with tempfile.TemporaryDirectory(prefix="labkit-tiers-") as folder:
            layout = H.make_layout(world, per_node, folder, peers)
            try:
                try:
                    launch(H.train_tiered, world, RUN, steps, layout, disk_every, False, fail, backend="gloo",
                           quiet=True, timeout=120)
                    raise RuntimeError("tiers_demo: no rank died")
                except RankError as e:
                    if e.exc_type != "RankDied":
                        raise
                gone = H.lose(layout, kind, fail[0])
                res = launch(H.train_tiered, world, RUN, steps, layout, disk_every, True, backend="gloo",
                             quiet=True, timeout=120)
            finally:
                H.remove(layout)
        rec = [r["recovery"] for r in res]
        used = Counter(r["tier"] for r in rec)
        step = rec[0]["step"]
        disk_only = fail[1] - 1 - (fail[1] - 1) % disk_every        # the last disk checkpoint before the failure
        rows.append((kind, ", ".join(gone) or "-", ", ".join(f"{t} x{n}" for t, n in sorted(used.items())), step,
                     fail[1] - step, fail[1] - disk_only,
                     "yes" if all(compare_runs(full[k], r)["same"] for k, r in enumerate(res)) else "NO"))
        timings[kind] = [r["seconds"] for r in rec]
        if kind == "process":
            timings["stall"] = [s for r in res for s in r["stall_s"]]
            timings["persist"] = [s for r in res for s in r["persist_s"]]
    table = Table(["failure", "memory lost", "ranks resumed from", "step", "redone", "disk only: redone",
                   "= uninterrupted"], rows,
                  title=f"{world} ranks on {world // per_node} nodes, memory + peer copy every step, disk every "
                        f"{disk_every}; rank {fail[0]} dies after step {fail[1]}")
    return table, timings


def scenario():
    """The multi-level example (assumptions, not measurements): failures of a process every 3 h,
    of a node every 12 h, of every node's memory every 48 h; checkpoints to memory (1 s, restart
    60 s), to a peer (5 s, restart 90 s), to disk (120 s, restart 300 s)."""
    from labkit.checkpoint.multilevel import Failure, Level

    levels = (Level("memory", 1, 1.0, 60.0), Level("peer", 4, 5.0, 90.0), Level("disk", 40, 120.0, 300.0))
    kinds = (Failure("process", 3 * HOUR_S, ("memory", "peer", "disk")), Failure("node", 12 * HOUR_S, ("peer", "disk")),
             Failure("job", 48 * HOUR_S, ("disk",)))
    return levels, kinds


def multilevel_table(work_h: float = 24.0, finest_s: float = 150.0, runs: int = 2000, seed: int = 0) -> Table:
    """Expected wall time of ``work_h`` hours of work (`scenario`): disk only at Daly's interval —
    Lab 12's closed form and its simulator (`interval.simulate_job`), and the multi-level simulator
    with that one level — then memory + disk and memory + peer + disk at ``finest_s`` seconds
    (the peer every 4, the disk every 40 intervals: near each level's Young interval). Wall times
    in hours; "first order": work × (1 + `multilevel.first_order_waste`)."""
    from labkit.checkpoint.interval import daly_interval, expected_wall_time, simulate_job
    from labkit.checkpoint.multilevel import Failure, Level, first_order_waste, simulate_multilevel

    levels, kinds = scenario()
    work = work_h * HOUR_S
    mtbf = 1 / sum(1 / k.mtbf_s for k in kinds)
    disk = levels[2]
    tau = daly_interval(disk.cost_s, mtbf)
    closed = expected_wall_time(work, tau, disk.cost_s, disk.restart_s, mtbf).wall_s
    lab12 = simulate_job(work, tau, disk.cost_s, disk.restart_s, mtbf, runs=runs, seed=seed)
    one = (Level("disk", 1, disk.cost_s, disk.restart_s),)
    anyk = (Failure("any", mtbf, ("disk",)),)
    rows = [("disk only, closed form", f"{tau:.0f}", closed / HOUR_S, 0.0, closed / HOUR_S),
            ("disk only, Lab 12 simulator", f"{tau:.0f}", lab12.wall_mean_s / HOUR_S, lab12.wall_se_s / HOUR_S,
             work * (1 + first_order_waste(tau, one, anyk)) / HOUR_S)]
    sim = simulate_multilevel(work, tau, one, anyk, runs=runs, seed=seed + 1)
    rows.append(("disk only, multi-level simulator", f"{tau:.0f}", sim.wall_mean_s / HOUR_S, sim.wall_se_s / HOUR_S,
                 rows[-1][4]))
    two = (levels[0], Level("disk", 40, disk.cost_s, disk.restart_s))
    for name, lv in (("memory + disk", two), ("memory + peer + disk", levels)):
        names = {l.name for l in lv}
        kk = tuple(Failure(k.name, k.mtbf_s, tuple(s for s in k.survives if s in names)) for k in kinds)
        sim = simulate_multilevel(work, finest_s, lv, kk, runs=runs, seed=seed + 2)
        every = "/".join(f"{l.every * finest_s:.0f}" for l in lv)
        rows.append((name, every, sim.wall_mean_s / HOUR_S, sim.wall_se_s / HOUR_S,
                     work * (1 + first_order_waste(finest_s, lv, kk)) / HOUR_S))
    return Table(["scheme", "intervals s", "wall h", "+- h", "first order h"], rows,
                 formats={"wall h": ".2f", "+- h": ".2f", "first order h": ".2f"},
                 title=f"{work_h:g} h of work; failures: process 3 h, node 12 h, job 48 h; {runs} runs a scheme")


def pipeline_components():
    """The selective-replication example (assumptions): an embedding stage on 4 large-memory hosts
    whose restart reloads 1 TB of tables (30 min), and three transformer stages of 4 GPU nodes each
    (restart 5 min); every machine fails once a month on average."""
    from labkit.checkpoint.multilevel import Component

    month = 30 * 24 * HOUR_S
    return (Component("embedding", 4, month, 1800.0),) + tuple(
        Component(f"stage {k}", 4, month, 300.0) for k in (1, 2, 3))


def replication_table(interval_s: float = HOUR_S, checkpoint_s: float = 120.0, failover_s: float = 30.0) -> Table:
    """Waste (first order, `multilevel.replication_cost`) replicating no stage, one stage, or all
    of `pipeline_components`: extra machines, the wasted share of the wall time per unit of work,
    and the waste each extra machine removes."""
    from labkit.checkpoint.multilevel import replication_cost

    comps = pipeline_components()
    names = [c.name for c in comps]
    base = replication_cost(comps, (), interval_s, checkpoint_s, failover_s)
    rows = []
    for chosen in [()] + [(n,) for n in names] + [tuple(names)]:
        cost = replication_cost(comps, chosen, interval_s, checkpoint_s, failover_s)
        extra = cost["devices"] - base["devices"]
        rows.append((", ".join(chosen) if chosen else "none", extra, 100 * (cost["wall"] - 1),
                     100 * (base["wall"] - cost["wall"]) / extra if extra else 0.0))
    return Table(["replicated", "extra machines", "waste %", "removed per machine, %"], rows,
                 formats={"waste %": ".3f", "removed per machine, %": ".4f"},
                 title=f"16 machines, each failing once a month; checkpoint every {interval_s / 60:g} min "
                       f"({checkpoint_s:g} s); failover {failover_s:g} s")


def replicated_ps_table(workers: int = 3, steps: int = 12, kill_clock: int = 5) -> Table:
    """The replicated parameter server (`replicated_ps`) with no failure, with the primary killed
    after forwarding clock ``kill_clock`` to the backup and before, and without a backup: whether
    the run finished, from which clock the backup served, and whether every surviving rank ends
    with one process's synchronous SGD, bit for bit."""
    from labkit.checkpoint import replicated_ps as R
    from labkit.data_parallel.param_server import PSConfig

    cfg = PSConfig(mode="bsp", steps=steps, lr=0.1, compute_s=0.002)
    want = R.bsp_in_one_process(cfg, workers)
    rows = []
    for label, kill, backup in (("no failure", None, True),
                                ("primary dies after forwarding", (kill_clock, "after_forward"), True),
                                ("primary dies before forwarding", (kill_clock, "before_forward"), True),
                                ("primary dies, no backup", (kill_clock, "after_forward"), False)):
        try:
            res = R.run_replicated(cfg, workers, kill, backup)
        except RankError as e:
            who = "a worker" if e.rank >= 2 else f"rank {e.rank}"    # whichever worker noticed first
            rows.append((label, "no", "-", f"{who}: {e.exc_type}"))
            continue
        finals = [r["final"] for r in res if r is not None and r["final"] is not None]
        server = res[1]["served_from"] if res[0] is None else "-"
        rows.append((label, "yes", server, "yes" if all(torch.equal(f, want) for f in finals) else "NO"))
    return Table(["run", "finished", "backup served after clock", "every rank = one process"], rows,
                 title=f"primary, backup and {workers} workers, {steps} clocks of BSP; the primary killed at "
                       f"clock {kill_clock}")


def peer_picture(fn, world: int = 8, per_node: int = 2):
    """Your ``peer_ranks`` drawn on the nodes, and what each node's loss leaves of the in-memory
    checkpoints (ranks that would have to fall back to disk)."""
    from IPython.display import HTML, display

    from labkit.checkpoint.hierarchical import lost_on_node_failure, peer_ranks
    from labkit.viz import checkpoint as V
    from labkit.viz.player import figure_to_html

    yours = [int(p) for p in fn(world, per_node)]
    display(HTML(figure_to_html(V.tiers_figure(yours, per_node))))
    rows = []
    for node in range(world // per_node):
        rows.append((node, lost_on_node_failure(yours, per_node, node),
                     lost_on_node_failure(peer_ranks(world, per_node), per_node, node)))
    table = Table(["node lost", "yours: ranks left with only disk", "labkit's"], rows,
                  title=f"your peers: {yours}; a permutation: {'yes' if sorted(yours) == list(range(world)) else 'NO'}")
    print(table)
    return table


def recovery_table(finest_s: float = 150.0) -> Table:
    """Expected seconds a failure of each kind costs in `scenario` (restart from the level it falls
    back to, plus half that level's interval of work lost), with memory + peer + disk at
    ``finest_s``, and with the disk alone at Daly's interval."""
    from labkit.checkpoint.interval import daly_interval
    from labkit.checkpoint.multilevel import fallback

    levels, kinds = scenario()
    disk = levels[2]
    tau = daly_interval(disk.cost_s, 1 / sum(1 / k.mtbf_s for k in kinds))
    rows = []
    for k in kinds:
        l = fallback(levels, k)
        rows.append((k.name, k.mtbf_s / HOUR_S, l.name, l.restart_s, l.every * finest_s / 2,
                     l.restart_s + l.every * finest_s / 2, disk.restart_s + tau / 2))
    return Table(["failure", "MTBF h", "falls back to", "restart s", "lost work s", "recovery s",
                  "disk only s"], rows,
                 formats={"MTBF h": ".0f", "restart s": ".0f", "lost work s": ".0f", "recovery s": ".0f",
                          "disk only s": ".0f"},
                 title="expected cost of one failure: restart + half the interval of the level it falls back to")
