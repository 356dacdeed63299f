"""``make gpu-smoke``: the course on one GPU box, end to end, in under ten minutes.

    python -m labkit.gpu_smoke [--out benchmarks/results/gpu-smoke.md] [--budget 540]

Checks, each timed and reported even when an earlier one failed:

1. environment: GPU, driver, torch's CUDA build, Triton and its backend (`labkit.env`);
2. compiled kernels vs torch: add, softmax, layer norm, matmul (fp16/bf16/fp32), attention (fp16
   causal, and fp32 at head dim 256, whose tiles must shrink to fit shared memory) for
   correctness, then GB/s and TFLOP/s next to torch's (`labkit.kernels.lab.gpu_timings`);
3. the access recorder on this box (kernels interpreted inside ``record()``, CPU tensors);
4. NCCL: a world-1 launch (its group also serves CPU tensors, the rank owns cuda:0), and with
   two GPUs or more the collectives on every GPU;
5. DDP, ZeRO-1, FSDP and PyTorch's DistributedDataParallel + ZeroRedundancyOptimizer and FSDP2
   training steps on CUDA against one process (float64), and the tensor-parallel GPT;
6. exact resume: a run stopped after step 5 and resumed from its checkpoint in fresh processes
   equals the uninterrupted one bit for bit (deterministic algorithms);
7. CUDA graphs: a chain of small kernels replayed from one graph vs launched eagerly;
8. memory: the tracker vs the CUDA allocator, the gap mostly cuBLAS's workspace;
9. notebooks 04 and 05 under nbval-lax (needs nbval and a Jupyter kernel: carried wheels).

It uses the interpreter it is started with and labkit from this checkout: on a GPU box with its
own PyTorch (torch 2.11, Triton 3.6, no network), ``make gpu-smoke PYTHON=python3``. The report
(markdown, headed by device, date and versions) goes to ``--out``. On a machine without a usable
GPU it prints one line saying why and exits with status 2. Status 1: a check failed.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu-smoke.md"
BACKEND = "nccl"          # the launched checks' backend (tests run them on gloo, on CPU)
NOTEBOOK_PACKAGES = ("nbval", "nbformat", "nbclient", "ipykernel", "jupyter_client", "IPython", "ipywidgets")


# --------------------------------------------------------------------------- checks (run in this process)

def check_environment() -> list[str]:
    import torch

    from labkit import env

    rep = env.report(verbose=False)
    props = torch.cuda.get_device_properties(0)
    return rep.lines() + [f"GPU memory       : {props.total_memory / 2**30:.1f} GiB, "
                          f"capability {props.major}.{props.minor}"]


def _close(name: str, got, want, atol: float, rtol: float) -> str:
    import torch

    err = (got.float() - want.float()).abs().max().item()
    ok = torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)
    if not ok:
        raise AssertionError(f"{name}: max |ours - torch| = {err:.2e} (atol {atol}, rtol {rtol})")
    return f"{name:34s} max |ours - torch| = {err:.1e}"


def check_kernels() -> list[str]:
    import torch

    from labkit import kernels as K
    from labkit.kernels.attention import gpu_tiles
    from labkit.kernels.checks import shared_memory_limit
    from labkit.kernels.lab import gpu_timings

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    r = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g, device=dev, dtype=dtype)  # noqa: E731
    lines = []
    x, y = r(1 << 20), r(1 << 20)
    lines.append(_close("add fp32 (2^20)", K.add(x, y), x + y, 0, 0))
    s = r(1000, 1000)
    lines.append(_close("softmax fp32 1000x1000", K.softmax(s), torch.softmax(s, -1), 1e-6, 1e-5))
    w, b = r(1000), r(1000)
    lines.append(_close("layernorm fp32 1000x1000", K.layernorm(s, w, b),
                        torch.nn.functional.layer_norm(s, (1000,), w, b), 1e-4, 1e-4))
    for dtype, tol in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2), (torch.float32, 5e-2)):
        a, bb = r(1000, 700, dtype=dtype), r(700, 900, dtype=dtype)
        lines.append(_close(f"matmul {str(dtype)[6:]} 1000x700x900", K.matmul(a, bb),
                            K.matmul_reference(a, bb), tol, tol))
    q, k, v = (r(2, 4, 333, 64, dtype=torch.float16) for _ in range(3))
    lines.append(_close("attention fp16 causal d=64", K.attention(q, k, v, causal=True),
                        K.attention_reference(q, k, v, causal=True), 2e-2, 2e-2))
    q, k, v = (r(1, 2, 200, 256) for _ in range(3))
    tiles = gpu_tiles(256, 4, shared_memory_limit(dev))
    lines.append(_close(f"attention fp32 d=256 tiles {tiles}", K.attention(q, k, v),
                        K.attention_reference(q, k, v), 2e-2, 2e-2))
    lines += str(gpu_timings()).splitlines()
    return lines


def check_recorder() -> list[str]:
    import torch
    import triton

    from labkit import kernels as K
    from labkit.kernels import record

    x, y = torch.arange(100.0), torch.ones(100)
    with record() as rec:
        out = K.add(x, y, block_size=32)
    assert torch.equal(out, x + 1) and rec.counts("x_ptr", "load").tolist() == [1] * 100
    assert rec.n_masked("load", "x_ptr") == 28
    a, b = torch.randn(20, 40), torch.randn(40, 24)
    with record() as rec:
        c = K.matmul(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    loads = sum(acc.offsets.size for acc in rec.select("load"))
    return [f"Triton {triton.__version__}: add on 100 elements, block 32: every element loaded once, "
            f"28 lanes masked; matmul 20x40x24 recorded ({loads} loaded elements)"]


def check_cuda_graphs() -> list[str]:
    from labkit.compiler import cuda_graphs

    r = cuda_graphs.measure()
    assert r.max_error == 0.0, f"graph replay differs from eager by {r.max_error}"
    return [f"{r.kernels} small kernels: eager {r.eager_us_per_kernel:.1f} us/kernel, CUDA graph "
            f"{r.graph_us_per_kernel:.1f} us/kernel ({r.speedup:.1f}x), replay == eager"]


def check_memory() -> list[str]:
    from labkit.memory.lab import cuda_peak_table

    t = cuda_peak_table()
    tracker, allocator, requested, workspace = t.column("peak bytes")
    gap = allocator - tracker                  # the allocator also holds cuBLAS's workspace
    assert requested <= allocator and 0 < workspace <= gap and workspace >= gap / 2, (tracker, allocator, workspace)
    return str(t).splitlines()


# --------------------------------------------------------------------------- checks on launched ranks

def _collectives_rank(rank, world):
    import torch
    import torch.distributed as dist

    from labkit.dist import backend, device

    dev = device()
    x = torch.full((8,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    host = torch.tensor([rank + 1.0])                 # a CPU tensor: the group's gloo part
    dist.all_reduce(host)
    gathered = torch.empty(8 * world, device=dev)
    dist.all_gather_into_tensor(gathered, x)
    shard = torch.empty(8 // world, device=dev)       # world is 1, 2, 4 or 8
    dist.reduce_scatter_tensor(shard, torch.ones(8, device=dev))
    return backend(), str(dev), x.tolist(), host.item(), float(gathered.sum()), shard.tolist()


def _train_rank(rank, world, methods):
    import torch

    from labkit.model import DATA_PARALLEL_GPT
    from labkit.zero.training import train_rank

    return {m: train_rank(rank, world, m, DATA_PARALLEL_GPT, global_batch=4, dtype=torch.float64).params
            for m in methods}


def check_nccl() -> list[str]:
    import torch

    from labkit.dist import launch

    gpus = torch.cuda.device_count()
    lines = []
    for n in sorted({1, max(k for k in (1, 2, 4, 8) if k <= gpus)}):
        out = launch(_collectives_rank, n, backend=BACKEND, timeout=180, quiet=True)
        s = n * (n + 1) / 2
        for r, (bk, dev, x, host, total, shard) in enumerate(out):
            want = f"cuda:{r}" if BACKEND == "nccl" else "cpu"
            assert bk == BACKEND and dev == want and x == [s] * 8 and host == s, out[r]
            assert total == 8 * n * s and shard == [float(n)] * (8 // n), out[r]
        lines.append(f"{n} rank(s) on {BACKEND} (NCCL: cpu:gloo,cuda:nccl, rank r on cuda:r): all-reduce of "
                     "device and CPU tensors, all-gather, reduce-scatter right on every rank")
    return lines


def check_training() -> list[str]:
    import torch

    from labkit.dist import launch
    from labkit.tensor_parallel.lab import model_table
    from labkit.model import DATA_PARALLEL_GPT
    from labkit.zero.training import reference_params

    world = 2 if torch.cuda.device_count() >= 2 else 1
    methods = ("ddp", "zero1", "zero2", "fsdp", "torch-zero1", "torch-fsdp2")
    want = reference_params(DATA_PARALLEL_GPT, global_batch=4)
    runs = launch(_train_rank, world, methods, backend=BACKEND, timeout=300, quiet=True)
    lines, worst = [], 0.0
    for m in methods:
        err = max((r[m][k] - want[k]).abs().max().item() for r in runs for k in want)
        worst = max(worst, err)
        lines.append(f"{m:12s} {world} rank(s) on {BACKEND}, 3 AdamW steps float64: max |param - one process| "
                     f"= {err:.1e}")
    assert worst < 1e-10, f"a method differs from one process by {worst:.1e}"
    t = model_table(worlds=(1, 2) if world == 2 else (1,))
    assert all(d < 1e-12 for d in t.column("|loss - unsplit|")), str(t)
    return lines + str(t).splitlines()


def check_resume() -> list[str]:
    import torch

    from labkit.checkpoint.resume import RunConfig, train
    from labkit.dist import launch

    run = RunConfig()
    with tempfile.TemporaryDirectory(prefix="labkit-smoke-") as folder:
        full = launch(train, 1, run, 8, backend=BACKEND, timeout=300, quiet=True)[0]
        launch(train, 1, run, 8, folder, False, 5, backend=BACKEND, timeout=300, quiet=True)
        resumed = launch(train, 1, run, 8, folder, True, backend=BACKEND, timeout=300, quiet=True)[0]
    same = all(torch.equal(full["params"][k], resumed["params"][k]) for k in full["params"])
    assert resumed["resumed_from"] == 5, resumed["resumed_from"]
    assert same and full["losses"] == resumed["losses"], "the resumed run differs from the uninterrupted one"
    return [f"GPT with dropout, 8 AdamW steps ({BACKEND}; deterministic algorithms on CUDA): stopped after 5, "
            "resumed from its step-5 checkpoint in fresh processes: parameters and losses bit-identical"]


def check_notebooks(seconds: float) -> list[str]:
    missing = [p for p in NOTEBOOK_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        return [f"SKIPPED: {', '.join(missing)} not importable; carry their wheels (and their "
                "dependencies) to run notebooks 04 and 05 here"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
           "notebooks/04_triton.ipynb", "notebooks/05_collectives.ipynb"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(30.0, seconds),
                          env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    tail = [ln for ln in done.stdout.splitlines() if ln.strip()][-3:]
    assert done.returncode == 0, "\n".join(done.stdout.splitlines()[-30:]) + done.stderr[-2000:]
    return tail


CHECKS = [("environment", check_environment), ("compiled kernels vs torch", check_kernels),
          ("access recorder", check_recorder), ("NCCL", check_nccl),
          ("DDP / ZeRO / FSDP / TP on CUDA vs one process and PyTorch's", check_training),
          ("bit-identical resume", check_resume), ("CUDA graphs", check_cuda_graphs),
          ("memory: tracker vs allocator", check_memory), ("notebooks 04, 05 (nbval-lax)", check_notebooks)]


# --------------------------------------------------------------------------- running them

def run(out: Path, budget_s: float) -> int:
    from labkit.bench import environment_header

    start = time.monotonic()
    sections, failed = [], []
    for title, check in CHECKS:
        left = budget_s - (time.monotonic() - start)
        t0 = time.monotonic()
        if left < 20:
            sections.append((title, "SKIPPED", 0.0, [f"out of time ({budget_s:.0f} s budget)"]))
            continue
        try:
            lines = check(left - 10) if check is check_notebooks else check()
            status = "SKIPPED" if lines and lines[0].startswith("SKIPPED") else "OK"
        except Exception as e:  # noqa: BLE001 - every check reports, the others still run
            status, lines = "FAILED", [f"{type(e).__name__}: {e}"] + traceback.format_exc().splitlines()[-6:]
            failed.append(title)
        sections.append((title, status, time.monotonic() - t0, lines))
        print(f"gpu-smoke: {title}: {status} ({time.monotonic() - t0:.0f} s)", flush=True)
    total = time.monotonic() - start
    text = [f"# GPU smoke test ({'all passed' if not failed else 'FAILED: ' + ', '.join(failed)})", "",
            environment_header(), f"Total {total:.0f} s (`python -m labkit.gpu_smoke`).", ""]
    for title, status, seconds, lines in sections:
        text += [f"## {title}: {status} ({seconds:.0f} s)", "", "```", *lines, "```", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(text))
    print(f"gpu-smoke: report in {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.gpu_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report file (markdown)")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for all checks (default 540)")
    a = ap.parse_args(argv)
    from labkit.env import require_gpu

    why = require_gpu()
    if why:
        print(f"gpu-smoke: nothing to check here: {why}", file=sys.stderr)
        return 2
    return run(a.out, a.budget)


if __name__ == "__main__":
    # run the imported module's main, so that rank functions are labkit.gpu_smoke's (spawned
    # NCCL ranks import them by that name), not __main__'s
    sys.exit(importlib.import_module("labkit.gpu_smoke").main())
