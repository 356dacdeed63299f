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


def test_our_gpts_saved_activations_are_counted_exactly():
    """The estimate equals (1) the storages autograd saves, seen by saved-tensor hooks, and (2) what
    the tracker sees live after forward (those, plus the logits and the loss), to the byte, on CPU."""
    import torch

    from labkit.memory.estimate import gpt_saved_activation_bytes
    from labkit.memory.tracker import MemoryTracker
    from labkit.model import GPT, GPTConfig, batch

    for cfg in (GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32),
                GPTConfig(layers=3, hidden=24, heads=3, seq_len=7, vocab=50, mlp_ratio=2)):
        for dtype in (torch.float32, torch.bfloat16, torch.float64):
            for seq in (None, 5):
                model = GPT(cfg, dtype=dtype)
                want = gpt_saved_activation_bytes(cfg, 3, seq, dtype)
                saved = {}

                def pack(t):
                    saved[id(t.untyped_storage())] = t.untyped_storage().nbytes()
                    return t

                tracker = MemoryTracker(model)
                with tracker:
                    tokens, targets = batch(cfg, 3, seq=seq)
                    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                        logits, loss = model(tokens, targets)       # kept alive: ids stay unique
                    live = tracker.live_by_category()["activations"]
                params = {id(p.untyped_storage()) for p in model.parameters()}
                assert sum(v for k, v in saved.items() if k not in params) == want["total"], (cfg, dtype, seq)
                assert live == want["total"] + logits.nbytes + loss.nbytes, (cfg, dtype, seq)
                assert want["total"] == sum(v for k, v in want.items() if k != "total")


def test_our_layer_against_korthikanti():
    """16-bit, one layer: ours is 32·s·b·h + 2·a·s²·b plus small terms; the paper's 34·s·b·h +
    5·a·s²·b counts dropout, which our model has not."""
    import torch

    from labkit.memory.estimate import gpt_saved_activation_bytes
    from labkit.model import GPTConfig

    s, b, h, a = 16, 2, 32, 4
    one, two = (gpt_saved_activation_bytes(GPTConfig(layers=L, hidden=h, heads=a, seq_len=s, vocab=64), b,
                                           dtype=torch.bfloat16) for L in (1, 2))
    per_layer = two["total"] - one["total"]
    assert per_layer == 32 * s * b * h + 2 * a * s * s * b + 4 * s * b * 2 + s * s
    assert activation_bytes_per_layer(s, b, h, a) - per_layer == 2 * s * b * h + 3 * a * s * s * b - 8 * s * b - s * s
