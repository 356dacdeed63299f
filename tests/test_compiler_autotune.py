"""Lab 13 part 3: autotuning search on a synthetic cost surface; CUDA graphs; the compiler table.

The synthetic surface (`synthetic_cost`) is deterministic and fast, so the searches are exact
functions of their seeds. The real measurement (`blocked_measure`) is only smoke-tested here; the
benchmark (benchmarks/compiler.py) runs the searches on it.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from labkit.compiler import autotune as at
from labkit.compiler import cuda_graphs, landscape

SPACE = at.blocked_space()                      # BM, BN, BK in 16..256: 125 configurations
OPT = min(at.synthetic_cost(c) for c in SPACE.configs())


def test_space_and_surface():
    assert len(SPACE) == len(SPACE.configs()) == 125
    c = {"BM": 64, "BN": 64, "BK": 64}
    assert at.synthetic_cost(c) == at.synthetic_cost(dict(c))             # deterministic
    assert at.synthetic_cost({"BM": 16, "BN": 16, "BK": 16}) > 3 * OPT     # too small: overhead
    assert at.synthetic_cost({"BM": 256, "BN": 256, "BK": 256}) > 2 * OPT  # too big: spills
    with pytest.raises(ValueError):
        at.Space(("a",), ((),))


def test_exhaustive_finds_the_optimum():
    tr = at.exhaustive(SPACE, at.synthetic_cost)
    assert len(tr.times) == 125 and tr.best_time == OPT
    assert tr.best_config == {"BM": 128, "BN": 256, "BK": 64}
    assert tr.best_so_far[-1] == OPT and all(np.diff(tr.best_so_far) <= 0)


def test_random_search_is_seeded_and_without_repeats():
    a = at.random_search(SPACE, at.synthetic_cost, 30, seed=3)
    b = at.random_search(SPACE, at.synthetic_cost, 30, seed=3)
    assert a.configs == b.configs and len({tuple(c.values()) for c in a.configs}) == 30
    assert a.configs != at.random_search(SPACE, at.synthetic_cost, 30, seed=4).configs


def test_random_and_model_guided_get_close_within_budget():
    model_best, random_best = [], []
    for seed in range(10):
        m = at.model_search(SPACE, at.synthetic_cost, 30, seed=seed)
        r = at.random_search(SPACE, at.synthetic_cost, 30, seed=seed)
        assert len(m.configs) == 30 and len({tuple(c.values()) for c in m.configs}) == 30
        assert at.evaluations_to_within(m, OPT, 5) is not None      # model: within 5% in 30 evals
        assert at.evaluations_to_within(r, OPT, 20) is not None     # random: within 20% in 30 evals
        model_best.append(m.best_time / OPT)
        random_best.append(r.best_time / OPT)
    assert np.mean(model_best) < np.mean(random_best)
    assert at.model_search(SPACE, at.synthetic_cost, 30, seed=1).configs == \
        at.model_search(SPACE, at.synthetic_cost, 30, seed=1).configs


def test_compare_curves():
    res = at.compare(SPACE, at.synthetic_cost, budget=40, seeds=range(10))
    assert res["optimum"] == OPT and len(res["table"]) == 125
    for method in at.METHODS:
        curve = res["curves"][method]
        assert curve.shape == (40,) and np.all(np.diff(curve) <= 1e-12) and curve[-1] >= 1.0
    assert res["curves"]["model"][-1] < res["curves"]["random"][-1] < res["curves"]["exhaustive"][-1]
    frac, mean = res["within"]["model"][5]
    assert frac == 1.0 and mean <= 30


def test_learned_model_ranks_held_out_configs_better_than_chance():
    cfgs = SPACE.configs()
    for seed in range(3):
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(cfgs))
        train, test = idx[:30], idx[30:]
        model = at.RidgeCostModel(SPACE).fit([cfgs[i] for i in train], [at.synthetic_cost(cfgs[i]) for i in train])
        truth = [at.synthetic_cost(cfgs[i]) for i in test]
        rho_model = at.spearman(model.predict([cfgs[i] for i in test]), truth)
        rho_random = at.spearman(rng.random(len(test)), truth)
        assert rho_model > 0.6 and rho_model > rho_random + 0.4


def test_spearman():
    assert at.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert at.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert at.spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)  # ties averaged


def test_tiled_matmul_and_real_measure():
    A, B = torch.randn(37, 29), torch.randn(29, 41)
    torch.testing.assert_close(at.tiled_matmul(A, B, 16, 8, 32), A @ B, rtol=1e-5, atol=1e-5)
    measure = at.blocked_measure(n=32, repeat=1, min_time_s=0.0)
    assert measure({"BM": 16, "BN": 32, "BK": 8}) > 0


def test_triton_measure_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmark times the real Triton kernel")
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        at.triton_measure()
    assert len(at.triton_space()) == 72


def test_cuda_graphs_on_cpu_says_what_it_needs():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert cuda_graphs.demo().split() == cuda_graphs.GPU_MESSAGE.split()   # wrapped at 100 columns
    assert "needs a CUDA GPU" in cuda_graphs.GPU_MESSAGE
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        cuda_graphs.measure()


def test_cuda_graphs_measure_code_path_with_a_stand_in_graph(monkeypatch):
    """The GPU path's shape on a CPU: pretend CUDA exists and replace the capture with eager
    replay. This checks the bookkeeping (timing, comparison, result fields), not CUDA graphs."""
    if torch.cuda.is_available():
        r = cuda_graphs.measure(kernels=50, size=256, repeat=5)
        assert r.max_error < 1e-5 and r.speedup > 1 and r.launches == 50      # one kernel per op
        return
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda_graphs, "capture", lambda fn, warmup=3: fn)
    r = cuda_graphs.measure(kernels=10, size=64, repeat=2, device="cpu")
    assert (r.kernels, r.size, r.max_error, r.launches) == (10, 64, 0.0, 10)
    assert r.eager_s > 0 and r.graph_s > 0 and r.eager_us_per_kernel == pytest.approx(r.eager_s / 10 * 1e6)


def test_small_kernels_chain_is_one_op_per_kernel():
    from labkit.compiler.fx_measure import launch_counts

    x = torch.randn(16)
    y = cuda_graphs.small_kernels(x, 4)
    torch.testing.assert_close(y, torch.relu(x * 1.0001 + 1e-4) * 1.0001)
    assert launch_counts(cuda_graphs.small_kernels, x, 9) == {"aten.mul": 3, "aten.add": 3, "aten.relu": 3}


def test_landscape_table_is_sourced():
    names = [r.name for r in landscape.ROWS]
    assert names[:4] == ["XLA", "TVM", "Triton", "TorchInductor"] and names[4].startswith("Hand-written")
    for row in landscape.ROWS:
        assert re.search(r"\b(19|20)\d\d\b", row.source), row.name
        assert row.measured_here and row.level and row.search
    md = landscape.table()
    assert len(md.splitlines()) == 2 + len(landscape.ROWS) and "measured here" in md.splitlines()[0]
    assert "opt-in" in landscape.ROWS[2].search                 # Triton does not tune by itself
    with pytest.raises(ValueError):
        landscape.table(("name", "speed"))
