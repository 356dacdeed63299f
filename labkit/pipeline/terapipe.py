"""TeraPipe (Li et al., ICML 2021): pipelining the tokens of one sequence.

For a causal transformer, token t attends only to tokens <= t, so a stage can start on the first
slice of a sequence while the previous stage is still on the next slice: slice j on stage s needs
slice j on stage s-1 (its input) and slice j-1 on stage s (the keys and values of the prefix it
attends to, which stage s computed for slice j-1). A single long sequence can thus fill a
pipeline without micro-batches.

A slice of l tokens after c tokens of prefix costs more the later it sits, because attention
looks at the whole prefix: `SliceCost` models its time on one stage as

    t(l, c) = overhead + per_token·l + per_pair·(l·c + l(l+1)/2)

(the last term counts the causal query-key pairs). With K identical stages, each slice taking
the same time on every stage, the pipeline is a *proportionate flow shop* and its latency is

    T = Σ_j t_j + (K-1)·max_j t_j,

the paper's objective; `pipeline_latency` simulates the dependencies and the tests check that
it equals the formula. Many small slices shrink the (K-1)·max term but pay the overhead many
times; `optimal_slicing` is the paper's dynamic program (its core, `_optimal_slicing`, is the
Lab 08 exercise): for each candidate bound t_max on a slice's time, S(i) = min over the last
slice (i-k .. i) with t(k, i-k) <= t_max of S(i-k) + t(k, i-k), then T = min over t_max of
S(L) + (K-1)·t_max. `brute_force_slicing` tries
all 2^(L-1) slicings (small L) and `best_uniform_slicing` the equal-size ones.

Times are exact (`Fraction`) when the cost coefficients are ints or Fractions. t is the
forward time of a slice on one stage; the paper applies the same objective with forward plus
backward time per slice.
"""
from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

from labkit.checks import check_int
from labkit.table import Table

__all__ = ["SliceCost", "slice_times", "pipeline_latency", "latency_formula", "optimal_slicing",
           "brute_force_slicing", "uniform_slicing", "best_uniform_slicing", "slicing_table"]


def _exact(fn: str, name: str, value) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, numbers.Rational):
        raise TypeError(f"{fn}: {name} must be an int or a Fraction (exact times), got "
                        f"{type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{fn}: {name} must be >= 0, got {value}")
    return Fraction(value)


@dataclass(frozen=True)
class SliceCost:
    """Time of a slice of ``length`` tokens after ``context`` tokens, on one stage:
    overhead + per_token·length + per_pair·(length·context + length(length+1)/2)."""

    overhead: Fraction = Fraction(8)
    per_token: Fraction = Fraction(2)
    per_pair: Fraction = Fraction(1, 4)

    def __post_init__(self):
        for name in ("overhead", "per_token", "per_pair"):
            object.__setattr__(self, name, _exact("SliceCost", name, getattr(self, name)))

    def __call__(self, length: int, context: int) -> Fraction:
        length = check_int("SliceCost", "length", length, minimum=1)
        context = check_int("SliceCost", "context", context, minimum=0)
        pairs = length * context + length * (length + 1) // 2
        return self.overhead + self.per_token * length + self.per_pair * pairs


def _check_slices(fn: str, slices) -> list:
    if not isinstance(slices, (list, tuple)) or not slices:
        raise TypeError(f"{fn}: slices must be a non-empty list of slice lengths, got {slices!r}")
    return [check_int(fn, f"slices[{j}]", x, minimum=1) for j, x in enumerate(slices)]


def slice_times(slices, cost: SliceCost = SliceCost()) -> list:
    """t_j of each slice on one stage (slice j starts after the tokens of slices 0..j-1)."""
    slices = _check_slices("slice_times", slices)
    out, c = [], 0
    for length in slices:
        out.append(cost(length, c))
        c += length
    return out


def pipeline_latency(slices, num_stages: int, cost: SliceCost = SliceCost(), stage_speed=None):
    """Simulate the token pipeline: slice j on stage s starts when slice j has left stage s-1 and
    stage s has finished slice j-1. Returns (latency, {(stage, slice): (start, end)}).

    ``stage_speed`` (optional, one number per stage) divides each stage's times, to model
    unequal stages; with equal stages the latency equals `latency_formula`.
    """
    fn = "pipeline_latency"
    K = check_int(fn, "num_stages", num_stages, minimum=1)
    t = slice_times(_check_slices(fn, slices), cost)
    speed = [Fraction(1)] * K if stage_speed is None else [_exact(fn, "stage_speed", x) for x in stage_speed]
    if len(speed) != K or any(x == 0 for x in speed):
        raise ValueError(f"{fn}: stage_speed needs {K} positive entries, got {stage_speed!r}")
    end: dict = {}
    spans = {}
    for s in range(K):
        for j, tj in enumerate(t):
            start = max(end.get((s - 1, j), 0), end.get((s, j - 1), 0))
            end[(s, j)] = start + tj / speed[s]
            spans[(s, j)] = (start, end[(s, j)])
    return end[(K - 1, len(t) - 1)], spans


def latency_formula(slices, num_stages: int, cost: SliceCost = SliceCost()) -> Fraction:
    """Σ_j t_j + (K-1)·max_j t_j (equal stages)."""
    K = check_int("latency_formula", "num_stages", num_stages, minimum=1)
    t = slice_times(_check_slices("latency_formula", slices), cost)
    return sum(t) + (K - 1) * max(t)


MAX_SEQ_LEN = 128   # optimal_slicing: ~L^4 work; L = 128 takes seconds, 2048 would take hours


def _check_problem(fn: str, seq_len, num_stages, cost) -> tuple:
    L = check_int(fn, "seq_len", seq_len, minimum=1)
    K = check_int(fn, "num_stages", num_stages, minimum=1)
    if not isinstance(cost, SliceCost):
        raise TypeError(f"{fn}: cost must be a SliceCost, got {type(cost).__name__}")
    return L, K


def _optimal_slicing(seq_len, num_stages, cost):
    """TeraPipe's slicing of one sequence: (least latency, slice lengths).

    seq_len: L tokens (or blocks of tokens), an int >= 1; num_stages: K equal pipeline stages.
    cost(length, context): the time, on one stage, of a slice of ``length`` tokens that follows
    ``context`` tokens of prefix (exact numbers: ints or Fractions); it grows with both.
    A slicing is a list of positive ints summing to L; slice j follows the tokens of slices
    0..j-1, and its time is t_j = cost(l_j, l_0 + ... + l_{j-1}). Its latency on K stages is
    Σ_j t_j + (K − 1)·max_j t_j. Return the least latency over all slicings and one slicing
    that has it, in order: ``(latency, [l_0, l_1, ...])``. L up to about 32 must take well under a
    second; trying all 2^(L−1) slicings does not.
    """
    # BEGIN SOLUTION
    # HINT: the max term is what couples the slices: fix it as a bound on every slice's time, and what
    # HINT: is left is a dynamic program over prefixes of the sequence; only the distinct slice times
    # HINT: can be the bound worth trying.
    L, K = seq_len, num_stages
    times = {(k, c): cost(k, c) for c in range(L) for k in range(1, L - c + 1)}
    best = None
    for t_max in sorted(set(times.values())):
        if best is not None and (K - 1) * t_max >= best[0]:
            break                                   # every larger bound costs at least this much
        # S[i]: least Σ t over slicings of the first i tokens; last[i]: the length of its last slice
        S, last = [0] + [None] * L, [0] * (L + 1)
        for i in range(1, L + 1):
            for k in range(1, i + 1):
                tk = times[(k, i - k)]
                if tk <= t_max and S[i - k] is not None and (S[i] is None or S[i - k] + tk < S[i]):
                    S[i], last[i] = S[i - k] + tk, k
        if S[L] is None:
            continue
        total = S[L] + (K - 1) * t_max
        if best is None or total < best[0]:
            slices, i = [], L
            while i:
                slices.append(last[i])
                i -= last[i]
            best = (total, slices[::-1])
    return best
    # END SOLUTION


def optimal_slicing(seq_len: int, num_stages: int, cost: SliceCost = SliceCost()) -> tuple:
    """TeraPipe's dynamic program (`_optimal_slicing`, the Lab 08 exercise): (least latency, slice
    lengths). O(L^2) candidate bounds t_max, each an O(L^2) DP; bounds are tried in increasing
    order and the search stops once (K-1)·t_max alone reaches the best latency found. Slice times
    are scaled to integers first (the same order, faster than Fractions). seq_len <= `MAX_SEQ_LEN`."""
    L, K = _check_problem("optimal_slicing", seq_len, num_stages, cost)
    check_int("optimal_slicing", "seq_len", L, maximum=MAX_SEQ_LEN)
    exact = {(k, c): cost(k, c) for c in range(L) for k in range(1, L - c + 1)}
    scale = math.lcm(*(x.denominator for x in exact.values()))
    scaled = {key: int(x * scale) for key, x in exact.items()}
    _, slices = _optimal_slicing(L, K, lambda k, c: scaled[(k, c)])
    return latency_formula(slices, K, cost), slices


def brute_force_slicing(seq_len: int, num_stages: int, cost: SliceCost = SliceCost()) -> tuple:
    """Every slicing of seq_len tokens (2^(L-1) of them; L <= 16): (least latency, slices),
    the first found in order of fewer cuts."""
    L, K = _check_problem("brute_force_slicing", seq_len, num_stages, cost)
    if L > 16:
        raise ValueError(f"brute_force_slicing: seq_len must be <= 16 (2^(L-1) slicings), got {L}")
    best = None
    for n in range(L):
        for cuts in itertools.combinations(range(1, L), n):
            bounds = (0,) + cuts + (L,)
            slices = [b - a for a, b in zip(bounds, bounds[1:])]
            lat = latency_formula(slices, K, cost)
            if best is None or lat < best[0]:
                best = (lat, slices)
    return best


def uniform_slicing(seq_len: int, num_slices: int) -> list:
    """seq_len tokens in num_slices slices of equal length (the first ones one longer if needed)."""
    L = check_int("uniform_slicing", "seq_len", seq_len, minimum=1)
    n = check_int("uniform_slicing", "num_slices", num_slices, minimum=1, maximum=L)
    q, r = divmod(L, n)
    return [q + 1] * r + [q] * (n - r)


def best_uniform_slicing(seq_len: int, num_stages: int, cost: SliceCost = SliceCost()) -> tuple:
    """The best equal-size slicing: (latency, slices)."""
    L, K = _check_problem("best_uniform_slicing", seq_len, num_stages, cost)
    check_int("best_uniform_slicing", "seq_len", L, maximum=4096)      # L slicings of L slices each
    return min(((latency_formula(uniform_slicing(L, n), K, cost), uniform_slicing(L, n))
                for n in range(1, L + 1)), key=lambda x: x[0])


def slicing_table(cases, cost: SliceCost = SliceCost()) -> Table:
    """Per (L, K): latency with the sequence whole (one slice), the best uniform slicing, and the
    DP's slicing (its slice lengths), and the DP's gain over uniform."""
    rows = []
    for L, K in cases:
        whole = latency_formula([L], K, cost)
        uni, us = best_uniform_slicing(L, K, cost)
        opt, os_ = optimal_slicing(L, K, cost)
        rows.append((L, K, str(whole), f"{float(uni):.1f} ({len(us)} x ~{us[0]})", f"{float(opt):.1f}",
                     " ".join(map(str, os_)), f"{float(uni / opt):.3f}"))
    return Table(["L", "K", "whole", "best uniform (slices)", "DP", "DP slice lengths", "uniform/DP"], rows)
