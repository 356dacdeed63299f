"""Graded tests for Lab 09 (exercises/lab09_memory.py). Run: python -m labkit.grade --lab 09.

``checkpointed_forward`` runs in the submission's sandboxed worker on float64 chains of
Linear+Tanh(+Dropout) layers (labkit.grading.harness.lab09_checkpoint); the judge runs the plain
chain with the same seed itself. Recomputing the same ops gives the same numbers: gradients are
compared to 1e-12 (dropout with the wrong masks is off by O(1)). Peak activation bytes must stay
within one (B, w) tensor of the every-segment closed form (S + k + 2)·a + g + 2e
(labkit.memory.activation_checkpointing.chain_peak_bytes), far below keeping everything, (N + 2)·a + g + 2e;
the extra FLOPs must be more than none and at most one forward.

``checkpoint_policy`` runs on 45 cases of up to 12 tensors (random sizes and costs spread so that
greedy orders go wrong, and matmul outputs of Linear chains): its choice must fit the budget, and
recompute exactly the least any choice within the budget does (labkit.memory.policy.
best_by_brute_force tries all 2^n subsets; any optimal set passes), returned as a sorted list.

``forward_only_peak`` is compared with max(a_1, max_i a_i + a_{i+1}) on random chains and with the
peak the judge measures (labkit's exact tracker) on a Linear/ReLU chain under torch.no_grad();
``kv_cache_bytes`` with 2·layers·kv_heads·head_dim·tokens·batch·itemsize on random multi-head and
grouped-query shapes, and with the bytes of the KV cache the judge fills while decoding our GPT.
"""
import random

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from labkit.grading.generate import references
from labkit.grading.static import Policy
from labkit.memory.activation_checkpointing import chain_peak_bytes, make_chain
from labkit.memory.policy import best_by_brute_force, chain_tensors, recomputed
from labkit.model import GPTConfig

POLICY = Policy(references=references("lab09_memory"),
                forbid_modules=("torch.utils.checkpoint",))
TOL = 1e-12


def _cases(seed):
    rng = random.Random(seed)
    return [dict(n_layers=16, segment=4, batch=8, width=6, dropout=0.0, seed=seed % 1000),
            dict(n_layers=7, segment=3, batch=4, width=5, dropout=0.0, seed=seed % 1000 + 1),
            dict(n_layers=9, segment=rng.randint(2, 4), batch=6, width=4, dropout=0.3, seed=seed % 1000 + 2),
            dict(n_layers=5, segment=1, batch=3, width=7, dropout=0.5, seed=seed % 1000 + 3)]


_RUN = {}


def _run(impl, seed):
    """(case, result) pairs, run once for all tests (on the first test's seed)."""
    if "r" not in _RUN:
        try:
            cases = _cases(seed)
            _RUN["r"] = list(zip(cases, impl.harness("lab09_checkpoint", cases)))
        except Exception as e:  # remembered: sibling tests fail the same way
            _RUN["r"] = e
    if isinstance(_RUN["r"], Exception):
        raise _RUN["r"]
    return _RUN["r"]


def _plain(case):
    layers = make_chain(case["n_layers"], case["width"], dropout=case["dropout"], seed=case["seed"])
    x = torch.randn(case["batch"], case["width"], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(case["seed"])).requires_grad_()
    torch.manual_seed(case["seed"])
    with FlopCounterMode(display=False) as counter:
        y = x
        for layer in layers:
            y = layer(y)
        y.sum().backward()
    forward = 2 * case["batch"] * case["width"] ** 2 * case["n_layers"]
    return [x.grad] + [p.grad for p in torch.nn.ModuleList(layers).parameters()], counter.get_total_flops(), forward


def _check_grads(case, res):
    want, _, _ = _plain(case)
    assert len(res["grads"]) == len(want), "a gradient is missing"
    for k, (g, w) in enumerate(zip(res["grads"], want)):
        what = "x" if k == 0 else f"parameter {k - 1}"
        assert g is not None, f"{case}: no gradient reached {what}"
        err = (g - w).abs().max().item()
        assert err < TOL, f"{case}: gradient of {what} off by {err:.2e}"


@pytest.mark.graded(points=3, exercise="checkpointed_forward")
def test_gradients_equal_the_plain_chain(impl, seed):
    for case, res in _run(impl, seed):
        if case["dropout"] == 0:
            _check_grads(case, res)


@pytest.mark.graded(points=2, exercise="checkpointed_forward")
def test_gradients_with_dropout_need_the_same_random_numbers(impl, seed):
    for case, res in _run(impl, seed):
        if case["dropout"] > 0:
            _check_grads(case, res)


@pytest.mark.graded(points=2, exercise="checkpointed_forward")
def test_only_segment_inputs_are_kept(impl, seed):
    for case, res in _run(impl, seed):
        if case["dropout"] > 0:
            continue                   # dropout masks add to the bytes; the closed form has none
        n, k, b, w = case["n_layers"], case["segment"], case["batch"], case["width"]
        bound = chain_peak_bytes(n, k, b, w, 8, "ours") + b * w * 8
        everything = chain_peak_bytes(n, None, b, w, 8, "none")
        assert res["peak"] <= bound, (f"{case}: peak activation bytes {res['peak']}, at most {bound} with only "
                                      f"segment inputs kept (keeping everything: {everything})")


@pytest.mark.graded(points=1, exercise="checkpointed_forward")
def test_recomputation_costs_at_most_one_forward(impl, seed):
    for case, res in _run(impl, seed):
        _, plain, forward = _plain(case)
        extra = res["flops"] - plain
        assert 0 < extra <= forward, (f"{case}: {extra} extra FLOPs over the plain step; recomputing every "
                                      f"segment once costs one forward, {forward}")


# ---- checkpoint_policy ------------------------------------------------------------------------

def _policy_cases(seed, n=40):
    """(sizes, costs, budget): 1 to 12 tensors, sizes and costs spread so that greedy orders (by
    size, by cost, by cost per byte) are often wrong, budgets from nothing to everything."""
    rng = random.Random(seed)
    cases = [([], [], 0), ([5], [7], 4), ([5], [7], 5), ([0, 3], [2, 0], 0), ([4, 4, 4], [1, 1, 1], 100)]
    while len(cases) < n:
        k = rng.randint(1, 12)
        sizes = [rng.choice([0, rng.randint(1, 40), rng.randint(1, 4000)]) for _ in range(k)]
        costs = [rng.choice([0, rng.randint(1, 50), rng.randint(1, 5000)]) for _ in range(k)]
        cases.append((sizes, costs, rng.randint(0, sum(sizes))))
    # sizes and costs of real tensors: matmul outputs of Linear chains (bytes, FLOPs)
    for _ in range(5):
        widths = [rng.choice([16, 32, 48, 64, 128, 256]) for _ in range(rng.randint(3, 10))]
        sizes, costs = chain_tensors(widths, rng.choice([4, 16]))
        cases.append((sizes, costs, rng.randint(0, sum(sizes))))
    return cases


def _keep(impl, sizes, costs, budget):
    got = impl.checkpoint_policy(list(sizes), list(costs), budget)
    keep = list(got)
    where = f"sizes={sizes} costs={costs} budget={budget}"
    assert all(isinstance(i, int) and 0 <= i < len(sizes) for i in keep), \
        f"{where}: returned {got!r}; want indices 0..{len(sizes) - 1}"
    assert len(set(keep)) == len(keep), f"{where}: returned {got!r}, an index twice"
    return keep, where


@pytest.mark.graded(points=2, exercise="checkpoint_policy")
def test_policy_fits_the_budget(impl, seed):
    for sizes, costs, budget in _policy_cases(seed):
        keep, where = _keep(impl, sizes, costs, budget)
        kept = sum(sizes[i] for i in keep)
        assert kept <= budget, f"{where}: keeps {sorted(keep)}, {kept} bytes, over the budget of {budget}"


@pytest.mark.graded(points=3, exercise="checkpoint_policy")
def test_policy_recomputes_the_least_possible(impl, seed):
    for sizes, costs, budget in _policy_cases(seed + 1):
        keep, where = _keep(impl, sizes, costs, budget)
        if sum(sizes[i] for i in keep) > budget:
            continue                               # the budget test takes the points for that
        least, best = best_by_brute_force(sizes, costs, budget)
        got = recomputed(costs, keep)
        assert got == least, (f"{where}: keeping {sorted(keep)} recomputes {got} FLOPs; keeping {best} "
                              f"recomputes {least}, within the budget")


@pytest.mark.graded(points=1, exercise="checkpoint_policy")
def test_policy_is_sorted(impl, seed):
    for sizes, costs, budget in _policy_cases(seed + 2, n=10):
        got = impl.checkpoint_policy(list(sizes), list(costs), budget)
        assert isinstance(got, list) and got == sorted(got), f"sizes={sizes} costs={costs} budget={budget}: " \
                                                             f"returned {got!r}; want a sorted list"


# ------------------------------------------------------------------ section 12: inference memory
def _peak_reference(a):
    return max([a[0]] + [x + y for x, y in zip(a, a[1:])])


@pytest.mark.graded(points=2, exercise="forward_only_peak")
def test_forward_only_peak_equals_the_measured_peak(impl):
    from labkit.memory.inference import chain_peaks

    for widths, batch_size in (([64, 64, 64, 64], 8), ([32, 128, 16, 256, 8], 4)):
        sizes = [batch_size * w * 4 for w in widths[1:] for _ in range(2)]    # Linear and ReLU outputs
        measured = chain_peaks(widths, batch_size)["inference_peak"]
        assert impl.forward_only_peak(sizes) == measured, f"widths {widths}: measured {measured} B"


@pytest.mark.graded(points=2, exercise="forward_only_peak")
def test_forward_only_peak_random(impl, seed):
    rng = random.Random(seed)
    for _ in range(30):
        a = [rng.randint(1, 10_000) for _ in range(rng.randint(1, 9))]
        assert impl.forward_only_peak(a) == _peak_reference(a), a
    with pytest.raises(ValueError):
        impl.forward_only_peak([])


def _kv_reference(layers, heads, kv_heads, head_dim, tokens, batch_size, itemsize):
    return 2 * layers * kv_heads * head_dim * tokens * batch_size * itemsize


@pytest.mark.graded(points=2, exercise="kv_cache_bytes")
def test_kv_cache_bytes_equals_a_filled_cache(impl):
    from labkit.memory.inference import measure_kv_cache

    cfg = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32)
    m = measure_kv_cache(cfg, batch=3, tokens=7)
    got = impl.kv_cache_bytes(2, 4, 4, 8, 7, 3, 4)
    assert got == m.held[-1], f"{got} B, but the cache of our GPT after 7 tokens holds {m.held[-1]} B"


@pytest.mark.graded(points=2, exercise="kv_cache_bytes")
def test_kv_cache_bytes_random_and_grouped(impl, seed):
    rng = random.Random(seed)
    for _ in range(30):
        heads = rng.choice([4, 8, 16, 32, 64])
        kv = rng.choice([d for d in (1, 2, 4, 8, heads) if heads % d == 0])
        args = (rng.randint(1, 96), heads, kv, rng.choice([64, 128]), rng.randint(0, 8192), rng.randint(1, 16),
                rng.choice([1, 2, 4]))
        assert impl.kv_cache_bytes(*args) == _kv_reference(*args), args
    assert impl.kv_cache_bytes(80, 64, 8, 128, 1, 1, 2) == 327_680, "Llama 2 70B: 320 KiB per token"
    for bad in ((80, 64, 6, 128, 1, 1, 2), (0, 4, 4, 8, 1, 1, 2), (2, 4, 4, 8, 1, 0, 2)):
        with pytest.raises(ValueError):
            impl.kv_cache_bytes(*bad)
