"""Lab 03 exercises: tiled matrix multiplication with load counting.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

Conventions (the same as labkit.matmul): A is M x K, B is K x N, C = A @ B is M x N.
Tile sizes need not divide the matrix sizes: the last tile along a dimension is
smaller, and you count only the elements really loaded. Traffic is counted in
elements with `labkit.matmul.Traffic(a_reads, b_reads, c_writes)`.
Grade with ``python -m labkit.grade --lab 03`` (or ``make grade LAB=03``).
"""
import numpy as np

from labkit.matmul import Traffic, TwoLevelTraffic


def cache_tiled(A, B, b1, b2):
    """Cache-aware tiled matmul (DRAM -> L1) that counts the elements it loads.

    A: (M, K) and B: (K, N) float numpy arrays; b1, b2: positive int tile sizes.
    Loop to implement:
        for each block of b1 rows of A (the last may be shorter):
            load that whole b1 x K row block of A                  (count its elements in a_reads)
            for each block of b2 columns of B (the last may be narrower):
                load that K x b2 column block of B                 (count its elements in b_reads)
                write the b1 x b2 block of C = (A block) @ (B block) (count its elements in c_writes)
    Returns (C, traffic): C the (M, N) float64 product, traffic a labkit.matmul.Traffic.
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if b1 < 1 or b2 < 1:
        raise ValueError(f"tile sizes must be >= 1, got b1={b1}, b2={b2}")
    M, N = A.shape[0], B.shape[1]
    C = np.zeros((M, N))
    t = Traffic()
    for i in range(0, M, b1):
        a = A[i:i + b1, :]
        t.a_reads += a.size
        for j in range(0, N, b2):
            b = B[:, j:j + b2]
            t.b_reads += b.size
            block = a @ b
            C[i:i + b1, j:j + b2] = block
            t.c_writes += block.size
    return C, t


def register_tiled(A, B, v1, v2, v3):
    """Register-aware tiled matmul (L1 -> registers) that counts the elements it loads.

    A: (M, K) and B: (K, N) float numpy arrays; v1, v2, v3: positive int tile sizes.
    v1 = rows and v2 = columns of the C tile held in registers; v3 = width of each k step.
    Loop to implement:
        for each block of v1 rows and each block of v2 columns of C (last ones may be smaller):
            c = zeros (the register tile)
            for each block of v3 values of k (the last may be shorter):
                load a = the A tile (v1 x v3) and b = the B tile (v3 x v2)   (count both)
                c += a @ b
            write c into C                                                  (count c_writes)
    Returns (C, traffic): C the (M, N) float64 product, traffic a labkit.matmul.Traffic.
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if min(v1, v2, v3) < 1:
        raise ValueError(f"tile sizes must be >= 1, got v1={v1}, v2={v2}, v3={v3}")
    M, K = A.shape
    N = B.shape[1]
    C = np.zeros((M, N))
    t = Traffic()
    for i in range(0, M, v1):
        for j in range(0, N, v2):
            c = np.zeros((min(v1, M - i), min(v2, N - j)))
            for k in range(0, K, v3):
                a = A[i:i + v1, k:k + v3]
                b = B[k:k + v3, j:j + v2]
                t.a_reads += a.size
                t.b_reads += b.size
                c += a @ b
            C[i:i + v1, j:j + v2] = c
            t.c_writes += c.size
    return C, t


def tiled(A, B, b1, b2, v1, v2):
    """Cache and register tiling combined, counting traffic at both levels.

    A: (M, K) and B: (K, N) float numpy arrays; b1, b2, v1, v2: positive int tile sizes.
    Loop to implement:
        for each b1-row block of A: load it into L1                      (dram.a_reads)
            for each b2-column block of B: load it into L1               (dram.b_reads)
                for each v1-row x v2-column register tile of this b1 x b2 block of C
                (tiles never cross the block edge; edge tiles may be smaller):
                    load its rows of the A block (v1 x K) and its columns of the B block
                    (K x v2) into registers                              (l1.a_reads, l1.b_reads)
                    write the tile of C                                  (l1.c_writes)
                the b1 x b2 block of C is now done                       (dram.c_writes)
    Returns (C, traffic): C the (M, N) float64 product; traffic a
    labkit.matmul.TwoLevelTraffic(dram=Traffic for DRAM -> L1, l1=Traffic for L1 -> registers).
    Raise ValueError if A.shape[1] != B.shape[0] or a tile size is < 1.
    """
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"inner dimensions differ: A {A.shape}, B {B.shape}")
    if min(b1, b2, v1, v2) < 1:
        raise ValueError(f"tile sizes must be >= 1, got b1={b1}, b2={b2}, v1={v1}, v2={v2}")
    M, N = A.shape[0], B.shape[1]
    C = np.zeros((M, N))
    dram, l1 = Traffic(), Traffic()
    for i in range(0, M, b1):
        a = A[i:i + b1, :]
        dram.a_reads += a.size
        for j in range(0, N, b2):
            b = B[:, j:j + b2]
            dram.b_reads += b.size
            for x in range(0, a.shape[0], v1):
                for y in range(0, b.shape[1], v2):
                    ar, br = a[x:x + v1, :], b[:, y:y + v2]
                    l1.a_reads += ar.size
                    l1.b_reads += br.size
                    tile = ar @ br
                    C[i + x:i + x + tile.shape[0], j + y:j + y + tile.shape[1]] = tile
                    l1.c_writes += tile.size
            dram.c_writes += a.shape[0] * b.shape[1]
    return C, TwoLevelTraffic(dram, l1)
