"""Grade exercises: ``python -m labkit.grade [--impl exercises|solutions|PATH] [--lab NN] [--exercise NAME]``.

Threat model: the submission's code is untrusted. It may read, write, spawn,
loop, allocate, print and lie. So:

- The process that decides points (the *judge*: a pytest run of
  tests/graded, started from here) never imports the submission. Each
  exercise's calls run in a sandboxed worker process (`labkit.grading.remote`,
  `labkit.grading.sandbox`); only data comes back (`labkit.grading.codec`:
  JSON plus raw array bytes, never pickle), and the judge compares it with
  references it computes itself, on inputs drawn from a seed chosen at
  grading time (printed, so a grade can be reproduced with ``--seed``).
- Verified outside the worker: every returned value (results, tensors,
  schedules, counts the submission reports) against the judge's reference;
  time (a wall-clock budget per exercise and per lab, enforced by killing the
  worker's whole process tree, so C loops stop too), memory, output size, and
  that no process of the submission is left afterwards.
- Best-effort inside the worker (the submission shares that process and could
  tamper with it): labkit's instrumentation (bytes counted at
  torch.distributed, the Triton access recorder, launch counts), the
  disabled built-in collectives, and the poisoned reference implementations.
  These are backed by a static check of the submission's source
  (`labkit.grading.static`) that refuses, with a one-line reason, imports of
  ``solutions``, of labkit's reference implementations of graded functions,
  of torch.distributed's collectives in labs that forbid them, and the
  dynamic tricks that would get round those rules.
- With bubblewrap installed, workers see a read-only filesystem with
  ``solutions/`` hidden, a private /tmp, loopback-only networking and their
  own PID namespace; the report says when grading ran without it.

Without bubblewrap nothing stops a worker that runs as the grader's own user
from writing the checkout, so the grader's own files (labkit/, tests/,
pyproject.toml, any conftest.py) are compared before and after: a change
voids the grade.

Exit status: 0 after grading (whatever the score), 2 for bad arguments, 3
when the grader's own files changed while grading (the grade is void).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from labkit import grading

MAX_FAILURE_CHARS = 600      # per lost test, in the table's notes and results.json
DEFAULT_EXERCISE_S = 60.0
DEFAULT_LAB_S = 240.0
# pytest plugins the judge has no use for; loading them (nbformat's JSON schemas, hypothesis)
# costs ~3 s per judge, which every "check your work" cell and every grading run pays
JUDGE_SKIPS_PLUGINS = ("-p", "no:nbval", "-p", "no:hypothesispytest", "-p", "no:anyio")


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


def graded_test_files(lab: str | None) -> list[Path]:
    pattern = f"test_lab{int(lab):02d}_*.py" if lab else "test_lab*.py"
    return sorted(grading.GRADED_TESTS.glob(pattern))


def labs() -> list[str]:
    return sorted(p.stem.removeprefix("test_lab")[:2] for p in grading.GRADED_TESTS.glob("test_lab*.py"))


def check_impl(impl: str) -> str:
    """``impl`` as the judge takes it; UsageError unless it names a folder holding lab*.py files."""
    if impl in ("exercises", "solutions"):
        return impl
    path = Path(impl).expanduser()
    if not path.is_dir():
        raise UsageError(f"--impl {impl}: no such folder")
    if not any(path.glob("lab*.py")):
        raise UsageError(f"--impl {impl}: the folder holds no labNN_*.py files")
    return str(path.resolve())


def check_lab(lab: str | None) -> str | None:
    if lab is None:
        return None
    if not lab.isdigit() or f"{int(lab):02d}" not in labs():
        raise UsageError(f"--lab {lab}: unknown lab; graded labs are {', '.join(labs())}")
    return f"{int(lab):02d}"


def check_writable(path: str | None) -> None:
    """UsageError unless ``path`` can be written (checked before grading starts)."""
    if path is None:
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise UsageError(f"--gradescope {path}: is a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=p.parent if str(p.parent) else ".", prefix=".labkit-check-"):
            pass
    except OSError as e:
        raise UsageError(f"--gradescope {path}: cannot write there ({e.strerror or e})") from None


def trusted_state() -> dict[str, tuple]:
    """(size, mtime, mode) of the files the judge trusts: labkit/, tests/, pyproject.toml, any conftest.py."""
    root = grading.REPO_ROOT
    state = {}
    for top in ("labkit", "tests"):
        for dirpath, dirnames, filenames in os.walk(root / top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                p = Path(dirpath) / f
                st = p.stat()
                state[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    for p in (root / "pyproject.toml", root / "conftest.py"):
        if p.exists():
            st = p.stat()
            state[p.name] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return state


def check_trusted_files() -> None:
    """UsageError if the judge's own test folder holds files that no checkout should (a planted conftest)."""
    root = grading.REPO_ROOT
    planted = [p for p in (root / "conftest.py", root / "tests" / "conftest.py", grading.GRADED_TESTS / "conftest.py")
               if p.exists()]
    if planted:
        raise UsageError(f"{planted[0]} should not exist (it would change how tests are judged); remove it")


def run_graded_tests(impl: str, lab: str | None = None, verbose: bool = False,
                     test_files: list[Path] | None = None, exercises: list[str] | None = None,
                     seed: int | None = None, exercise_s: float = DEFAULT_EXERCISE_S, lab_s: float = DEFAULT_LAB_S,
                     require_sandbox: bool = False, memory_mb: int = 4096) -> dict:
    """Run the judge (pytest over the graded tests) against ``impl``.

    Returns {"tests": one dict per graded test (see the plugin), "seed": ..., "sandbox": ...}.
    A test that crashes the judge process scores 0 and the remaining tests run
    again in a fresh judge, so a crash costs only its own points. The whole
    run is bounded by the lab budgets (plus start-up slack).
    """
    files = test_files if test_files is not None else graded_test_files(lab)
    if not files:
        raise UsageError(f"no graded tests found for lab {lab!r} in {grading.GRADED_TESTS}")
    impl = check_impl(impl)
    targets = [str(f) for f in files]
    results: dict[str, dict] = {}
    meta = {"seed": seed, "sandbox": ""}
    total_s = len(files) * (lab_s + 60) + 120
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        report = Path(tmp) / "report.json"
        while targets:
            report.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "pytest", *targets, "-c", str(grading.REPO_ROOT / "pyproject.toml"),
                   "-p", "no:cacheprovider", *JUDGE_SKIPS_PLUGINS, "--impl", impl, "--grade-report", str(report),
                   "--exercise-timeout", str(exercise_s), "--lab-timeout", str(lab_s), "--memory-mb", str(memory_mb),
                   "--no-header", "-q" if verbose else "-qq", "-rf" if verbose else "-rN",
                   *(["--grade-seed", str(meta["seed"])] if meta["seed"] is not None else []),
                   *(["--require-sandbox"] if require_sandbox else []),
                   *[f"--exercise={e}" for e in exercises or []]]
            code, out = _run_judge(cmd, total_s, verbose)
            if not report.exists():
                raise SystemExit(f"grade: the graded tests could not run (pytest exit {code}):\n{out[-3000:]}")
            data = json.loads(report.read_text())
            meta.update(seed=data["seed"], sandbox=data["sandbox"] or meta["sandbox"])
            entries = data["tests"]
            for e in entries:
                if e["status"] == "running":
                    e["status"] = "failed"
                    e["message"] = ("grading stopped: the total time limit was reached" if code == "timeout"
                                    else f"crashed the test process (pytest exit code {code})")
            if code == "timeout":
                for e in entries:
                    if e["status"] == "not run":
                        e["status"], e["message"] = "failed", "not run: the total time limit was reached"
            results.update({e["nodeid"]: e for e in entries if e["status"] != "not run"})
            targets = [e["target"] for e in entries if e["status"] == "not run"]
            if targets and not any(e["status"] == "failed" and e["message"].startswith("crashed") for e in entries):
                raise SystemExit(f"grade: {len(targets)} graded tests did not run (pytest exit {code})")
    return {"tests": list(results.values()), **meta}


def _run_judge(cmd: list[str], limit_s: float, verbose: bool) -> tuple[int | str, str]:
    """Run the judge; (exit code or "timeout", its output)."""
    proc = subprocess.Popen(cmd, cwd=grading.REPO_ROOT, start_new_session=True, text=True,
                            stdout=None if verbose else subprocess.PIPE, stderr=None if verbose else subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=limit_s)
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", out or ""


def score_table(results: dict | list) -> list[dict]:
    """Group per-test results into one row per (lab, exercise) with score, max and failure lines."""
    tests = results["tests"] if isinstance(results, dict) else results
    rows: dict[tuple, dict] = defaultdict(lambda: {"score": 0, "max_score": 0, "failures": []})
    for r in tests:
        row = rows[(r["lab"], r["exercise"])]
        row["max_score"] += r["max_points"]
        if r["status"] == "passed":
            row["score"] += r["max_points"]
        else:
            row["failures"].append(f"{r['nodeid']} (-{r['max_points']}): {_one_line(r['message'])}")
            row.setdefault("reasons", {}).setdefault(_one_line(r["message"]), []).append(r["max_points"])
    return [{"lab": lab, "exercise": ex, **v} for (lab, ex), v in sorted(rows.items())]


def _one_line(message: str) -> str:
    lines = [ln.removeprefix("E").strip() for ln in message.splitlines() if ln.strip()]
    text = " / ".join(ln for ln in lines if ln)
    return text[:MAX_FAILURE_CHARS] + (" ..." if len(text) > MAX_FAILURE_CHARS else "")


def format_table(rows: list[dict]) -> str:
    width = max([len(r["exercise"]) for r in rows] + [8])
    lines = [f"{'lab':<4} {'exercise':<{width}}  score", "-" * (width + 16)]
    for r in rows:
        lines.append(f"{r['lab']:<4} {r['exercise']:<{width}}  {r['score']:>3} / {r['max_score']}")
    total, best = sum(r["score"] for r in rows), sum(r["max_score"] for r in rows)
    lines += ["-" * (width + 16), f"{'':<4} {'total':<{width}}  {total:>3} / {best}"]
    return "\n".join(lines)


def gradescope_json(rows: list[dict], seed=None, sandbox: str = "") -> dict:
    """Gradescope's results.json: one test per exercise, with why points were lost."""
    return {
        "score": sum(r["score"] for r in rows),
        "output": f"grading seed {seed}; sandbox: {sandbox}",
        "visibility": "visible",
        "tests": [
            {
                "name": f"lab{r['lab']} {r['exercise']}",
                "score": r["score"],
                "max_score": r["max_score"],
                "output": "\n".join(r["failures"]) or "all checks passed",
                "visibility": "visible",
            }
            for r in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.grade", description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="exercises", help="exercises (default) | solutions | PATH to a folder of labNN_*.py")
    ap.add_argument("--lab", default=None, help="grade one lab only, e.g. 05")
    ap.add_argument("--exercise", action="append", default=None, help="grade only this exercise (repeatable)")
    ap.add_argument("--gradescope", metavar="FILE", default=None, help="also write Gradescope results.json here")
    ap.add_argument("--seed", type=int, default=None, help="grading seed (default: random; printed with the table)")
    ap.add_argument("--exercise-timeout", type=float, default=DEFAULT_EXERCISE_S, help="worker seconds per exercise")
    ap.add_argument("--lab-timeout", type=float, default=DEFAULT_LAB_S, help="worker seconds per lab")
    ap.add_argument("--memory-mb", type=int, default=4096, help="memory limit of one worker's processes (MiB)")
    ap.add_argument("--require-sandbox", action="store_true", help="refuse to grade without bubblewrap")
    ap.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    a = ap.parse_args(argv)
    try:
        impl, lab = check_impl(a.impl), check_lab(a.lab)
        check_writable(a.gradescope)
        check_trusted_files()
        before = trusted_state()
        if a.require_sandbox:
            from labkit.grading.sandbox import Sandbox

            Sandbox.best(require=True)
        result = run_graded_tests(impl, lab, a.verbose, exercises=a.exercise, seed=a.seed,
                                  exercise_s=a.exercise_timeout, lab_s=a.lab_timeout,
                                  require_sandbox=a.require_sandbox, memory_mb=a.memory_mb)
        rows = score_table(result)
        if not rows:
            raise UsageError(f"no graded tests for exercise(s) {a.exercise} in lab {lab or 'any'}")
    except (UsageError, RuntimeError) as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    after = trusted_state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        print(f"grade: the grader's own files changed while grading ({', '.join(changed[:3])}): the grade is void; "
              "restore the checkout and grade with bubblewrap installed", file=sys.stderr)
        return 3
    print(f"implementation: {a.impl}")
    print(f"grading seed: {result['seed']}   sandbox: {result['sandbox']}")
    print(format_table(rows))
    for r in rows:
        for reason, points in r.get("reasons", {}).items():
            tests = f"{len(points)} tests" if len(points) > 1 else "1 test"
            print(f"  lab{r['lab']} {r['exercise']}: -{sum(points)} ({tests}): {reason}")
    if a.gradescope:
        Path(a.gradescope).write_text(json.dumps(gradescope_json(rows, result["seed"], result["sandbox"]), indent=1))
        print(f"\nwrote {a.gradescope}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
