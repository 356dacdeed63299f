"""Algorithm-based fault tolerance (ABFT) for matrix multiplication: checksums that ride along.

Huang and Abraham, "Algorithm-Based Fault Tolerance for Matrix Operations", IEEE Transactions on
Computers C-33(6), 1984. Instead of checkpointing and recomputing, encode the inputs so that the
*output itself* says whether it is right, and where it is wrong.

**Encoding.** For A (m×k) and B (k×n), with e a vector of ones:

    column checksum matrix   A_c = [ A ; eᵀA ]          (m+1)×k: a last row of column sums
    row checksum matrix      B_r = [ B , B e ]          k×(n+1): a last column of row sums
    full checksum product    C_f = A_c · B_r = [ C    C e  ]
                                               [ eᵀC  eᵀCe ]

because eᵀ(AB) = (eᵀA)B and (AB)e = A(Be): one ordinary matmul of encoded inputs computes C =
A·B *and* its row sums (last column) and column sums (last row). `abft_matmul` does exactly that.

**Checking.** Recompute each row's sum of C_f's first n entries and compare with its last entry
(the same for columns, the checksum row and column included). A single corrupted element
C_f[i, j] (a bit flip in a multiplier, a bad memory word) shifts row i's sum and column j's sum
by the same δ: exactly one row and one column disagree, they cross at the culprit (`detect`), and
the row's residual δ is what to subtract (`correct`). If only a row (or a column) disagrees, the
corrupted element is the checksum itself and C is intact.

**What it cannot do.** Two corrupted elements in different rows and columns give two bad rows and
two bad columns: the error is *detected* but not located (four candidate cells), so the product
must be recomputed (`UncorrectableError`). Four errors of ±δ on the corners of a rectangle cancel
in every row and column sum: that pattern goes *undetected*. An error smaller than the rounding
tolerance is indistinguishable from rounding (flips of the lowest mantissa bits, `flip_bit`), and
one near the tolerance may trip only one of its two checksums: it is then blamed on a checksum
cell and left in C — where it is below the other checksum's tolerance, i.e. rounding-sized.

**Tolerance.** In floating point the sums never agree exactly. A computed entry of C carries at
most about k·u·(|A||B|)_ij of rounding error (u = 2⁻⁵³ in float64), and summing a row adds about
n·u·Σ_j(|A||B|)_ij; the checksum entry has a like bound. So row i is flagged only when

    |residual_i| > (m + n + k + 2) · ε · (|A| |B| e)_i              (ε = 2⁻⁵², machine epsilon)

and column j likewise with (eᵀ|A| |B|)_j — a worst-case bound, scaled by each row's magnitudes
(not one global norm), so clean products never raise a false alarm while errors far above the
rounding level are caught. The bound is computed from A and B (with matrix–vector work, O(n²)),
never from the possibly corrupted output. Everything is float64.

**Cost.** The encoded product does 2(m+1)·k·(n+1) FLOPs instead of 2·m·k·n: for square n, an
overhead of (2n + 1)/n², 0.2 % at n = 1024 (`abft_flops`, counted by ``FlopCounterMode``, which
counts matmuls only; the O(n²) encoding and checking additions are not matmuls).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from labkit.checks import check_int, check_real
from labkit.table import Table

__all__ = ["ABFTProduct", "Syndrome", "UncorrectableError", "abft_matmul", "inject", "flip_bit", "syndrome", "detect",
           "correct", "matmul_flops", "abft_flops", "counted_flops", "flops_table"]

EPS = float(np.finfo(np.float64).eps)    # 2⁻⁵²


class UncorrectableError(ValueError):
    """The checksums disagree in a pattern that no single corrupted element explains."""


@dataclass(frozen=True)
class ABFTProduct:
    """The full checksum product of A (m×k) and B (k×n), and the rounding bounds to check it with.

    full      (m+1, n+1) float64: [[C, Ce], [eᵀC, eᵀCe]]
    row_tol   (m+1,) largest row-sum residual rounding can explain
    col_tol   (n+1,) the same for columns"""

    full: torch.Tensor
    row_tol: torch.Tensor
    col_tol: torch.Tensor

    @property
    def C(self) -> torch.Tensor:
        """The product A·B, (m, n) (a view: possibly corrupted, as stored)."""
        return self.full[:-1, :-1]


def _matrix(fn: str, name: str, x) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.ndim != 2 or 0 in t.shape:
        raise ValueError(f"{fn}: {name} must be a non-empty 2-D matrix, got shape {tuple(t.shape)}")
    if t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"{fn}: {name} must be real, got dtype {t.dtype}")
    t = t.to(torch.float64)
    if not torch.isfinite(t).all():
        raise ValueError(f"{fn}: {name} must be finite (no NaN or infinity)")
    return t


def abft_matmul(A, B) -> ABFTProduct:
    """C = A·B computed as the full checksum product A_c·B_r (one matmul of the encoded inputs), in
    float64, with the per-row and per-column rounding tolerances. A: (m, k), B: (k, n)."""
    A = _matrix("abft_matmul", "A", A)                            # (m, k)
    B = _matrix("abft_matmul", "B", B)                            # (k, n)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"abft_matmul: A is {tuple(A.shape)} and B is {tuple(B.shape)}; inner sizes differ")
    (m, k), n = A.shape, B.shape[1]
    A_c = torch.cat([A, A.sum(0, keepdim=True)], 0)               # (m+1, k): column checksum row
    B_r = torch.cat([B, B.sum(1, keepdim=True)], 1)               # (k, n+1): row checksum column
    full = torch.mm(A_c, B_r)                                     # (m+1, n+1)
    # rounding bounds from |A||B| without forming it: (|A| (|B| e))_i and ((eᵀ|A|) |B|)_j
    gamma = (m + n + k + 2) * EPS
    rows = (A.abs() * B.abs().sum(1)).sum(1)                      # (m,)   (|A||B|e)
    cols = (B.abs() * A.abs().sum(0)[:, None]).sum(0)             # (n,)   (eᵀ|A||B|)
    row_tol = gamma * torch.cat([rows, rows.sum().reshape(1)])
    col_tol = gamma * torch.cat([cols, cols.sum().reshape(1)])
    if not (torch.isfinite(full).all() and torch.isfinite(row_tol).all() and torch.isfinite(col_tol).all()):
        raise ValueError(f"abft_matmul: A·B or its checksums overflow float64 (sum of |A||B| = "
                         f"{float(rows.sum()):.3g}); scale A or B down")
    return ABFTProduct(full, row_tol, col_tol)


def inject(product: ABFTProduct, i: int, j: int, delta: float) -> ABFTProduct:
    """A copy of ``product`` with ``delta`` added to full[i, j] (a fault; checksum cells allowed)."""
    m1, n1 = product.full.shape
    i = check_int("inject", "i", i, minimum=0, maximum=m1 - 1)
    j = check_int("inject", "j", j, minimum=0, maximum=n1 - 1)
    delta = check_real("inject", "delta", delta)
    full = product.full.clone()
    full[i, j] += delta
    return ABFTProduct(full, product.row_tol, product.col_tol)


@dataclass(frozen=True)
class Syndrome:
    """Which checksums disagree. Residuals: row sum − stored checksum (shapes (m+1,), (n+1,))."""

    bad_rows: tuple
    bad_cols: tuple
    row_residual: torch.Tensor
    col_residual: torch.Tensor

    @property
    def clean(self) -> bool:
        return not self.bad_rows and not self.bad_cols

    @property
    def location(self):
        """(i, j) in the full matrix when one corrupted element explains the syndrome, else None.
        One bad row and no bad column: the row's checksum cell (i, n); one column only: (m, j)."""
        m, n = len(self.row_residual) - 1, len(self.col_residual) - 1
        r, c = self.bad_rows, self.bad_cols
        if len(r) == 1 and len(c) == 1:
            return r[0], c[0]
        if len(r) == 1 and not c:
            return r[0], n
        if len(c) == 1 and not r:
            return m, c[0]
        return None


# BEGIN SOLUTION (labkit's ABFT: it answers abft_locate)
def syndrome(product: ABFTProduct) -> Syndrome:
    """Compare every row's and column's sum with its checksum, against the rounding tolerance."""
    f = product.full
    row_res = f[:, :-1].sum(1) - f[:, -1]                         # (m+1,)
    col_res = f[:-1, :].sum(0) - f[-1, :]                         # (n+1,)
    # "not <=" rather than ">": a NaN residual (an exponent flipped to all ones) is a mismatch too
    bad_r = tuple(int(i) for i in torch.nonzero(~(row_res.abs() <= product.row_tol)).flatten())
    bad_c = tuple(int(j) for j in torch.nonzero(~(col_res.abs() <= product.col_tol)).flatten())
    return Syndrome(bad_r, bad_c, row_res, col_res)
# END SOLUTION


# BEGIN SOLUTION (labkit's ABFT)
def detect(product: ABFTProduct):
    """None if the checksums agree; (i, j) in the full (m+1)×(n+1) matrix if one element is corrupted
    (i = m or j = n: a checksum cell, C itself is intact); UncorrectableError if more are."""
    s = syndrome(product)
    if s.clean:
        return None
    if s.location is None:
        raise UncorrectableError(f"detect: checksums disagree in rows {list(s.bad_rows)} and columns "
                                 f"{list(s.bad_cols)}: more than one element is corrupted; recompute")
    return s.location
# END SOLUTION


def correct(product: ABFTProduct) -> torch.Tensor:
    """C (m, n), repaired if one element was corrupted; a new tensor. The bad element is rebuilt
    from its row checksum minus the row's other elements (not by subtracting the residual, which
    would lose all precision when the error dwarfs C, e.g. a flipped exponent bit).
    UncorrectableError when the syndrome shows more than one corrupted element."""
    loc = detect(product)
    C = product.C.clone()
    if loc is not None:
        i, j = loc
        m, n = C.shape
        if i < m and j < n:
            others = torch.cat([C[i, :j], C[i, j + 1:]])
            C[i, j] = product.full[i, -1] - others.sum()
    return C


def flip_bit(product: ABFTProduct, i: int, j: int, bit: int) -> ABFTProduct:
    """A copy of ``product`` with bit ``bit`` (0 = lowest mantissa bit, 52..62 exponent, 63 sign) of
    the float64 full[i, j] flipped: the fault a particle strike leaves in a register or memory word."""
    m1, n1 = product.full.shape
    i = check_int("flip_bit", "i", i, minimum=0, maximum=m1 - 1)
    j = check_int("flip_bit", "j", j, minimum=0, maximum=n1 - 1)
    bit = check_int("flip_bit", "bit", bit, minimum=0, maximum=63)
    full = product.full.clone()
    word = full[i, j:j + 1].view(torch.int64)                    # the same 8 bytes, as an integer
    word ^= torch.tensor(1, dtype=torch.int64) << bit if bit < 63 else torch.tensor(-2**63, dtype=torch.int64)
    return ABFTProduct(full, product.row_tol, product.col_tol)


def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of an (m×k)·(k×n) matmul: 2·m·k·n (one multiply and one add per term)."""
    return 2 * check_int("matmul_flops", "m", m, minimum=1) * check_int("matmul_flops", "k", k, minimum=1) \
        * check_int("matmul_flops", "n", n, minimum=1)


def abft_flops(m: int, k: int, n: int) -> int:
    """FLOPs of the full checksum product: 2·(m+1)·k·(n+1)."""
    m, n = check_int("abft_flops", "m", m, minimum=1), check_int("abft_flops", "n", n, minimum=1)
    return matmul_flops(m + 1, k, n + 1)


def counted_flops(fn, *args) -> int:
    """FLOPs that ``torch.utils.flop_counter.FlopCounterMode`` counts while ``fn(*args)`` runs."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return int(counter.get_total_flops())


def flops_table(sizes=(16, 64, 256, 1024)) -> Table:
    """For square n: plain and checksum-product FLOPs (formula and FlopCounterMode) and the overhead."""
    rows = []
    for n in sizes:
        n = check_int("flops_table", "n", n, minimum=1, maximum=4096)
        A = torch.ones(n, n, dtype=torch.float64)
        plain, enc = matmul_flops(n, n, n), abft_flops(n, n, n)
        rows.append([n, plain, counted_flops(torch.mm, A, A), enc, counted_flops(abft_matmul, A, A),
                     100 * (enc / plain - 1), 100 * (2 * n + 1) / n**2])
    return Table(["n", "2n^3", "counted", "2(n+1)^2 n", "counted ABFT", "overhead %", "(2n+1)/n^2 %"],
                 rows, formats={"overhead %": ".3f", "(2n+1)/n^2 %": ".3f"},
                 title="ABFT matmul: FLOPs of the checksum product vs the plain one")


def abft_locate(full, tol):
    """The one corrupted element of an ABFT product, from its checksums.

    full: (m+1, n+1) float64 tensor, [[C, C·e], [eᵀ·C, eᵀ·C·e]]: the product C = A·B with a column
    of row sums and a row of column sums (computed alongside C), after at most one element of C
    (not of the checksums) was changed. tol: rounding allowance (a float).
    Row i (i < m) disagrees if |sum of full[i, :n] − full[i, n]| > tol; column j (j < n) disagrees
    if |sum of full[:m, j] − full[m, j]| > tol. Return (i, j) as ints when exactly one row and one
    column disagree — that element is the wrong one — and None when none disagrees.
    """
    # BEGIN SOLUTION
    # HINT: compare the stored checksum row and column with fresh sums of the product; the one
    # HINT: wrong element sits where the bad row and the bad column cross.
    rows = full[:-1, :-1].sum(1) - full[:-1, -1]               # (m,)
    cols = full[:-1, :-1].sum(0) - full[-1, :-1]               # (n,)
    bad_rows = (rows.abs() > tol).nonzero().flatten().tolist()
    bad_cols = (cols.abs() > tol).nonzero().flatten().tolist()
    if not bad_rows and not bad_cols:
        return None
    return bad_rows[0], bad_cols[0]
    # END SOLUTION
