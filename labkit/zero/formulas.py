"""Per-rank bytes of the model states under ZeRO (Rajbhandari et al. 2020), and the real savings.

With Ψ parameters on N data-parallel ranks, per-parameter bytes of parameters p, gradients g and
optimizer states k (mixed-precision Adam: p = g = 2, k = 12):

    stage 0 (plain DP)            (p + g + k)·Ψ
    stage 1 (optimizer states)    (p + g)·Ψ + k·Ψ/N
    stage 2 (+ gradients)         p·Ψ + (g + k)·Ψ/N
    stage 3 (+ parameters)        (p + g + k)·Ψ/N

The "4× / 8×" reductions quoted for stages 1 and 2 are limits as N → ∞: (p+g+k)/(p+g) = 4 and
(p+g+k)/p = 8. At N = 8 they are ≈ 2.9× and ≈ 4.3× (`reduction`).
"""
from __future__ import annotations

from labkit.checks import check_int, check_real


# BEGIN SOLUTION (labkit's checked count: it answers model_state_bytes)
def model_state_bytes(num_params: float, world_size: int, stage: int, param_bytes: float = 2,
                      grad_bytes: float = 2, optimizer_bytes: float = 12) -> float:
    """Bytes of model states one rank holds: with p, g, k bytes per parameter and Ψ parameters on
    N ranks, (p + g + k)·Ψ at stage 0; stage 1 divides k·Ψ by N, stage 2 (g + k)·Ψ, stage 3 all."""
    fn = "model_state_bytes"
    psi = check_real(fn, "num_params", num_params, positive=True)
    n = check_int(fn, "world_size", world_size, minimum=1)
    stage = check_int(fn, "stage", stage, minimum=0, maximum=3)
    p = check_real(fn, "param_bytes", param_bytes)
    g = check_real(fn, "grad_bytes", grad_bytes)
    k = check_real(fn, "optimizer_bytes", optimizer_bytes)
    sharded = {0: 0.0, 1: k, 2: g + k, 3: p + g + k}[stage]
    return (p + g + k - sharded) * psi + sharded * psi / n
# END SOLUTION


def _model_state_bytes(num_params, world_size, stage, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes of parameters + gradients + optimizer states one rank holds.

    num_params: Ψ, the number of parameters; world_size: N data-parallel ranks; stage: 0 (plain
    data parallelism: everything replicated), 1 (optimizer states sharded over the N ranks),
    2 (gradients too), 3 (parameters too). param_bytes, grad_bytes, optimizer_bytes: bytes per
    parameter of each (mixed-precision Adam: 2, 2 and 12 — fp32 master copy, m and v).
    Return a float. Example: Ψ = 7.5e9, N = 64, stage 1 -> 4Ψ + 12Ψ/64 = 31.40625e9.
    """
    # BEGIN SOLUTION
    # HINT: start from everything replicated, (p + g + k)·Ψ, and divide by N the kinds of bytes
    # HINT: each stage shards: optimizer states from stage 1, gradients from 2, parameters at 3.
    p, g, k = param_bytes, grad_bytes, optimizer_bytes
    sharded = [0, k, g + k, p + g + k][stage]
    return float((p + g + k - sharded) * num_params + sharded * num_params / world_size)
    # END SOLUTION


def reduction(world_size: int, stage: int, **bytes_per_param) -> float:
    """How many times less than plain data parallelism a rank holds at this stage and N."""
    return model_state_bytes(1.0, world_size, 0, **bytes_per_param) / model_state_bytes(
        1.0, world_size, stage, **bytes_per_param)


def comm_bytes_per_step(num_params: float, world_size: int, stage: int, bytes_per_element: float = 2) -> float:
    """Bytes one rank sends per training step in a ring (Lab 05), for Ψ parameters on N ranks:

        stage 0 (DDP)     all-reduce of the gradients                      2(N−1)/N·Ψ·b
        stages 1 and 2    reduce-scatter of gradients + all-gather of params  2(N−1)/N·Ψ·b
        stage 3 (FSDP)    all-gather in forward and again in backward
                          + reduce-scatter of gradients                    3(N−1)/N·Ψ·b

    ZeRO-1 and -2 send what DDP sends (and use no all-reduce); ZeRO-3 sends 1.5× as much.
    """
    fn = "comm_bytes_per_step"
    psi = check_real(fn, "num_params", num_params, positive=True)
    n = check_int(fn, "world_size", world_size, minimum=1)
    stage = check_int(fn, "stage", stage, minimum=0, maximum=3)
    b = check_real(fn, "bytes_per_element", bytes_per_element, positive=True)
    return (3 if stage == 3 else 2) * (n - 1) / n * psi * b
