"""Lab 04's one-liners (labkit.kernels.lab) and the notebook's GPU-box path, checked on a CPU."""
import labkit  # noqa: F401

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from labkit.kernels import lab
from labkit.kernels.checks import interpreting

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not interpreting(), reason="runs the kernels on CPU tensors")
def test_launch_options_are_ignored_by_the_interpreter():
    t = lab.launch_options_table()
    assert t.column("num_warps") == [1, 4, 8] and t.column("num_stages") == [1, 3, 4]
    assert all(t.column("same C bits")) and all(t.column("same accesses"))
    assert t.column("loads+stores") == [45] * 3     # 9 tiles x (2 k-steps x 2 loads + 1 store)
    assert max(len(line) for line in str(t).splitlines()) <= 100


@pytest.mark.skipif(not interpreting(), reason="runs the kernels on CPU tensors")
def test_gpu_timings_formulas():
    """Fake timer (ours 2 ms, torch 1 ms): GB/s = 2*M*N*4 / t, TFLOP/s = 2 n^3 / t, ratio torch/ours."""
    calls = []

    def bench(fn):
        fn()                                            # the code path runs (interpreted, tiny)
        calls.append(fn)
        return 2.0 if len(calls) % 2 else 1.0
    t = lab.gpu_timings(bench=bench, rows=8, cols=(16, 32), n=16, device="cpu")
    assert len(calls) == 6
    assert t.column("unit") == ["GB/s", "GB/s", "TFLOP/s"]
    assert t.column("ours") == [pytest.approx(2 * 8 * 16 * 4 / 2e-3 / 1e9), pytest.approx(2 * 8 * 32 * 4 / 2e-3 / 1e9),
                                pytest.approx(2 * 16 ** 3 / 2e-3 / 1e12)]
    assert t.column("torch") == [pytest.approx(2 * x) for x in t.column("ours")]
    assert t.column("ratio") == [0.5] * 3
    assert max(len(line) for line in str(t).splitlines()) <= 100


NOTEBOOK_AS_ON_A_GPU_BOX = r'''
import linecache, os, pathlib, sys
os.environ["TRITON_INTERPRET"] = "0"          # kernels compile, as on a GPU box
os.environ["MPLBACKEND"] = "Agg"
import torch, triton
from labkit.nbbuild import read_source
import labkit.grading.check as G
import solutions.lab04_triton as S
from labkit.kernels.add import add_kernel
assert type(add_kernel) is triton.runtime.jit.JITFunction

def check_your_work(lab_name, exercise, picture=None):   # the lab's picture, on our solution; no grader
    from labkit.pictures import picture as lab_picture
    got = (picture or lab_picture(lab_name, exercise))(getattr(S, exercise))
    assert got["close"] and got["out_of_bounds"] == 0, exercise
    print("checked", exercise)

G.check_your_work = check_your_work
import IPython.display
IPython.display.display = lambda *a, **k: None
cells = [c.source for c in read_source(pathlib.Path(sys.argv[1])).cells if c.cell_type == "code"]
g = {"__name__": "__main__"}
for i, src in enumerate(cells):
    name = f"<cell {i}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)   # as IPython does
    exec(compile(src, name, "exec"), g)
assert g["GPU"] is torch.cuda.is_available() and os.environ["TRITON_INTERPRET"] == "0"
print("ran", len(cells), "cells; cuda", torch.cuda.is_available())
'''


def test_notebook_runs_with_compiled_kernels(tmp_path):
    """Every code cell of Lab 04 runs with TRITON_INTERPRET=0 (compiled kernels, as on a GPU box):
    whatever launches a kernel on CPU tensors must do so inside `record()`, which interprets it;
    the timing cell prints its one-line note where there is no CUDA, and times the kernels where
    there is (on a GPU box this test runs the notebook for real)."""
    script = tmp_path / "as_gpu_box.py"
    script.write_text(NOTEBOOK_AS_ON_A_GPU_BOX)
    done = subprocess.run([sys.executable, str(script), str(ROOT / "notebooks" / "_src" / "04_triton.py")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
                               **{k: v for k, v in os.environ.items()          # a GPU box's driver libraries
                                  if k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME")}})
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for ex in ("add_kernel", "softmax_kernel", "matmul_kernel", "layernorm_kernel"):
        assert f"checked {ex}" in out
    no_gpu_note = "No GPU here, so no timings: on a GPU this cell compares our kernels with torch's."
    assert (no_gpu_note in out) == out.rstrip().endswith("cuda False")
    assert max(len(line) for line in out.splitlines()) <= 100
