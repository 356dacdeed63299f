"""FSDP prefetch (labkit.zero.fsdp, prefetch=True; labkit.zero.prefetch): the same training as one
process and as FSDP without prefetch, the order of its gathers, one extra unit at the peak, the
same traffic, and the closed form for when the traffic hides.

Tolerance: float64 runs against one process, 1e-12 (sums over ranks in another order); with and
without prefetch the arithmetic is the same, so parameters must be bit-identical.
"""
from functools import partial

import pytest
import torch

from labkit.collectives.counting import count_collectives
from labkit.dist import launch
from labkit.model import GPT, GPTConfig, batch
from labkit.zero import prefetch as P
from labkit.zero.fsdp import FSDP
from labkit.zero.training import reference_params, train_rank

CFG = GPTConfig(layers=3, hidden=16, heads=2, seq_len=8, vocab=32)


@pytest.mark.parametrize("world", (1, 2, 4))
def test_prefetching_fsdp_trains_like_one_process(world):
    want = reference_params(CFG, global_batch=4)
    runs = launch(partial(train_rank, global_batch=4), world, "fsdp-prefetch", CFG, timeout=120, quiet=True)
    assert max((r.params[k] - want[k]).abs().max().item() for r in runs for k in want) < 1e-12


def _step_rank(rank, world, prefetch):
    model = FSDP(GPT(CFG, seed=0, dtype=torch.float64), prefetch=prefetch)
    tokens, targets = batch(CFG, 2, seed=rank)
    with count_collectives() as recs:
        model(tokens, targets)[1].backward()
        model.finish_gradient_synchronization()
    grads = [p.grad.clone() for p in model.parameters()]
    events, peaks = list(model.events), [model.gathered_peak_bytes]
    for _ in range(2):   # the peak counts storages until they die, and gloo's worker thread can keep one a
        model.zero_grad(set_to_none=True)                  # moment longer: the least of 3 steps is the design's
        model.gathered_peak_bytes = model.gathered_bytes
        model(tokens, targets)[1].backward()
        model.finish_gradient_synchronization()
        peaks.append(model.gathered_peak_bytes)
    unit = max(g.layout.padded for u in model.units[1:] for g in u.groups if g.sharded) * 8
    return {"events": events, "grads": grads, "sent": sum(c.bytes_sent for c in recs),
            "ops": [(c.op, c.numel) for c in recs], "gathered_peak": min(peaks), "unit": unit,
            "wait": model.gather_wait_s}


@pytest.fixture(scope="module")
def steps():
    return {p: launch(_step_rank, 2, p, timeout=120, quiet=True)[0] for p in (False, True)}


def test_the_next_units_gather_is_posted_before_the_current_one_is_done(steps):
    ev = steps[True]["events"]
    at = lambda *e: ev.index(e)                                           # noqa: E731
    blocks = [f"blocks.{i}" for i in range(CFG.layers)]
    for i in range(CFG.layers - 1):                                       # forward: next block before this one frees
        assert at("prefetch", blocks[i + 1], "forward") < at("free", blocks[i], "forward")
    for i in range(1, CFG.layers):                                        # backward: the block before, in advance
        assert at("prefetch", blocks[i - 1], "backward") < at("reduce_scatter", blocks[i], "backward")
    assert at("prefetch", blocks[-1], "backward") < at("reduce_scatter", "", "backward")  # the root posts the last
    without = steps[False]["events"]
    for b in blocks:                                                      # each still gathered twice a step
        for phase in ("forward", "backward"):
            assert ev.count(("prefetch", b, phase)) + ev.count(("gather", b, phase)) == 1
            assert without.count(("gather", b, phase)) == 1 and ("prefetch", b, phase) not in without


def test_same_gradients_and_same_traffic(steps):
    off, on = steps[False], steps[True]
    assert all(torch.equal(a, b) for a, b in zip(off["grads"], on["grads"]))
    assert sorted(off["ops"]) == sorted(on["ops"]) and off["sent"] == on["sent"]


def test_prefetch_holds_one_unit_more_at_its_peak(steps):
    off, on = steps[False], steps[True]
    assert on["gathered_peak"] - off["gathered_peak"] == on["unit"]
    assert off["wait"] >= 0 and on["wait"] >= 0


def test_measure_reports_identical_training_and_one_extra_unit():
    r = P.measure(world=2, cfg=CFG, batch_per_rank=1, steps=1)
    assert r.max_diff == 0.0
    assert r.gathered_peak[True] - r.gathered_peak[False] == r.unit_bytes
    assert r.peak[True] - r.peak[False] <= r.unit_bytes
    assert r.hidden_fraction <= 1.0


def test_min_tokens_is_the_closed_form():
    assert P.min_tokens(1e12, 1e9, 2, 2) == pytest.approx(1e12 * 2 * 1 / (2 * 2 * 1e9), rel=1e-12)
    nvlink = P.min_tokens(P.H100_BF16_FLOPS, P.NVLINK4_BYTES, 8)
    ib = P.min_tokens(P.H100_BF16_FLOPS, P.IB_NDR_BYTES, 8)
    assert 1800 < nvlink < 2000 and 17000 < ib < 17500 and ib / nvlink == pytest.approx(9.0)
    table = P.hardware_table(8, here=(1e10, 1e9, 4, 2))
    assert table.column("T_min tokens/rank")[-1] == pytest.approx(1e10 * 4 * 1 / (2 * 2 * 1e9))
    with pytest.raises(ValueError, match="min_tokens: bytes_per_s must be a finite positive number"):
        P.min_tokens(1e12, 0, 8)


def test_prefetch_must_be_a_bool():
    from labkit.dist import RankError

    with pytest.raises(RankError, match="FSDP: prefetch must be True or False, got 'yes'"):
        launch(lambda r, w: FSDP(GPT(CFG), prefetch="yes"), 1, timeout=60, quiet=True)
