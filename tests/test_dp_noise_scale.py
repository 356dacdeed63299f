"""labkit.data_parallel.noise_scale: steps to a target against the batch, the critical batch,
the two-batch noise-scale estimator against the closed form, AdaScale and the generalisation gap."""
import math

import numpy as np
import pytest

from labkit.data_parallel import noise_scale as N


def test_closed_form_loss_and_noise_scale_match_sampling():
    p = N.Problem(d=8, kappa=10.0, sigma2=0.5)
    rng = np.random.default_rng(0)
    delta = rng.standard_normal(8)
    X, noise = p.sample(rng, (200_000,))
    per_example = X * (X @ delta - noise)[:, None]
    g = per_example.mean(0)
    trace = per_example.var(0, ddof=1).sum()
    assert 0.5 * ((X @ delta - noise) ** 2).mean() == pytest.approx(p.excess(delta) + 0.25, rel=0.01)
    np.testing.assert_allclose(g, p.lam * delta, atol=0.02)
    assert trace / float(((p.lam * delta) ** 2).sum()) == pytest.approx(p.b_simple(delta), rel=0.03)


def test_isotropic_noiseless_noise_scale_is_d_plus_one():
    p = N.Problem(d=16, kappa=1.0)
    assert p.b_simple(np.arange(1.0, 17.0)) == pytest.approx(17.0)


def test_two_batch_estimator_is_unbiased_where_the_plain_norm_is_not():
    g2, trace = 1.0, 128.0
    est = N.noise_scale(g2 + trace / 32, g2 + trace / 256, 32, 256)
    assert est == pytest.approx((1.0, 128.0, 128.0))
    assert trace / (g2 + trace / 256) < 0.7 * est[2]              # forgetting the bias: 85 instead of 128
    with pytest.raises(ValueError, match="larger than b_small"):
        N.noise_scale(1.0, 1.0, 8, 8)


def test_estimate_from_a_run_is_near_the_closed_form_where_the_run_stays():
    p = N.Problem()
    run = N.noise_scale_of_run(p, 8, 64, 1.0)
    assert len(run.small_sq) == len(run.big_sq) == len(run.exact) > 5
    # at the first step the parameters are w = 0 for every rank: average many such steps
    rng = np.random.default_rng(1)
    delta = -p.w_star
    small, big = [], []
    for _ in range(400):
        X, noise = p.sample(rng, (8, 64))
        local = (X * (X @ delta - noise)[..., None]).mean(1)
        small.append((local ** 2).sum(1).mean())
        big.append((local.mean(0) ** 2).sum())
    assert N.noise_scale(np.mean(small), np.mean(big), 64, 512)[2] == pytest.approx(p.b_simple(delta), rel=0.1)


def test_steps_fall_as_one_over_b_then_stop_and_the_noise_scale_finds_the_bend():
    p = N.Problem()
    sw = N.sweep(p, batches=(1, 2, 4, 64, 256, 1024))
    steps = dict(zip(sw.batches, sw.steps))
    assert all(s > 0 for s in sw.steps)
    assert max(steps[b] * b for b in (1, 2, 4)) / min(steps[b] * b for b in (1, 2, 4)) < 1.1
    assert steps[1024] >= 0.85 * steps[256]
    s_min, e_min, b_crit = N.critical_batch_fit(sw.batches, sw.steps)
    assert s_min * b_crit == pytest.approx(e_min)
    run = N.noise_scale_of_run(p, 16, 64, sw.lrs[-1])
    assert run.b_simple == pytest.approx(b_crit, rel=0.25)
    assert max(sw.lrs) < 2.0                                       # capped by the curvature, 2/λ_max


def test_steps_to_target_skips_diverging_rates_and_says_when_none_reaches():
    p = N.Problem()
    steps, lr = N.steps_to_target(p, 16, [1.0, 50.0])
    assert steps > 0 and lr == 1.0
    assert N.steps_to_target(p, 16, [50.0])[0] == 0
    assert N.steps_to_target(p, 16, [1e-4], max_steps=5) == (0, pytest.approx(math.nan, nan_ok=True))


def test_critical_batch_fit_recovers_an_exact_curve():
    batches = [1, 4, 16, 64, 256]
    assert N.critical_batch_fit(batches, [10 * (1 + 32 / b) for b in batches]) == pytest.approx((10, 320, 32))
    with pytest.raises(ValueError, match="two different batch sizes"):
        N.critical_batch_fit([4, 4], [1, 2])


def test_adascale_gain_is_between_one_and_s():
    rng = np.random.default_rng(0)
    noise_only = rng.standard_normal((8, 100))
    var, mu2 = N.adascale_gain(noise_only)
    assert var == pytest.approx(100, rel=0.1) and abs(mu2) < 3
    same = np.ones((4, 10))
    assert N.adascale_gain(same) == (0.0, 10.0)
    with pytest.raises(ValueError, match="S >= 2"):
        N.adascale_gain(np.ones((1, 3)))


def test_adascale_reaches_the_base_loss_where_the_linear_rule_blows_up():
    p = N.Problem()
    T, _ = N.steps_to_target(p, 2, [0.125])
    base = N.scaled_run(p, "base", 1, 2, 0.125, T).final
    ada = N.scaled_run(p, "adascale", 64, 2, 0.125, T)
    lin = N.scaled_run(p, "linear", 64, 2, 0.125, T)
    assert not ada.diverged and ada.final < 2 * base and ada.steps < T / 5
    assert 1 <= min(ada.gains) and max(ada.gains) <= 64
    assert lin.diverged or lin.final > float(p.excess(-p.w_star))
    with pytest.raises(ValueError, match="scale >= 2"):
        N.scaled_run(p, "adascale", 1, 2, 0.1, 10)


def test_a_large_batch_gap_at_equal_epochs_is_mostly_training_loss():
    p = N.Problem(sigma2=1.0)
    small = [N.finite_data_run(p, 256, 8, 0.4, 1, seed=k) for k in range(4)]
    large = [N.finite_data_run(p, 256, 128, 1.2, 1, seed=k) for k in range(4)]
    assert small[0].steps == 32 and large[0].steps == 2
    assert np.mean([r.test for r in large]) > np.mean([r.test for r in small]) + 0.1
    assert abs(np.mean([r.gap for r in large]) - np.mean([r.gap for r in small])) < 0.06
    with pytest.raises(ValueError, match="must divide"):
        N.finite_data_run(p, 100, 7, 0.1, 1)
