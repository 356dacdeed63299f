"""labkit.data_parallel.param_server on real gloo ranks: consistency models, staleness, bytes."""
import pytest
import torch

from labkit.data_parallel import param_server as PS


def _bsp_in_one_process(cfg, workers):
    """Synchronous SGD with the workers' own mini-batches, in one process."""
    X, y, _ = PS.make_data(cfg, workers)
    gens = {k: torch.Generator().manual_seed(cfg.seed * 1000 + k) for k in range(1, workers + 1)}
    w = torch.zeros(cfg.dim, dtype=torch.float64)
    for _ in range(cfg.steps):
        grads = []
        for k in range(1, workers + 1):
            Xs, ys = X[(k - 1) * 64:k * 64], y[(k - 1) * 64:k * 64]
            idx = torch.randint(64, (cfg.batch,), generator=gens[k])
            grads.append(Xs[idx].t() @ (Xs[idx] @ w - ys[idx]) / cfg.batch)
        w = w - cfg.lr * sum(grads) / workers
    return w


def test_bsp_is_synchronous_sgd_with_fresh_gradients():
    cfg = PS.PSConfig(mode="bsp", steps=12, compute_s=0.0, stragglers={2: 0.003})
    res = PS.run(cfg, workers=3)
    assert res.updates == 12 and res.staleness == [0] * 36
    # float64; only the order in which the server sums the 3 gradients differs
    torch.testing.assert_close(res.final, _bsp_in_one_process(cfg, 3), rtol=0, atol=1e-12)
    assert res.loss[-1] < res.loss[0] / 5
    assert res.bytes_in == 36 * (PS.HEADER + cfg.dim) * 8 and res.bytes_out == 36 * (1 + cfg.dim) * 8


def test_asp_lets_fast_workers_run_on_stale_parameters():
    cfg = PS.PSConfig(mode="asp", steps=10, compute_s=0.001, stragglers={1: 0.03})
    res = PS.run(cfg, workers=3)
    assert res.updates == 30 and len(res.staleness) == 30
    assert max(res.staleness) >= 2                   # the straggler's gradients are several updates old
    # nobody waits for the straggler: waiting for it would cost about steps x 0.03 = 0.3 s; the bound
    # is a third of that (a loaded machine once made a fast worker's plain waits 0.056 s)
    straggler_s = cfg.steps * cfg.stragglers[1]
    assert res.wait_s[2] < straggler_s / 3 and res.wait_s[3] < straggler_s / 3


@pytest.mark.parametrize("s", [0, 1])
def test_ssp_bounds_staleness(s):
    workers = 3
    cfg = PS.PSConfig(mode="ssp", staleness=s, steps=10, compute_s=0.001, stragglers={1: 0.01})
    res = PS.run(cfg, workers=workers)
    # while a worker computes clock c+1, every other worker can push at most 2s+1 gradients
    assert max(res.staleness) <= (2 * s + 1) * (workers - 1)
    assert res.updates == 30 and res.loss[-1] < res.loss[0]


def test_server_link_carries_every_workers_traffic():
    assert PS.server_bytes_per_step(4, 1000) == 2 * 4 * 1000 * 8


def test_bad_configs_are_one_line_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        PS.PSConfig(mode="hogwild")
    with pytest.raises(ValueError, match="staleness must be an int >= 0"):
        PS.PSConfig(mode="ssp", staleness=-1)
    with pytest.raises(ValueError, match="do not exist"):
        PS.run(PS.PSConfig(stragglers={5: 0.1}), workers=2)
