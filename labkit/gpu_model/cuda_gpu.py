"""The same kernels under numba: its CUDA simulator on a CPU, ``numba.cuda.jit`` on a GPU.

- `numba_simulator_outputs()` runs `labkit.gpu_model.cuda_kernels`' vector add, tiled matmul and
  reduction under numba's own simulator (``NUMBA_ENABLE_CUDASIM=1``, in a child process, since the
  variable must be set before numba.cuda is imported) on seeded integer-valued inputs, and returns
  the outputs together with the same inputs' outputs from `labkit.gpu_model.cuda_sim`: the two
  simulators run the same source and must agree exactly.
- `gpu_run()` compiles the three kernels with ``numba.cuda.jit`` on a CUDA GPU, checks them against
  torch, times them (`labkit.bench.median_time`), and measures the waves of a busy kernel: time
  against the number of blocks steps up by one block-duration every S · (blocks per SM) blocks (its
  blocks sleep for a fixed time, ``cuda.nanosleep``, so co-resident blocks do not slow each other).
  Without a GPU, or when numba cannot compile for it (libNVVM missing: install
  ``numba-cuda[cu12]`` or ``[cu13]`` to match the driver), it returns a one-line `NeedsCuda`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from labkit.gpu_model.host_device import NeedsCuda

__all__ = ["numba_simulator_outputs", "gpu_run", "GpuRun", "SIM_CASE"]

SIM_CASE = {"n": 70, "mm": (11, 9, 13), "sum_n": 300, "seed": 0}

_CHILD = r"""
import json, sys
import numpy as np
from numba import cuda
from labkit.gpu_model import cuda_kernels as K
from labkit.gpu_model.cuda_sim import with_cuda
case = json.loads(sys.argv[1])
a, b, A, B, x = K.sample_inputs(case)
jit = lambda f: cuda.jit(with_cuda(f, cuda))
out = np.zeros_like(a)
jit(K.vector_add)[K.cdiv(a.size, 32), 32](a, b, out, a.size)
(M, Kd), N = A.shape, B.shape[1]
C = np.zeros((M, N), np.float32)
jit(K.matmul_tiled)[(K.cdiv(N, K.TILE), K.cdiv(M, K.TILE)), (K.TILE, K.TILE)](A, B, C, M, N, Kd)
s = np.zeros(1, np.float32)
jit(K.block_sum)[K.cdiv(x.size, 64), 64](x, s, x.size)
print(json.dumps({"vector_add": out.tolist(), "matmul_tiled": C.tolist(), "block_sum": float(s[0])}))
"""


def numba_simulator_outputs(case: dict | None = None, timeout_s: float = 300.0) -> dict:
    """{kernel: (numba simulator's output, labkit.gpu_model.cuda_sim's output)} for ``case``
    (`SIM_CASE`: sizes and seed). Raises RuntimeError (one line) if numba's simulator fails."""
    from labkit.gpu_model import cuda_kernels as K

    case = dict(SIM_CASE if case is None else case)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(case)], capture_output=True, text=True,
                          env=env, timeout=timeout_s)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"numba's CUDA simulator failed: {last}")
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    a, b, A, B, x = K.sample_inputs(case)
    ours = {"vector_add": K.launch_vector_add(a, b)[0], "matmul_tiled": K.launch_matmul(A, B)[0],
            "block_sum": K.launch_sum(x)[0]}
    return {k: (np.asarray(theirs[k], np.float32), np.asarray(ours[k], np.float32)) for k in ours}


@dataclass(frozen=True)
class GpuRun:
    """device; per kernel: equal to torch, milliseconds; the waves measurement: blocks per SM
    predicted by `labkit.gpu_model.occupancy.occupancy` from the compiled kernel's registers,
    and (grid blocks, ms) points of the busy kernel."""
    device: str
    kernels: dict
    sms: int
    regs_per_thread: int
    predicted_blocks_per_sm: int
    wave_points: list


def _gpu_kernels(cuda):
    """The three kernels compiled, plus a busy kernel for the waves (a fixed amount of work per thread)."""
    from labkit.gpu_model import cuda_kernels as K
    from labkit.gpu_model.cuda_sim import with_cuda

    def busy(out, iters):
        # a fixed wall time per block whatever else shares its SM (sleeping, not competing for issue
        # slots), so a launch takes (number of waves) x (one block's time): a clean staircase
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        for _ in range(iters):
            cuda.nanosleep(1000)
        out[i] = i

    jit = lambda f: cuda.jit(with_cuda(f, cuda))  # noqa: E731
    return {k: jit(getattr(K, k)) for k in ("vector_add", "matmul_tiled", "block_sum")}, cuda.jit(busy)


def gpu_run(n: int = 1 << 24, mm: int = 1024, threads: int = 256, iters: int = 100) -> GpuRun | NeedsCuda:
    """Compile and run the kernels on the GPU (module docstring). A `NeedsCuda` where that is impossible."""
    what = "numba.cuda.jit kernels vs torch, and the waves of a launch"
    try:
        import torch
    except ImportError:                      # pragma: no cover - torch is a dependency
        return NeedsCuda(what)
    if not torch.cuda.is_available():
        return NeedsCuda(what)
    try:
        from numba import cuda
        kernels, busy = _gpu_kernels(cuda)
        return _measure(torch, cuda, kernels, busy, n, mm, threads, iters)
    except Exception as e:  # noqa: BLE001 - numba without libNVVM, an old driver: say so in one line
        return NeedsCuda(f"{what} (numba could not compile or run them: {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:120] if str(e) else ''}; try pip install 'numba-cuda[cu12]')")


def _measure(torch, cuda, kernels, busy, n, mm, threads, iters) -> GpuRun:   # pragma: no cover - GPU only
    from labkit.bench import median_time
    from labkit.gpu_model import cuda_kernels as K
    from labkit.gpu_model.occupancy import SMLimits, occupancy

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    a, b = torch.randn(n, device=dev, generator=g), torch.randn(n, device=dev, generator=g)
    out = torch.empty_like(a)
    A = torch.randint(-4, 5, (mm, mm), device=dev, generator=g).float()
    B = torch.randint(-4, 5, (mm, mm), device=dev, generator=g).float()
    C = torch.empty(mm, mm, device=dev)
    x = torch.randint(-4, 5, (n,), device=dev, generator=g).float()
    s = torch.zeros(1, device=dev)
    ca = lambda t: cuda.as_cuda_array(t)  # noqa: E731  (torch tensors through __cuda_array_interface__)
    calls = {
        "vector_add": (lambda: kernels["vector_add"][K.cdiv(n, threads), threads](ca(a), ca(b), ca(out), n),
                       lambda: torch.equal(out, a + b)),
        "matmul_tiled": (lambda: kernels["matmul_tiled"][(K.cdiv(mm, K.TILE), K.cdiv(mm, K.TILE)), (K.TILE, K.TILE)](
            ca(A), ca(B), ca(C), mm, mm, mm), lambda: torch.equal(C, A @ B)),
        "block_sum": (lambda: (s.zero_(), kernels["block_sum"][K.cdiv(n, K.BLOCK), K.BLOCK](ca(x), ca(s), n)),
                      lambda: float(s.item()) == float(x.double().sum().item())),
    }
    results = {}
    for name, (call, ok) in calls.items():
        call()
        torch.cuda.synchronize()
        results[name] = {"equal": bool(ok()), "ms": median_time(call, repeat=10, warmup=2) * 1e3}
    props = torch.cuda.get_device_properties(dev)
    sm = SMLimits(f"{props.name} (sm_{props.major}{props.minor})", sms=props.multi_processor_count,
                  max_warps=props.max_threads_per_multi_processor // 32, max_blocks=32,
                  registers=props.regs_per_multiprocessor, smem_bytes=props.shared_memory_per_multiprocessor,
                  smem_per_block=props.shared_memory_per_block_optin)
    busy_out = torch.empty(threads * sm.sms * 64, device=dev)
    busy[sm.sms, threads](ca(busy_out), 10)
    torch.cuda.synchronize()
    regs = busy.get_regs_per_thread()
    regs = max(regs.values()) if isinstance(regs, dict) else regs
    per_sm = occupancy(threads, int(regs), 0, sm).blocks
    wave = sm.sms * per_sm
    points = []
    for blocks in (wave // 2, wave, wave + 1, 2 * wave, 2 * wave + 1, 3 * wave):
        t = median_time(lambda: busy[blocks, threads](ca(busy_out), iters), repeat=5, warmup=1)
        points.append((blocks, t * 1e3))
    return GpuRun(props.name, results, sm.sms, int(regs), per_sm, points)
