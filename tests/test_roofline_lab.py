"""Lab 01's one-liners (labkit.roofline.lab): pictures of a learner's function, the roof's noise,
the compute-bound batch tables, and the numbers the notebook's prose and worked problems state."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

import exercises.lab01_roofline as stubs
import solutions.lab01_roofline as answers
from labkit.roofline import lab
from labkit.roofline import measure as R
from labkit.roofline import model as M


def _points(fig):
    """(label, x, y) of each dot of a roofline figure (lines[0] is the roof)."""
    return [(l.get_label(), l.get_xdata()[0], l.get_ydata()[0]) for l in fig.axes[0].lines[1:]
            if len(l.get_xdata()) == 1]


@pytest.mark.parametrize("exercise", sorted(lab.CASES))
def test_figure_draws_the_learners_numbers_on_the_roof(exercise):
    fig = lab.figure(exercise, getattr(answers, exercise))
    pts = _points(fig)
    assert pts, exercise
    if exercise == "mfu_hfu":
        peak, _ = lab.H100
        mfu, hfu = M.mfu(7e9, 2 ** 20, 100.0, 989e12), M.hfu(7e9, 2 ** 20, 100.0, 989e12, True)
        assert [y for _, _, y in pts] == pytest.approx([mfu * peak / 1e9, hfu * peak / 1e9], rel=1e-12)
        assert all(x == M.linear_intensity(*lab.TRAIN_LAYER) for _, x, _ in pts)
        assert max(fig.axes[0].lines[0].get_ydata()) == peak / 1e9
    else:   # every dot sits on the example roof, at the intensity labkit gives
        for (_, x, y) in pts:
            assert y == pytest.approx(M.attainable_flops(x, lab.PEAK, lab.BW) / 1e9, rel=1e-12)
        if exercise != "attainable_flops":
            want = sorted(lab.reference(exercise, c) for c in lab.CASES[exercise])
            assert sorted(x for _, x, _ in pts) == pytest.approx(want, rel=1e-12)
    with pytest.raises(NotImplementedError):
        lab.figure(exercise, getattr(stubs, exercise))
    with pytest.raises(ValueError, match="no picture"):
        lab.figure("nope", abs)


def test_a_wrong_chain_is_drawn_where_it_says():
    wrong = lambda k, fused, b=4: k / (3 * k * b)   # noqa: E731 - forgets that fusion saves traffic
    xs = sorted(x for _, x, _ in _points(lab.figure("chain_intensity", wrong)))
    assert xs != pytest.approx(sorted(lab.reference("chain_intensity", c) for c in lab.CASES["chain_intensity"]))


def test_peak_spread_times_the_same_matmul_each_round():
    with R.threads(1):
        t = lab.peak_spread(64, rounds=3, repeat=1)
    assert t.column("round") == [1, 2, 3]
    rates = t.column("GFLOP/s")
    assert all(r > 0 for r in rates)
    for ms, g in zip(t.column("ms"), rates):
        assert g == pytest.approx(2 * 64 ** 3 / (ms / 1e3) / 1e9, rel=1e-9)
    assert sorted(t.column("% of median"))[1] == pytest.approx(100.0)
    assert "max/min" in t.title and all(len(line) <= 100 for line in str(t).splitlines())
    with pytest.raises(ValueError, match="rounds"):
        lab.peak_spread(8, rounds=1)


def test_datasheet_table_ridges_and_batches():
    t = lab.datasheet_table(8192)
    rows = {r[0]: r for r in t.rows}
    h100 = rows["NVIDIA H100 SXM (bf16 tensor cores)"]
    assert h100[4] == pytest.approx(989 / 3.35) and round(h100[4]) == 295   # the ridge Lab 04 quotes
    assert h100[5] == pytest.approx(h100[4]) and h100[6] == 319            # R*b/2 with b = 2, exact B*
    assert round(rows["NVIDIA H100 SXM (fp32, no tensor cores)"][4]) == 20
    for name, (peak, bw) in M.DATASHEETS.items():
        b = rows[name][3]
        assert b == (2 if "bf16" in name else 4)
        assert rows[name][6] == M.compute_bound_batch(peak, bw, 8192, 8192, b)
    assert all(len(line) <= 100 for line in str(t).splitlines())


@pytest.mark.parametrize("d", [1024, 4096, 8192, 12288])
def test_compute_bound_batch_closed_form_for_a_square_layer(d):
    """B* = (R·b/2) / (1 − R·b/d), rounded up, is the first batch whose intensity reaches R."""
    peak, bw = lab.H100
    r, b = M.ridge_intensity(peak, bw), 2
    closed = (r * b / 2) / (1 - r * b / d)
    bstar = M.compute_bound_batch(peak, bw, d, d, b)
    assert bstar == math.ceil(closed)
    assert M.linear_intensity(bstar, d, d, b) >= r > M.linear_intensity(bstar - 1, d, d, b)
    # the intensity itself: 2B/(b(1 + 2B/d)), ≈ 2B/b for B << d
    for batch in (1, 16, bstar):
        assert M.linear_intensity(batch, d, d, b) == pytest.approx(2 * batch / (b * (1 + 2 * batch / d)))
    assert M.linear_intensity(1, d, d, b) == pytest.approx(2 / b, rel=3 / d)


def test_no_batch_is_enough_when_the_layer_is_narrower_than_r_times_b():
    peak, bw = lab.H100
    r = M.ridge_intensity(peak, bw)
    assert M.compute_bound_batch(peak, bw, 512, 512, 2) == math.inf           # d/b = 256 < 295
    assert M.linear_intensity(10 ** 9, 512, 512, 2) == pytest.approx(256, rel=1e-6) and 256 < r
    assert M.compute_bound_batch(peak, bw, 4096, 4096, 2) == 345               # worked problem 5


def _sweep(batches, d, rates):
    return [R.Measurement(f"matmul {b}x{d}x{d}", M.matmul(b, d, d).flops, M.matmul(b, d, d).bytes,
                          M.matmul(b, d, d).flops / r) for b, r in zip(batches, rates)]


def test_sweep_table_and_first_batch_near_peak():
    peak, bw = 100e9, 25e9
    sweep = _sweep((1, 8, 256), 4096, (10e9, 30e9, 90e9))
    t = lab.sweep_table(sweep, peak, bw, dtype_bytes=4)
    assert t.column("B") == [1, 8, 256]
    assert t.column("2B/b") == [0.5, 4.0, 128.0]
    assert t.column("I (FLOP/B)") == [m.intensity for m in sweep]
    assert t.column("bound") == [M.bound(m.intensity, peak, bw) for m in sweep]
    assert t.column("% of roof")[2] == pytest.approx(90.0)
    assert t.column("GFLOP/s") == pytest.approx([10.0, 30.0, 90.0])
    assert lab.first_batch_near_peak(sweep, peak, 0.8) == 256
    assert lab.first_batch_near_peak(sweep, peak, 0.95) is None
    assert all(len(line) <= 100 for line in str(t).splitlines())


def test_tokens_per_matmul_training_vs_decoding():
    t = lab.tokens_per_matmul(*lab.H100, d=8192, dtype_bytes=2, seq_len=2048, batch_tokens=3.2e6)
    assert t.column("tokens") == [2048, 1, 64, 319]
    assert t.column("bound") == ["compute", "memory", "memory", "compute"]
    assert t.column("% of peak at best")[0] == 100.0 and t.column("% of peak at best")[1] < 1
    assert "1562.5 sequences" in t.title and "B* = 319" in t.title
    assert all(len(line) <= 100 for line in str(t).splitlines())


def test_ridge_ratio_bf16_over_fp32_is_about_15():
    bf16 = M.ridge_intensity(*M.DATASHEETS["NVIDIA H100 SXM (bf16 tensor cores)"])
    fp32 = M.ridge_intensity(*M.DATASHEETS["NVIDIA H100 SXM (fp32, no tensor cores)"])
    assert 14 < bf16 / fp32 < 16                                            # "about 15x" in the notebook
