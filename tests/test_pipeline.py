"""Lab 08 core: schedules, the validity checker, the simulator's closed forms, weight versions, drawings.

Times are Fractions or ints, so every closed form below is checked with exact equality.
"""
from fractions import Fraction as Fr

import pytest

from labkit.pipeline import Action, ScheduleError, check_schedule, is_valid, schedule, time_schedule
from labkit.pipeline.async_sim import weight_versions
from labkit.pipeline.schedules import dependencies

P_M = [(p, m) for p in (1, 2, 3, 4, 5) for m in (1, 2, 3, 4, 5, 7, 8, 12)]


def _valid_configs():
    for kind in ("gpipe", "1f1b", "interleaved_1f1b", "interleaved_zb"):
        for p, m in P_M:
            for v in ((1, 2, 3) if kind.startswith("interleaved") else (1,)):
                try:
                    yield kind, p, m, v, schedule(kind, p, m, v)
                except ValueError:
                    pass


# ---------------------------------------------------------------- schedules and the checker

def test_every_built_schedule_is_valid_and_complete():
    n = 0
    for kind, p, m, v, s in _valid_configs():
        check_schedule(s)
        assert sorted(s) == list(range(p))
        per_item = 3 if kind == "interleaved_zb" else 2  # F + B, or F + I + W
        assert sum(len(a) for a in s.values()) == per_item * p * v * m, (kind, p, m, v)
        for r, acts in s.items():
            assert all(a.stage % p == r for a in acts)
        n += 1
    assert n > 150


def test_known_small_orders():
    assert schedule("gpipe", 2, 2)[1] == [Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 0), Action(1, "B", 1)]
    # rank 0 of 1F1B p=3, m=4: 3 warm-up forwards, then B/F alternate, then the last backward
    assert [f"{a.kind}{a.microbatch}" for a in schedule("1f1b", 3, 4)[0]] == \
        ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]
    assert [f"{a.kind}{a.microbatch}" for a in schedule("1f1b", 3, 4)[2]] == \
        ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]


@pytest.mark.parametrize("args, match", [
    (("zb", 2, 4), "unknown schedule kind"),
    (("1f1b", 4, 3), "num_microbatches >= num_ranks"),
    (("gpipe", 2, 4, 2), "virtual_stages must be 1"),
    (("interleaved_1f1b", 4, 9, 2), "multiple of its number of rounds"),
    (("gpipe", 0, 4), "num_ranks must be >= 1"),
])
def test_invalid_combinations_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        schedule(*args)


def test_non_int_arguments_are_refused():
    with pytest.raises(TypeError, match="num_microbatches must be an int"):
        schedule("gpipe", 2, 4.0)


def test_checker_names_a_swapped_forward_dependency():
    s = schedule("1f1b", 3, 4)
    # Swap the first two actions of the last rank: B0 before its own F0. Ranks 0 and 1 then block
    # too (waiting for gradients), but the message names the root cause, not the lowest rank.
    last = s[2]
    last[0], last[1] = last[1], last[0]
    with pytest.raises(ScheduleError, match=r"rank 2 position 0: B0@s2 needs the forward of stage 2 microbatch 0"):
        check_schedule(s)


def test_checker_names_a_backward_order_deadlock():
    s = schedule("gpipe", 2, 2)
    s[0] = [Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 1), Action(0, "B", 0)]
    s[1] = [Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 0), Action(1, "B", 1)]
    check_schedule(s)  # a different backward order per rank is fine: B(1) of stage 1 does run
    s[1] = [Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1), Action(1, "F", 1)]
    with pytest.raises(ScheduleError, match=r"rank 1 position 2: B1@s1 needs the forward of stage 1 microbatch 1"):
        check_schedule(s)


def test_checker_cross_rank_cycle():
    # rank 0 waits for stage 1's gradient of mb 0 before sending mb 1's activation that rank 1 needs first.
    s = {0: [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
         1: [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)]}
    with pytest.raises(ScheduleError, match=r"rank 0 position 1: B0@s0 needs the backward \(input grad\) of stage 1 "
                                            r"microbatch 0 first, but that runs on rank 1, which is itself blocked"):
        check_schedule(s)


def test_checker_missing_duplicate_and_misplaced():
    s = schedule("gpipe", 2, 3)
    s[1] = s[1][:-1]
    with pytest.raises(ScheduleError, match="stage 1 microbatch 2: its backward \\(input grad\\) never runs"):
        check_schedule(s)
    s = schedule("gpipe", 2, 3)
    s[0].append(Action(0, "F", 1))
    with pytest.raises(ScheduleError, match="repeats the forward of stage 0 microbatch 1"):
        check_schedule(s)
    s = schedule("gpipe", 2, 3)
    s[0][0] = Action(1, "F", 0)
    with pytest.raises(ScheduleError, match="belongs on rank 1"):
        check_schedule(s)
    assert not is_valid({})


def test_split_backward_dependencies():
    assert dependencies(Action(1, "I", 3), 4) == [(1, "F", 3), (2, "G", 3)]
    assert dependencies(Action(1, "W", 3), 4) == [(1, "G", 3)]
    s = {0: [Action(0, "F", 0), Action(0, "I", 0), Action(0, "W", 0)],
         1: [Action(1, "F", 0), Action(1, "I", 0), Action(1, "W", 0)]}
    check_schedule(s)
    s[0] = [Action(0, "F", 0), Action(0, "W", 0), Action(0, "I", 0)]
    with pytest.raises(ScheduleError, match="W after its own input gradient"):
        check_schedule(s)


# ---------------------------------------------------------------- the simulator's closed forms

@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("tf, tb", [(1, 2), (Fr(3, 7), Fr(5, 7)), (1, 1)])
def test_bubble_closed_form_gpipe_1f1b(kind, tf, tb):
    for p, m in P_M:
        if kind == "1f1b" and m < p:
            continue
        r = time_schedule(schedule(kind, p, m), tf, tb)
        assert r.makespan == (m + p - 1) * (tf + tb)
        # share of total time (idle / (p * makespan)):
        assert r.bubble_fraction == Fr(p - 1, m + p - 1), (p, m)
        # relative to the ideal compute time (idle / busy):
        assert r.bubble_vs_ideal() == Fr(p - 1, m), (p, m)


@pytest.mark.parametrize("tf, tb", [(1, 2), (1, 1), (2, 1)])
def test_bubble_closed_form_interleaved(tf, tb):
    """(p-1)/(v m + p - 1) with per-stage times 1/v of a rank's chunk holds exactly for every m >= p
    that PyTorch's interleaved schedule accepts; for m < p (and v > 1) the schedule does worse."""
    checked = worse = 0
    for p in (2, 3, 4, 5):
        for m in range(1, 3 * p + 1):
            for v in (1, 2, 3):
                try:
                    s = schedule("interleaved_1f1b", p, m, v)
                except ValueError:
                    continue
                r = time_schedule(s, Fr(tf, v), Fr(tb, v))
                formula = Fr(p - 1, v * m + p - 1)
                if m >= p:
                    assert r.bubble_fraction == formula, (p, m, v)
                    checked += 1
                elif v > 1:
                    assert r.bubble_fraction > formula, (p, m, v)
                    worse += 1
    assert checked > 50 and worse > 10


@pytest.mark.parametrize("tf, ti, tw", [(1, 1, 1), (1, Fr(3, 2), Fr(1, 2)), (2, 2, 1), (Fr(3, 2), 1, 1)])
def test_zero_bubble_closed_form(tf, ti, tw):
    """Splitting B into I (input grad) + W (weight grad) and deferring W: with times tf, ti, tw of a
    rank's whole share of the model (each of its v virtual stages takes 1/v of them), every m >= p
    gives makespan = m (tf + ti + tw) + (p - 1)(tf + ti - tw) / v, provided tw <= min(tf, ti)."""
    n = 0
    for p in (2, 3, 4):
        for m in range(p, 3 * p + 1):
            for v in (1, 2):
                try:
                    s = schedule("interleaved_zb", p, m, v)
                except ValueError:
                    continue
                r = time_schedule(s, Fr(tf) / v, Fr(ti + tw) / v, weight_time=Fr(tw) / v)
                assert r.makespan == m * (tf + ti + tw) + Fr(p - 1) * (tf + ti - tw) / v, (p, m, v)
                one = time_schedule(schedule("interleaved_1f1b", p, m, v), Fr(tf) / v, Fr(ti + tw) / v)
                assert r.makespan < one.makespan
                n += 1
    assert n > 20
    # outside the condition (W slower than F) the formula no longer holds
    r = time_schedule(schedule("interleaved_zb", 2, 2), 1, 3, weight_time=2)
    assert r.makespan != 2 * 4 + (1 + 1 - 2)


def test_zero_bubble_memory_released_after_w():
    r = time_schedule(schedule("interleaved_zb", 2, 4), 1, 2)
    assert r.peak_inflight[0] == 2 and r.inflight[0][-1][1] == 0
    with pytest.raises(ValueError, match="must not exceed backward_time"):
        time_schedule(schedule("interleaved_zb", 2, 4), 1, 2, weight_time=3)


def test_interleaving_beats_1f1b():
    a = time_schedule(schedule("1f1b", 4, 8), 1, 2)
    b = time_schedule(schedule("interleaved_1f1b", 4, 8, 2), Fr(1, 2), 1)
    assert b.makespan < a.makespan and b.bubble_fraction < a.bubble_fraction


def test_peak_inflight_1f1b_vs_gpipe():
    for p, m in P_M:
        g = time_schedule(schedule("gpipe", p, m), 1, 2)
        assert all(g.peak_inflight[r] == m for r in range(p))
        if m >= p:
            f = time_schedule(schedule("1f1b", p, m), 1, 2)
            assert f.peak_inflight[0] == p == min(p, m)
            assert [f.peak_inflight[r] for r in range(p)] == [p - r for r in range(p)]
            assert f.inflight[0][-1][1] == 0  # everything released at the end


def test_inflight_series_is_consistent():
    r = time_schedule(schedule("1f1b", 3, 5), 1, 2)
    for rank, steps in r.inflight.items():
        assert steps[0] == (0, 0) or steps[0][0] == 0
        assert max(c for _, c in steps) == r.peak_inflight[rank]
        assert all(t1 < t2 for (t1, _), (t2, _) in zip(steps, steps[1:]))


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_slowest_stage_sets_the_pace(kind):
    tf = [Fr(1), Fr(1), Fr(3), Fr(1)]
    tb = [Fr(2), Fr(2), Fr(5), Fr(2)]
    spans = [time_schedule(schedule(kind, 4, m), tf, tb).makespan for m in range(4, 12)]
    # each extra microbatch costs exactly the slowest stage's forward + backward
    assert all(b - a == 3 + 5 for a, b in zip(spans, spans[1:]))
    if kind == "gpipe":  # flow-shop closed form: sum of stages + (m - 1) * slowest
        assert spans[0] == sum(tf) + sum(tb) + 3 * (3 + 5)


def test_p2p_latency_adds_per_hop():
    p, m, lat = 3, 4, Fr(1, 10)
    a = time_schedule(schedule("gpipe", p, m), 1, 2)
    b = time_schedule(schedule("gpipe", p, m), 1, 2, p2p_latency=lat)
    # GPipe's critical path: p-1 forward hops and p-1 backward hops
    assert b.makespan - a.makespan == 2 * (p - 1) * lat


def test_simulate_bad_inputs():
    s = schedule("gpipe", 2, 2)
    with pytest.raises(ValueError, match="forward_time has 3 entries but the schedule has 2 stages"):
        time_schedule(s, [1, 1, 1], 1)
    with pytest.raises(ValueError, match="must be >= 0"):
        time_schedule(s, -1, 1)
    with pytest.raises(TypeError, match="forward_time must be a number"):
        time_schedule(s, None, 1)
    bad = {0: [Action(0, "B", 0), Action(0, "F", 0)], 1: []}
    with pytest.raises(ScheduleError):
        time_schedule(bad, 1, 1)


@pytest.mark.parametrize("sched,kwargs,match", [
    ([Action(0, "F", 0)], {}, "a schedule is a non-empty dict rank -> list of Action, got list"),
    ({}, {}, r"non-empty dict .*got dict \(empty\)"),
    ({1: [], 2: []}, {}, r"ranks must be 0\.\.1, got \[1, 2\]"),
    ({"a": []}, {}, r"ranks \(the schedule's keys\) must be ints 0\.\.0, got 'a'"),
    ({0: [], "1": []}, {}, r"must be ints 0\.\.1, got '1'"),
    ({True: []}, {}, r"must be ints 0\.\.0, got True \(bool\)"),
    ({0: 5}, {}, "rank 0: its actions must be a list of Action.*got int"),
    ({0: "FB"}, {}, "rank 0: its actions must be a list of Action.*got str"),
    ({0: [(0, "F")]}, {}, r"rank 0 position 0: \(0, 'F'\) is not an Action\(stage, kind, microbatch\)"),
    ({0: [[0, "F", 0]]}, {}, r"rank 0 position 0: \[0, 'F', 0\] is not an Action"),
    ({0: [(0, "F", 0), (0, "X", 0)]}, {}, r"rank 0 position 1: unknown kind 'X'.*expected F, B, I or W"),
    ({0: [(0, 1, 0)]}, {}, "rank 0 position 0: unknown kind 1"),
    ({0: [(-1, "F", 0)]}, {}, r"rank 0 position 0: stage must be an int >= 0, got -1"),
    ({0: [(0.0, "F", 0)]}, {}, r"stage must be an int >= 0, got 0\.0 \(float\)"),
    ({0: [("0", "F", 0)]}, {}, r"stage must be an int >= 0, got '0' \(str\)"),
    ({0: [(0, "F", -1)]}, {}, r"microbatch must be an int >= 0, got -1"),
    ({0: [(0, "F", True)]}, {}, r"microbatch must be an int >= 0, got True \(bool\)"),
    (schedule("gpipe", 2, 2), {"num_stages": "2"},
     r"num_stages must be an int >= 1 \(or None to infer it\), got '2'"),
    (schedule("gpipe", 2, 2), {"num_microbatches": 0}, r"num_microbatches must be an int >= 1"),
])
def test_checker_malformed_input_one_line(sched, kwargs, match):
    with pytest.raises(ScheduleError, match=match) as excinfo:
        check_schedule(sched, **kwargs)
    assert "\n" not in str(excinfo.value)
    assert isinstance(excinfo.value, ValueError)
    if not kwargs:
        assert not is_valid(sched)


def test_plain_tuples_are_accepted_by_checker_and_simulator():
    plain = {r: [tuple(a) for a in acts] for r, acts in schedule("1f1b", 2, 3).items()}
    check_schedule(plain)
    assert time_schedule(plain, 1, 2).makespan == time_schedule(schedule("1f1b", 2, 3), 1, 2).makespan


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(forward_time=float("nan")), ValueError,
     r"forward_time must be finite \(no NaN or infinity\), got \[nan, nan\]"),
    (dict(backward_time=[1, float("inf")]), ValueError, r"backward_time must be finite \(no NaN or infinity\)"),
    (dict(forward_time=-1), ValueError, r"forward_time must be >= 0 seconds, got \[-1, -1\]"),
    (dict(forward_time=[1, -Fr(1, 2)]), ValueError, r"forward_time must be >= 0 seconds"),
    (dict(p2p_latency=float("nan")), ValueError, "p2p_latency must be a finite number >= 0 seconds, got nan"),
    (dict(p2p_latency=float("inf")), ValueError, "p2p_latency must be a finite number >= 0 seconds, got inf"),
    (dict(p2p_latency=-1), ValueError, "p2p_latency must be a finite number >= 0 seconds, got -1"),
    (dict(p2p_latency="1"), TypeError, "p2p_latency must be a number of seconds, got str"),
    (dict(weight_time=float("nan")), ValueError, r"weight_time must be finite"),
])
def test_simulate_bad_times_one_line(kwargs, exc, match):
    args = dict(forward_time=1, backward_time=2)
    args.update(kwargs)
    with pytest.raises(exc, match=match) as excinfo:
        time_schedule(schedule("1f1b", 2, 2), **args)
    assert "\n" not in str(excinfo.value)


def test_bubble_vs_ideal_zero_times_one_line():
    r = time_schedule(schedule("1f1b", 2, 2), 0, 0)
    assert r.makespan == 0 and r.bubble_fraction == 0
    with pytest.raises(ValueError, match=r"bubble_vs_ideal: total busy time is 0") as excinfo:
        r.bubble_vs_ideal()
    assert "\n" not in str(excinfo.value)
    assert time_schedule(schedule("gpipe", 2, 4), 0, 1).bubble_vs_ideal() == Fr(1, 4)   # only B takes time: (p-1)/m


# ---------------------------------------------------------------- asynchronous schedules

@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_pipedream_versions(p):
    t = weight_versions("pipedream", p, 4 * p + 3)
    assert t.max_versions == [p - s for s in range(p)]
    assert t.staleness == [p - 1 - s for s in range(p)]


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_pipedream_2bw_versions(p):
    t = weight_versions("pipedream_2bw", p, 4 * p + 3)
    assert t.max_versions == [2] * (p - 1) + [1]
    # updating every microbatch brings back PipeDream's p - s
    assert weight_versions("pipedream_2bw", p, 4 * p + 3, update_every=1).max_versions == [p - s for s in range(p)]


def test_gpipe_is_synchronous():
    t = weight_versions("gpipe", 4, 8)
    assert t.max_versions == [1] * 4 and t.staleness == [0] * 4
    # every backward uses the version its forward used
    for trace in weight_versions("pipedream", 4, 12).used:
        fwd = {a.microbatch: v for a, v in trace if a.kind == "F"}
        assert all(fwd[a.microbatch] == v for a, v in trace if a.kind == "B")


def test_weight_versions_bad_input():
    with pytest.raises(ValueError, match="unknown policy"):
        weight_versions("chimera", 2, 4)
    with pytest.raises(ValueError, match="update_every applies"):
        weight_versions("pipedream", 2, 4, update_every=2)
    for args, kwargs, exc, match in [(("pipedream", "2", 4), {}, TypeError, "num_stages must be an int"),
                                     (("pipedream", 2, 4.0), {}, TypeError, "num_microbatches must be an int"),
                                     (("pipedream", 0, 4), {}, ValueError, "num_stages must be >= 1"),
                                     (("pipedream_2bw", 2, 4), {"update_every": 0}, ValueError,
                                      "update_every must be >= 1")]:
        with pytest.raises(exc, match=match) as excinfo:
            weight_versions(*args, **kwargs)
        assert "\n" not in str(excinfo.value)


# ---------------------------------------------------------------- drawings

def test_pipeline_frame_renders_and_reports():
    import matplotlib.figure

    from labkit.viz.pipeline import frame_stats, pipeline_frame

    fig = pipeline_frame("1f1b", 4, 8, 1, 0.0)
    assert isinstance(fig, matplotlib.figure.Figure)
    title = fig.axes[0].get_title()
    assert "bubble 0.273" in title and "peak in flight on rank 0 = 4" in title
    _, st = frame_stats("gpipe", 4, 8)
    assert st["peak_inflight_rank0"] == 8 and abs(st["bubble"] - 3 / 11) < 1e-12
    _, slow = frame_stats("gpipe", 4, 8, 1, 1.0)
    assert slow["bubble"] > st["bubble"]
    err = pipeline_frame("1f1b", 4, 2)
    assert isinstance(err, str) and "num_microbatches &gt;= num_ranks" in err
    import matplotlib.pyplot as plt
    plt.close("all")


def test_gantt_and_compare():
    import matplotlib.pyplot as plt

    from labkit.viz.pipeline import as_timeline, compare_timelines, gantt

    r = time_schedule(schedule("interleaved_1f1b", 2, 4, 2), Fr(1, 2), 1)
    tl = as_timeline(r)
    assert len(tl[0]) == 16 and tl[0][0][1] == 0.0
    gantt(r, "x")
    compare_timelines(tl, r)
    plt.close("all")


def test_widget_wires_five_controls():
    import matplotlib.pyplot as plt

    from labkit.viz.pipeline import pipeline_widget

    w = pipeline_widget()
    controls, html = w.children[:-1], w.children[-1]
    assert len(controls) == 5 and "<img" in html.value
    controls[0].value = "gpipe"  # a change redraws
    assert "<img" in html.value
    controls[2].value = 1  # m=1 < p=4 is fine for GPipe
    controls[0].value = "1f1b"  # ... but refused by 1F1B: an error line, not an exception
    assert "cannot build this schedule" in html.value
    plt.close("all")
