"""`make autograder`'s zip, unpacked into a fake /autograder tree, grades a submission like Gradescope would."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from labkit.grading import gradescope

ROOT = Path(__file__).resolve().parents[1]


def test_zip_has_what_gradescope_runs(tmp_path):
    z = gradescope.build(tmp_path / "autograder.zip")
    names = set(zipfile.ZipFile(z).namelist())
    assert {"setup.sh", "run_autograder", "source/pyproject.toml", "source/labkit/grade.py",
            "source/tests/graded/test_lab01_roofline.py"} <= names
    assert not any("__pycache__" in n for n in names)
    modes = {i.filename: i.external_attr >> 16 for i in zipfile.ZipFile(z).infolist()}
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111


def test_run_autograder_writes_results(tmp_path):
    root = tmp_path / "autograder"
    with zipfile.ZipFile(gradescope.build(tmp_path / "autograder.zip")) as z:
        z.extractall(root)
    (root / "run_autograder").chmod(0o755)
    sub = root / "submission" / "my-folder"
    sub.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "lab01_roofline.py", sub)             # right
    shutil.copy(ROOT / "exercises" / "lab02_strides.py", root / "submission")  # stubs: 0
    (sub / "notes.txt").write_text("not graded")
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), LABKIT_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((root / "results" / "results.json").read_text())
    tests = {t["name"]: t for t in data["tests"]}
    assert all(t["score"] == t["max_score"] > 0 for n, t in tests.items() if n.startswith("lab01")), tests
    lab02 = [t for n, t in tests.items() if n.startswith("lab02")]
    assert lab02 and all(t["score"] == 0 and "NotImplementedError" in t["output"] for t in lab02)
    lab03 = [t for n, t in tests.items() if n.startswith("lab03")]
    assert lab03 and all(t["score"] == 0 and "no lab03_matmul.py" in t["output"] for t in lab03)
    assert data["score"] == sum(t["score"] for t in tests.values())
    assert all({"name", "score", "max_score", "output", "visibility"} <= set(t) for t in data["tests"])
    assert "grading seed" in data["output"] and "sandbox" in data["output"]


def test_run_autograder_with_nothing_to_grade(tmp_path):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    (root / "submission" / "README.md").write_text("oops")
    assert gradescope.run(root) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] == 0 and "no labNN_*.py" in data["output"]
