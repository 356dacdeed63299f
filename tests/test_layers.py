"""labkit's layers, enforced by import-linter (contracts in pyproject.toml's [tool.importlinter]).

Lowest first: core (dist, model, env, checks, claims, bench, labkit.viz's player, ...) -> topics,
each with its draw.py and lab.py on top of its own modules -> grading -> the command lines.
`lint-imports` exits non-zero, naming the import, when any contract is broken; the planted-import
tests show that it does. Only a draw.py or lab.py may import IPython (a test below, by AST).
"""
import ast
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


@pytest.mark.parametrize("module,planted,import_", [
    # topic code that imports the grader (as Lab 07's pictures once did)
    ("zero/formulas.py", "from labkit.grading import harness", "labkit.zero.formulas -> labkit.grading.harness"),
    # topic core that imports its own drawing, and a drawing that imports a lab.py
    ("zero/formulas.py", "from labkit.zero import draw", "labkit.zero.formulas -> labkit.zero.draw"),
    ("zero/draw.py", "from labkit.zero import lab", "labkit.zero.draw -> labkit.zero.lab"),
])
def test_a_planted_upward_import_breaks_a_contract(tmp_path, module, planted, import_):
    """The contracts bite: each planted import (inside a function, as lazy imports are) fails."""
    shutil.copytree(ROOT / "labkit", tmp_path / "labkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "labkit" / module
    target.write_text(target.read_text() + f"\n\ndef _planted():\n    {planted}  # noqa\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    out = _lint(tmp_path, env)
    assert out.returncode != 0
    assert import_ in out.stdout


# Modules that may import IPython: the notebook-facing top of each topic. labkit.show is one
# exception: it is the notebooks' code display (`show(fn)`), which hands IPython a highlighted
# source when a kernel runs it and prints it elsewhere.
# labkit.demo (`make demo`) is the other: it turns a cell's IPython syntax (magics, shell escapes)
# into plain Python with IPython's own transformer before Voila serves the demo path.
IPYTHON_ALLOWED = ("*/lab.py", "*/draw.py", "gpu_model/cuda_lab.py", "show.py", "demo.py")


def ipython_importers(package: Path) -> list[str]:
    """Modules under ``package`` (paths relative to it) that import IPython anywhere in their body."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == "IPython" or n.startswith("IPython.") for n in names):
                found.append(path.relative_to(package).as_posix())
                break
    return found


def test_only_lab_and_draw_modules_import_ipython():
    importers = ipython_importers(ROOT / "labkit")
    assert importers, "no labkit module imports IPython: the check below would be vacuous"
    stray = [m for m in importers if not any(Path(m).match(p) for p in IPYTHON_ALLOWED)]
    assert not stray, f"only a topic's lab.py or draw.py may import IPython; these do: {stray}"


def test_the_ipython_check_finds_a_planted_import(tmp_path):
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "formulas.py").write_text("def f():\n    from IPython.display import display\n")
    (tmp_path / "zero" / "lab.py").write_text("import IPython\n")
    (tmp_path / "show.py").write_text("x = 'IPython'\n")           # a string is not an import
    assert ipython_importers(tmp_path) == ["zero/formulas.py", "zero/lab.py"]
