"""Cost models: FLOPs, bytes moved, arithmetic intensity, the roofline, MFU/HFU.

Counting convention (used everywhere in the course):
- FLOPs: one per add, multiply, compare, exp or divide on one element; a
  multiply-add counts 2. Matmul of (m x k) by (k x n) is 2*m*k*n FLOPs.
- Bytes moved: the *compulsory* traffic to and from main memory, assuming
  every operand is read once and every result written once (perfect caching
  inside one kernel, no caching between kernels). An unfused chain of
  kernels therefore pays for every intermediate twice (written, then read).
- Arithmetic intensity I = FLOPs / bytes (FLOP/byte). Counting "read/writes"
  in elements instead gives add an intensity of 1/3; in bytes of float32 it is 1/12.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "OpCost", "elementwise_add", "elementwise_chain", "matmul", "softmax", "copy", "triad",
    "matmul_intensity", "chain_intensity", "attainable_flops", "mfu_hfu",
    "ridge_intensity", "bound", "mfu", "hfu", "training_flops", "utilization",
    "linear_intensity", "compute_bound_batch", "raise_roof", "DATASHEETS",
]

# Vendor datasheet numbers (dense, no sparsity): peak FLOP/s per precision and memory bandwidth (bytes/s).
# The ridge point peak / bandwidth is what decides memory- vs compute-bound on each.
DATASHEETS = {
    "NVIDIA H100 SXM (bf16 tensor cores)": (989e12, 3.35e12),
    "NVIDIA H100 SXM (fp32, no tensor cores)": (67e12, 3.35e12),
    "NVIDIA A100 SXM 80GB (bf16 tensor cores)": (312e12, 2.039e12),
    "NVIDIA A100 SXM 80GB (fp32, no tensor cores)": (19.5e12, 2.039e12),
}


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


def _pos_num(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")
    return v


@dataclass(frozen=True)
class OpCost:
    """An operation's work: ``flops`` (FLOPs) and ``bytes`` (bytes moved to/from memory)."""

    name: str
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes


def elementwise_add(n: int, dtype_bytes: int = 4) -> OpCost:
    """c = a + b on n elements: n FLOPs; reads a, b and writes c: 3*n*dtype_bytes bytes."""
    _pos_int("n", n), _pos_int("dtype_bytes", dtype_bytes)
    return OpCost(f"add n={n}", n, 3 * n * dtype_bytes)


# BEGIN SOLUTION  (the intensities of matmul_intensity and chain_intensity: denied to graded code)
def elementwise_chain(n: int, fused: bool, dtype_bytes: int = 4) -> OpCost:
    """e = d + (a + b) * c on n elements (the lab's fusion example), 3 FLOPs per element.

    Unfused (three kernels: add, mul, add) each kernel reads 2 and writes 1
    array: 9 arrays moved. Fused (one kernel) reads a, b, c, d and writes e:
    5 arrays moved. Bytes = arrays * n * dtype_bytes.
    """
    _pos_int("n", n), _pos_int("dtype_bytes", dtype_bytes)
    arrays = 5 if fused else 9
    return OpCost(f"chain {'fused' if fused else 'unfused'} n={n}", 3 * n, arrays * n * dtype_bytes)


def matmul(m: int, k: int, n: int, dtype_bytes: int = 4) -> OpCost:
    """(m x k) @ (k x n): 2*m*k*n FLOPs; reads A and B once, writes C once: (mk + kn + mn)*dtype_bytes."""
    for name, v in (("m", m), ("k", k), ("n", n), ("dtype_bytes", dtype_bytes)):
        _pos_int(name, v)
    return OpCost(f"matmul {m}x{k}x{n}", 2 * m * k * n, (m * k + k * n + m * n) * dtype_bytes)
# END SOLUTION


def softmax(rows: int, cols: int, dtype_bytes: int = 4) -> OpCost:
    """Row softmax of a rows x cols matrix, fused (one read, one write).

    FLOPs per element: max (1 compare), subtract (1), exp (1), sum (1), divide (1) = 5.
    Bytes: read the input once and write the output once = 2*rows*cols*dtype_bytes.
    """
    _pos_int("rows", rows), _pos_int("cols", cols), _pos_int("dtype_bytes", dtype_bytes)
    return OpCost(f"softmax {rows}x{cols}", 5 * rows * cols, 2 * rows * cols * dtype_bytes)


def copy(n: int, dtype_bytes: int = 4) -> OpCost:
    """dst[:] = src (STREAM "copy"): 0 FLOPs, 2*n*dtype_bytes bytes (read + write)."""
    _pos_int("n", n), _pos_int("dtype_bytes", dtype_bytes)
    return OpCost(f"copy n={n}", 0, 2 * n * dtype_bytes)


def triad(n: int, dtype_bytes: int = 4) -> OpCost:
    """a = b + s*c (STREAM "triad"): 2*n FLOPs, 3*n*dtype_bytes bytes."""
    _pos_int("n", n), _pos_int("dtype_bytes", dtype_bytes)
    return OpCost(f"triad n={n}", 2 * n, 3 * n * dtype_bytes)


def matmul_intensity(m, k, n, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of C = A @ B with A (m x k), B (k x n), C (m x n).

    FLOPs: one multiply and one add per (i, j, p) triple. Bytes: A and B read
    once, C written once, each element ``dtype_bytes`` bytes. Returns a float.
    """
    # BEGIN SOLUTION
    # HINT: FLOPs over bytes: a multiply-add per (i, j, p) triple; each of A, B, C crosses memory
    # HINT: once. Try m=1 (a vector times a matrix) and compare with m=n=k.
    flops = 2 * m * k * n
    moved = (m * k + k * n + m * n) * dtype_bytes
    return flops / moved
    # END SOLUTION


def chain_intensity(k, fused, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of a chain of ``k`` binary element-wise ops.

    The chain is y = (((x0 op x1) op x2) ... op xk) over k+1 input arrays of the
    same length n: k FLOPs per element. Unfused, every op is its own kernel that
    reads two arrays and writes one. Fused, one kernel reads the k+1 inputs and
    writes y. The result does not depend on n. Returns a float.
    """
    # BEGIN SOLUTION
    # HINT: count the arrays that cross memory per element: each unfused kernel reads two and
    # HINT: writes one; the fused kernel reads every input once and writes one result.
    arrays = (k + 2) if fused else 3 * k
    return k / (arrays * dtype_bytes)
    # END SOLUTION


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline: min(peak_flops, intensity * bandwidth) in FLOP/s; Lab 01's `_attainable_flops`
    with its arguments checked. ``intensity`` FLOP/byte, ``peak_flops`` FLOP/s, ``bandwidth`` bytes/s.
    """
    if isinstance(intensity, bool) or not isinstance(intensity, (int, float)) or intensity < 0:
        raise ValueError(f"intensity must be a number >= 0 (FLOP/byte), got {intensity!r}")
    _pos_num("peak_flops", peak_flops), _pos_num("bandwidth", bandwidth)
    return _attainable_flops(intensity, peak_flops, bandwidth)


def _attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline: the best FLOP/s an op of ``intensity`` (FLOP/byte) can reach on a machine
    with compute peak ``peak_flops`` (FLOP/s) and memory ``bandwidth`` (bytes/s)."""
    # BEGIN SOLUTION
    # HINT: the roof is the lower of two ceilings: the compute peak, and what memory can feed
    # HINT: (intensity times bandwidth).
    return min(peak_flops, intensity * bandwidth)
    # END SOLUTION


def ridge_intensity(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the roofline bends: peak_flops / bandwidth."""
    return _pos_num("peak_flops", peak_flops) / _pos_num("bandwidth", bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """'memory' left of the ridge point, 'compute' at or right of it."""
    return "memory" if intensity < ridge_intensity(peak_flops, bandwidth) else "compute"


def utilization(flops: float, seconds: float, peak_flops: float) -> float:
    """(flops / seconds) / peak_flops, a fraction in [0, 1] for a sane measurement."""
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or flops < 0:
        raise ValueError(f"flops must be a number >= 0, got {flops!r}")
    return flops / _pos_num("seconds", seconds) / _pos_num("peak_flops", peak_flops)


def mfu_hfu(n_params, tokens, seconds, peak_flops, recompute_forward):
    """(MFU, HFU) of training a dense model of ``n_params`` parameters on ``tokens`` tokens
    in ``seconds`` on hardware with ``peak_flops`` FLOP/s.

    Forward costs 2 FLOPs per parameter per token and backward twice a forward.
    With ``recompute_forward`` (activation checkpointing) the forward is run once
    more during backward; that work counts for HFU but not for MFU.
    """
    # BEGIN SOLUTION
    # HINT: both are FLOPs per second over the peak. Model FLOPs count forward and backward once;
    # HINT: hardware FLOPs also count the forward that checkpointing runs again.
    model_flops = 6 * n_params * tokens
    hardware_flops = (8 if recompute_forward else 6) * n_params * tokens
    return model_flops / seconds / peak_flops, hardware_flops / seconds / peak_flops
    # END SOLUTION


# BEGIN SOLUTION  (the same counts as mfu_hfu: denied to graded code)
def training_flops(n_params: float, tokens: float, recompute_forward: bool = False) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of training a dense model on ``tokens`` tokens.

    Forward = 2*N FLOPs per token, backward = 2 forwards = 4*N, so a step is
    6*N*tokens *model* FLOPs. With activation checkpointing one forward is
    run again during backward, so the *hardware* executes 8*N*tokens; the
    model FLOPs stay 6*N*tokens (the recompute does not advance training).
    """
    _pos_num("n_params", n_params), _pos_num("tokens", tokens)
    model = 6 * n_params * tokens
    hardware = (8 if recompute_forward else 6) * n_params * tokens
    return model, hardware


def mfu(n_params: float, tokens: float, seconds: float, peak_flops: float) -> float:
    """Model FLOPs utilization: 6*N*tokens / seconds / peak_flops (checkpointing does not change it)."""
    model, _ = training_flops(n_params, tokens)
    return utilization(model, seconds, peak_flops)


def hfu(n_params: float, tokens: float, seconds: float, peak_flops: float, recompute_forward: bool = False) -> float:
    """Hardware FLOPs utilization: FLOPs actually executed (8*N*tokens with recompute) / seconds / peak."""
    _, hardware = training_flops(n_params, tokens, recompute_forward)
    return utilization(hardware, seconds, peak_flops)
# END SOLUTION


def linear_intensity(batch: int, d_in: int, d_out: int, dtype_bytes: int = 2) -> float:
    """Intensity (FLOP/byte) of y = x @ W with x (batch x d_in), W (d_in x d_out): `matmul(batch, d_in, d_out)`.

    2·B·d_in·d_out FLOPs over (B·d_in + d_in·d_out + B·d_out)·dtype_bytes bytes; for B << d this is
    about 2B / dtype_bytes: the weights are read once whatever the batch, so each token reuses them.
    """
    return matmul(batch, d_in, d_out, dtype_bytes).intensity


def compute_bound_batch(peak_flops: float, bandwidth: float, d_in: int, d_out: int,
                        dtype_bytes: int = 2) -> float:
    """Smallest batch B (tokens, rounded up; math.inf if none) at which y = x @ W is compute-bound.

    Solves linear_intensity(B) >= ridge R = peak / bandwidth:
    2·B·d_in·d_out >= R·b·(B·(d_in + d_out) + d_in·d_out), so
    B* = R·b·d_in·d_out / (2·d_in·d_out − R·b·(d_in + d_out)); for large d, B* ≈ R·b / 2.
    """
    import math

    for name, v in (("d_in", d_in), ("d_out", d_out), ("dtype_bytes", dtype_bytes)):
        _pos_int(name, v)
    r = ridge_intensity(peak_flops, bandwidth)
    denom = 2 * d_in * d_out - r * dtype_bytes * (d_in + d_out)
    if denom <= 0:
        return math.inf
    b = math.ceil(r * dtype_bytes * d_in * d_out / denom - 1e-9)
    while b > 1 and linear_intensity(b - 1, d_in, d_out, dtype_bytes) >= r:   # rounding guards
        b -= 1
    while linear_intensity(b, d_in, d_out, dtype_bytes) < r:
        b += 1
    return b


def raise_roof(peak_flops: float, bandwidth: float, points) -> tuple[float, float]:
    """A roof (peak FLOP/s, bandwidth bytes/s) no point exceeds, raised from the given one only as
    far as needed.

    ``points``: (intensity FLOP/B, achieved FLOP/s). A measured roof is itself a measurement (a
    median, at other sizes, at another moment); a point above it shows the machine can do more.
    A point right of the ridge raises the peak, one left of it the bandwidth (to achieved / I).
    """
    for intensity, achieved in points:
        if achieved > attainable_flops(intensity, peak_flops, bandwidth):
            if intensity >= ridge_intensity(peak_flops, bandwidth):
                peak_flops = achieved
            else:
                bandwidth = max(bandwidth, achieved / intensity)
                peak_flops = max(peak_flops, achieved)
    return peak_flops, bandwidth

