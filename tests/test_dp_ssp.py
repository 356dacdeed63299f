"""The SSP clock rule (labkit.data_parallel.ssp), exact on hand-made timelines and properties."""
import random

import pytest

from labkit.data_parallel.ssp import ssp_makespan, ssp_staleness, ssp_start_times

FAST_SLOW = [[1, 1, 1], [3, 3, 3]]     # worker 0 takes 1 unit per iteration, worker 1 takes 3


def test_hand_timelines():
    assert ssp_start_times(FAST_SLOW, None) == [[0, 1, 2], [0, 3, 6]]          # ASP: nobody waits
    assert ssp_start_times(FAST_SLOW, 0) == [[0, 3, 6], [0, 3, 6]]             # BSP: a barrier per clock
    assert ssp_start_times(FAST_SLOW, 1) == [[0, 1, 3], [0, 3, 6]]             # one clock of slack
    assert ssp_makespan(FAST_SLOW, None) == ssp_makespan(FAST_SLOW, 0) == 9    # the straggler sets it
    # ASP: worker 1's first gradient is applied after worker 0's three: staleness 3
    assert ssp_staleness(FAST_SLOW, None) == [0, 0, 0, 3, 0, 0]


def test_properties_on_random_timelines():
    rng = random.Random(1)
    for _ in range(200):
        w, steps = rng.randint(1, 5), rng.randint(1, 8)
        d = [[rng.randint(1, 6) for _ in range(steps)] for _ in range(w)]
        bsp = ssp_start_times(d, 0)
        assert ssp_makespan(d, 0) == sum(max(d[k][c] for k in range(w)) for c in range(steps))
        assert all(len(set(bsp[k][c] for k in range(w))) == 1 for c in range(steps))  # lock-step
        assert ssp_start_times(d, steps) == ssp_start_times(d, None)                  # s >= steps: ASP
        spans = [ssp_makespan(d, s) for s in range(steps + 1)]
        assert spans == sorted(spans, reverse=True)                                   # slack never hurts
        for s in range(steps):
            stale = ssp_staleness(d, s)
            assert len(stale) == w * steps and min(stale) >= 0
            assert max(stale) <= (2 * s + 1) * (w - 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="same number"):
        ssp_start_times([[1, 2], [1]], 0)
    with pytest.raises(ValueError, match="one list per worker"):
        ssp_start_times([], 0)
    with pytest.raises(ValueError, match="staleness must be an int >= 0"):
        ssp_start_times(FAST_SLOW, -1)
    with pytest.raises(ValueError, match=">= 0"):
        ssp_makespan([[1, -2]], 0)
    with pytest.raises(ValueError, match="> 0"):
        ssp_staleness([[1, 0]], 0)
