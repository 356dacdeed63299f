"""ZeRO's per-rank model-state bytes against the ZeRO paper's figure and hand values."""
import pytest

from labkit.zero.formulas import model_state_bytes, reduction


def test_the_zero_papers_7_5b_on_64_gpus():
    psi, n = 7.5e9, 64
    gb = [model_state_bytes(psi, n, s) / 1e9 for s in range(4)]
    assert gb[0] == 120                                    # 16 bytes x 7.5B
    assert gb[1] == pytest.approx(31.40625)                # 4Ψ + 12Ψ/64: the paper's 31.4 GB
    assert gb[2] == pytest.approx(16.640625)               # 2Ψ + 14Ψ/64: 16.6 GB
    assert gb[3] == pytest.approx(1.875)                   # 16Ψ/64: 1.9 GB


def test_the_4x_and_8x_are_limits():
    assert reduction(8, 1) == pytest.approx(16 / (4 + 12 / 8))      # 2.91
    assert reduction(8, 2) == pytest.approx(16 / (2 + 14 / 8))      # 4.27
    assert round(reduction(8, 1), 2) == 2.91 and round(reduction(8, 2), 2) == 4.27
    assert reduction(10**9, 1) == pytest.approx(4, rel=1e-6) and reduction(10**9, 2) == pytest.approx(8, rel=1e-6)
    assert reduction(1, 3) == 1 and reduction(64, 3) == 64
    assert model_state_bytes(100, 4, 1, param_bytes=4, grad_bytes=4, optimizer_bytes=8) == 800 + 200


def test_bad_arguments():
    with pytest.raises(ValueError, match="stage must be an int in 0..3"):
        model_state_bytes(1e9, 8, 4)
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        model_state_bytes(1e9, 0, 1)
