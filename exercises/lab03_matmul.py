"""Lab 03 exercises: tiled matrix multiplication with load counting.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

Conventions (the same as labkit.matmul): A is M x K, B is K x N, C = A @ B is M x N.
Tile sizes need not divide the matrix sizes: the last tile along a dimension is
smaller, and you count only the elements really loaded. Traffic is counted in
elements with `labkit.matmul.Traffic(a_reads, b_reads, c_writes)`.
Grade with ``python -m labkit.grade --lab 03`` (or ``make grade LAB=03``).
"""
import numpy as np  # noqa: F401

from labkit.matmul import Traffic, TwoLevelTraffic  # noqa: F401


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
    raise NotImplementedError("hint: keep each row block of A for the whole sweep over B's column blocks; numpy slices clip the last tile for you, and .size counts what a tile really holds.")


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
    raise NotImplementedError("hint: the C tile is an accumulator that stays put while the k loop streams tiles of A and B past it; it is written once, after the last k block.")


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
    raise NotImplementedError("hint: nest register tiles inside each cache block: two Traffic counters, one per level; a register tile never crosses its block's edge.")
