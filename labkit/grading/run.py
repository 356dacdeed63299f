"""Run the judge (pytest over tests/graded) against an implementation and tabulate its scores.

`run_graded_tests` starts the judge and collects one result per graded test; `score_table` groups
them into one row per exercise; `format_table` and `gradescope_json` print or export the rows.
The command line (`python -m labkit.grade`) and "check your work" cells both call these; the
threat model is in ``labkit.grade``'s docstring.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from labkit.env import REPO_ROOT
from labkit.grading import GRADED_TESTS

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
    return sorted(GRADED_TESTS.glob(pattern))


def labs() -> list[str]:
    return sorted(p.stem.removeprefix("test_lab")[:2] for p in GRADED_TESTS.glob("test_lab*.py"))


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
    root = REPO_ROOT
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
    root = REPO_ROOT
    planted = [p for p in (root / "conftest.py", root / "tests" / "conftest.py", GRADED_TESTS / "conftest.py")
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
        raise UsageError(f"no graded tests found for lab {lab!r} in {GRADED_TESTS}")
    impl = check_impl(impl)
    targets = [str(f) for f in files]
    results: dict[str, dict] = {}
    meta = {"seed": seed, "sandbox": ""}
    total_s = len(files) * (lab_s + 60) + 120
    with tempfile.TemporaryDirectory(prefix="labkit-grade-") as tmp:
        report = Path(tmp) / "report.json"
        while targets:
            report.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "pytest", *targets, "-c", str(REPO_ROOT / "pyproject.toml"),
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
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, start_new_session=True, text=True,
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
