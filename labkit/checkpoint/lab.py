"""The Lab 12 notebook's one-liners, and its "check your work" pictures.

    crash_table(saves)                  each save function killed at each moment: what is left
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
from labkit.dist import launch
from labkit.table import Table

RUN = RunConfig()
ROOT = Path(__file__).resolve().parents[2]


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"]) and a["losses"] == b["losses"]


def _in_place(data: bytes, path: str) -> None:
    """The common mistake: open the checkpoint's own name and write."""
    with open(path, "wb") as f:
        f.write(data)


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


def crash_table(saves: dict | None = None, size: int = 1 << 16) -> Table:
    """Each save function (name -> fn(data, path)) killed before its first byte, half way, after its
    last byte and just before a rename, over an old file: what each leaves at the path."""
    saves = saves or {"in place": _in_place, "temp + fsync + rename": _labkit_save}
    old, new = b"o" * size, b"n" * (size + 1)
    points = CRASH_POINTS[1:]
    rows = []
    for name, fn in saves.items():
        found = crash_test(fn, [(old, new, p) for p in points])
        rows.append([name] + [f["found"] for f in found])
    return Table(["save", *(f"killed at {p}" for p in points)], rows,
                 title=f"an old checkpoint of {size} bytes, a new one of {size + 1}: what is at the path after")


def resume_table(worlds=(1, 2), steps: int = 8, stop: int = 4) -> Table:
    """Stop after ``stop`` steps, resume in fresh processes, finish ``steps``: equal to the
    uninterrupted run (parameters, optimizer state and every loss)? On each of ``worlds``; then, on
    the first, with one state left out at a time."""
    rows = []
    for world in worlds:
        full = launch(train, world, RUN, steps, quiet=True)
        for forget in ((), *((f,) for f in FORGETTABLE)) if world == worlds[0] else ((),):
            with tempfile.TemporaryDirectory(prefix="labkit-resume-") as folder:
                launch(train, world, RUN, steps, folder, False, stop, quiet=True)
                res = launch(train, world, RUN, steps, folder, True, None, None, forget, quiet=True)
            same = all(_same(full[r], res[r]) for r in range(world))
            first = next((k + 1 for k, (a, b) in enumerate(zip(full[0]["losses"], res[0]["losses"])) if a != b), "-")
            rows.append((world, "nothing" if not forget else forget[0], "yes" if same else "NO", first))
    return Table(["ranks", "left out on resume", "bit-identical", "first step that differs"], rows,
                 title=f"{steps} steps; stopped after {stop}, resumed in fresh processes")


def failure_demo(world: int = 4, steps: int = 10, kill: tuple = (2, 7)):
    """A rank SIGKILLed after a step; the supervisor restarts; prints its log and compares with the
    uninterrupted run. Returns the `Supervised` record."""
    full = launch(train, world, RUN, steps, quiet=True)[0]
    with tempfile.TemporaryDirectory(prefix="labkit-fail-") as folder:
        run = supervise(world, RUN, steps, folder, kill=kill)
    for line in run.log:
        print(line)
    print(f"final parameters equal to the uninterrupted run's: {_same(full, run.result)}")
    return run


def fewer_table(world: int = 4, steps: int = 12, kill: tuple = (3, 5)) -> Table:
    """The losses of the uninterrupted run on ``world`` ranks next to the run that lost a rank after
    step ``kill[1]`` and went on with ``world − 1`` (batch and learning rate scaled: `smaller`)."""
    full = launch(train, world, RUN, steps, quiet=True)[0]
    with tempfile.TemporaryDirectory(prefix="labkit-fewer-") as folder:
        run = continue_on_fewer(world, RUN, steps, folder, kill=kill)
    less = smaller(RUN, world, world - 1)
    rows = [(k + 1, world if k < run.result["resumed_from"] else world - 1, a, b)
            for k, (a, b) in enumerate(zip(full["losses"], run.result["losses"]))]
    return Table(["step", "ranks", f"loss, {world} ranks", "loss, lost one"], rows,
                 formats={f"loss, {world} ranks": ".4f", "loss, lost one": ".4f"},
                 title=f"{run.log[0]}; then batch {RUN.batch} -> {less.batch}, lr {RUN.lr:g} -> {less.lr:g}")


def torchrun_command(world: int, steps: int, folder: str, out: str, fail: tuple | None) -> list[str]:
    """The command line that runs `labkit.checkpoint.elastic` under torchrun on this machine."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    cmd = [torchrun, "--standalone", "--nproc-per-node", str(world), "--max-restarts", "3",
           "-m", "labkit.checkpoint.elastic", "--folder", folder, "--steps", str(steps), "--out", out]
    return cmd + (["--fail", str(fail[0]), str(fail[1])] if fail else [])


def torchrun_demo(world: int = 2, steps: int = 6, fail: tuple = (1, 3)) -> dict:
    """Run the training under torchrun with a rank killed in the first attempt; returns what rank 0
    wrote ({"params", "resumed_from", "attempt"}) and prints whether it equals `train`'s run."""
    with tempfile.TemporaryDirectory(prefix="labkit-torchrun-") as folder:
        out = os.path.join(folder, "final.pt")
        done = subprocess.run(torchrun_command(world, steps, os.path.join(folder, "ckpt"), out, fail), cwd=ROOT,
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
        if done.returncode != 0:
            raise RuntimeError(f"torchrun_demo: torchrun exited {done.returncode}: {done.stderr.strip()[-300:]}")
        final = torch.load(out)
    full = launch(train, world, RUN, steps, quiet=True)[0]
    same = all(torch.equal(full["params"][k], final["params"][k]) for k in full["params"])
    print(f"torchrun: {final['attempt']} restart(s); the last attempt resumed from step {final['resumed_from']}")
    print(f"final parameters equal to the uninterrupted run's: {same}")
    return final


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
            "simulate_wall_time": simulate_picture, "abft_locate": abft_picture}[exercise]
