"""Replication: majority voting (TMR, N-modular redundancy) versus spares, in closed form and simulated.

Each unit (a replica of a computation, a node) works for the whole mission with probability R,
independently of the others. Two ways to use N of them:

**N-modular redundancy with a majority voter** (von Neumann 1956; TMR is N = 3). All N compute the
same result; a perfect voter outputs the value that more than half of them agree on. A failed unit
may output anything, so the system is right exactly when at least ⌊N/2⌋ + 1 units work:

    R_NMR = Σ_{k > N/2} C(N, k) R^k (1 − R)^{N−k}        R_TMR = R³ + 3R²(1 − R) = 3R² − 2R³

(`nmr_reliability`, `tmr_reliability`). TMR beats one unit only when R > ½:
R_TMR − R = R(2R − 1)(1 − R), zero at R = ½ exactly. Below ½ the majority is usually wrong.

**Parallel redundancy** (standby spares): the failure of a unit is *detected* (it stops, or a check
rejects its output) and any one working unit suffices:

    R_parallel = 1 − (1 − R)^N                            (`parallel_reliability`)

A common mistake is to quote this for voting: "triplicate and the failure probability cubes".
A voter needs a *majority* to be right, so at R = 0.9 TMR gives 0.972, not 0.999; it is voting
that masks *silent* wrong answers, spares that need failures to announce themselves.

**Over time.** With exponential units, R(t) = e^{−t/M}. TMR is better than one unit only while
R(t) > ½, i.e. for missions shorter than M·ln 2; its mean time to failure is *lower*:
MTTF_TMR = M(1/2 + 1/3) = 5M/6. In general a k-out-of-N system of exponential units fails at the
(N − k + 1)-th unit failure, after M·Σ_{j=k}^{N} 1/j on average (`nmr_mttf`, with k = ⌊N/2⌋ + 1):
voting buys reliability for short missions (or with repair), not a longer life.

`simulate_redundancy` draws units, lets failed ones output wrong values, and runs a real majority
voter (`vote`) over the outputs, or for "parallel" takes any working unit; `simulate_lifetime`
draws unit lifetimes. Both agree with the closed forms within their standard errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real, check_sequence
from labkit.table import Table

__all__ = ["tmr_reliability", "nmr_reliability", "parallel_reliability", "nmr_mttf", "vote",
           "simulate_redundancy", "simulate_lifetime", "RedundancyResult", "LifetimeResult", "voting_table"]

SCHEMES = ("majority", "parallel")


def _probability(fn: str, r) -> float:
    r = check_real(fn, "reliability", r)
    if not 0.0 <= r <= 1.0:
        raise ValueError(f"{fn}: reliability must be a probability in [0, 1], got {r!r}")
    return r


def tmr_reliability(reliability: float) -> float:
    """Triple modular redundancy with a perfect voter: 3R² − 2R³ (2 of 3 must work)."""
    r = _probability("tmr_reliability", reliability)
    return 3 * r * r - 2 * r ** 3


MAX_UNITS = 10 ** 9   # nmr_reliability: beyond a few hundred units the sum runs over ~80·√N terms


def nmr_reliability(reliability: float, units: int) -> float:
    """N-modular redundancy with a strict-majority voter: Σ_{k > N/2} C(N,k) R^k (1−R)^(N−k).
    (For even N a tie is a failure.) Up to `MAX_UNITS` units: above 1000 the binomial terms are
    summed in log space over the ±40 standard deviations that hold all of the sum (C(N, k) alone
    overflows a float from N ≈ 1030)."""
    r = _probability("nmr_reliability", reliability)
    n = check_int("nmr_reliability", "units", units, minimum=1, maximum=MAX_UNITS)
    k0 = n // 2 + 1
    if n <= 1000:
        return sum(math.comb(n, k) * r ** k * (1 - r) ** (n - k) for k in range(k0, n + 1))
    if r in (0.0, 1.0):
        return r
    sd = math.sqrt(n * r * (1 - r))
    mode = int((n + 1) * r)
    lo = max(k0, mode - int(40 * sd) - 100)
    hi = min(n, max(k0, mode) + int(40 * sd) + 100)
    k = np.arange(lo, hi, dtype=np.float64)                           # steps lo -> lo+1 ... hi-1 -> hi
    start = math.lgamma(n + 1) - math.lgamma(lo + 1) - math.lgamma(n - lo + 1) + lo * math.log(r) \
        + (n - lo) * math.log1p(-r)
    logp = start + np.concatenate([[0.0], np.cumsum(np.log((n - k) / (k + 1)) + math.log(r / (1 - r)))])
    return min(1.0, float(np.exp(logp).sum()))


def parallel_reliability(reliability: float, units: int) -> float:
    """N units of which any one suffices (failures detected): 1 − (1 − R)^N. Not a voter's."""
    r = _probability("parallel_reliability", reliability)
    n = check_int("parallel_reliability", "units", units, minimum=1)
    return 1 - (1 - r) ** n


def nmr_mttf(mtbf_s: float, units: int) -> float:
    """Mean time to failure (s) of majority voting over N exponential units of MTBF M:
    M·Σ_{j=⌊N/2⌋+1}^{N} 1/j (TMR: 5M/6)."""
    m = check_real("nmr_mttf", "mtbf_s", mtbf_s, positive=True)
    n = check_int("nmr_mttf", "units", units, minimum=1)
    if n <= 100_000:
        return m * sum(1.0 / j for j in range(n // 2 + 1, n + 1))
    # H_N − H_{k−1} for large N by the asymptotic series of the harmonic numbers (error < 1e-30)
    tail = lambda x: 1 / (2 * x) - 1 / (12 * x * x) + 1 / (120 * x ** 4)  # noqa: E731
    k = n // 2
    return m * (math.log(n / k) + tail(n) - tail(k))


def vote(outputs: np.ndarray):
    """Strict-majority vote along the last axis. outputs: (..., N) ints. Returns (value, has_majority),
    each of shape (...): the value more than N/2 units output (where one exists).

    A strict majority, if any, is the median of the sorted outputs; it is one iff it occurs > N/2 times."""
    outputs = np.asarray(outputs)
    if outputs.ndim == 0 or outputs.shape[-1] == 0:
        raise ValueError(f"vote: outputs must have at least one unit along the last axis, got shape {outputs.shape}")
    if outputs.dtype.kind not in "iubf":
        raise TypeError(f"vote: outputs must be numbers (ints, or floats compared exactly), got dtype {outputs.dtype}")
    if outputs.dtype.kind == "f" and np.isnan(outputs).any():
        raise ValueError("vote: outputs contain NaN, which equals nothing: no unit could agree with it")
    n = outputs.shape[-1]
    median = np.sort(outputs, axis=-1)[..., n // 2]
    count = (outputs == median[..., None]).sum(-1)
    return median, count > n / 2


@dataclass(frozen=True)
class RedundancyResult:
    """Monte Carlo of one redundancy scheme. ``estimate`` = successes / trials; ``standard_error`` =
    √(p̂(1 − p̂)/trials). For "majority", ``wrong_majority`` counts trials where failed units agreed
    on a wrong value and outvoted the rest (silent corruption), a subset of the failures."""

    scheme: str
    units: int
    reliability: float
    trials: int
    successes: int
    wrong_majority: int

    @property
    def estimate(self) -> float:
        return self.successes / self.trials

    @property
    def standard_error(self) -> float:
        p = self.estimate
        return math.sqrt(p * (1 - p) / self.trials)


def simulate_redundancy(reliability: float, units: int, trials: int = 100_000, seed: int = 0,
                        scheme: str = "majority", wrong_values: int = 1 << 30) -> RedundancyResult:
    """Draw ``trials`` missions of ``units`` units, each working with probability R.

    "majority": the right answer is 0; a failed unit outputs a wrong value drawn from
    1..``wrong_values`` (make it small, e.g. 1, to let failed units agree); `vote` decides.
    "parallel": failures are detected; the mission succeeds if any unit works."""
    fn = "simulate_redundancy"
    r = _probability(fn, reliability)
    n = check_int(fn, "units", units, minimum=1)
    trials = check_int(fn, "trials", trials, minimum=1, maximum=10_000_000)
    seed = check_int(fn, "seed", seed, minimum=0)
    if trials * n > 10_000_000:
        raise ValueError(f"{fn}: trials · units = {trials * n} unit draws, more than 1e7; use fewer")
    wrong_values = check_int(fn, "wrong_values", wrong_values, minimum=1)
    if scheme not in SCHEMES:
        raise ValueError(f"{fn}: scheme must be one of {SCHEMES}, got {scheme!r}")
    rng = np.random.default_rng(seed)
    works = rng.random((trials, n)) < r                               # (trials, N)
    if scheme == "parallel":
        return RedundancyResult(scheme, n, r, trials, int(works.any(1).sum()), 0)
    outputs = np.where(works, 0, rng.integers(1, wrong_values + 1, size=(trials, n)))
    value, ok = vote(outputs)
    return RedundancyResult(scheme, n, r, trials, int((ok & (value == 0)).sum()), int((ok & (value != 0)).sum()))


@dataclass(frozen=True)
class LifetimeResult:
    """Simulated time to failure of majority voting over exponential units (seconds)."""

    units: int
    mtbf_s: float
    trials: int
    mean_s: float
    se_s: float                    # sample std (ddof=1) / √trials


def simulate_lifetime(mtbf_s: float, units: int, trials: int = 100_000, seed: int = 0) -> LifetimeResult:
    """Draw each unit's exponential lifetime; the voter fails when the (N − ⌊N/2⌋)-th unit has failed."""
    fn = "simulate_lifetime"
    m = check_real(fn, "mtbf_s", mtbf_s, positive=True)
    n = check_int(fn, "units", units, minimum=1)
    trials = check_int(fn, "trials", trials, minimum=2, maximum=10_000_000)
    seed = check_int(fn, "seed", seed, minimum=0)
    if trials * n > 10_000_000:
        raise ValueError(f"{fn}: trials · units = {trials * n} lifetimes to draw, more than 1e7; use fewer")
    life = np.sort(np.random.default_rng(seed).exponential(m, (trials, n)), axis=1)
    end = life[:, n - (n // 2 + 1)]            # once fewer than ⌊N/2⌋ + 1 units work, the vote is lost
    return LifetimeResult(n, m, trials, float(end.mean()), float(end.std(ddof=1) / math.sqrt(trials)))


def voting_table(reliabilities=(0.3, 0.5, 0.9, 0.99, 0.999), trials: int = 200_000, seed: int = 0) -> Table:
    """Per R: TMR (closed form, and simulated ± standard error), TMR's gain over one unit
    R(2R − 1)(1 − R), 5-MR, and the parallel formula 1 − (1 − R)³ that is often (wrongly) quoted
    for TMR."""
    trials, seed = check_int("voting_table", "trials", trials, minimum=1), check_int("voting_table", "seed", seed, minimum=0)
    rows = []
    for i, r in enumerate(check_sequence("voting_table", "reliabilities", reliabilities)):
        r = _probability("voting_table", r)
        sim = simulate_redundancy(r, 3, trials, seed + i)
        tmr = tmr_reliability(r)
        rows.append([r, tmr, f"{sim.estimate:.6f} ± {sim.standard_error:.6f}", tmr - r,
                     nmr_reliability(r, 5), parallel_reliability(r, 3)])
    f = ".6f"
    return Table(["R", "TMR 3R²-2R³", "TMR simulated", "TMR - R", "5-MR", "1-(1-R)³ (not voting)"], rows,
                 formats={"R": "g", "TMR 3R²-2R³": f, "TMR - R": "+.6f", "5-MR": f, "1-(1-R)³ (not voting)": f},
                 title=f"Majority voting vs one unit ({trials} simulated missions per row)")
