"""labkit.roofline: the cost models and formulas exactly; the measuring code for sanity (not speed)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from labkit.roofline import measure as R
from labkit.roofline import model as M
from labkit.roofline import draw as V
from labkit.roofline import lab as roofline_lab


def test_elementwise_costs_follow_the_stated_convention():
    add = M.elementwise_add(1000)
    assert (add.flops, add.bytes) == (1000, 12000)
    assert add.intensity == 1 / 12  # "1/3" counts elements; float32 bytes give 1/12
    unf, fus = M.elementwise_chain(10, fused=False), M.elementwise_chain(10, fused=True)
    assert (unf.flops, unf.bytes) == (30, 360) and (fus.flops, fus.bytes) == (30, 200)
    assert unf.intensity == 3 / 36 and fus.intensity == 3 / 20
    assert fus.intensity / unf.intensity == 9 / 5  # fusion cuts traffic 9 -> 5 arrays
    assert M.elementwise_add(8, dtype_bytes=2).intensity == 1 / 6
    assert (M.copy(5).flops, M.copy(5).bytes) == (0, 40)
    assert (M.triad(5).flops, M.triad(5).bytes) == (10, 60)


def test_matmul_and_softmax_costs():
    mm = M.matmul(3, 5, 7)
    assert mm.flops == 2 * 3 * 5 * 7 and mm.bytes == 4 * (15 + 35 + 21)
    # square n: 2n^3 / (3 n^2 * 4) = n/6 FLOP/B grows with n
    for n in (6, 60, 600):
        assert M.matmul(n, n, n).intensity == pytest.approx(n / 6, rel=1e-12)
    # matrix-vector (n x 1 output) stays memory bound: ~ 2 FLOPs per 4-byte weight
    assert M.matmul(1024, 1024, 1).intensity < 0.5
    sm = M.softmax(4, 8)
    assert (sm.flops, sm.bytes) == (5 * 32, 2 * 32 * 4)


def test_roofline_formula():
    peak, bw = 100e9, 10e9
    assert M.ridge_intensity(peak, bw) == 10.0
    assert M.attainable_flops(1.0, peak, bw) == 10e9
    assert M.attainable_flops(10.0, peak, bw) == 100e9
    assert M.attainable_flops(1000.0, peak, bw) == 100e9
    assert M.bound(9.99, peak, bw) == "memory" and M.bound(10.0, peak, bw) == "compute"


def test_mfu_hfu_and_the_checkpointing_ratio():
    n, tokens, secs, peak = 7e9, 1e6, 100.0, 1e15
    model, hw = M.training_flops(n, tokens)
    assert model == hw == 6 * n * tokens
    model, hw = M.training_flops(n, tokens, recompute_forward=True)
    assert (model, hw) == (6 * n * tokens, 8 * n * tokens)
    assert M.mfu(n, tokens, secs, peak) == pytest.approx(6 * n * tokens / secs / peak, rel=1e-15)
    h = M.hfu(n, tokens, secs, peak, recompute_forward=True)
    assert M.mfu(n, tokens, secs, peak) == pytest.approx(0.75 * h, rel=1e-15)
    assert M.hfu(n, tokens, secs, peak) == M.mfu(n, tokens, secs, peak)
    # the worked example: 1e12 FLOPs in 10 s on a 1e13 FLOP/s machine is 1 %
    assert M.utilization(1e12, 10, 1e13) == pytest.approx(0.01, rel=1e-12)


@pytest.mark.parametrize("call", [
    lambda: M.elementwise_add(0), lambda: M.matmul(2, 0, 2), lambda: M.softmax(2, 2.5),
    lambda: M.attainable_flops(-1, 1, 1), lambda: M.attainable_flops(1, 0, 1),
    lambda: M.mfu(1, 1, 0, 1), lambda: M.training_flops(-5, 1)])
def test_bad_input_is_a_value_error(call):
    with pytest.raises(ValueError, match="must be"):
        call()


def test_measurements_are_consistent_with_their_cost_models():
    with R.threads(1):
        m = R.peak_matmul(sizes=(64, 96), repeat=1)
        assert m.flops == 2 * 96 ** 3 or m.flops == 2 * 64 ** 3
        assert m.seconds > 0 and m.flops_per_s == m.flops / m.seconds
        bw = R.bandwidth(n=1 << 12, kind="triad", repeat=1)
        assert (bw.flops, bw.bytes) == (2 << 12, 3 * 4 << 12) and bw.bytes_per_s > 0
        with pytest.raises(ValueError, match="copy"):
            R.bandwidth(16, kind="scale")
    assert torch.get_num_threads() >= 1


def test_unfused_and_fused_chain_compute_the_same_thing():
    a, b, c, d = R.chain_inputs(1000)
    want = d + (a + b) * c
    out, tmp = torch.empty(1000), (torch.empty(1000), torch.empty(1000))
    assert torch.equal(R.chain_unfused(a, b, c, d, out, tmp), want)
    fused, arrays, how = R.make_fused_chain()
    assert arrays in (5, 7) and ("compile" in how or "fallback" in how)
    out2 = torch.empty(1000)
    fused(a, b, c, d, out2)
    # fused code may contract (a+b)*c + d into an FMA: one rounding instead of two
    torch.testing.assert_close(out2, want, rtol=1e-6, atol=1e-6)


def test_explorer_point_sits_on_the_roof():
    peak, bw = 50e9, 10e9
    s = roofline_lab.explorer_state("matmul", 6, 0.0, peak, bw)
    assert s["intensity"] == M.matmul(64, 64, 64).intensity and s["bound"] == "compute"
    assert s["attainable"] == peak
    s = roofline_lab.explorer_state("add", 10, 0.0, peak, bw)
    # (1/12) * bw and bw / 12 differ in the last bit of a double
    assert s["attainable"] == pytest.approx(bw / 12, rel=1e-15) and s["bound"] == "memory"
    s = roofline_lab.explorer_state("any intensity", 1, 2.0, peak, bw)
    assert s["intensity"] == 4.0 and s["attainable"] == 40e9
    fig = roofline_lab.explorer_figure("chain fused", 12, 0.0, peak, bw)
    star = fig.axes[0].lines[-1]
    assert list(star.get_xdata()) == [3 / 20] and list(star.get_ydata()) == [3 / 20 * bw / 1e9]
    roof = fig.axes[0].lines[0]
    assert max(roof.get_ydata()) == peak / 1e9
    with pytest.raises(ValueError, match="op must be"):
        roofline_lab.op_cost("conv", 3)


def test_roofline_figure_draws_points():
    fig = V.roofline_figure(1e10, 1e9, points=[("x", 0.5, 4e8), ("y", 100, 9e9)])
    xs = [list(l.get_xdata()) for l in fig.axes[0].lines[1:]]
    assert [0.5] in xs and [100] in xs


# ---- the compute-bound batch size, the raised roof, Lab 01's pictures and worked problems

@pytest.mark.parametrize("peak,bw,d_in,d_out,b", [(989e12, 3.35e12, 8192, 8192, 2), (67e12, 3.35e12, 8192, 8192, 4),
                                                  (50e9, 10e9, 2048, 2048, 4), (312e12, 2.039e12, 4096, 11008, 2)])
def test_compute_bound_batch_is_the_first_batch_past_the_ridge(peak, bw, d_in, d_out, b):
    from labkit.roofline import model as Mo

    bstar = Mo.compute_bound_batch(peak, bw, d_in, d_out, b)
    ridge = Mo.ridge_intensity(peak, bw)
    assert Mo.linear_intensity(bstar, d_in, d_out, b) >= ridge > Mo.linear_intensity(bstar - 1, d_in, d_out, b)
    assert Mo.bound(Mo.linear_intensity(bstar, d_in, d_out, b), peak, bw) == "compute"
    closed = ridge * b * d_in * d_out / (2 * d_in * d_out - ridge * b * (d_in + d_out))
    assert bstar == math.ceil(closed - 1e-9)
    assert abs(bstar - ridge * b / 2) / bstar < 0.1 or min(d_in, d_out) < 4096   # ≈ R·b/2 for large d


def test_compute_bound_batch_never_when_the_layer_is_too_thin():
    from labkit.roofline import model as Mo

    assert Mo.compute_bound_batch(989e12, 3.35e12, 64, 64, 2) == math.inf   # intensity < 32 whatever B
    assert Mo.compute_bound_batch(989e12, 3.35e12, 8192, 8192, 2) == 319


def test_raise_roof_only_as_far_as_the_points_need():
    from labkit.roofline import model as Mo

    assert Mo.raise_roof(100.0, 10.0, [(1.0, 5.0), (50.0, 90.0)]) == (100.0, 10.0)
    peak, bw = Mo.raise_roof(100.0, 10.0, [(1.0, 12.0), (50.0, 120.0)])
    assert (peak, bw) == (120.0, 12.0)
    pts = [(0.1, 1.3), (2.0, 30.0), (40.0, 101.0)]
    peak, bw = Mo.raise_roof(100.0, 10.0, pts)
    assert all(f <= Mo.attainable_flops(i, peak, bw) for i, f in pts)


def test_linear_sweep_counts_the_matmul_of_one_layer():
    from labkit.roofline import measure as Me

    ms = Me.linear_sweep(batches=(1, 8), d=64, device=torch.device("cpu"), repeat=1)   # d explicit: fast
    assert [m.flops for m in ms] == [2 * 1 * 64 * 64, 2 * 8 * 64 * 64]
    assert [m.bytes for m in ms] == [(64 + 64 * 64 + 64) * 4, (8 * 64 + 64 * 64 + 8 * 64) * 4]
    assert all(m.seconds > 0 for m in ms)


def test_lab01_pictures(capsys, monkeypatch):
    import exercises.lab01_roofline as stubs
    import solutions.lab01_roofline as answers
    from labkit.roofline import lab

    import IPython.display
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    for name in lab.CASES:
        table = lab.picture(name)(getattr(answers, name))
        assert all(table.column("equal")), name
        assert all(len(line) <= 100 for line in str(table).splitlines())
        with pytest.raises(NotImplementedError):
            lab.picture(name)(getattr(stubs, name))
    wrong = lab.compare("matmul_intensity", lambda m, k, n, b=4: 2 * m * k * n / ((m * k + k * n + m * n) * 4))
    assert not all(wrong.column("equal"))                       # forgot the dtype's bytes
    assert not all(lab.compare("mfu_hfu", lambda *a: (1.0,)).column("equal"))


def test_lab01_worked_problems():
    from labkit.roofline import model as Mo

    assert Mo.ridge_intensity(200e9, 25e9) == 8
    assert abs(Mo.attainable_flops(1 / 12, 200e9, 25e9) - 25e9 / 12) < 1
    assert abs(Mo.mfu(13e9, 2e6, 20, 64 * 989e12) - 0.1232) < 1e-4
    assert abs(Mo.hfu(13e9, 2e6, 20, 64 * 989e12, True) - 0.1643) < 1e-4
    assert Mo.compute_bound_batch(67e12, 3.35e12, 8192, 8192, 4) == 41
