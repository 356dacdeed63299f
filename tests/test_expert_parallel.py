"""Expert parallelism (labkit.tensor_parallel.experts) on 1, 2 and 4 real gloo ranks against the same
mixture-of-experts layer in one process.

Tolerance: float64; the expert-parallel layer computes the same products per token as one process
(experts are applied per token, so batching tokens from several ranks changes nothing), but the
router's gradient is a sum over ranks taken in a different order: 1e-12 absolute.
"""
import math

import pytest
import torch
import torch.distributed as dist

from labkit.dist import launch
from labkit.tensor_parallel.experts import (ExpertParallelMoE, MoE, MoEConfig, all_to_all, all_to_all_bytes,
                                            moe_reference, route)

CFG = MoEConfig(hidden=8, experts=4, ffn=16, top_k=2, capacity_factor=1.0)
TOKENS = 12     # per rank


def _inputs(world):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(world * TOKENS, CFG.hidden, generator=g, dtype=torch.float64)
    w = torch.randn(world * TOKENS, CFG.hidden, generator=g, dtype=torch.float64)
    return x, w


def _ep_rank(rank, world):
    x, w = _inputs(world)
    moe = MoE(CFG, seed=3)
    layer = ExpertParallelMoE(moe)
    mine = slice(rank * TOKENS, (rank + 1) * TOKENS)
    xs = x[mine].clone().requires_grad_()         # as inside a model: the input needs a gradient too
    y, dropped = layer(xs)
    (y * w[mine]).sum().backward()
    # p2p all-to-all vs torch's own
    chunks = [torch.full((3,), 10.0 * rank + q, dtype=torch.float64) for q in range(world)]
    ours = torch.cat(all_to_all(chunks))
    theirs = torch.empty(3 * world, dtype=torch.float64)
    dist.all_to_all_single(theirs, torch.cat(chunks))
    return {"y": y.detach(), "dropped": dropped, "x_grad": xs.grad, "router": layer.router.weight.grad.clone(),
            "experts": [[p.grad.clone() for p in e.parameters()] for e in layer.experts],
            "bytes": layer.stats.get("bytes_sent", 0), "a2a_equal": torch.equal(ours, theirs)}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_expert_parallel_equals_one_process(world):
    x, w = _inputs(world)
    x.requires_grad_()
    moe = MoE(CFG, seed=3)
    y, dropped = moe_reference(moe, x, groups=world)
    (y * w).sum().backward()
    got = launch(_ep_rank, world, backend="gloo", timeout=90)
    local = CFG.experts // world
    torch.testing.assert_close(torch.cat([r["y"] for r in got]), y.detach(), rtol=0, atol=1e-12)
    assert sum(r["dropped"] for r in got) == dropped > 0             # capacity factor 1: some are dropped
    torch.testing.assert_close(torch.cat([r["x_grad"] for r in got]), x.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(sum(r["router"] for r in got), moe.router.weight.grad, rtol=0, atol=1e-12)
    for rank, r in enumerate(got):
        assert r["a2a_equal"]
        assert r["bytes"] == 4 * all_to_all_bytes(CFG, TOKENS, world, 8)      # 2 forward + 2 backward
        for e in range(local):
            for a, b in zip(r["experts"][e], moe.experts[rank * local + e].parameters()):
                torch.testing.assert_close(a, b.grad, rtol=0, atol=1e-12)


def test_capacity_and_dropping_follow_the_priority_rule():
    cfg = MoEConfig(hidden=2, experts=2, ffn=4, top_k=1, capacity_factor=1.0)
    moe = MoE(cfg)
    with torch.no_grad():
        moe.router.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    x = torch.tensor([[5.0, 0], [4, 0], [3, 0], [0, 1]], dtype=torch.float64)   # 3 tokens want expert 0
    r = route(moe.router, x, cfg)
    assert r.capacity == math.ceil(1.0 * 1 * 4 / 2) == 2
    assert r.expert[:, 0].tolist() == [0, 0, 0, 1]
    assert r.slot[:, 0].tolist() == [0, 1, -1, 0] and r.dropped == 1             # third in line is dropped
    y, dropped = moe_reference(moe, x)
    assert dropped == 1 and torch.equal(y[2], torch.zeros(2, dtype=torch.float64))
    big = MoEConfig(hidden=2, experts=2, ffn=4, top_k=1, capacity_factor=2.0)
    assert route(moe.router, x, big).dropped == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="top_k must be an int in 1..4"):
        MoEConfig(experts=4, top_k=5)
    with pytest.raises(ValueError, match="capacity_factor must be a finite positive"):
        MoEConfig(capacity_factor=0)
    with pytest.raises(ValueError, match="divisible by groups"):
        moe_reference(MoE(CFG), torch.zeros(5, CFG.hidden, dtype=torch.float64), groups=2)
