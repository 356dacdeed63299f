"""Batch size and convergence: steps to a target against the batch, the gradient noise scale,
AdaScale, and the generalisation gap — on a problem small enough to sweep (pure numpy).

**The problem.** Linear regression y = xᵀw* (+ noise of variance σ²) with Gaussian inputs
x ~ N(0, Λ), Λ = diag(λ_1..λ_d) spread geometrically from 1 down to 1/κ. Every step draws a fresh
batch (the one-pass regime of large-scale training), and the loss has a closed form:
L(w) = ½(δᵀΛδ + σ²) with δ = w − w*, so "steps until the loss reaches a target" needs no test
set and no noise in the measurement.

**Steps against batch size** (McCandlish, Kaplan, Amodei et al., *An Empirical Model of
Large-Batch Training*, 2018). With the learning rate tuned for each batch size B, the steps to a
target loss follow S(B) ≈ S_min + E_min/B = S_min·(1 + B_crit/B): doubling a small batch halves
the steps (perfect scaling, the samples E = S·B stay near E_min), doubling a batch well above the
*critical batch* B_crit = E_min/S_min barely helps (the steps stay near S_min) — the bend lies at
B_crit, where S = 2·S_min. `critical_batch_fit` fits the line S = S_min + E_min·(1/B).

**The gradient noise scale.** The paper predicts the bend from the gradients themselves:
B_simple = tr(Σ)/|G|², with G the true gradient and Σ the covariance of one example's gradient
(for this problem: tr Σ = |Λδ|² + (δᵀΛδ + σ²)·tr Λ and |G|² = |Λδ|²). A batch of B gives
E|G_B|² = |G|² + tr(Σ)/B, so two batch sizes give unbiased estimates of both (its Appendix A.1):

    |G|² ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr Σ ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

Data parallelism has both for free: every rank's own gradient (B_small = b per rank) and the
all-reduced one (B_big = N·b). Averaging each over the steps of a run and dividing gives the
run's B_simple (`noise_scale_of_run`). Using |G_big|² as |G|² forgets that it is biased upwards by
tr(Σ)/B_big, and underestimates the noise scale.

**AdaScale** (Johnson, Agrawal, Gu and Guestrin, ICML 2020) scales a base learning rate lr0 at
batch b0 to a batch of S·b0 by the *gain* r = (σ² + μ²)/(σ²/S + μ²), σ² the variance of one base
batch's gradient and μ² = |G|², estimated each step from the S base-batch gradients; it runs
until the sum of the gains reaches the base run's steps. r is near S when noise dominates (the
linear scaling rule) and near 1 when the gradient does — where the linear rule's step lr0·S would
be too large.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int, check_real

MAX_STEPS = 200_000


@dataclass(frozen=True)
class Problem:
    """Linear regression in ``d`` dimensions: input variances λ from 1 down to 1/``kappa``
    (geometric), label noise variance ``sigma2``, w* ~ N(0, I) from ``seed``, training from w = 0."""

    d: int = 32
    kappa: float = 30.0
    sigma2: float = 0.0
    seed: int = 0

    def __post_init__(self):
        check_int("Problem", "d", self.d, minimum=1, maximum=4096)
        if check_real("Problem", "kappa", self.kappa, positive=True) < 1:
            raise ValueError(f"Problem: kappa must be >= 1, got {self.kappa}")
        if check_real("Problem", "sigma2", self.sigma2) < 0:
            raise ValueError(f"Problem: sigma2 must be >= 0, got {self.sigma2}")
        check_int("Problem", "seed", self.seed, minimum=0)

    @property
    def lam(self) -> np.ndarray:
        """The input variances λ (d,)."""
        return np.logspace(0.0, -math.log10(self.kappa), self.d)

    @property
    def w_star(self) -> np.ndarray:
        return np.random.default_rng(self.seed).standard_normal(self.d)

    def excess(self, delta: np.ndarray) -> np.ndarray:
        """Loss above its minimum, ½·δᵀΛδ, for δ = w − w* (…, d)."""
        return 0.5 * (delta ** 2 * self.lam).sum(-1)

    def sample(self, rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Inputs (*shape, d) and label noises (*shape) for ``shape`` examples."""
        x = rng.standard_normal((*shape, self.d)) * np.sqrt(self.lam)
        return x, rng.standard_normal(shape) * math.sqrt(self.sigma2)

    def b_simple(self, delta: np.ndarray) -> float:
        """tr(Σ)/|G|² at w = w* + δ, in closed form (module docstring)."""
        lam = self.lam
        g2 = float(((lam * delta) ** 2).sum())
        if g2 == 0:
            return math.inf
        return (g2 + (float((lam * delta ** 2).sum()) + self.sigma2) * float(lam.sum())) / g2


def _target(problem: Problem, fraction: float) -> float:
    frac = check_real("steps_to_target", "fraction", fraction, positive=True)
    if frac >= 1:
        raise ValueError(f"steps_to_target: fraction must be below 1, got {frac}")
    return frac * float(problem.excess(-problem.w_star))


def steps_to_target(problem: Problem, batch: int, lrs, seeds: int = 6, fraction: float = 0.003,
                    max_steps: int = 20_000) -> tuple[int, float]:
    """(steps, lr): the fewest steps after which every one of ``seeds`` runs of SGD at batch
    ``batch`` has brought the excess loss to ``fraction`` of its start, over the learning rates
    ``lrs`` (the best of them), and that learning rate. (0, nan) if none gets there in
    ``max_steps``. All learning rates and seeds run at once (numpy); seed k's batches come from
    default_rng((1000 + batch, k)), shared by all learning rates (common random numbers)."""
    fn = "steps_to_target"
    batch = check_int(fn, "batch", batch, minimum=1, maximum=1 << 16)
    seeds = check_int(fn, "seeds", seeds, minimum=1, maximum=64)
    max_steps = check_int(fn, "max_steps", max_steps, minimum=1, maximum=MAX_STEPS)
    lrs = np.array([check_real(fn, "lr", lr, positive=True) for lr in lrs])
    if not len(lrs):
        raise ValueError(f"{fn}: lrs must not be empty")
    target = _target(problem, fraction)
    rngs = [np.random.default_rng((1000 + batch, k)) for k in range(seeds)]
    delta = np.broadcast_to(-problem.w_star, (seeds, len(lrs), problem.d)).copy()    # (seeds, lrs, d)
    lr = lrs[None, :, None]
    start = float(problem.excess(-problem.w_star))
    alive = np.ones(len(lrs), dtype=bool)
    reached = np.zeros((seeds, len(lrs)), dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):      # diverging learning rates are dropped
        return _first_to_target(problem, batch, lrs, rngs, delta, lr, start, alive, reached, target, max_steps)


def _first_to_target(problem, batch, lrs, rngs, delta, lr, start, alive, reached, target, max_steps):
    for t in range(1, max_steps + 1):
        xs = [problem.sample(r, (batch,)) for r in rngs]
        X = np.stack([x for x, _ in xs])                                 # (seeds, batch, d)
        noise = np.stack([e for _, e in xs])                             # (seeds, batch)
        resid = delta @ X.transpose(0, 2, 1) - noise[:, None, :]          # (seeds, lrs, batch)
        delta = delta - lr * (resid @ X) / batch
        loss = problem.excess(delta)                                     # (seeds, lrs)
        alive &= np.all(np.isfinite(loss) & (loss < 1e6 * start), axis=0)
        reached |= loss <= target
        done = reached.all(axis=0) & alive
        if done.any():
            return t, float(lrs[np.argmax(done)])
        if not alive.any():
            break
    return 0, math.nan


@dataclass(frozen=True)
class BatchSweep:
    """Steps to the target (``steps``) and the best learning rate (``lrs``) per batch size."""

    batches: tuple
    steps: tuple
    lrs: tuple
    fraction: float

    def samples(self) -> tuple:
        """E = S·B: examples processed to reach the target."""
        return tuple(s * b for s, b in zip(self.steps, self.batches))


LR_GRID = tuple(2.0 ** (k / 4) for k in range(-28, 7))     # 2^-7 .. 2^1.5


def sweep(problem: Problem, batches=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), lrs=LR_GRID,
          seeds: int = 6, fraction: float = 0.003) -> BatchSweep:
    """`steps_to_target` for every batch size."""
    out = [steps_to_target(problem, b, lrs, seeds, fraction) for b in batches]
    return BatchSweep(tuple(batches), tuple(s for s, _ in out), tuple(lr for _, lr in out), fraction)


def critical_batch_fit(batches, steps) -> tuple[float, float, float]:
    """(S_min, E_min, B_crit): least squares of S = S_min + E_min·(1/B), B_crit = E_min/S_min."""
    b = np.array([check_real("critical_batch_fit", "batch", x, positive=True) for x in batches])
    s = np.array([check_real("critical_batch_fit", "steps", x, positive=True) for x in steps])
    if len(b) != len(s) or len(set(b.tolist())) < 2:
        raise ValueError("critical_batch_fit: needs steps for at least two different batch sizes, one per batch")
    (s_min, e_min), *_ = np.linalg.lstsq(np.stack([np.ones_like(b), 1 / b], 1), s, rcond=None)
    return float(s_min), float(e_min), float(e_min / s_min)


def _noise_scale(g_small_sq, g_big_sq, b_small, b_big):
    """The gradient noise scale B_simple = tr(Σ)/|G|² from gradients over two batch sizes
    (McCandlish et al. 2018): what a data-parallel step already has — each rank's own gradient
    over ``b_small`` examples and the all-reduced one over ``b_big`` (> b_small).

    g_small_sq: mean over ranks (and steps) of |local gradient|²; g_big_sq: mean (over steps) of
    |all-reduced gradient|²; b_small, b_big: examples per local and per global gradient.
    A gradient over B examples has E|G_B|² = |G|² + tr(Σ)/B, Σ the covariance of one example's
    gradient and G the true gradient. Solve the two equations (one per batch size) for |G|² and
    tr(Σ), and return (|G|² estimate, tr(Σ) estimate, their ratio tr(Σ)/|G|²) as floats.
    Example: g_small_sq = 3.0, g_big_sq = 1.5, b_small = 1, b_big = 4 -> (1.0, 2.0, 2.0).
    """
    # BEGIN SOLUTION
    # HINT: write E|G_B|^2 = |G|^2 + tr(Sigma)/B once for each batch size: two linear equations in the two
    # HINT: unknowns. The big batch's norm alone is not |G|^2: it still carries tr(Sigma)/b_big.
    g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small)
    trace = (g_small_sq - g_big_sq) / (1 / b_small - 1 / b_big)
    return g2, trace, trace / g2
    # END SOLUTION


def noise_scale(g_small_sq: float, g_big_sq: float, b_small: float, b_big: float) -> tuple[float, float, float]:
    """(|G|², tr Σ, B_simple) from the squared norms of gradients over batches of ``b_small``
    and ``b_big`` examples (McCandlish et al., Appendix A.1; module docstring). The bias of
    |G_B|², tr(Σ)/B, is removed from both estimates."""
    fn = "noise_scale"
    gs, gb = check_real(fn, "g_small_sq", g_small_sq), check_real(fn, "g_big_sq", g_big_sq)
    bs, bb = check_real(fn, "b_small", b_small, positive=True), check_real(fn, "b_big", b_big, positive=True)
    if not bb > bs:
        raise ValueError(f"{fn}: b_big ({bb:g}) must be larger than b_small ({bs:g})")
    if bb * gb == bs * gs:      # the |G|² estimate is exactly 0: no signal at all
        raise ValueError(f"{fn}: the two gradients give |G|² = 0 (b_big·g_big_sq = b_small·g_small_sq), "
                         f"so the noise scale is infinite")
    return _noise_scale(gs, gb, bs, bb)


@dataclass(frozen=True)
class NoiseScaleRun:
    """A data-parallel run of ``ranks`` × ``per_rank`` examples per step: per step, the mean over
    ranks of |local gradient|² (``small_sq``), |all-reduced gradient|² (``big_sq``), and the closed
    form B_simple at that step's parameters (``exact``)."""

    ranks: int
    per_rank: int
    lr: float
    small_sq: tuple
    big_sq: tuple
    exact: tuple

    @property
    def b_simple(self) -> float:
        """The run's noise scale: estimates of tr Σ and |G|², each averaged over the steps, divided."""
        _, _, b = noise_scale(float(np.mean(self.small_sq)), float(np.mean(self.big_sq)), self.per_rank,
                              self.ranks * self.per_rank)
        return b


def noise_scale_of_run(problem: Problem, ranks: int, per_rank: int, lr: float, fraction: float = 0.003,
                       seed: int = 0, max_steps: int = 10_000) -> NoiseScaleRun:
    """SGD at batch ranks·per_rank until the target, recording what each step's data-parallel
    all-reduce makes available: every rank's own gradient norm and the averaged one."""
    fn = "noise_scale_of_run"
    ranks = check_int(fn, "ranks", ranks, minimum=2, maximum=4096)
    per_rank = check_int(fn, "per_rank", per_rank, minimum=1, maximum=4096)
    lr = check_real(fn, "lr", lr, positive=True)
    max_steps = check_int(fn, "max_steps", max_steps, minimum=1, maximum=MAX_STEPS)
    target = _target(problem, fraction)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    delta = -problem.w_star
    small, big, exact = [], [], []
    for _ in range(max_steps):
        if problem.excess(delta) <= target:
            break
        X, noise = problem.sample(rng, (ranks, per_rank))
        per_example = X * (X @ delta - noise)[..., None]                 # (ranks, per_rank, d)
        local = per_example.mean(1)                                      # each rank's gradient
        total = local.mean(0)                                            # after the all-reduce
        small.append(float((local ** 2).sum(1).mean()))
        big.append(float((total ** 2).sum()))
        exact.append(problem.b_simple(delta))
        delta = delta - lr * total
        if not np.all(np.isfinite(delta)):
            raise ValueError(f"{fn}: the run diverged at lr = {lr:g}; use a smaller one")
    else:
        raise ValueError(f"{fn}: the target was not reached in {max_steps} steps")
    return NoiseScaleRun(ranks, per_rank, lr, tuple(small), tuple(big), tuple(exact))


# ---------------------------------------------------------------------------- AdaScale

@dataclass(frozen=True)
class ScaledRun:
    """SGD at a batch of ``scale`` × the base batch: ``rule`` ("base", "linear", "adascale"), the
    ``steps`` taken, the learning-rate ``gains`` used at each step (lr = gain·lr0), the excess
    ``losses`` after each step, and whether it ``diverged``."""

    rule: str
    scale: int
    steps: int
    gains: tuple
    losses: tuple
    diverged: bool

    @property
    def final(self) -> float:
        return self.losses[-1] if self.losses else math.nan


def adascale_gain(local_grads: np.ndarray) -> tuple[float, float]:
    """(σ², μ²) estimated from S >= 2 base-batch gradients (S, d): the variance of one base batch's
    gradient, Σ|g_i − ḡ|²/(S − 1), and |ḡ|² − σ²/S (unbiased for |G|²)."""
    g = np.asarray(local_grads, dtype=float)
    if g.ndim != 2 or g.shape[0] < 2:
        raise ValueError("adascale_gain: needs a (S, d) array of S >= 2 gradients")
    S = g.shape[0]
    mean = g.mean(0)
    var = float(((g - mean) ** 2).sum() / (S - 1))
    return var, float((mean ** 2).sum()) - var / S


def scaled_run(problem: Problem, rule: str, scale: int, base_batch: int, lr0: float, base_steps: int,
               seed: int = 0, smoothing: float = 0.9) -> ScaledRun:
    """Train at batch ``scale``·``base_batch`` by ``rule``: "base" (scale 1, lr0, base_steps
    steps), "linear" (lr0·scale for ⌈base_steps/scale⌉ steps), "adascale" (lr0·r_t with the gain r_t
    from exponential averages (``smoothing``) of σ² and μ², until Σ r_t >= base_steps)."""
    fn = "scaled_run"
    if rule not in ("base", "linear", "adascale"):
        raise ValueError(f"{fn}: rule must be 'base', 'linear' or 'adascale', got {rule!r}")
    scale = check_int(fn, "scale", scale, minimum=1, maximum=4096)
    base_batch = check_int(fn, "base_batch", base_batch, minimum=1, maximum=4096)
    lr0 = check_real(fn, "lr0", lr0, positive=True)
    base_steps = check_int(fn, "base_steps", base_steps, minimum=1, maximum=MAX_STEPS)
    theta = check_real(fn, "smoothing", smoothing)
    if not 0 <= theta < 1:
        raise ValueError(f"{fn}: smoothing must be in [0, 1), got {theta}")
    if rule == "base" and scale != 1:
        raise ValueError(f"{fn}: the base run has scale 1, got {scale}")
    if rule == "adascale" and scale < 2:
        raise ValueError(f"{fn}: AdaScale needs scale >= 2 (it estimates the variance across base batches)")
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    delta = -problem.w_star
    start = float(problem.excess(delta))
    gains, losses, progress, var, mu2 = [], [], 0.0, None, None
    while progress < base_steps and len(gains) < MAX_STEPS:
        X, noise = problem.sample(rng, (scale, base_batch))
        local = (X * (X @ delta - noise)[..., None]).mean(1)            # (scale, d): one per base batch
        grad = local.mean(0)
        if rule == "adascale":
            v, m = adascale_gain(local)
            var = v if var is None else theta * var + (1 - theta) * v
            mu2 = m if mu2 is None else theta * mu2 + (1 - theta) * m
            gain = min(max((var + mu2) / (var / scale + mu2), 1.0), float(scale)) if mu2 > 0 else float(scale)
        else:
            gain = float(scale)
        delta = delta - gain * lr0 * grad
        gains.append(gain)
        loss = float(problem.excess(delta))
        losses.append(loss)
        progress += gain if rule == "adascale" else scale
        if not (math.isfinite(loss) and loss < 1e6 * start):
            return ScaledRun(rule, scale, len(gains), tuple(gains), tuple(losses), True)
    return ScaledRun(rule, scale, len(gains), tuple(gains), tuple(losses), False)


# ------------------------------------------------------------------- generalisation gap

@dataclass(frozen=True)
class GapRun:
    """SGD over a fixed training set: batch, learning rate, ``epochs``, ``steps``, training loss
    and test (population) loss at the end, both above the noise floor σ²/2."""

    batch: int
    lr: float
    epochs: int
    steps: int
    train: float
    test: float

    @property
    def gap(self) -> float:
        return self.test - self.train


def finite_data_run(problem: Problem, n_train: int, batch: int, lr: float, epochs: int, seed: int = 0) -> GapRun:
    """Shuffled epochs of SGD over ``n_train`` examples drawn once (seed); the training loss is
    the mean over those examples, the test loss the population loss ½(δᵀΛδ + σ²)."""
    fn = "finite_data_run"
    n = check_int(fn, "n_train", n_train, minimum=1, maximum=1 << 20)
    batch = check_int(fn, "batch", batch, minimum=1, maximum=n)
    if n % batch:
        raise ValueError(f"{fn}: batch ({batch}) must divide n_train ({n})")
    lr = check_real(fn, "lr", lr, positive=True)
    epochs = check_int(fn, "epochs", epochs, minimum=1, maximum=MAX_STEPS)
    rng = np.random.default_rng(check_int(fn, "seed", seed, minimum=0))
    X, noise = problem.sample(rng, (n,))
    w_star = problem.w_star
    y = X @ w_star + noise
    w = np.zeros(problem.d)
    steps = 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for i in range(0, n, batch):
            idx = order[i:i + batch]
            w = w - lr * X[idx].T @ (X[idx] @ w - y[idx]) / batch
            steps += 1
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{fn}: diverged at lr = {lr:g}, batch {batch}")
    train = float(((X @ w - y) ** 2).mean() / 2)
    test = float(problem.excess(w - w_star)) + problem.sigma2 / 2
    return GapRun(batch, lr, epochs, steps, train, test)
