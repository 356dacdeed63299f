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


def measure(n: int, tiles, repeat: int = 3, dtype=None, device: str = "cpu", seed: int = 0) -> dict:
    """Time blocked_matmul for each tile and torch.matmul on n x n matrices (same run).

    Returns {"n", "blas_s", "blas_gflops", "rows": [(tile, seconds, gflops, ratio_to_blas)]},
    seconds = median wall time (labkit.bench.median_time), GFLOP/s = 2n^3 / s / 1e9,
    ratio_to_blas = blocked GFLOP/s / BLAS GFLOP/s.
    """
    import torch

    from labkit.bench import median_time

    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=dtype).to(device)
    B = torch.randn(n, n, generator=g, dtype=dtype).to(device)
    flops = matmul_flops(n, n, n)
    blas_s = median_time(lambda: torch.matmul(A, B), repeat=repeat, warmup=1, min_time_s=0.05)
    blas_gf = flops / blas_s / 1e9
    rows = []
    for tile in tiles:
        s = median_time(lambda: blocked_matmul(A, B, tile), repeat=repeat, warmup=1)
        gf = flops / s / 1e9
        rows.append((tile, s, gf, gf / blas_gf))
    return {"n": n, "blas_s": blas_s, "blas_gflops": blas_gf, "rows": rows}
