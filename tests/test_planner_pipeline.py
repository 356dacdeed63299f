"""Lab 11: the pipeline term of the cost model (labkit.planner.pipeline) — how the layers are split
(evenly, or by cost with Lab 11's partition DP) and how long m micro-batches take — against
labkit.pipeline's event simulator run with each stage's forward and backward times."""
from __future__ import annotations

import random
from fractions import Fraction

import pytest

from labkit.cluster.autoparallel import partition_stages
from labkit.pipeline import schedule, time_schedule
from labkit.planner.pipeline import balanced_split, even_split, layer_units, pipeline_time


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (4, 16, 2), (8, 16, 2), (4, 8, 4), (3, 6, 2), (12, 12, 1)])
def test_equal_stages_give_the_textbook_bubble_exactly(p, m, v):
    # forward 1, backward 2 per chunk (exact Fractions): the simulator's makespan, and (p−1)/(v·m)
    # of the ideal
    t = [Fraction(3)] * (p * v)
    kind = "1f1b" if v == 1 else "interleaved_1f1b"
    sim = time_schedule(schedule(kind, p, m, v), [Fraction(1)] * (p * v), [Fraction(2)] * (p * v)).makespan
    got = pipeline_time(t, m, v)
    assert got == pytest.approx(float(sim), rel=1e-12)
    ideal = m * v * 3
    assert got / ideal - 1 == pytest.approx(float(Fraction(p - 1, v * m)), rel=1e-12)


@pytest.mark.parametrize("p", [2, 4, 8, 12])
@pytest.mark.parametrize("m_per_p", [1, 2, 8])
def test_1f1b_is_exact_when_the_last_stage_is_slowest(p, m_per_p):
    # the usual case: the last stage also runs the logits and the loss
    rng = random.Random(p * 100 + m_per_p)
    for _ in range(3):
        f = [1.0] * p
        f[-1] = 1.0 + rng.random()
        f[0] += 0.05 * rng.random() * (f[-1] - 1)       # the embedding: a little, less than the head
        b = [2 * x for x in f]
        m = m_per_p * p
        sim = time_schedule(schedule("1f1b", p, m), f, b).makespan
        assert pipeline_time([x + y for x, y in zip(f, b)], m) == pytest.approx(sim, rel=1e-9)


def test_1f1b_is_an_upper_bound_otherwise():
    # a slowest stage elsewhere: the formula never undercuts the simulator, and the gap is its fill
    # and drain only — within 3 % at m = 8p, within 15 % at m = p (stages ±20 % apart)
    rng = random.Random(7)
    for _ in range(60):
        p = rng.choice([2, 3, 4, 6, 8, 12])
        f = [rng.uniform(0.8, 1.2) for _ in range(p)]
        b = [2 * x * rng.uniform(0.95, 1.05) for x in f]
        for m, tol in ((p, 0.15), (8 * p, 0.03)):
            sim = time_schedule(schedule("1f1b", p, m), f, b).makespan
            got = pipeline_time([x + y for x, y in zip(f, b)], m)
            assert sim * (1 - 1e-12) <= got <= sim * (1 + tol), (p, m)


def test_interleaved_with_heavier_ends_stays_close():
    # the planner's interleaved stages are equal but for the embedding's first chunk and the head's
    # last: within −1 % and +9 % of the simulator
    for p in (2, 4, 8):
        for v in (2, 3, 4):
            for m in (p, 4 * p):
                for head, emb in ((1.5, 1.0), (1.2, 1.05), (2.0, 1.1)):
                    t = [1.0] * (p * v)
                    t[-1] *= head
                    t[0] *= emb
                    sim = time_schedule(schedule("interleaved_1f1b", p, m, v), [x / 3 for x in t],
                                   [2 * x / 3 for x in t]).makespan
                    assert -0.01 <= pipeline_time(t, m, v) / sim - 1 <= 0.09, (p, v, m, head, emb)


def test_splits():
    assert even_split(96, 8) == (12,) * 8
    with pytest.raises(ValueError, match=r"^even_split: stages \(7\) must divide layers \(96\)$"):
        even_split(96, 7)
    # balanced: the partition DP on [1 + embedding, 1, ..., 1, 1 + head] in layer units
    split = balanced_split(70, 12, 0.11, 0.0016, 0.107)
    costs = [1.0 + layer_units(0.0016 / 0.11)] + [1.0] * 68 + [1.0 + layer_units(0.107 / 0.11)]
    assert list(split) == partition_stages(costs, 12)[0] == [5] + [6] * 10 + [5]
    # a heavy head moves layers off the last stage; a light one leaves the split even-ish
    assert balanced_split(70, 12, 1.0, 0.0, 3.0)[-1] < 5
    assert balanced_split(10, 3, 1.0, 0.0, 0.0) == (4, 4, 2)          # the DP's tie rule: early stages long
    assert balanced_split(5, 1, 1.0, 0.5, 0.5) == (5,)
    with pytest.raises(ValueError, match=r"^balanced_split: stages \(8\) must be <= layers \(6\)"):
        balanced_split(6, 8, 1.0, 0.0, 0.0)
    assert layer_units(0.0149) == 0.02 and layer_units(0.972) == 0.98 and layer_units(0.969) == 0.96


def test_pipeline_time_bad_input():
    with pytest.raises(ValueError, match=r"^pipeline_time: 5 stage times do not make 2 chunks per rank$"):
        pipeline_time([1.0] * 5, 4, 2)
    with pytest.raises(ValueError, match=r"^pipeline_time: micro_batches must be an int >= 1, got 0$"):
        pipeline_time([1.0] * 4, 0)
