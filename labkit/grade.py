"""Grade exercises: ``python -m labkit.grade [--impl exercises|solutions|PATH] [--lab NN] [--exercise NAME] [--gradescope FILE]``.

Runs the graded tests (tests/graded/test_labNN_*.py) against the chosen
implementation in a separate pytest process, then prints a score table per
exercise. Points come from each test's ``@pytest.mark.graded(points=...)``;
every graded test has a timeout, so a hanging or crashing exercise loses only
its own points. ``--gradescope`` writes Gradescope's results.json format.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from labkit import grading


def graded_test_files(lab: str | None) -> list[Path]:
    pattern = f"test_lab{int(lab):02d}_*.py" if lab else "test_lab*.py"
    return sorted(grading.GRADED_TESTS.glob(pattern))


def run_graded_tests(impl: str, lab: str | None = None, verbose: bool = False,
                     test_files: list[Path] | None = None, exercises: list[str] | None = None) -> list[dict]:
    """Run the graded tests against ``impl``; return one dict per graded test (see the plugin).

    A test that crashes the pytest process scores 0 and the remaining tests
    run again in a fresh process, so a crash costs only its own points.
    """
    files = test_files if test_files is not None else graded_test_files(lab)
    if not files:
        raise SystemExit(f"grade: no graded tests found for lab {lab!r} in {grading.GRADED_TESTS}")
    if impl not in ("exercises", "solutions"):
        impl = str(Path(impl).expanduser().resolve())
    targets = [str(f) for f in files]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        while targets:
            report.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "pytest", *targets, "-c", str(grading.REPO_ROOT / "pyproject.toml"),
                   "-p", "no:cacheprovider", "--impl", impl, "--grade-report", str(report),
                   "--no-header", "-q" if verbose else "-qq", "-rf" if verbose else "-rN",
                   *[f"--exercise={e}" for e in exercises or []]]
            proc = subprocess.run(cmd, cwd=grading.REPO_ROOT, capture_output=not verbose, text=True)
            if not report.exists():
                out = (proc.stdout or "") + (proc.stderr or "")
                raise SystemExit(f"grade: the graded tests could not run (pytest exit {proc.returncode}):\n{out[-3000:]}")
            entries = json.loads(report.read_text())
            for e in entries:
                if e["status"] == "running":
                    e["status"] = "failed"
                    e["message"] = f"crashed the test process (pytest exit code {proc.returncode})"
            results.update({e["nodeid"]: e for e in entries if e["status"] != "not run"})
            targets = [e["target"] for e in entries if e["status"] == "not run"]
            if targets and not any(e["status"] == "failed" and e["message"].startswith("crashed") for e in entries):
                raise SystemExit(f"grade: {len(targets)} graded tests did not run (pytest exit {proc.returncode})")
    return list(results.values())


def score_table(results: list[dict]) -> list[dict]:
    """Group per-test results into one row per (lab, exercise) with score and max."""
    rows: dict[tuple, dict] = defaultdict(lambda: {"score": 0, "max_score": 0, "failures": []})
    for r in results:
        row = rows[(r["lab"], r["exercise"])]
        row["max_score"] += r["max_points"]
        if r["status"] == "passed":
            row["score"] += r["max_points"]
        else:
            row["failures"].append(f"{r['nodeid']}\n{r['message']}")
    return [{"lab": lab, "exercise": ex, **v} for (lab, ex), v in sorted(rows.items())]


def format_table(rows: list[dict]) -> str:
    width = max([len(r["exercise"]) for r in rows] + [8])
    lines = [f"{'lab':<4} {'exercise':<{width}}  score", "-" * (width + 16)]
    for r in rows:
        lines.append(f"{r['lab']:<4} {r['exercise']:<{width}}  {r['score']:>3} / {r['max_score']}")
    total, best = sum(r["score"] for r in rows), sum(r["max_score"] for r in rows)
    lines += ["-" * (width + 16), f"{'':<4} {'total':<{width}}  {total:>3} / {best}"]
    return "\n".join(lines)


def gradescope_json(rows: list[dict]) -> dict:
    return {
        "score": sum(r["score"] for r in rows),
        "tests": [
            {
                "name": f"lab{r['lab']} {r['exercise']}",
                "score": r["score"],
                "max_score": r["max_score"],
                "output": "\n\n".join(r["failures"]) or "all checks passed",
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
    ap.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    a = ap.parse_args(argv)
    rows = score_table(run_graded_tests(a.impl, a.lab, a.verbose, exercises=a.exercise))
    if not rows:
        raise SystemExit(f"grade: no graded tests for exercise(s) {a.exercise} in lab {a.lab or 'any'}")
    print(f"implementation: {a.impl}")
    print(format_table(rows))
    for r in rows:
        for f in r["failures"]:
            print(f"\nFAILED {f}")
    if a.gradescope:
        Path(a.gradescope).write_text(json.dumps(gradescope_json(rows), indent=1))
        print(f"\nwrote {a.gradescope}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
