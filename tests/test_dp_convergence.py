"""labkit.data_parallel.convergence: the server's SGD replayed (bit for bit against real runs),
simulated from the clock rule, and the delay stability limit against an independent bisection."""
import math

import pytest
import torch

from labkit.data_parallel import convergence as C
from labkit.data_parallel import param_server as PS
from labkit.data_parallel.ssp import ssp_makespan, ssp_staleness


@pytest.mark.parametrize("mode,s", [("bsp", 0), ("ssp", 1), ("asp", 0)])
def test_replay_gives_the_real_servers_losses_bit_for_bit(mode, s):
    cfg = PS.PSConfig(mode=mode, staleness=s, steps=8, lr=0.05, compute_s=0.001, stragglers={1: 0.004})
    real = PS.run(cfg, workers=3)
    again = C.replay(cfg, 3, real.received)
    assert again.loss == real.loss and again.staleness == real.staleness
    assert torch.equal(torch.tensor(again.loss[-1]), torch.tensor(PS.loss_of(real.final, *PS.make_data(cfg, 3)[:2])))
    assert len(real.times) == real.updates and real.times == sorted(real.times)


def test_a_real_run_can_play_a_given_timeline():
    durations = C.jittery_durations(3, 6, 1)
    sleeps = tuple(tuple(d * 0.002 for d in row) for row in durations)
    cfg = PS.PSConfig(mode="ssp", staleness=1, steps=6, sleeps=sleeps)
    real = PS.run(cfg, workers=3)
    assert C.replay(cfg, 3, real.received).loss == real.loss
    # every iteration sleeps its duration: the run cannot be shorter than the clock rule says
    assert real.seconds >= 0.9 * ssp_makespan(durations, 1) * 0.002
    with pytest.raises(ValueError, match="one row of 6 seconds"):
        PS.PSConfig(steps=6, sleeps=((0.1,) * 5,))
    with pytest.raises(ValueError, match="one per worker"):
        PS.run(cfg, workers=2)


def test_simulated_order_follows_the_clock_rule():
    durations = C.jittery_durations(4, 12, 3)
    for s in (None, 0, 1, 3):
        mode = "asp" if s is None else "ssp"
        received, times = C.schedule(durations, mode, s or 0)
        assert len(received) == 48 and times == sorted(times)
        run = C.replay(PS.PSConfig(mode=mode, staleness=s or 0, steps=12), 4, received, times)
        assert run.staleness == ssp_staleness(durations, s)        # the same events, counted twice
        assert times[-1] == pytest.approx(ssp_makespan(durations, s))
    received, times = C.schedule(durations, "bsp")
    assert len(times) == 12 and {read for _, _, read in received} == set(range(12))


def test_ssp_zero_is_bsp_with_the_summed_step():
    """Applying a clock's W gradients one by one at lr is BSP's averaged update at W·lr."""
    durations = C.jittery_durations(3, 10, 0)
    ssp0 = C.simulate(PS.PSConfig(mode="ssp", staleness=0, steps=10, lr=0.05), durations)
    bsp = C.simulate(PS.PSConfig(mode="bsp", steps=10, lr=0.15), durations)
    assert ssp0.loss[3::3] == pytest.approx(bsp.loss[1:], rel=1e-12)


def test_first_below_reads_gradients_and_time():
    run = C.Run("asp", None, [4.0, 2.0, 1.0, 0.5], [1.0, 2.5, 3.0], [0, 1, 1], [1, 1, 1], [])
    assert run.first_below(1.0) == 2.5 and run.first_below(1.0, "gradients") == 2
    assert math.isinf(run.first_below(0.1))


def test_replay_refuses_an_impossible_order():
    cfg = PS.PSConfig(mode="asp", steps=3)
    with pytest.raises(ValueError, match="impossible"):
        C.replay(cfg, 2, [(1, 1, 5)])
    with pytest.raises(ValueError, match="impossible"):
        C.replay(cfg, 2, [(3, 1, 0)])


@pytest.mark.parametrize("tau", range(0, 12))
def test_delay_limit_closed_form_equals_bisection(tau):
    assert C.largest_stable_step(tau) == pytest.approx(C.delay_step_limit(tau), abs=1e-9)
    limit = C.delay_step_limit(tau)
    assert C.spectral_radius(0.99 * limit, tau) < 1 < C.spectral_radius(1.01 * limit, tau)


def test_delayed_descent_converges_below_the_limit_and_diverges_above():
    for tau in (0, 1, 3, 6):
        limit = C.delay_step_limit(tau)
        assert C.delayed_descent(0.9 * limit, tau, 4000)[-1] < 1e-3
        assert C.delayed_descent(1.1 * limit, tau, 4000)[-1] > 1e3
    assert C.tolerated_delay(0.3) == 4 and C.tolerated_delay(2.5) == -1
    assert C.delay_step_limit(1) == pytest.approx(1.0) and C.delay_step_limit(0) == 2.0


def test_ssp_bound_grows_as_sqrt_of_staleness_plus_one():
    b = [C.ssp_regret_bound(2.0, 3.0, s, 4, 100) for s in (0, 3, 8)]
    assert b[0] == pytest.approx(4 * 2 * 3 * math.sqrt(2 * 4 * 100))
    assert (b[1] / b[0], b[2] / b[0]) == pytest.approx((2.0, 3.0))


def test_staleness_table_shows_both_regimes():
    from labkit.data_parallel import lab

    table, runs = lab.staleness_runs(timelines=4)
    row = {(r[0], r[1]): r for r in table.rows}
    assert row[(0.1, "ASP")][5] < row[(0.1, "BSP (s=0)")][5]           # small step: not waiting wins
    assert row[(0.2, "ASP")][4] > 1.4 * row[(0.2, "BSP (s=0)")][4]     # larger step: staleness costs
    assert {r[2] for r in table.rows if r[1] == "BSP (s=0)"} == {3}      # W - 1 within a clock
    assert set(runs) == {(lr, label) for lr in (0.1, 0.2) for label in
                         ("BSP (s=0)", "SSP s=1", "SSP s=2", "SSP s=4", "SSP s=8", "ASP")}


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="mode must be"):
        C.schedule([[1.0]], "hogwild")
    with pytest.raises(ValueError, match="durations must be > 0"):
        C.schedule([[0.0, 1.0]], "asp")
    with pytest.raises(ValueError, match="cfg.steps"):
        C.simulate(PS.PSConfig(steps=3), [[1.0, 1.0]])
    with pytest.raises(ValueError, match="p_slow"):
        C.jittery_durations(2, 2, 0, p_slow=1.5)
    with pytest.raises(ValueError):
        C.ssp_regret_bound(1.0, 1.0, -1, 4, 10)
