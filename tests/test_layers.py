"""labkit's layers, enforced by import-linter (contracts in pyproject.toml's [tool.importlinter]).

Lowest first: core (dist, model, env, checks, claims, bench, ...) -> topics -> each topic's lab.py
and labkit.viz -> grading -> the command lines. `lint-imports` exits non-zero, naming the import,
when any contract is broken; the second test shows that it does on a planted upward import.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: import-linter is a test dependency (pyproject.toml); run make setup")
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_labkit_keeps_its_import_contracts():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout and "kept" in out.stdout


def test_a_planted_upward_import_breaks_a_contract(tmp_path):
    """The contracts bite: topic code that imports the grader (as Lab 07's pictures once did) fails."""
    shutil.copytree(ROOT / "labkit", tmp_path / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "labkit" / "zero" / "formulas.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from labkit.grading import harness  # noqa\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    out = _lint(tmp_path, env)
    assert out.returncode != 0
    assert "labkit.zero.formulas -> labkit.grading.harness" in out.stdout
