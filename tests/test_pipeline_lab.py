"""labkit.pipeline.lab: the Lab 08 one-liners, the formulas they print, and the check-your-work pictures."""
from fractions import Fraction

import matplotlib
import pytest

import exercises.lab08_pipeline as stubs
import solutions.lab08_pipeline as answers
from labkit.pipeline import lab, schedule, time_schedule

matplotlib.use("Agg")


@pytest.mark.parametrize("p,m,v,TF,TI,TW", [(4, 8, 2, 1, 1, 1), (4, 8, 2, 2, 2, 1), (4, 8, 1, 1, 1, 1),
                                            (8, 16, 4, 1, 2, 1), (2, 4, 2, 3, 2, 1), (4, 4, 2, 1, 1, 1)])
def test_zero_bubble_formula_uses_per_stage_times(p, m, v, TF, TI, TW):
    sim = lab.simulate_zero_bubble(p, m, v, TF, TI, TW).makespan
    assert sim == lab.zero_bubble_makespan(p, m, v, TF, TI, TW)
    row = lab.zero_bubble_table([(p, m, v, TF, TI, TW)]).rows[0]
    assert row[4] == sim and row[6] is True
    if v > 1:   # per-virtual-stage times plugged into the same formula are off by v
        assert row[7] == sim / v


def test_peak_table_numbers_the_notebook_explains():
    t = lab.peak_table(4, 8, 2)
    assert t.column("peak sets per rank") == [[4, 3, 2, 1], [7, 5, 3, 1], [11, 9, 7, 5], [8, 8, 8, 8]]
    assert t.column("max in rank-shares") == ["4", "7", "11/2", "4"]
    # interleaved with v = 1: PyTorch's warm-up of 2(p-1-r) forwards, then one more before the first B
    order = schedule("interleaved_1f1b", 4, 8, 1)
    for r in range(4):
        kinds = [a.kind for a in order[r]]
        assert kinds.index("B") == 2 * (4 - 1 - r) + 1
    assert time_schedule(order, 1, 2).makespan == time_schedule(schedule("1f1b", 4, 8), 1, 2).makespan


def test_executor_table_matches_one_process_and_pytorch():
    t = lab.executor_table((("1f1b", 2, 4, 1), ("interleaved_zb", 2, 4, 2)))
    assert t.column("= one process") == [True, True] and t.column("= PyTorch") == [True, True]
    assert all(len(line) <= 100 for line in str(t).splitlines())


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_a_pipeline_trains_like_one_process(kind):
    t = lab.training_table(kind, p=2, m=4, steps=6)
    d = t.data
    assert d["losses"][-1] < d["losses"][0]                             # it learns
    assert max(abs(a - b) for a, b in zip(d["losses"], d["reference"])) < 1e-12 and d["max_param_diff"] < 1e-12
    assert all(len(line) <= 100 for line in str(t).splitlines())


def test_worked_problems_answers():
    # 1: bubble shares
    assert time_schedule(schedule("gpipe", 8, 32), 1, 2).bubble_fraction == Fraction(7, 39)
    assert time_schedule(schedule("interleaved_1f1b", 8, 32, 2), Fraction(1, 2), 1).bubble_fraction == Fraction(7, 71)
    assert min(m for m in range(1, 200) if Fraction(7, m + 7) <= Fraction(1, 20)) == 133
    # 2: peaks on rank 0
    assert time_schedule(schedule("gpipe", 8, 32), 1, 2).peak_inflight[0] == 32
    assert time_schedule(schedule("1f1b", 8, 32), 1, 2).peak_inflight[0] == 8
    # 3: flow shop
    tf, tb = [1, 1, 3, 1], [2, 2, 5, 2]
    assert time_schedule(schedule("gpipe", 4, 8), tf, tb).makespan == 73
    assert time_schedule(schedule("gpipe", 4, 9), tf, tb).makespan == 81
    # 5: zero bubble vs 1F1B
    assert lab.simulate_zero_bubble(4, 8, 1, 1, 1, 1).makespan == 27
    assert time_schedule(schedule("1f1b", 4, 8), 1, 2).makespan == 33


def test_pictures_of_the_solutions(capsys, monkeypatch):
    shown = []
    monkeypatch.setattr(lab, "_display_figure", shown.append)
    res = lab.picture("schedule_1f1b")(answers.schedule_1f1b)
    assert res.makespan == 33 and len(shown) == 1
    table = lab.picture("bubble_fraction")(answers.bubble_fraction)
    assert all(table.column("equal"))
    run = lab.picture("stage_backward")(answers.stage_backward)
    out = capsys.readouterr().out
    assert "same order as 1F1B on every rank: True" in out and ": equal (to 1e-12)" in out
    assert run.loss > 0 and len(shown) == 2
    assert all(len(line) <= 100 for line in out.splitlines())
    table = lab.picture("optimal_slicing")(answers.optimal_slicing)
    assert table.column("right") == ["yes"] * 3 and all(len(line) <= 100 for line in str(table).splitlines())


def test_slicing_picture_shows_a_wrong_latency_and_a_wrong_slicing():
    rows = lab.slicing_picture(lambda L, K, cost: (1, [L])).rows           # the whole sequence, a made-up latency
    assert [r[-1] for r in rows] == ["NO"] * 3 and all(r[4] == r[6] for r in rows)


def test_pictures_of_the_stubs_say_they_are_stubs(capsys):
    from labkit.grading.check import run_picture

    names = ("schedule_1f1b", "bubble_fraction", "stage_backward", "optimal_slicing")   # stage_backward: 2 ranks
    for name in names:
        assert run_picture("lab08_pipeline", name, lab.picture(name)) is None
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if "is still a stub" in line] == [f"{name} is still a stub." for name in names]


def test_a_wrong_schedule_is_reported_in_one_line(capsys):
    def reversed_1f1b(p, m):
        return {r: list(reversed(acts)) for r, acts in answers.schedule_1f1b(p, m).items()}

    assert lab.picture("schedule_1f1b")(reversed_1f1b) is None
    out = capsys.readouterr().out
    assert out.startswith("your schedule_1f1b(4, 8) cannot run:")
    assert all(len(line) <= 100 for line in out.splitlines())
