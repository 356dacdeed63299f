"""Autotuning a tiled kernel: exhaustive, random and cost-model-guided search over tile sizes.

A tiled kernel has knobs whose best values depend on the machine: the tile sizes of a blocked
matmul, or a Triton kernel's BLOCK_M/BLOCK_N/BLOCK_K, num_warps and num_stages. An autotuner
measures candidate configurations and keeps the fastest. Three ways to choose what to measure:

- **exhaustive**: every configuration; finds the optimum, at the price of the whole space.
- **random**: a seeded random order without repeats; cheap, blind.
- **model-guided** (the AutoTVM idea, Chen et al., "Learning to Optimize Tensor Programs",
  NeurIPS 2018): measure a few random configurations, fit a cheap *cost model* to them, measure
  the configurations the model predicts to be fastest, refit, repeat. AutoTVM used gradient
  boosted trees and a TreeGRU; here the model is ridge regression on quadratic features of the
  log2 knob values (`RidgeCostModel`), which needs nothing beyond numpy.

The measurement is a function ``measure(config: dict) -> seconds`` and is injected, so the same
searches run on:

- `synthetic_cost`: a made-up but plausible cost surface (per-call overhead, reuse that grows
  with the tile, a penalty once the tiles outgrow a cache, a small deterministic jitter): fast
  and deterministic, for tests and for trying ideas;
- `blocked_measure`: Lab 03's blocked matmul (``addmm_`` on tile pieces) generalised to
  rectangular BM x BN x BK tiles, timed on this CPU with `labkit.bench.median_time`;
- `triton_measure`: Lab 04's Triton matmul (`labkit.kernels.matmul.matmul`) with an explicit
  config, on a GPU only (under ``TRITON_INTERPRET=1`` a timing would measure the interpreter).

A common mistake is to say that Triton "profiles your system automatically". It does not: a
kernel runs with the block sizes it is given; only a kernel wrapped in ``triton.autotune`` over a
list of configs that someone wrote benchmarks them (per distinct ``key``), as Lab 04's
``GPU_CONFIGS`` do. That list is exactly the kind of space this module searches.

    space = blocked_space()                         # BM, BN, BK in 16..256
    trace = model_search(space, synthetic_cost, budget=20, seed=0)
    trace.best_config, trace.best_time, trace.best_so_far   # best after 1, 2, ... evaluations
    curves = compare(space, synthetic_cost, budget=40, seeds=range(10))
"""
from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from labkit.checks import check_int, check_numel, check_real, check_sequence

__all__ = ["Space", "blocked_space", "triton_space", "synthetic_cost", "tiled_matmul",
           "blocked_measure", "triton_measure", "SearchTrace", "exhaustive", "random_search",
           "model_search", "RidgeCostModel", "features", "spearman", "compare",
           "evaluations_to_within", "METHODS"]

Measure = Callable[[dict], float]


# ---------------------------------------------------------------------------- search spaces
@dataclass(frozen=True)
class Space:
    """A grid of configurations: knob ``names`` and the allowed ``values`` of each (positive ints)."""

    names: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]

    def __post_init__(self):
        if len(self.names) != len(self.values) or not self.names:
            raise ValueError("Space: need one tuple of values per name")
        for name, vals in zip(self.names, self.values):
            if not vals:
                raise ValueError(f"Space: knob {name} has no values")
            for v in vals:
                check_int("Space", name, v, minimum=1)

    def configs(self) -> list[dict]:
        """Every configuration, in ``itertools.product`` order (the exhaustive sweep's order)."""
        return [dict(zip(self.names, combo)) for combo in itertools.product(*self.values)]

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.values)


def blocked_space(values: Sequence[int] = (16, 32, 64, 128, 256)) -> Space:
    """Tile sizes BM (rows of C), BN (columns of C), BK (the reduction step) of a blocked matmul."""
    vals = tuple(check_int("blocked_space", "values[i]", v, minimum=1) for v in check_sequence("blocked_space", "values", values))
    return Space(("BM", "BN", "BK"), (vals, vals, vals))


def triton_space() -> Space:
    """72 configurations of Lab 04's Triton matmul: tiles, warps per program, pipeline stages."""
    return Space(("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"),
                 ((32, 64, 128), (32, 64, 128), (32, 64), (4, 8), (3, 4)))


# ------------------------------------------------------------------------ cost surfaces
def _jitter(config: dict) -> float:
    """A deterministic pseudo-random number in [-1, 1) from the configuration (crc32 of its items)."""
    h = zlib.crc32(repr(sorted(config.items())).encode())
    return (h % 20001) / 10000.0 - 1.0


def synthetic_cost(config: dict, n: int = 1024, call_s: float = 2e-6, peak_flops: float = 2e10,
                   reuse_knee: float = 48.0, cache_bytes: int = 256 * 1024, jitter: float = 0.03) -> float:
    """A synthetic time (seconds) of an n x n x n blocked matmul with tiles BM x BN x BK.

    time = calls * call_s + 2 n^3 / (peak_flops * efficiency) with
      calls      = ceil(n/BM) * ceil(n/BN) * ceil(n/BK)        (one tile product per call)
      efficiency = r / (r + reuse_knee) * min(1, cache / ws)^1.5
      r          = 2 / (1/BM + 1/BN)   (operand reuse of a BM x BN output tile)
      ws         = 4 (BM*BK + BK*BN + BM*BN) bytes (the three fp32 tiles a product touches)
    times (1 + jitter * u), u in [-1, 1) a fixed pseudo-random number per configuration. Not a
    measurement: a surface with the right shape (too small: overhead; too big: spills).
    """
    bm, bn, bk = (check_int("synthetic_cost", k, config[k], minimum=1) for k in ("BM", "BN", "BK"))
    calls = math.ceil(n / bm) * math.ceil(n / bn) * math.ceil(n / bk)
    reuse = 2.0 / (1.0 / bm + 1.0 / bn)
    ws = 4 * (bm * bk + bk * bn + bm * bn)
    eff = reuse / (reuse + reuse_knee) * min(1.0, cache_bytes / ws) ** 1.5
    t = calls * call_s + 2.0 * n ** 3 / (peak_flops * eff)
    return t * (1.0 + jitter * _jitter(config))


def tiled_matmul(A, B, bm: int, bn: int, bk: int):
    """C = A @ B one BM x BN block of C at a time, accumulating BM x BK by BK x BN products with
    ``addmm_`` (Lab 03's `labkit.matmul.blocked.blocked_matmul`, with rectangular tiles).
    A: (M, K), B: (K, N) torch tensors. Returns C (M, N)."""
    import torch

    M, K = A.shape
    N = B.shape[1]
    C = torch.zeros((M, N), dtype=A.dtype, device=A.device)
    for i0 in range(0, M, bm):
        Ai = A[i0:i0 + bm]
        for j0 in range(0, N, bn):
            c = C[i0:i0 + bm, j0:j0 + bn]                      # a view of C: accumulate in place
            for k0 in range(0, K, bk):
                c.addmm_(Ai[:, k0:k0 + bk], B[k0:k0 + bk, j0:j0 + bn])
    return C


def blocked_measure(n: int = 256, threads: int | None = 1, repeat: int = 3, min_time_s: float = 0.01,
                    seed: int = 0) -> Measure:
    """A real ``measure(config) -> seconds``: `tiled_matmul` on n x n float32 matrices on this CPU,
    timed by `labkit.bench.median_time` with ``threads`` intra-op threads (1: steadier on a shared
    machine). The result is checked against ``torch.matmul`` once per configuration."""
    import torch

    from labkit.bench import median_time

    n = check_int("blocked_measure", "n", n, minimum=1)
    check_numel("blocked_measure", "n·n", n * n)
    seed = check_int("blocked_measure", "seed", seed, minimum=0)
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g)
    B = torch.randn(n, n, generator=g)
    ref = A @ B

    def measure(config: dict) -> float:
        bm, bn, bk = (check_int("blocked_measure", k, config[k], minimum=1) for k in ("BM", "BN", "BK"))
        old = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            C = tiled_matmul(A, B, bm, bn, bk)
            if not torch.allclose(C, ref, rtol=1e-4, atol=1e-3):
                raise AssertionError(f"tiled_matmul is wrong for {config}")
            return median_time(lambda: tiled_matmul(A, B, bm, bn, bk), repeat=repeat, warmup=1,
                               min_time_s=min_time_s)
        finally:
            torch.set_num_threads(old)

    return measure


def triton_measure(n: int = 2048, dtype=None, repeat: int = 5, group_m: int = 8) -> Measure:
    """A real ``measure(config) -> seconds`` for Lab 04's Triton matmul on an n x n x n problem.

    GPU only: raises RuntimeError on a machine without CUDA or under TRITON_INTERPRET=1 (the
    interpreter's time says nothing about the kernel). Each new config compiles once (in the
    warm-up call), then `labkit.bench.median_time` times it.
    """
    import torch

    from labkit.kernels.checks import interpreting

    if not torch.cuda.is_available() or interpreting():
        raise RuntimeError("triton_measure needs a CUDA GPU with compiled Triton (not the interpreter); "
                           "on one, it times Lab 04's matmul for each configuration")
    from labkit.bench import median_time
    from labkit.kernels.matmul import matmul

    dtype = dtype or torch.float16
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=dtype, generator=g)

    def measure(config: dict) -> float:
        cfg = dict(config, GROUP_M=group_m)
        return median_time(lambda: matmul(a, b, cfg), repeat=repeat, warmup=1, min_time_s=0.01)

    return measure


# ------------------------------------------------------------------------------- searches
@dataclass
class SearchTrace:
    """One search: ``configs`` measured in order, their ``times``, and ``best_so_far[i]`` = the
    fastest time among the first i + 1 measurements."""

    method: str
    configs: list[dict]
    times: list[float]

    @property
    def best_so_far(self) -> list[float]:
        return list(np.minimum.accumulate(np.asarray(self.times, dtype=float)))

    @property
    def best_time(self) -> float:
        return min(self.times)

    @property
    def best_config(self) -> dict:
        return self.configs[int(np.argmin(self.times))]


def _check_budget(fn: str, budget, space: Space) -> int:
    return min(check_int(fn, "budget", budget, minimum=1), len(space))


def exhaustive(space: Space, measure: Measure) -> SearchTrace:
    """Measure every configuration in ``space.configs()`` order."""
    configs = space.configs()
    return SearchTrace("exhaustive", configs, [float(measure(c)) for c in configs])


def random_search(space: Space, measure: Measure, budget: int, seed: int = 0) -> SearchTrace:
    """Measure ``budget`` distinct configurations in a random order (numpy Generator(seed))."""
    budget = _check_budget("random_search", budget, space)
    configs = space.configs()
    order = np.random.default_rng(seed).permutation(len(configs))[:budget]
    chosen = [configs[i] for i in order]
    return SearchTrace("random", chosen, [float(measure(c)) for c in chosen])


def features(space: Space, configs: Sequence[dict]) -> np.ndarray:
    """Features of each configuration: z = log2 of each knob, then every z_i * z_j (i <= j), i.e.
    a quadratic in the logs (interactions such as BM*BN, squares for a sweet spot). (n, f)."""
    z = np.log2(np.array([[c[k] for k in space.names] for c in configs], dtype=float))   # (n, d)
    d = z.shape[1]
    quad = [z[:, i] * z[:, j] for i in range(d) for j in range(i, d)]
    return np.column_stack([z, *quad]) if quad else z


class RidgeCostModel:
    """Ridge regression of log(time) on `features` (standardised), closed form:
    w = (X^T X + lam I)^-1 X^T y. Predicts log(time); only its ranking is used."""

    def __init__(self, space: Space, lam: float = 0.1):
        self.space = space
        self.lam = check_real("RidgeCostModel", "lam", lam)
        self.w = None

    def fit(self, configs: Sequence[dict], times: Sequence[float]) -> "RidgeCostModel":
        X = features(self.space, configs)
        y = np.log(np.asarray(times, dtype=float))
        self.mu, self.sd = X.mean(0), X.std(0) + 1e-12
        Xs = (X - self.mu) / self.sd
        self.y0 = y.mean()
        A = Xs.T @ Xs + self.lam * np.eye(Xs.shape[1])
        self.w = np.linalg.solve(A, Xs.T @ (y - self.y0))
        return self

    def predict(self, configs: Sequence[dict]) -> np.ndarray:
        if self.w is None:
            raise RuntimeError("RidgeCostModel: call fit() before predict()")
        X = (features(self.space, configs) - self.mu) / self.sd
        return X @ self.w + self.y0


def model_search(space: Space, measure: Measure, budget: int, seed: int = 0, init: int = 8,
                 batch: int = 2, explore: float = 0.1, lam: float = 0.1) -> SearchTrace:
    """AutoTVM-style search: measure ``init`` random configurations, then repeatedly fit a
    `RidgeCostModel` on everything measured and measure the ``batch`` unmeasured configurations it
    predicts fastest; each pick is instead a random unmeasured one with probability ``explore``
    (a little exploration keeps a wrong model from trapping the search). Stops after ``budget``."""
    budget = _check_budget("model_search", budget, space)
    init = check_int("model_search", "init", init, minimum=2)
    batch = check_int("model_search", "batch", batch, minimum=1)
    rng = np.random.default_rng(seed)
    configs = space.configs()
    left = list(rng.permutation(len(configs)))
    measured: list[int] = []
    times: list[float] = []

    def take(i):
        left.remove(i)
        measured.append(i)
        times.append(float(measure(configs[i])))

    for i in left[:min(init, budget)]:
        take(i)
    while len(measured) < budget:
        model = RidgeCostModel(space, lam).fit([configs[i] for i in measured], times)
        pred = model.predict([configs[i] for i in left])
        ranked = [left[j] for j in np.argsort(pred, kind="stable")]
        for _ in range(min(batch, budget - len(measured))):
            pick = left[int(rng.integers(len(left)))] if rng.random() < explore else ranked[0]
            ranked.remove(pick)
            take(pick)
    return SearchTrace("model", [configs[i] for i in measured], times)


METHODS = ("exhaustive", "random", "model")


def _ranks(a: np.ndarray) -> np.ndarray:
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a), dtype=float)
    ranks[order] = np.arange(len(a), dtype=float)
    for v in np.unique(a):                     # ties share their average rank
        tie = a == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation: the Pearson correlation of the ranks (ties averaged)."""
    ra, rb = _ranks(np.asarray(a, dtype=float)), _ranks(np.asarray(b, dtype=float))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb) / den if den else 0.0


def evaluations_to_within(trace: SearchTrace, optimum: float, pct: float) -> int | None:
    """The number of measurements after which the best found is within ``pct`` % of ``optimum``
    (None if never within the trace)."""
    limit = optimum * (1 + pct / 100.0)
    for i, t in enumerate(trace.best_so_far):
        if t <= limit:
            return i + 1
    return None


def compare(space: Space, measure: Measure, budget: int, seeds: Iterable[int] = range(10),
            **model_kwargs) -> dict:
    """Best-found time / optimum after 1..``budget`` evaluations, averaged over ``seeds``.

    ``measure`` is called once per configuration (results memoised), so random and model-guided
    searches replay the times of one exhaustive pass and every method sees identical numbers.
    Returns {"optimum": s, "best_config": dict, "table": {config tuple: s},
             "curves": {method: array (budget,) of mean best/optimum},
             "runs": {method: array (seeds, budget) of best/optimum, one row per seed},
             "within": {method: {pct: (fraction of seeds that got within pct % of the optimum,
                                       mean evaluations those seeds needed, or None)}}}
    """
    seeds = list(seeds)
    table: dict[tuple, float] = {}

    def memo(config: dict) -> float:
        key = tuple(config[k] for k in space.names)
        if key not in table:
            table[key] = float(measure(config))
        return table[key]

    full = exhaustive(space, memo)
    opt = full.best_time
    budget = _check_budget("compare", budget, space)
    traces = {"exhaustive": [full] * len(seeds),
              "random": [random_search(space, memo, budget, s) for s in seeds],
              "model": [model_search(space, memo, budget, s, **model_kwargs) for s in seeds]}
    curves, within, runs = {}, {}, {}
    for method, ts in traces.items():
        runs[method] = np.array([np.asarray(t.best_so_far[:budget]) / opt for t in ts])
        curves[method] = runs[method].mean(axis=0)
        within[method] = {}
        for pct in (1, 5, 10):
            hits = [evaluations_to_within(t, opt, pct) for t in ts]
            ok = [h for h in hits if h is not None and h <= budget]
            within[method][pct] = (len(ok) / len(ts), float(np.mean(ok)) if ok else None)
    return {"optimum": opt, "best_config": full.best_config, "table": table, "curves": curves,
            "runs": runs, "within": within}
