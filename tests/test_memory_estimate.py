"""Closed forms of labkit.memory.estimate, on hand-computed values."""
import pytest

from labkit.memory.estimate import activation_bytes_per_layer, model_state_bytes_per_param


def test_model_states_are_16_bytes_per_parameter_either_way():
    mixed, fp32 = model_state_bytes_per_param(True), model_state_bytes_per_param(False)
    assert mixed == {"params": 2, "grads": 2, "optimizer": 12, "total": 16}
    assert fp32 == {"params": 4, "grads": 4, "optimizer": 8, "total": 16}
    n = 70e9                                                   # a 70B model, mixed precision
    assert n * mixed["params"] / 1e9 == 140 and n * mixed["optimizer"] / 1e9 == 840
    assert n * mixed["total"] / 1e9 == 1120
    assert 3 * n * 2 / 1e9 == 420 != n * mixed["total"] / 1e9  # the "3N x sizeof" slip


def test_activation_closed_forms():
    s, b, h, a = 2048, 1, 12288, 96                            # a GPT-3 175B layer
    sbh = s * b * h
    assert activation_bytes_per_layer(s, b, h, a) == sbh * (34 + 5 * a * s / h)
    assert activation_bytes_per_layer(s, b, h, a, 8) == sbh * (10 + 24 / 8 + 5 * a * s / (h * 8))
    assert activation_bytes_per_layer(s, b, h, a, 8, True) == sbh * (34 / 8 + 5 * a * s / (h * 8))
    assert activation_bytes_per_layer(s, b, h, a, 8, True, "selective") == sbh * 34 / 8
    assert activation_bytes_per_layer(s, b, h, a, 8, False, "selective") == sbh * (10 + 24 / 8)
    assert activation_bytes_per_layer(s, b, h, a, 8, True, "full") == sbh * 2 / 8
    assert activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * sbh
    # with t = 1 the tensor-parallel form is the plain one (10 + 24 = 34)
    assert activation_bytes_per_layer(s, b, h, a, 1) == activation_bytes_per_layer(s, b, h, a)
    # the attention term dominates at long sequences: 5as/h = 80 here vs 34
    assert 5 * a * s / h == 80


def test_bad_arguments():
    with pytest.raises(ValueError, match="recompute must be one of"):
        activation_bytes_per_layer(8, 1, 16, 2, recompute="some")
    with pytest.raises(ValueError, match="needs tensor_parallel > 1"):
        activation_bytes_per_layer(8, 1, 16, 2, sequence_parallel=True)
    with pytest.raises(ValueError, match="heads must be an int >= 1"):
        activation_bytes_per_layer(8, 1, 16, 0)
