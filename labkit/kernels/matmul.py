"""Tiled matmul C = A @ B with a k-loop, grouped program order and fp32 accumulation.

Program (pid_m, pid_n) owns a BLOCK_M x BLOCK_N tile of C. It walks K in
steps of BLOCK_K, loading a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x
BLOCK_N tile of B each step and accumulating ``tl.dot`` into an fp32 tile,
then writes its C tile once. Edges are masked, so M, N, K need not be block
multiples.

Traffic (Lab 03's formula, per tile): each program reads (BLOCK_M + BLOCK_N)
* K elements, so all ceil(M/BM)*ceil(N/BN) programs read about M*N*K*(1/BN +
1/BM) elements, plus M*N written: for square b x b tiles, 2 n^3 / b + n^2
(see ``tiled_traffic_elements``).
Bigger tiles -> less traffic, until they no longer fit on chip.

Grouped ordering: consecutive program ids walk down GROUP_M rows of tiles
before moving right, so programs running at the same time share A and B
tiles in L2.

``input_precision="ieee"`` is set explicitly in ``tl.dot``: for fp32 inputs a
GPU would otherwise use TF32 (10-bit mantissa) while the interpreter computes
in full fp32, and the two would disagree. (It does not affect fp16/bf16.)

Interpreter quirk (triton 3.9): its ``tl.dot`` multiplies bf16 tiles as their
raw 16-bit integer patterns (numpy has no bf16), giving garbage (reported
upstream as triton-lang/triton#11584; the interpreter does not support bf16
dot yet). So under the
interpreter bf16 tiles are converted to fp32 just before the dot
(``DOT_FP32``). That changes nothing numerically: a product of two bf16
numbers (8-bit mantissas) is exact in fp32, and the GPU's bf16 MMA also
accumulates in fp32; only the summation order may differ.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from labkit.kernels.checks import (DOT_MAX, DOT_MIN, check_block, check_int, check_same, check_shared_memory,
                                   check_tensor, interpreting, pipelined_tile_bytes, shared_memory_limit)


# BEGIN SOLUTION (lab04_triton: labkit's production matmul kernel answers the exercise too)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, DOT_FP32: tl.constexpr = False):
    # grouped ordering: program id -> (pid_m, pid_n)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        if DOT_FP32:  # interpreter + bf16 only: see module docstring
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
# END SOLUTION


# On a GPU: a small autotune set (tiles, pipeline stages, warps), tuned per (M, N, K).
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=5, num_warps=2),
]
# Under the interpreter: one fixed, small config (no tuning: timings mean nothing there).
INTERPRETER_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}

_autotuned = None


def _tuned_kernel():
    global _autotuned
    if _autotuned is None:
        _autotuned = triton.autotune(configs=GPU_CONFIGS, key=["M", "N", "K"])(matmul_kernel)
    return _autotuned


TILE_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
LAUNCH_KEYS = ("num_warps", "num_stages")   # optional: Triton launch options (ignored by the interpreter)
MAX_GROUP_M = 1 << 16


def shared_bytes(config: dict, itemsize: int) -> int:
    """Shared memory one program needs (bytes): its A (BLOCK_M x BLOCK_K) and B (BLOCK_K x BLOCK_N)
    tiles in flight, num_stages (default 3) pipeline stages deep."""
    tiles = config["BLOCK_M"] * config["BLOCK_K"] + config["BLOCK_K"] * config["BLOCK_N"]
    return pipelined_tile_bytes(tiles, config.get("num_stages", 3), 0, itemsize)


def check_config(config, itemsize: int = 4, smem_limit: int | None = None) -> dict:
    """Validate a matmul ``config`` and return it as a plain dict of ints; one-line errors.

    Required: BLOCK_M, BLOCK_N, BLOCK_K, powers of two in 16..256 (``tl.dot`` needs every
    tile dimension >= 16 when compiled), and GROUP_M, an int in 1..65536 (tile rows per
    group; 0 or less would divide by zero in the grouped order). Optional: num_warps (a power
    of two in 1..32) and num_stages (an int in 1..8). Any other key is refused. With
    ``smem_limit`` (bytes per program, `checks.shared_memory_limit`), tiles of ``itemsize``-byte
    elements that cannot fit in shared memory are refused too.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"matmul: config must be a dict with keys {', '.join(TILE_KEYS)}, "
                        f"got {type(config).__name__}")
    unknown = [k for k in config if k not in TILE_KEYS + LAUNCH_KEYS]
    if unknown:
        raise ValueError(f"matmul: unknown config key(s) {', '.join(map(repr, unknown))}; "
                         f"allowed: {', '.join(TILE_KEYS + LAUNCH_KEYS)}")
    missing = [k for k in TILE_KEYS if k not in config]
    if missing:
        raise ValueError(f"matmul: config is missing {', '.join(missing)} (need {', '.join(TILE_KEYS)})")
    cfg = {k: check_block("matmul", f"config['{k}']", config[k], minimum=DOT_MIN, maximum=DOT_MAX)
           for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    cfg["GROUP_M"] = check_int("matmul", "config['GROUP_M']", config["GROUP_M"], minimum=1, maximum=MAX_GROUP_M)
    if "num_warps" in config:
        cfg["num_warps"] = check_block("matmul", "config['num_warps']", config["num_warps"], minimum=1, maximum=32)
    if "num_stages" in config:
        cfg["num_stages"] = check_int("matmul", "config['num_stages']", config["num_stages"], minimum=1, maximum=8)
    check_shared_memory("matmul", shared_bytes(cfg, itemsize), smem_limit,
                        f"tiles {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} with {cfg.get('num_stages', 3)} "
                        f"stages ({itemsize}-byte elements)", "use smaller tiles or fewer num_stages")
    return cfg


def grid_size(M: int, N: int, block_m: int, block_n: int) -> int:
    """Programs launched: ceil(M/BLOCK_M) * ceil(N/BLOCK_N) (one per C tile)."""
    return triton.cdiv(M, block_m) * triton.cdiv(N, block_n)


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """C = A @ B for 2-D A (M, K) and B (K, N) of one dtype (fp32/fp16/bf16); any strides.

    Accumulates in fp32 and returns C (M, N) in the input dtype. ``config``
    (keys BLOCK_M, BLOCK_N, BLOCK_K: powers of two in 16..256; GROUP_M: an int
    >= 1; optionally num_warps, num_stages; see :func:`check_config`) fixes the
    tiles; by default the interpreter uses INTERPRETER_CONFIG and a GPU
    autotunes over GPU_CONFIGS.
    """
    check_tensor("matmul", "a", a, ndim=2, contiguous=False)
    check_tensor("matmul", "b", b, ndim=2, contiguous=False)
    check_same("matmul", a=a, b=b)
    cfg = None if config is None else check_config(config, a.element_size(), shared_memory_limit(a.device))
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} "
                         f"(need a (M, K) and b (K, N))")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    if cfg is None and not interpreting():
        kernel = _tuned_kernel()
        kernel[lambda meta: (grid_size(M, N, meta["BLOCK_M"], meta["BLOCK_N"]),)](*args)
        return c
    if cfg is None:
        cfg = dict(INTERPRETER_CONFIG)
    dot_fp32 = interpreting() and a.dtype == torch.bfloat16
    try:
        matmul_kernel[(grid_size(M, N, cfg["BLOCK_M"], cfg["BLOCK_N"]),)](*args, **cfg, DOT_FP32=dot_fp32)
    except OutOfResources as e:          # what check_config's estimate missed: Triton's count, one line
        raise ValueError(f"matmul: config {cfg}: {e}") from None
    return c


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32-accumulated reference: (a.float() @ b.float()) cast to a.dtype."""
    return (a.float() @ b.float()).to(a.dtype)


def program_tile(pid: int, M: int, N: int, block_m: int, block_n: int, group_m: int) -> tuple[int, int]:
    """The (pid_m, pid_n) tile that program ``pid`` computes under grouped ordering (pure Python)."""
    M, N = check_int("program_tile", "M", M, minimum=1), check_int("program_tile", "N", N, minimum=1)
    block_m = check_int("program_tile", "block_m", block_m, minimum=1)
    block_n = check_int("program_tile", "block_n", block_n, minimum=1)
    group_m = check_int("program_tile", "group_m", group_m, minimum=1)
    check_int("program_tile", "pid", pid, minimum=0, maximum=grid_size(M, N, block_m, block_n) - 1)
    num_pid_m, num_pid_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    group_size = group_m * num_pid_n
    first_m = (pid // group_size) * group_m
    rows = min(num_pid_m - first_m, group_m)
    return first_m + (pid % group_size) % rows, (pid % group_size) // rows


def tiled_traffic_elements(M: int, K: int, N: int, block_m: int, block_n: int) -> dict:
    """Elements each operand moves between memory and chip if nothing is reused across programs.

    Program (i, j) reads rows i*BM.. of A (all K columns) and columns j*BN.. of
    B, so A is read once per tile column and B once per tile row; masked lanes
    move nothing: A = M*K*ceil(N/BN), B = K*N*ceil(M/BM), C = M*N (written once).
    For M=N=K=n and BM=BN=b: 2*n^3/b + n^2 in all -- Lab 03's register-tiling
    count n^3/v2 + n^3/v1 + n^2 with the Triton tile in the role of the register tile.
    """
    M, K, N = (check_int("tiled_traffic_elements", n, v, minimum=0) for n, v in (("M", M), ("K", K), ("N", N)))
    block_m = check_int("tiled_traffic_elements", "block_m", block_m, minimum=1)
    block_n = check_int("tiled_traffic_elements", "block_n", block_n, minimum=1)
    a = M * K * triton.cdiv(N, block_n)
    b = K * N * triton.cdiv(M, block_m)
    return {"A": a, "B": b, "C": M * N, "total": a + b + M * N}
