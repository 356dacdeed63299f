"""make gpu-smoke on a machine without a GPU, and its checks run here as far as a CPU allows."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labkit import gpu_smoke

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: make gpu-smoke runs there")
def test_without_a_gpu_it_says_why_in_one_line():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "labkit.gpu_smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("gpu-smoke: nothing to check here: ")
    make = subprocess.run(["make", "-s", "gpu-smoke", f"PYTHON={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert make.returncode != 0 and "gpu-smoke: nothing to check here: " in make.stderr


def test_the_report_lists_every_check_with_its_status_even_after_a_failure(tmp_path, monkeypatch):
    def broken():
        raise AssertionError("ours 1.0 vs torch 2.0")

    monkeypatch.setattr(gpu_smoke, "CHECKS", [("fine", lambda: ["a line"]), ("broken", broken),
                                              ("absent", lambda: ["SKIPPED: nbval not importable"]),
                                              ("notebooks", gpu_smoke.check_notebooks)])
    monkeypatch.setattr(gpu_smoke, "NOTEBOOK_PACKAGES", ("no_such_package_here",))
    out = tmp_path / "smoke.md"
    assert gpu_smoke.run(out, budget_s=100) == 1
    text = out.read_text()
    assert text.startswith("# GPU smoke test (FAILED: broken)") and "- device: " in text
    for line in ("## fine: OK", "## broken: FAILED", "AssertionError: ours 1.0 vs torch 2.0",
                 "## absent: SKIPPED", "## notebooks: SKIPPED", "no_such_package_here not importable"):
        assert line in text, line
    assert gpu_smoke.run(out, budget_s=10) == 0 and out.read_text().count("SKIPPED") == 4   # out of time


def test_the_recorder_check():
    assert "every element loaded once" in gpu_smoke.check_recorder()[0]


def test_the_launched_checks_on_gloo(monkeypatch):
    """The NCCL, training and resume checks, with their ranks on gloo: the same code and asserts."""
    monkeypatch.setattr(gpu_smoke, "BACKEND", "gloo")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    lines = gpu_smoke.check_nccl()
    assert [ln.split(" rank(s)")[0] for ln in lines] == ["1", "2"]
    lines = gpu_smoke.check_training()
    assert len([ln for ln in lines if "max |param - one process|" in ln]) == 6
    assert "bit-identical" in gpu_smoke.check_resume()[0]
