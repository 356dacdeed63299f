"""Lab 01 exercises: arithmetic intensity, the roofline, MFU/HFU.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

Conventions (as in the notebook): one FLOP per add/multiply; bytes moved are
the compulsory traffic (each operand read once, each result written once per
kernel); arithmetic intensity = FLOPs / bytes.
"""


def matmul_intensity(m, k, n, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of C = A @ B with A (m x k), B (k x n), C (m x n).

    FLOPs: one multiply and one add per (i, j, p) triple. Bytes: A and B read
    once, C written once, each element ``dtype_bytes`` bytes. Returns a float.
    """
    flops = 2 * m * k * n
    moved = (m * k + k * n + m * n) * dtype_bytes
    return flops / moved


def chain_intensity(k, fused, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of a chain of ``k`` binary element-wise ops.

    The chain is y = (((x0 op x1) op x2) ... op xk) over k+1 input arrays of the
    same length n: k FLOPs per element. Unfused, every op is its own kernel that
    reads two arrays and writes one. Fused, one kernel reads the k+1 inputs and
    writes y. The result does not depend on n. Returns a float.
    """
    arrays = (k + 2) if fused else 3 * k
    return k / (arrays * dtype_bytes)


def attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline: the best FLOP/s an op of ``intensity`` (FLOP/byte) can reach on a machine
    with compute peak ``peak_flops`` (FLOP/s) and memory ``bandwidth`` (bytes/s)."""
    return min(peak_flops, intensity * bandwidth)


def mfu_hfu(n_params, tokens, seconds, peak_flops, recompute_forward):
    """(MFU, HFU) of training a dense model of ``n_params`` parameters on ``tokens`` tokens
    in ``seconds`` on hardware with ``peak_flops`` FLOP/s.

    Forward costs 2 FLOPs per parameter per token and backward twice a forward.
    With ``recompute_forward`` (activation checkpointing) the forward is run once
    more during backward; that work counts for HFU but not for MFU.
    """
    model_flops = 6 * n_params * tokens
    hardware_flops = (8 if recompute_forward else 6) * n_params * tokens
    return model_flops / seconds / peak_flops, hardware_flops / seconds / peak_flops
