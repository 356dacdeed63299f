"""Lab 08 extensions: Chimera, DualPipe, TeraPipe and asynchronous staleness.

Times are ints or Fractions, so each closed form is checked with exact equality.
"""
import itertools
import math
from fractions import Fraction as Fr

import pytest

from labkit.pipeline import Action, ScheduleError, schedule, time_schedule
from labkit.pipeline.async_sim import weight_versions
from labkit.pipeline.chimera import (Layout, bidirectional_layout, check_placed, chimera_bubble,
                                     chimera_idle, chimera_memory, chimera_schedule, looped_layout,
                                     simulate_placed)
from labkit.pipeline.dualpipe import (compare, comparison_table, dualpipe_pairs, dualpipe_schedule,
                                      report_bubble, simulate_dualpipe)
from labkit.pipeline.staleness import (MACHINES, closed_form, stage_events, staleness, staleness_table,
                                       train)
from labkit.pipeline.terapipe import (SliceCost, best_uniform_slicing, brute_force_slicing, latency_formula,
                                      optimal_slicing, pipeline_latency, slice_times, uniform_slicing)


def _one_line(excinfo):
    assert "\n" not in str(excinfo.value), str(excinfo.value)


# ---------------------------------------------------------------- the placed simulator

@pytest.mark.parametrize("kind, p, m, v", [("gpipe", 3, 5, 1), ("1f1b", 4, 8, 1), ("interleaved_1f1b", 4, 8, 2),
                                           ("interleaved_zb", 4, 8, 2)])
def test_placed_simulator_equals_the_lab_simulator_on_the_lab_placement(kind, p, m, v):
    s = schedule(kind, p, m, v)
    a = time_schedule(s, 1, Fr(5, 2), weight_time=1)
    b = simulate_placed(s, looped_layout(p, m, v), 1, Fr(5, 2), weight_time=1)
    assert (a.makespan, a.bubble_fraction, a.peak_inflight, a.busy) == (b.makespan, b.bubble_fraction,
                                                                        b.peak_inflight, b.busy)
    assert a.timeline == b.timeline


def test_check_placed_names_the_problem():
    D, N = 4, 4
    L = bidirectional_layout(D, N)
    good = chimera_schedule(D, N)
    bad = {r: list(a) for r, a in good.items()}
    bad[0][0] = Action(1, "F", 0)                      # stage 1 lives on rank 1
    with pytest.raises(ScheduleError, match="belongs on rank 1") as e:
        check_placed(bad, L)
    _one_line(e)
    bad = {r: list(a) for r, a in good.items()}
    bad[0][0] = Action(0, "F", 3)                      # micro-batch 3 goes up, not down
    with pytest.raises(ScheduleError, match="goes through chain 1"):
        check_placed(bad, L)
    bad = {r: list(a) for r, a in good.items()}
    bad[3] = [a for a in bad[3] if a != Action(4, "B", 2)]
    with pytest.raises(ScheduleError, match="never runs"):
        check_placed(bad, L)
    bad = {r: list(a) for r, a in good.items()}
    bad[0] = bad[0][::-1]                              # backwards first: deadlock
    with pytest.raises(ScheduleError, match="needs the") as e:
        check_placed(bad, L)
    _one_line(e)
    with pytest.raises(TypeError, match="layout must be a Layout"):
        check_placed(good, "bidirectional")
    with pytest.raises(ValueError, match="cover stages"):
        Layout((0, 1), ((0,),), (0,))


# ---------------------------------------------------------------- Chimera

CHIMERA = [(D, k * D) for D in (2, 4, 6, 8) for k in (1, 2, 3)]


@pytest.mark.parametrize("D, N", CHIMERA)
def test_chimera_is_valid_and_matches_the_paper_for_equal_times(D, N):
    s, L = chimera_schedule(D, N), bidirectional_layout(D, N)
    check_placed(s, L)
    assert all(len({a.stage for a in acts}) == 2 for acts in s.values())      # two stages per rank
    r = simulate_placed(s, L, 1, 1)
    assert r.makespan == 2 * N + D - 2
    assert r.bubble_fraction == chimera_bubble(D, N) == Fr(D - 2, 2 * N + D - 2)
    # activation sets: D/2 + 1 at the ends, D in the middle (the paper's [(D/2+1), D] M_a)
    assert [r.peak_inflight[k] for k in range(D)] == [D // 2 + 1 + min(k, D - 1 - k) for k in range(D)]


@pytest.mark.parametrize("F, B", [(1, 2), (2, 1), (2, 3), (1, 3), (Fr(1, 2), Fr(3, 4))])
def test_chimera_idle_closed_form_for_any_times(F, B):
    for D, N in [(4, 4), (4, 8), (4, 12), (6, 12), (8, 8)]:
        r = simulate_placed(chimera_schedule(D, N), bidirectional_layout(D, N), F, B)
        assert all(r.makespan - r.busy[k] == chimera_idle(D, N, F, B) for k in range(D)), (D, N)


def test_chimera_halves_1f1b_bubble_count_and_doubles_weights():
    D = 8
    c = simulate_placed(chimera_schedule(D, D), bidirectional_layout(D, D), 1, 1)
    o = time_schedule(schedule("1f1b", D, D), 1, 1)
    assert c.makespan - D * 2 == D - 2 and o.makespan - D * 2 == 2 * (D - 1)
    mem = chimera_memory(D)
    assert mem["stages_per_rank_chimera"] == 2 * mem["stages_per_rank_1f1b"]
    assert mem["replica_pairs"] == [(0, 7), (1, 6), (2, 5), (3, 4)]


@pytest.mark.parametrize("args, exc, match", [((3, 6), ValueError, "even number of ranks"),
                                              ((4, 6), ValueError, "multiple of num_ranks"),
                                              ((4.0, 4), TypeError, "must be an int")])
def test_chimera_bad_input(args, exc, match):
    with pytest.raises(exc, match=match) as e:
        chimera_schedule(*args)
    _one_line(e)


# ---------------------------------------------------------------- DualPipe

DUAL = [(PP, m) for PP in (2, 4, 6, 8) for m in (2 * PP, 2 * PP + 2, 4 * PP)]


@pytest.mark.parametrize("PP, m", DUAL)
def test_dualpipe_is_valid_and_complete(PP, m):
    s, pairs = dualpipe_schedule(PP, m), dualpipe_pairs(PP, m)
    check_placed(s, bidirectional_layout(PP, m), pairs)
    for r, acts in s.items():
        assert len({a.stage for a in acts}) == 2
        for i in pairs[r]:                                    # an overlapped pair: F of one, B of the other
            assert acts[i].kind == "F" and acts[i + 1].kind == "B" and acts[i].stage != acts[i + 1].stage
    r = simulate_dualpipe(PP, m, 1, 2, 1)
    assert all(r.peak_inflight[k] == PP + 1 for k in range(PP))   # the report's PP + 1


def test_dualpipe_bubble_equals_the_report_when_I_equals_F():
    """Middle ranks idle (PP/2-1)(F&B+B-3W) whenever I = B - W = F and W <= F; with
    F >= I >= W the simulator finds (PP/2-1)(F&B+F-2W)."""
    n = 0
    for PP in (2, 4, 6):
        for F, I, W in itertools.product((1, 2, 3), (1, 2, 3), (0, 1, 2)):
            B = I + W
            if W > F or (I != F and not F >= I >= W):
                continue
            for FB in (max(F, B), F + B):
                r = simulate_dualpipe(PP, 2 * PP + 2, F, B, W, FB)
                idle = max(r.makespan - b for b in r.busy.values())
                if I == F:
                    assert idle == report_bubble("DualPipe", PP, 2 * PP, F, B, W, FB), (PP, F, B, W, FB)
                    n += 1
                if F >= I >= W:
                    assert idle == (Fr(PP, 2) - 1) * (FB + F - 2 * W), (PP, F, B, W, FB)
    assert n > 20


def test_comparison_table_against_the_report():
    got = compare(8, 16, 1, 2, 1, Fr(5, 2))
    assert got["1F1B"]["bubble"] == 7 * 3 and got["ZB1P"]["bubble"] == 7 * (3 - 2)
    assert got["DualPipe"]["bubble"] == 3 * (Fr(5, 2) + 2 - 3)
    assert got["Chimera"]["bubble"] == chimera_idle(8, 16, 1, 2)
    assert [got[k]["peak"] for k in ("1F1B", "ZB1P", "Chimera", "DualPipe")] == [8, 8, 8, 9]
    t = comparison_table([(4, 8, 1, 2, 1, None), (8, 16, 1, 2, 1, 2)])
    assert t.column("bubble") == t.column("formula")
    assert t.column("peak act.") == t.column("report")
    assert all(len(line) <= 100 for line in str(t).splitlines())


@pytest.mark.parametrize("args, match", [((3, 8), "even number of ranks"), ((4, 6), ">= 2 \\* num_ranks"),
                                         ((4, 9), "even number")])
def test_dualpipe_bad_input(args, match):
    with pytest.raises(ValueError, match=match) as e:
        dualpipe_schedule(*args)
    _one_line(e)
    with pytest.raises(ValueError, match="FB must be"):
        simulate_dualpipe(4, 8, 1, 2, 1, FB=-1)


# ---------------------------------------------------------------- TeraPipe

COSTS = [SliceCost(), SliceCost(1, 1, 1), SliceCost(20, 1, Fr(1, 8))]


@pytest.mark.parametrize("cost", COSTS)
def test_terapipe_dp_equals_brute_force(cost):
    for L in range(1, 9):
        for K in (1, 2, 4, 8):
            lat, slices = optimal_slicing(L, K, cost)
            assert sum(slices) == L
            assert lat == brute_force_slicing(L, K, cost)[0], (L, K)
            assert lat <= best_uniform_slicing(L, K, cost)[0]


def test_terapipe_simulation_equals_the_formula():
    cost = SliceCost()
    for slices in ([5], [1, 1, 1], [4, 3, 2, 1], [1, 2, 3, 4], uniform_slicing(13, 4)):
        for K in (1, 3, 6):
            assert pipeline_latency(slices, K, cost)[0] == latency_formula(slices, K, cost)
    t = slice_times([2, 2], cost)
    assert t == [8 + 4 + Fr(3, 4), 8 + 4 + Fr(2 * 2 + 3, 4)]          # the second slice sees 2 more keys
    assert latency_formula([16], 4, cost) == 4 * cost(16, 0)             # unsliced: one stage at a time
    lat, _ = pipeline_latency([2, 2], 2, cost, stage_speed=[1, 2])       # unequal stages simulate too
    assert lat == t[0] + t[1] + t[1] / 2


def test_terapipe_dp_beats_uniform_on_a_long_sequence():
    cost = SliceCost()
    opt, slices = optimal_slicing(32, 8, cost)
    uni, _ = best_uniform_slicing(32, 8, cost)
    assert opt < uni < latency_formula([32], 8, cost)
    assert slices[0] > slices[-1]              # later slices attend to more context: shorter


@pytest.mark.parametrize("call, exc, match", [
    (lambda: optimal_slicing(0, 4), ValueError, "seq_len must be an int >= 1"),
    (lambda: brute_force_slicing(20, 4), ValueError, "<= 16"),
    (lambda: pipeline_latency([], 2), TypeError, "non-empty list"),
    (lambda: pipeline_latency([2, 0], 2), ValueError, "slices\\[1\\]"),
    (lambda: SliceCost(0.5, 1, 1), TypeError, "exact times"),
    (lambda: uniform_slicing(4, 5), ValueError, "num_slices"),
])
def test_terapipe_bad_input(call, exc, match):
    with pytest.raises(exc, match=match) as e:
        call()
    _one_line(e)


# ---------------------------------------------------------------- staleness

@pytest.mark.parametrize("machine", MACHINES)
def test_staleness_matches_the_closed_form(machine):
    for p in (1, 2, 3, 5):
        for N in (1, 2, 3):
            want = [closed_form(machine, p, s, N) for s in range(p)]
            assert staleness(machine, p, update_every=N) == want, (p, N)
    assert closed_form("fully_pipelined", 4, 0) == 7 and closed_form("1f1b", 4, 0) == 3


def test_1f1b_staleness_ignores_times_and_agrees_with_weight_versions():
    for F, B in ((1, 2), (2, 1), (Fr(1, 3), 5)):
        assert staleness("1f1b", 4, forward_time=F, backward_time=B) == [3, 2, 1, 0]
    assert weight_versions("pipedream", 4, 24).staleness == [3, 2, 1, 0]
    assert staleness_table(4).column("equal") == [True] * 4


def test_async_training_diverges_where_sync_converges_and_rescheduling_rescues():
    delays = [closed_form("fully_pipelined", 4, s) for s in range(4)]
    sync = train([0] * 4, lr=1.2)
    assert not sync.diverged and sync.final(50) < sync.losses[0] / 10
    assert train(delays, lr=1.2).diverged
    fixed = train(delays, lr=1.2, reschedule=math.inf)
    assert not fixed.diverged and fixed.final(50) < fixed.losses[0] / 10
    assert not train(delays, lr=0.4).diverged


@pytest.mark.parametrize("call, exc, match", [
    (lambda: staleness("gpipe", 4), ValueError, "unknown machine"),
    (lambda: stage_events("fully_pipelined", 4, 8, 1, 2), ValueError, "forward_time must equal"),
    (lambda: stage_events("1f1b", 4, 2), ValueError, "num_microbatches must be an int >= 4"),
    (lambda: closed_form("1f1b", 4, 4), ValueError, "stage must be an int in 0..3"),
    (lambda: train([], lr=0.1), TypeError, "delays must be"),
    (lambda: train([1, -1]), ValueError, "delays\\[1\\]"),
    (lambda: train([1], correction=1.0), ValueError, "correction"),
    (lambda: train([1], lr=0), ValueError, "lr must be a finite positive"),
])
def test_staleness_bad_input(call, exc, match):
    with pytest.raises(exc, match=match) as e:
        call()
    _one_line(e)
