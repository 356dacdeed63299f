"""MoE router balance (labkit.tensor_parallel.experts, router_training): the auxiliary losses equal
their formulas, routing with capacity equals a token-by-token loop, and training with the losses
balances the experts.

Tolerance: float64; losses and gradients 1e-12 relative (a handful of sums in another order).
"""
import math
import random

import pytest
import torch

from labkit.tensor_parallel.experts import (MoEConfig, expert_load, load_balancing_loss, route, router_z_loss)
from labkit.tensor_parallel.router_training import train_router


def _formula(z: torch.Tensor, k: int) -> torch.Tensor:
    """E · Σᵢ fᵢ Pᵢ written out token by token."""
    t, e = z.shape
    p = torch.softmax(z, -1)
    counts = [0] * e
    for row in p.detach().tolist():
        for i in sorted(range(e), key=lambda j: -row[j])[:k]:
            counts[i] += 1
    return sum(counts[i] / (t * k) * p[:, i].mean() for i in range(e)) * e


@pytest.mark.parametrize("k", (1, 2, 3))
def test_balance_loss_is_the_formula_with_its_gradient(k):
    g = torch.Generator().manual_seed(k)
    for skew in (0.0, 2.0, 6.0):
        z = torch.randn(37, 6, dtype=torch.float64, generator=g)
        z[:, 1] += skew
        a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
        ours, want = load_balancing_loss(a, k), _formula(b, k)
        ours.backward()
        want.backward()
        assert ours.item() == pytest.approx(want.item(), rel=1e-12)
        assert torch.allclose(a.grad, b.grad, rtol=1e-12, atol=1e-15)


def test_uniform_router_scores_one_and_skew_scores_more():
    z = torch.zeros(16, 8, dtype=torch.float64)
    z[torch.arange(16), torch.arange(16) % 8] = 1.0
    assert load_balancing_loss(z, 1).item() == pytest.approx(1.0, rel=1e-12)
    z[:, 0] += 5.0
    assert load_balancing_loss(z, 1).item() > 4.0              # nearly everything on one expert: close to E·(1/1)·P₀


def test_z_loss_is_the_mean_squared_log_sum_exp():
    z = torch.randn(9, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = sum(math.log(sum(math.exp(x) for x in row)) ** 2 for row in z.tolist()) / 9
    assert router_z_loss(z).item() == pytest.approx(want, rel=1e-12)


def test_bad_logits_are_one_line():
    with pytest.raises(ValueError, match="load_balancing_loss: router_logits must be a \\(tokens, experts\\) tensor"):
        load_balancing_loss(torch.zeros(4))
    with pytest.raises(ValueError, match="top_k must be an int in 1..3"):
        load_balancing_loss(torch.zeros(4, 3), top_k=4)


def _route_by_loop(expert, capacity, experts):
    t, k = expert.shape
    slot = torch.full((t, k), -1, dtype=torch.int64)
    filled = [0] * experts
    for j in range(k):
        for i in range(t):
            e = int(expert[i, j])
            if filled[e] < capacity:
                slot[i, j], filled[e] = filled[e], filled[e] + 1
    return slot


def test_routing_with_capacity_serves_first_choices_first():
    rng = random.Random(0)
    for trial in range(20):
        cfg = MoEConfig(hidden=4, experts=rng.choice([2, 4, 8]), ffn=4, top_k=rng.randint(1, 2),
                        capacity_factor=rng.choice([0.5, 1.0, 1.25, 2.0]))
        router = torch.nn.Linear(4, cfg.experts, bias=False).double()
        x = torch.randn(rng.randint(3, 40), 4, dtype=torch.float64)
        r = route(router, x, cfg)
        assert torch.equal(r.slot, _route_by_loop(r.expert, r.capacity, cfg.experts))
        assert r.dropped == int((r.slot < 0).sum())
        assert expert_load(r.expert, cfg.experts).sum() == x.shape[0] * cfg.top_k


@pytest.fixture(scope="module")
def runs():
    return {ab: train_router(alpha=ab[0], beta=ab[1]) for ab in ((0.0, 0.0), (0.1, 0.0), (0.0, 1e-3))}


def test_the_balance_loss_balances_the_experts(runs):
    plain, balanced = runs[0.0, 0.0], runs[0.1, 0.0]
    assert plain.max_over_mean > 3 and balanced.max_over_mean < 1.5
    assert balanced.cv < plain.cv / 4
    for f in (1.0, 1.25):
        assert balanced.dropped[f] < plain.dropped[f] / 4
    assert balanced.balance_loss < plain.balance_loss


def test_the_z_loss_shrinks_the_routers_log_sum_exp(runs):
    assert runs[0.0, 1e-3].z_loss < runs[0.0, 0.0].z_loss / 10
