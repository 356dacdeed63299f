"""labkit.zero.timeline: the moment-by-moment model ends on the closed forms, and its transients."""
import pytest

from labkit.zero.formulas import comm_bytes_per_step, model_state_bytes
from labkit.zero.timeline import SHARD, WHOLE, step_moments


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_step_ends_on_the_closed_forms(stage):
    for world in (1, 2, 4, 8):
        moments = step_moments(stage, world, units=3, unit_numel=1000)
        assert moments[-1].bytes_held == pytest.approx(model_state_bytes(3000, world, stage))
        assert moments[-1].bytes_sent == pytest.approx(comm_bytes_per_step(3000, world, stage, 2))
        assert moments[0].label == "start" and moments[0].bytes_sent == 0


def test_transients():
    peak = {s: max(m.bytes_held for m in step_moments(s, 4, 3, 1000)) for s in range(4)}
    assert peak[0] == model_state_bytes(3000, 4, 0)                         # nothing beyond the end state
    assert peak[2] == pytest.approx(model_state_bytes(3000, 4, 2) + 2 * 1000 * 3 / 4)   # one unit's whole gradient
    ends = [m for m in step_moments(3, 4, 3, 1000) if m.phase != "start"]
    assert max(m.held["parameters"].count(WHOLE) for m in ends) == 1          # one unit gathered at a time
    assert all(m.held["parameters"][u] == SHARD for m in ends[-1:] for u in range(3))
    gathers = [m.comm for m in step_moments(3, 4, 3, 1000) if m.comm.startswith("all-gather")]
    assert gathers == [f"all-gather unit {u}" for u in (0, 1, 2, 2, 1, 0)]    # twice per unit: fwd, bwd


def test_bad_arguments():
    with pytest.raises(ValueError, match="stage must be an int in 0..3"):
        step_moments(4, 2)
    with pytest.raises(ValueError, match="unit_numel must be a finite positive"):
        step_moments(1, 2, 3, 0)
