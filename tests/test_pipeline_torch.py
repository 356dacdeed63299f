"""Lab 08 against PyTorch and real ranks: schedule orders vs torch.distributed.pipelining,
the gloo executor's gradients vs one process, and the same step through PyTorch's schedules."""
import pytest
import torch

from labkit.pipeline import check_schedule, schedule
from labkit.pipeline.executor import MLPConfig, measured_bubble, reference_step, run_pipeline
from labkit.pipeline.torch_ref import (torch_executed_orders, torch_pipeline_order, torch_pipeline_orders,
                                       torch_step)

# float64 everywhere: pipeline and single process sum the same terms in a different order
# (microbatch accumulation vs one matmul), so results agree to rounding, ~1e-16 relative.
ATOL = 1e-12

ORDER_CONFIGS = {
    2: [("gpipe", 1, 1), ("gpipe", 3, 1), ("1f1b", 2, 1), ("1f1b", 5, 1),
        ("interleaved_1f1b", 1, 2), ("interleaved_1f1b", 3, 2), ("interleaved_1f1b", 4, 2),
        ("interleaved_1f1b", 6, 3), ("interleaved_1f1b", 3, 1), ("interleaved_zb", 4, 2), ("interleaved_zb", 2, 1)],
    3: [("gpipe", 2, 1), ("1f1b", 3, 1), ("1f1b", 7, 1), ("interleaved_1f1b", 3, 2),
        ("interleaved_1f1b", 5, 2), ("interleaved_1f1b", 6, 2), ("interleaved_1f1b", 4, 3),
        ("interleaved_1f1b", 2, 2), ("interleaved_zb", 6, 1), ("interleaved_zb", 6, 2)],
    4: [("gpipe", 5, 1), ("1f1b", 4, 1), ("1f1b", 6, 1), ("interleaved_1f1b", 4, 2),
        ("interleaved_1f1b", 8, 2), ("interleaved_1f1b", 10, 2), ("interleaved_1f1b", 6, 3),
        ("interleaved_zb", 8, 2), ("interleaved_zb", 4, 1)],
}


@pytest.mark.parametrize("p", sorted(ORDER_CONFIGS))
def test_orders_equal_pytorch_executed_and_ir(p):
    configs = ORDER_CONFIGS[p]
    executed = torch_executed_orders(p, configs)
    ir = torch_pipeline_orders(p, configs)
    for (kind, m, v), ex, po in zip(configs, executed, ir):
        ours = schedule(kind, p, m, v)
        # the recorder sees a backward when the output gradient arrives: that is B, or I of a split
        # backward (W is not observable by it; its place is checked against pipeline_order below)
        seen = {r: [a._replace(kind="B") if a.kind == "I" else a for a in acts if a.kind != "W"]
                for r, acts in ours.items()}
        assert seen == ex, f"{kind} p={p} m={m} v={v}: executed order differs"
        if kind != "1f1b":  # multi-stage IR (and GPipe's helper) is what runs
            assert ours == po, f"{kind} p={p} m={m} v={v}: pipeline_order differs"


def test_pytorch_1f1b_helper_order_is_not_what_runs():
    """Schedule1F1B's printed pipeline_order starts the last rank at microbatch 1 (and runs mb m,
    which does not exist); the executor runs 0..m-1. Our order follows the executor.
    (True of torch 2.13.0, the pinned version; a later fix upstream would make this test fail.)"""
    po = torch_pipeline_order("1f1b", 3, 4)
    assert po[2][0].microbatch == 1 and max(a.microbatch for a in po[2]) == 4
    assert po[0] == schedule("1f1b", 3, 4)[0]


def test_refusals_match_pytorch():
    for kind, p, m, v in [("interleaved_1f1b", 4, 9, 2), ("interleaved_1f1b", 3, 7, 2), ("1f1b", 4, 3, 1)]:
        with pytest.raises(ValueError, match="PyTorch refuses"):
            torch_pipeline_order(kind, p, m, v)
        with pytest.raises(ValueError):
            schedule(kind, p, m, v)
    # and the ones PyTorch accepts, we accept (flexible microbatch counts)
    for kind, p, m, v in [("interleaved_1f1b", 4, 10, 2), ("interleaved_1f1b", 4, 7, 2)]:
        check_schedule(schedule(kind, p, m, v))


@pytest.mark.parametrize("kind, p, m, v", [("gpipe", 2, 3, 1), ("1f1b", 3, 4, 1),
                                           ("interleaved_1f1b", 2, 4, 2), ("interleaved_1f1b", 3, 6, 2),
                                           ("interleaved_zb", 2, 4, 2), ("interleaved_zb", 3, 3, 1)])
def test_executor_gradients_equal_single_process(kind, p, m, v):
    cfg = MLPConfig(num_stages=p * v, num_microbatches=m, width=8, batch=2 * m, layers_per_stage=2)
    run = run_pipeline(schedule(kind, p, m, v), cfg)
    loss, grads = reference_step(cfg)
    assert run.loss == pytest.approx(loss, abs=ATOL)
    for s in range(cfg.num_stages):
        for a, b in zip(run.grads[s], grads[s]):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    # the recorded timeline has one interval per action, in the schedule's order
    for r, acts in schedule(kind, p, m, v).items():
        assert [a for a, _, _ in run.timeline[r]] == acts
        assert all(0 <= s <= e for _, s, e in run.timeline[r])
    assert 0 <= measured_bubble(run.timeline) < 1


def test_executor_catches_a_wrong_gradient():
    """The gradient check can fail: a step that drops one microbatch's backward is caught."""
    cfg = MLPConfig(num_stages=2, num_microbatches=2, width=8, batch=4)
    loss, grads = reference_step(cfg)
    half = MLPConfig(num_stages=2, num_microbatches=1, width=8, batch=2)
    run = run_pipeline(schedule("gpipe", 2, 1), half)
    assert not torch.allclose(run.grads[0][0], grads[0][0], atol=ATOL)


def test_executor_bad_input():
    cfg = MLPConfig(num_stages=2, num_microbatches=3, batch=4)
    with pytest.raises(ValueError, match="do not split into 3 equal microbatches"):
        run_pipeline(schedule("gpipe", 2, 3), cfg)
    with pytest.raises(ValueError, match="config has"):
        run_pipeline(schedule("gpipe", 2, 2), cfg)


@pytest.mark.parametrize("kind, p, v", [("gpipe", 2, 1), ("1f1b", 3, 1), ("interleaved_1f1b", 2, 2),
                                        ("interleaved_zb", 2, 2)])
def test_pytorch_schedules_give_the_same_loss_and_grads(kind, p, v):
    m = 4
    cfg = MLPConfig(num_stages=p * v, num_microbatches=m, width=8, batch=8)
    ours = run_pipeline(schedule(kind, p, m, v), cfg)
    loss, grads, _ = torch_step(kind, cfg, num_ranks=p)
    assert ours.loss == pytest.approx(loss, abs=ATOL)
    for s in range(cfg.num_stages):
        for a, b in zip(ours.grads[s], grads[s]):
            torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


# ---- NCCL matches point-to-point messages by order, not by tag: the executor's ordered mode,
# ---- run here on gloo with every tag set to 0 (so gloo matches by order too)

def test_message_order_is_each_senders_action_order():
    from labkit.pipeline.comm import message_order

    assert message_order(schedule("gpipe", 2, 3)) == {(0, 1, "act"): [(0, 0), (0, 1), (0, 2)],
                                                      (1, 0, "grad"): [(0, 0), (0, 1), (0, 2)]}
    interleaved = message_order(schedule("interleaved_1f1b", 2, 2, 2))   # stages 0, 2 on rank 0
    assert set(interleaved) == {(0, 1, "act"), (1, 0, "act"), (1, 0, "grad"), (0, 1, "grad")}
    assert sorted(interleaved[(1, 0, "act")]) == [(1, 0), (1, 1)]


def _out_of_order():
    """Stage 1 takes microbatch 1 before 0: it receives activations in the reverse of their send order."""
    from labkit.pipeline import Action as A

    return {0: [A(0, "F", 0), A(0, "F", 1), A(0, "B", 1), A(0, "B", 0)],
            1: [A(1, "F", 1), A(1, "F", 0), A(1, "B", 1), A(1, "B", 0)]}


@pytest.mark.parametrize("case", ["out_of_order", "interleaved_zb"])
def test_executor_without_tags_matches_messages_by_order(case, monkeypatch):
    from labkit.pipeline import comm, executor

    sched = _out_of_order() if case == "out_of_order" else schedule("interleaved_zb", 2, 4, 2)
    check_schedule(sched)
    stages, m = (2, 2) if case == "out_of_order" else (4, 4)
    cfg = MLPConfig(num_stages=stages, num_microbatches=m, width=8, batch=2 * m)
    loss, grads = reference_step(cfg)
    monkeypatch.setattr(comm, "act_tag", lambda *a: 0)        # what NCCL does with tags
    monkeypatch.setattr(comm, "grad_tag", lambda *a: 0)

    def error(run):
        return max((a - b).abs().max().item() for s in range(stages) for a, b in zip(run.grads[s], grads[s]))

    monkeypatch.setattr(executor, "ordered_p2p", lambda: False)  # receive in our own order: wrong data
    assert error(run_pipeline(sched, cfg, timeout=60)) > 1e-3
    monkeypatch.setattr(executor, "ordered_p2p", lambda: True)   # in each sender's order, one group per direction
    run = run_pipeline(sched, cfg, timeout=60)
    assert run.loss == pytest.approx(loss, abs=ATOL) and error(run) <= ATOL


def test_a_learners_backward_receives_by_tag_so_it_runs_on_gloo():
    from labkit.pipeline.comm import message_order
    from labkit.pipeline.executor import run_step

    with pytest.raises(ValueError, match="receives by tag itself"):
        run_step([], {}, 1, 1, None, None, (1,), torch.float64, backward_fn=print,
                 order=message_order(schedule("gpipe", 1, 1)))
