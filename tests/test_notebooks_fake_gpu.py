"""The notebooks' GPU branches, run on this CPU machine with a faked "2 GPUs present".

Every code cell of a notebook source that branches on the GPU (mentions ``torch.cuda``) is run
after that notebook's first code cell (its imports), in a fresh interpreter where torch reports
two CUDA devices and NCCL. What cannot run without hardware is replaced by stand-ins that keep
the *decisions* under test: tensors asked for on "cuda" are made on the "meta" device (shapes
and dtypes, no data: a matmul of two 8192² "GPU" tensors returns at once; copies back to the host
are zeros, pinned memory is plain memory), device queries and
synchronisation answer as a GPU would, and `labkit.dist.launch` records which backend and which
function a cell asked for (an NCCL launch must get an importable function — spawned ranks import
it) and returns fake timings. The cell must then finish without error and print only short lines.
"""
import json
import pathlib
import subprocess
import sys

import pytest

from labkit.nbbuild import read_source

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "_src").glob("[0-9][0-9]*_*.py"))

FAKE_GPU = '''
import importlib, json, sys
import torch, torch.distributed as dist
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2
dist.is_nccl_available = lambda: True
torch.cuda.get_device_name = lambda *a, **k: "Fake GPU"
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.reset_peak_memory_stats = lambda *a, **k: None
torch.cuda.max_memory_allocated = lambda *a, **k: 0
torch.cuda.memory_allocated = lambda *a, **k: 0
from torch.overrides import TorchFunctionMode


def _is_cuda(d):
    return isinstance(d, (str, torch.device)) and str(d).startswith("cuda")


class _CudaToMeta(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        kwargs.pop("pin_memory", None)          # no pinned-memory allocator without a driver
        if func is torch.Tensor.pin_memory:
            return args[0]
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "meta"
        if func is torch.Tensor.cuda:
            return args[0].to("meta")
        if func is torch.Tensor.copy_ and args[1].is_meta and not args[0].is_meta:
            return args[0]                                   # "device to host": the host keeps its data
        if func is torch.Tensor.cpu and args[0].is_meta:    # a "GPU" tensor copied back: zeros
            return torch.zeros(args[0].shape, dtype=args[0].dtype)
        if func is torch.Tensor.to:
            args = tuple("meta" if _is_cuda(a) else a for a in args)
            if args[0].is_meta and ("cpu" in args[1:] or str(kwargs.get("device")) == "cpu"):
                return torch.zeros(args[0].shape, dtype=kwargs.get("dtype", args[0].dtype))
        return func(*args, **kwargs)


_CudaToMeta().__enter__()
import labkit.dist as _ldist

LAUNCHES = []

def _fake_launch(fn, world_size, *args, backend="auto", timeout=None, **kw):
    chosen = _ldist.auto_backend(fn, world_size)[0] if backend == "auto" else backend
    LAUNCHES.append({"fn": f"{fn.__module__}.{fn.__qualname__}", "backend": chosen,
                     "importable": _ldist.importable(fn), "world_size": world_size})
    if chosen == "nccl" and not _ldist.importable(fn):
        raise TypeError("NCCL launch of a function spawned ranks cannot import")
    if fn.__name__ == "builtin_on_ranks":
        return [{s: 1e-4 for s in args[0]} for _ in range(world_size)]
    raise RuntimeError(f"fake launch has no canned answer for {fn.__qualname__}")

_ldist.launch = _fake_launch
'''


def gpu_cells(path):
    """(first code cell, [code cells that branch on the GPU]) of one notebook source."""
    cells = [c.source for c in read_source(path).cells if c.cell_type == "code"]
    return cells[0], [c for c in cells[1:] if "torch.cuda" in c]


CASES = [(p, i) for p in SOURCES for i in range(len(gpu_cells(p)[1]))]


def test_some_notebook_branches_on_the_gpu():
    assert any(p.name.startswith("05_") for p, _ in CASES), "the Lab 05 NCCL cell is missing"


@pytest.mark.parametrize("path,index", CASES, ids=[f"{p.stem}-gpu-cell-{i}" for p, i in CASES])
def test_gpu_branch_of_notebook_runs_with_faked_gpus(path, index, tmp_path):
    imports, cells = gpu_cells(path)
    script = (FAKE_GPU + "\n" + imports + "\n" + cells[index]
              + "\nprint('LAUNCHES=' + json.dumps(LAUNCHES))\n")
    (tmp_path / "cell.py").write_text(script)
    done = subprocess.run([sys.executable, str(tmp_path / "cell.py")], cwd=ROOT / "notebooks",
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-3000:]
    out, launches = done.stdout.rsplit("LAUNCHES=", 1)
    launches = json.loads(launches)
    assert all(len(line) <= 100 for line in out.splitlines()), out
    for rec in launches:   # what a real GPU box would have done
        assert rec["backend"] != "nccl" or rec["importable"], rec
    if path.name.startswith("05_"):
        assert {r["backend"] for r in launches} == {"gloo", "nccl"}, launches
        assert "NCCL us" in out and "No 2 GPUs" not in out
