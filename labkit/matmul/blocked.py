"""A real-speed blocked matmul in torch, and its GFLOP/s vs tile size next to BLAS.

`blocked_matmul(A, B, tile)` computes C = A @ B (A: M x K, B: K x N torch tensors)
one tile x tile block of C at a time, accumulating over k-blocks with
``addmm_`` on tile-sized pieces. Each block product runs in BLAS, so the Python
loop overhead (about (M/tile)*(N/tile)*(K/tile) calls) is what small tiles pay;
large tiles approach a single BLAS call. `measure` times it against
``torch.matmul`` in the same run. A matmul of M x K by K x N is 2*M*N*K FLOPs.
"""
from __future__ import annotations

from labkit.matmul.traffic import check_tile

__all__ = ["blocked_matmul", "matmul_flops", "measure"]


def matmul_flops(M: int, K: int, N: int) -> int:
    """FLOPs of an M x K by K x N matmul: one multiply and one add per (i, j, k): 2*M*N*K."""
    return 2 * M * N * K


def _check(A, B):
    import torch

    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
        if X.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(X.shape)}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(A.shape)}, B is {tuple(B.shape)}")
    if A.dtype != B.dtype or A.device != B.device:
        raise ValueError(f"A and B must share dtype and device, got {A.dtype}/{A.device} and {B.dtype}/{B.device}")


def blocked_matmul(A, B, tile: int):
    """C = A @ B computed tile x tile block by block (tile x tile x tile block products).

    A: (M, K), B: (K, N) torch tensors of one dtype/device; tile: positive int (need not divide).
    Returns C: (M, N), same dtype/device.
    """
    import torch

    _check(A, B)
    tile = check_tile("tile", tile)
    M, K = A.shape
    N = B.shape[1]
    C = torch.zeros((M, N), dtype=A.dtype, device=A.device)
    for i0 in range(0, M, tile):
        Ai = A[i0:i0 + tile]
        for j0 in range(0, N, tile):
            c = C[i0:i0 + tile, j0:j0 + tile]          # a view: accumulate in place
            for k0 in range(0, K, tile):
                c.addmm_(Ai[:, k0:k0 + tile], B[k0:k0 + tile, j0:j0 + tile])
    return C


def measure(n: int, tiles, repeat: int = 3, rounds: int = 3, threads: int | None = 1, dtype=None,
            device: str = "cpu", seed: int = 0) -> dict:
    """Time blocked_matmul for each tile and torch.matmul on n x n matrices, in the same run.

    Each implementation is timed with labkit.bench.median_time (``repeat`` samples) in each
    of ``rounds`` interleaved rounds; the fastest round's median is kept, so a burst of load
    from other processes on a shared machine hits one round, not the comparison.
    ``threads``: torch intra-op threads during the measurement (1 by default: a single
    core, steady on a shared machine; None keeps the current setting).
    Returns {"n", "threads", "blas_s", "blas_gflops", "rows": [(tile, seconds, gflops, ratio_to_blas)]},
    seconds per matmul, GFLOP/s = 2n^3 / s / 1e9, ratio_to_blas = blocked GFLOP/s / BLAS GFLOP/s.
    """
    import torch

    from labkit.bench import median_time

    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=dtype).to(device)
    B = torch.randn(n, n, generator=g, dtype=dtype).to(device)
    flops = matmul_flops(n, n, n)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        best = {}
        for _ in range(rounds):
            cands = [("blas", lambda: torch.matmul(A, B))]
            cands += [(tile, (lambda t=tile: blocked_matmul(A, B, t))) for tile in tiles]
            for key, fn in cands:
                s = median_time(fn, repeat=repeat, warmup=1, min_time_s=0.02)
                best[key] = min(best.get(key, float("inf")), s)
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(old_threads)
    blas_gf = flops / best["blas"] / 1e9
    rows = [(tile, best[tile], flops / best[tile] / 1e9, flops / best[tile] / 1e9 / blas_gf) for tile in tiles]
    return {"n": n, "threads": used, "blas_s": best["blas"], "blas_gflops": blas_gf, "rows": rows}
