"""Lab 01 exercises: arithmetic intensity, the roofline, MFU/HFU.

Conventions (as in the notebook): one FLOP per add/multiply; bytes moved are
the compulsory traffic (each operand read once, each result written once per
kernel); arithmetic intensity = FLOPs / bytes.
"""


def matmul_intensity(m, k, n, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of C = A @ B with A (m x k), B (k x n), C (m x n).

    FLOPs: one multiply and one add per (i, j, p) triple. Bytes: A and B read
    once, C written once, each element ``dtype_bytes`` bytes. Returns a float.
    """
    raise NotImplementedError("hint: count 2*m*k*n FLOPs and (m*k + k*n + m*n) elements moved; try m=1 (a vector times a matrix)")


def chain_intensity(k, fused, dtype_bytes=4):
    """Arithmetic intensity (FLOP/byte) of a chain of ``k`` binary element-wise ops.

    The chain is y = (((x0 op x1) op x2) ... op xk) over k+1 input arrays of the
    same length n: k FLOPs per element. Unfused, every op is its own kernel that
    reads two arrays and writes one. Fused, one kernel reads the k+1 inputs and
    writes y. The result does not depend on n. Returns a float.
    """
    raise NotImplementedError("hint: count arrays moved per element: unfused 3 per op, fused (k+1) reads + 1 write")


def attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline: the best FLOP/s an op of ``intensity`` (FLOP/byte) can reach on a machine
    with compute peak ``peak_flops`` (FLOP/s) and memory ``bandwidth`` (bytes/s)."""
    raise NotImplementedError("hint: the roof is the lower of two ceilings: compute peak and intensity * bandwidth")


def mfu_hfu(n_params, tokens, seconds, peak_flops, recompute_forward):
    """(MFU, HFU) of training a dense model of ``n_params`` parameters on ``tokens`` tokens
    in ``seconds`` on hardware with ``peak_flops`` FLOP/s.

    Forward costs 2 FLOPs per parameter per token and backward twice a forward.
    With ``recompute_forward`` (activation checkpointing) the forward is run once
    more during backward; that work counts for HFU but not for MFU.
    """
    raise NotImplementedError("hint: model FLOPs are 6*N*tokens always; hardware FLOPs add one more forward (2*N*tokens) when recomputing")
