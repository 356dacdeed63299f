"""Amdahl and Gustafson (labkit.data_parallel.scaling): closed forms on hand values, fits that
recover the serial fraction exactly from noiseless times, and the measurement's shape."""
import random

import pytest

from labkit.data_parallel.scaling import (amdahl_speedup, efficiency, fit_amdahl, fit_gustafson,
                                          gustafson_speedup, measure_scaling)
from labkit.model import GPTConfig


def test_closed_forms():
    assert amdahl_speedup(0.1, 10) == pytest.approx(1 / (0.1 + 0.09))        # 5.263
    assert amdahl_speedup(0.0, 7) == 7 and amdahl_speedup(1.0, 7) == 1
    assert amdahl_speedup(0.05, 10**9) == pytest.approx(20, rel=1e-6)        # the 1/s ceiling
    assert gustafson_speedup(0.1, 10) == pytest.approx(9.1)                   # n - s(n - 1)
    # the slip: plugging the parallel fraction p = 1 - s into n - s(n - 1) gives 1.9, not 9.1
    assert gustafson_speedup(1 - 0.1, 10) == pytest.approx(1.9)
    assert efficiency(gustafson_speedup(0.1, 10), 10) == pytest.approx(0.91)


def test_fits_recover_the_serial_fraction():
    rng = random.Random(0)
    for _ in range(20):
        s, t1 = rng.uniform(0, 0.9), rng.uniform(0.01, 2)
        ns = [1, 2, 3, 4, 8]
        assert fit_amdahl(ns, [t1 * (s + (1 - s) / n) for n in ns]) == pytest.approx(s, abs=1e-12)
        assert fit_gustafson(ns, [gustafson_speedup(s, n) for n in ns]) == pytest.approx(s, abs=1e-12)
    # with 2 % noise on the times, s comes back within 0.05 (stated tolerance for this noise level)
    ns, s = [1, 2, 4, 8, 16], 0.2
    noisy = [(s + (1 - s) / n) * (1 + rng.uniform(-0.02, 0.02)) for n in ns]
    assert fit_amdahl(ns, noisy) == pytest.approx(s, abs=0.05)


def test_bad_arguments():
    with pytest.raises(ValueError, match="serial_fraction must lie in"):
        amdahl_speedup(1.5, 4)
    with pytest.raises(ValueError, match="at least two different n"):
        fit_amdahl([2, 2], [1.0, 1.0])
    with pytest.raises(ValueError, match="exactly one of"):
        measure_scaling(GPTConfig(), (1, 2))
    with pytest.raises(ValueError, match="does not split"):
        measure_scaling(GPTConfig(), (3,), global_batch=4)


def test_measured_points():
    cfg = GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32)
    strong = measure_scaling(cfg, (1, 2), global_batch=4, steps=2)
    assert [(p.world, p.per_rank) for p in strong] == [(1, 4), (2, 2)] and all(p.step_s > 0 for p in strong)
    weak = measure_scaling(cfg, (2,), per_rank=3, steps=1)
    assert [(p.world, p.per_rank) for p in weak] == [(2, 3)]
