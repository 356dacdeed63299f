"""Gradient compression with error feedback, local SGD (FedAvg) and learning-rate scaling rules."""
import math

import pytest
import torch

from labkit.data_parallel.compression import (ErrorFeedback, bytes_sent_per_rank, payload_bytes, sign_compress,
                                              sign_decompress, topk_compress, topk_decompress, train_compressed)
from labkit.data_parallel.large_batch import loss_after, scaled_lr
from labkit.data_parallel.local_sgd import local_sgd
from labkit.dist import launch
from labkit.data_parallel import DDP
from labkit.model import GPT, GPTConfig, batch

CFG = GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32)


def test_topk_keeps_the_largest_magnitudes():
    g = torch.tensor([0.5, -3.0, 1.0, 2.5, -0.1], dtype=torch.float64)
    vals, idx = topk_compress(g, 2)
    assert sorted(idx.tolist()) == [1, 3] and sorted(vals.tolist()) == [-3.0, 2.5]
    assert topk_decompress(vals, idx, 5).tolist() == [0, -3.0, 0, 2.5, 0]


def test_sign_packs_one_bit_per_element():
    g = torch.tensor([0.5, -3.0, 1.0, 0.0, -0.5, 2.0, -1.0, 4.0, -2.0], dtype=torch.float64)
    packed, scale = sign_compress(g)
    assert packed.dtype == torch.uint8 and packed.numel() == 2 == math.ceil(9 / 8)
    assert scale.item() == pytest.approx(g.abs().mean().item())
    assert sign_decompress(packed, scale, 9).tolist() == (scale * torch.where(g < 0, -1.0, 1.0).double()).tolist()


def test_error_feedback_sends_everything_eventually():
    gen = torch.Generator().manual_seed(0)
    for roundtrip in (lambda c: topk_decompress(*topk_compress(c, 3), 20),
                      lambda c: sign_decompress(*sign_compress(c), 20)):
        ef, total, sent = ErrorFeedback(roundtrip), torch.zeros(20, dtype=torch.float64), torch.zeros(20, dtype=torch.float64)
        for _ in range(7):
            g = torch.randn(20, generator=gen, dtype=torch.float64)
            total += g
            sent += ef.step(g)
        torch.testing.assert_close(sent + ef.residual, total, rtol=0, atol=1e-12)


def test_byte_counts():
    assert payload_bytes("topk", 1000, 10) == 10 * 12 and payload_bytes("sign+ef", 1001, 0) == 126 + 4
    assert bytes_sent_per_rank("dense", 1000, 0, 4) == 2 * 3 / 4 * 4000
    assert bytes_sent_per_rank("topk+ef", 1000, 10, 4) == 3 * 120


def _ddp_rank(rank, world):
    model = DDP(GPT(CFG, seed=0, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(3):
        opt.zero_grad()
        model(*batch(CFG, 4, seed=step * world + rank))[1].backward()
        model.finish_gradient_synchronization()
        opt.step()
    return [p.detach() for p in model.parameters()]


def test_dense_training_equals_our_ddp_and_compression_sends_less():
    want = launch(_ddp_rank, 2, backend="gloo", timeout=60)[0]
    dense = train_compressed(CFG, "dense", steps=3, per_rank=4, dtype=torch.float64)
    for a, b in zip(dense["params"], want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    topk = train_compressed(CFG, "topk+ef", steps=3, per_rank=4, ratio=0.01)
    assert topk["bytes_per_step"] == (2 - 1) * topk["k"] * 12 < dense["bytes_per_step"] / 10
    with pytest.raises(ValueError, match="method must be one of"):
        train_compressed(CFG, "gzip")


def test_local_sgd_with_one_local_step_is_data_parallel_sgd():
    want = launch(_ddp_rank, 2, backend="gloo", timeout=60)[0]
    got = local_sgd(CFG, local_steps=1, rounds=3, per_rank=4, dtype=torch.float64)
    for a, b in zip(got["params"], want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    n = sum(p.numel() for p in want)
    assert got["bytes"] == 3 * 2 * (2 - 1) / 2 * n * 8
    h4 = local_sgd(CFG, local_steps=4, rounds=1, per_rank=4)
    assert len(h4["losses"]) == 1 and h4["bytes"] == n * 4


def test_learning_rate_rules_and_determinism():
    assert [scaled_lr(r, 0.1, 32, 8) for r in ("none", "linear", "sqrt")] == [0.1, pytest.approx(0.4), 0.2]
    a, b = loss_after(CFG, 64, 16, 0.1), loss_after(CFG, 64, 16, 0.1)
    assert a == b and math.isfinite(a)
    assert loss_after(CFG, 64, 16, 1e6) == float("inf")            # a step far too big diverges
    with pytest.raises(ValueError, match="multiple of batch_size"):
        loss_after(CFG, 60, 16, 0.1)
    with pytest.raises(ValueError, match="rule must be one of"):
        scaled_lr("cubic", 0.1, 8, 8)
