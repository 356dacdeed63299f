"""The α–β (latency–bandwidth) cost model, and fitting α, β to measured times.

A message of n bytes costs α + n·β seconds (α: per-message latency in s,
β: seconds per byte = 1 / bandwidth). A round in which every rank sends one
message costs as much as its largest message. With p ranks and an n-byte
buffer (rounds · α + bytes on the critical path · β):

    ring all-reduce            2(p-1)·α + 2(p-1)/p · n·β
    ring reduce-scatter        (p-1)·α  + (p-1)/p · n·β   (same for all-gather)
    tree broadcast / reduce    ⌈log2 p⌉·(α + n·β)
    tree all-reduce            2⌈log2 p⌉·(α + n·β)          (reduce, then broadcast)
    recursive doubling         (log2 P + 2·[p > P])·(α + n·β),  P = 2^⌊log2 p⌋
    Rabenseifner               2·log2 P·α + 2(P-1)/P · n·β   (+2 rounds of n bytes if p > P)
      (reduce-scatter by recursive halving, then all-gather by recursive doubling:
       as few bytes as the ring, 2·log2 p rounds instead of 2(p-1))

(The n/p terms assume p divides the element count; otherwise the largest
chunk, ⌈L/p⌉ elements, sets each ring round's length.) Reduction arithmetic
is not modelled; on a CPU it folds into the fitted β.
"""
from __future__ import annotations

import math

import numpy as np

MODELS = ("ring_all_reduce", "ring_reduce_scatter", "ring_all_gather", "tree_broadcast",
          "tree_reduce", "tree_all_reduce", "recursive_doubling_all_reduce", "rabenseifner_all_reduce")


def coefficients(algorithm: str, p: int, n_bytes: float) -> tuple[float, float]:
    """(a, b) such that the model time is a·α + b·β (a: rounds, b: bytes on the critical path)."""
    if p < 1:
        raise ValueError(f"coefficients: p must be >= 1, got {p}")
    if algorithm == "ring_all_reduce":
        return 2 * (p - 1), 2 * (p - 1) / p * n_bytes
    if algorithm in ("ring_reduce_scatter", "ring_all_gather"):
        return p - 1, (p - 1) / p * n_bytes
    k = (p - 1).bit_length()  # ceil(log2 p)
    if algorithm in ("tree_broadcast", "tree_reduce"):
        return k, k * n_bytes
    if algorithm == "tree_all_reduce":
        return 2 * k, 2 * k * n_bytes
    if algorithm == "recursive_doubling_all_reduce":
        big_p = 1 << (p.bit_length() - 1)
        rounds = (big_p.bit_length() - 1) + (2 if p > big_p else 0)
        return rounds, rounds * n_bytes
    if algorithm == "rabenseifner_all_reduce":   # a model only: labkit does not implement it
        big_p = 1 << (p.bit_length() - 1)
        fold = 2 if p > big_p else 0
        return 2 * (big_p.bit_length() - 1) + fold, (2 * (big_p - 1) / big_p + fold) * n_bytes
    raise ValueError(f"coefficients: unknown algorithm {algorithm!r}; expected one of {', '.join(MODELS)}")


def predict_time(algorithm: str, p: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Model time in seconds of ``algorithm`` on p ranks for an n_bytes buffer."""
    a, b = coefficients(algorithm, p, n_bytes)
    return a * alpha + b * beta


def fit_alpha_beta(samples) -> tuple[float, float]:
    """Least-squares α (s) and β (s/byte) from ``samples`` = [(algorithm, p, n_bytes, seconds), ...].

    Minimises the *relative* error Σ ((a·α + b·β − t) / t)², so microsecond
    small-message times weigh as much as millisecond large ones.
    """
    rows, rhs = [], []
    for algorithm, p, n_bytes, t in samples:
        if t <= 0:
            raise ValueError(f"fit_alpha_beta: times must be > 0 s, got {t}")
        a, b = coefficients(algorithm, p, n_bytes)
        rows.append([a / t, b / t])
        rhs.append(1.0)
    if len(rows) < 2:
        raise ValueError("fit_alpha_beta: need at least two samples")
    (alpha, beta), *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    return float(alpha), float(beta)


def fit_per_algorithm(samples) -> dict[str, tuple[float, float]]:
    """{algorithm: (α, β)}: `fit_alpha_beta` on each algorithm's own samples.

    One (α, β) for every algorithm assumes a round costs the same whoever is
    sending. On an oversubscribed CPU it does not: in a ring round every rank
    sends and adds at once, in a tree round only a few do, so each algorithm
    gets its own effective α and β.
    """
    by_alg: dict[str, list] = {}
    for s in samples:
        by_alg.setdefault(s[0], []).append(s)
    return {alg: fit_alpha_beta(rows) for alg, rows in by_alg.items()}


def crossover_fitted(alg_small: str, fit_small: tuple[float, float], alg_large: str,
                     fit_large: tuple[float, float], p: int) -> float:
    """Buffer size n (bytes) where two algorithms, each with its own fitted (α, β), take equal model time.

    Solves a1·α1 + b1·n·β1 = a2·α2 + b2·n·β2; math.inf if they never cross at n > 0.
    """
    a1, b1 = coefficients(alg_small, p, 1.0)
    a2, b2 = coefficients(alg_large, p, 1.0)
    slope = b1 * fit_small[1] - b2 * fit_large[1]
    if slope == 0:
        return math.inf
    n = (a2 * fit_large[0] - a1 * fit_small[0]) / slope
    return n if n > 0 else math.inf


def crossover_bytes(alg_small: str, alg_large: str, p: int, alpha: float, beta: float) -> float:
    """Buffer size n (bytes) where both algorithms' model times are equal (math.inf if they never cross).

    Solves a1·α + b1·n·β = a2·α + b2·n·β with b the bytes coefficient per buffer byte.
    """
    a1, b1 = coefficients(alg_small, p, 1.0)
    a2, b2 = coefficients(alg_large, p, 1.0)
    if (b1 - b2) * beta == 0:
        return math.inf
    n = (a2 - a1) * alpha / ((b1 - b2) * beta)
    return n if n > 0 else math.inf
