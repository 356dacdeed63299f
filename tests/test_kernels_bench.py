"""benchmarks/kernels.py: on CPU it refuses to time, checks correctness and exits 0; peak lookup."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "benchmarks" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_device_peaks_lookup():
    peaks = _bench_module().device_peaks
    assert peaks("NVIDIA H100 80GB HBM3") == (3.35e12, 989e12)
    assert peaks("NVIDIA H100 PCIe") == (2.0e12, 756e12)
    assert peaks("NVIDIA H200") == (4.8e12, 989e12)
    assert peaks("Some CPU") == (None, None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU this script runs the full benchmark")
def test_cpu_run_checks_correctness_and_says_timings_need_a_gpu():
    proc = subprocess.run([sys.executable, "benchmarks/kernels.py", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "need a GPU" in proc.stdout and "all kernels match torch" in proc.stdout
    assert proc.stdout.count(" ok") == 6
