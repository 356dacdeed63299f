"""Gradescope autograder: build its zip, and grade inside its container with the same judge.

    python -m labkit.grading.gradescope build build/autograder.zip   # what `make autograder` runs
    python -m labkit.grading.gradescope run [/autograder]            # what the zip's run_autograder runs

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh``
once to build the image, then for each submission runs ``run_autograder``,
which must write ``/autograder/results/results.json``. The submission's
files arrive in ``/autograder/submission`` (any folder layout: every
``labNN_*.py`` found there is graded). ``run`` never lets the score depend on
the submission's exit status or output: the judge writes results.json; if
grading itself cannot run, results.json says so with a score of 0.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from labkit.env import REPO_ROOT

LAB_FILE = re.compile(r"lab\d\d_[a-z0-9_]+\.py")
SOURCE_PARTS = ("labkit", "solutions", "exercises", "tests/graded", "pyproject.toml", "README.md", "Makefile",
                "environment.yml")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope image set-up: system packages, then labkit and its dependencies in a virtual environment.
set -euo pipefail
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip bubblewrap
cd /autograder/source
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e .
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Grade /autograder/submission into /autograder/results/results.json (Gradescope runs this per submission).
cd "$(dirname "$0")/source" 2>/dev/null || cd "$(dirname "$0")"
PY="${LABKIT_PYTHON:-$PWD/.venv/bin/python}"
exec "$PY" -m labkit.grading.gradescope run "${AUTOGRADER_ROOT:-/autograder}"
"""


def build(out: Path) -> Path:
    """Write the autograder zip (setup.sh, run_autograder, and the course's source) to ``out``."""
    root = REPO_ROOT
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in (("setup.sh", SETUP_SH), ("run_autograder", RUN_AUTOGRADER)):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            z.writestr(info, text)
        for part in SOURCE_PARTS:
            path = root / part
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for f in files:
                if "__pycache__" not in f.parts:
                    z.write(f, f"source/{f.relative_to(root)}")
    return out


def collect(submission: Path, dest: Path) -> list[str]:
    """Copy every labNN_*.py under ``submission`` into ``dest``; return notes on what was skipped."""
    notes, seen = [], {}
    for f in sorted(submission.rglob("*.py")):
        if not LAB_FILE.fullmatch(f.name) or not f.is_file() or f.is_symlink():
            continue
        if f.name in seen:
            notes.append(f"{f.relative_to(submission)} ignored: {seen[f.name]} has the same name")
            continue
        seen[f.name] = f.relative_to(submission)
        shutil.copyfile(f, dest / f.name)
    return notes


def run(root: Path) -> int:
    """Grade ``root``/submission and write ``root``/results/results.json. Always 0 unless results can't be written."""
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="labkit-gradescope-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        notes = collect(root / "submission", sub) if (root / "submission").is_dir() else ["no submission folder"]
        if not any(sub.iterdir()):
            return _failed(results, "no labNN_*.py files were found in the submission. " + "; ".join(notes))
        proc = subprocess.run([sys.executable, "-m", "labkit.grade", "--impl", str(sub), "--gradescope", str(results)],
                              cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0 or not results.exists():
            return _failed(results, f"grading could not run: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    data = json.loads(results.read_text())
    if notes:
        data["output"] = data.get("output", "") + "\n" + "\n".join(notes)
    results.write_text(json.dumps(data, indent=1))
    return 0


def _failed(results: Path, message: str) -> int:
    results.write_text(json.dumps({"score": 0, "output": message, "visibility": "visible", "tests": []}, indent=1))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["build"] and len(argv) == 2:
        print(f"wrote {build(Path(argv[1]))}")
        return 0
    if argv[:1] == ["run"] and len(argv) <= 2:
        return run(Path(argv[1] if len(argv) == 2 else os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    print("usage: python -m labkit.grading.gradescope build ZIP | run [AUTOGRADER_ROOT]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
