"""ZeRO-1/2 (ShardedOptimizer) and ZeRO-3 (FSDP) on real gloo ranks: the same training as one
process, the bytes each rank holds equal the formula exactly, the traffic each step sends equals
the closed forms, and PyTorch's ZeroRedundancyOptimizer and FSDP2 land on the same parameters.

Tolerance for parameters: 1e-12 absolute on O(0.1..1) float64 values. A rank's gradient is the
sum of N slice-means divided by N instead of one mean over the batch, and AdamW runs on flat
vectors instead of per-tensor: both change the rounding (the measured gap is ~1e-14), nothing else.
"""
from functools import partial

import pytest
import torch

from labkit.collectives.counting import count_collectives
from labkit.dist import RankError, launch
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig, batch, parameter_count
from labkit.zero import FSDP, ShardedOptimizer
from labkit.zero.flat import FlatLayout, padded_numel
from labkit.zero.formulas import comm_bytes_per_step, model_state_bytes
from labkit.zero.training import reference_params, train_rank

CFG = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32)
ODD = GPTConfig(layers=1, hidden=10, heads=2, seq_len=5, vocab=23)   # sizes that leave padding at N = 4
TOL = 1e-12


def _max_err(runs, want):
    return max((r.params[n] - want[n]).abs().max().item() for r in runs for n in want)


@pytest.mark.parametrize("method", ["zero1", "zero2", "fsdp"])
def test_each_stage_trains_like_one_process(method):
    want = reference_params(CFG)
    for world in (1, 2, 3, 4):   # 12 rows split evenly over 1..4 ranks
        runs = launch(partial(train_rank, global_batch=12), world, method, CFG, backend="gloo", timeout=120)
        assert _max_err(runs, reference_params(CFG, global_batch=12)) < TOL, (method, world)
    runs = launch(train_rank, 2, method, CFG, backend="gloo", timeout=120)
    assert _max_err(runs, want) < TOL
    assert runs[0].params.keys() == want.keys()


@pytest.mark.parametrize("method", ["zero1", "zero2", "fsdp"])
def test_frozen_parameters_stay_put_and_the_rest_trains_like_one_process(method):
    frozen = ("pos_emb.weight", "blocks.0.ln1.bias")
    want = reference_params(CFG, frozen=frozen)
    runs = launch(partial(train_rank, global_batch=6, frozen=frozen), 3, method, CFG, backend="gloo", timeout=120)
    assert _max_err(runs, reference_params(CFG, global_batch=6, frozen=frozen)) < TOL
    start = dict(GPT(CFG, dtype=torch.float64).named_parameters())
    for name in frozen:
        assert torch.equal(runs[0].params[name], start[name].detach())
    assert not torch.equal(runs[0].params["tok_emb.weight"], start["tok_emb.weight"].detach())
    assert want.keys() == runs[0].params.keys()


@pytest.mark.parametrize("ours, theirs", [("zero1", "torch-zero1"), ("fsdp", "torch-fsdp2")])
def test_pytorch_lands_on_the_same_parameters(ours, theirs):
    a = launch(train_rank, 2, ours, CFG, backend="gloo", timeout=120)
    b = launch(train_rank, 2, theirs, CFG, backend="gloo", timeout=120)
    for name, p in a[0].params.items():
        assert (p - b[1].params[name]).abs().max().item() < TOL, name
    assert a[0].losses == pytest.approx(b[0].losses, abs=TOL)


def _held(rank, world, stage, cfg, all_sharded):
    if stage < 3:   # mixed precision as in the ZeRO paper: bf16 parameters and gradients
        model = GPT(cfg, dtype=torch.bfloat16)
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, stage=stage, bucket_cap_mb=0.002)
        groups, padded = len(opt.buckets), opt.padded_numel
    else:
        policy = (lambda n, p: True) if all_sharded else (lambda n, p: p.dim() >= 2)
        model = FSDP(GPT(cfg), policy=policy)
        opt = torch.optim.AdamW(model.parameters())
        groups, padded = len(list(model.parameters())), model.padded_numel
    model(*batch(cfg, 2, seed=rank))[1].backward()
    if stage == 3:
        model.finish_gradient_synchronization()
    opt.step()
    tracker = MemoryTracker(model, opt)
    with tracker:
        return tracker.live_by_category(), groups, padded


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_bytes_each_rank_holds_equal_the_formula_exactly(stage):
    """After a step. Padding rule: each group is padded to a multiple of N (labkit.zero.flat).
    Mixed precision (stages 1, 2): 2 + 2 bytes of bf16 parameters and gradients, K = 12 for the
    fp32 master shard and Adam's m and v. FSDP here keeps float32 shards: 4 + 4 + 8. Adam adds a
    4-byte step counter per tensor it steps (one per bucket / group)."""
    psi = parameter_count(ODD)
    padding_seen = False
    for world in (1, 2, 3, 4):
        for rank, (held, groups, padded) in enumerate(launch(_held, world, stage, ODD, True, backend="gloo")):
            padding_seen |= padded > psi
            if stage < 3:
                grads = 2 * psi if stage == 1 else 2 * padded // world
                want = {"parameters": 2 * psi, "gradients": grads, "optimizer": 12 * padded // world + 4 * groups}
                formula = model_state_bytes(psi, world, stage) if padded == psi else None
            else:
                want = {"parameters": 4 * padded // world, "gradients": 4 * padded // world,
                        "optimizer": 8 * padded // world + 4 * groups}
                formula = model_state_bytes(padded, world, 3, param_bytes=4, grad_bytes=4, optimizer_bytes=8)
            assert {k: held[k] for k in want} == want, (world, rank)
            if formula is not None:
                assert sum(want.values()) - 4 * groups == formula
    assert padding_seen


def test_fsdp_keeps_one_dimensional_parameters_whole():
    held, groups, padded = launch(_held, 4, 3, ODD, False, backend="gloo")[0]
    whole = sum(p.numel() for p in GPT(ODD).parameters() if p.dim() == 1)
    assert padded == sum(padded_numel(n, 4) for n in _sharded_group_sizes(ODD))
    assert held["parameters"] == 4 * (padded // 4 + whole)


def _sharded_group_sizes(cfg):
    model = GPT(cfg)
    root = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("blocks") and p.dim() >= 2)
    blocks = [sum(p.numel() for p in b.parameters() if p.dim() >= 2) for b in model.blocks]
    return [root, *blocks]


def _traffic(rank, world, method, dtype):
    return train_rank(rank, world, method, CFG, steps=1, dtype=dtype).comm[0]


@pytest.mark.parametrize("world", [2, 4])
def test_traffic_per_step_equals_the_closed_forms(world):
    psi = parameter_count(CFG)
    matrices = sum(p.numel() for p in GPT(CFG).parameters() if p.dim() >= 2)
    sent = {}
    for method in ("ddp", "zero1", "zero2", "fsdp"):
        with count_collectives():
            ops = launch(_traffic, world, method, torch.float32, backend="gloo")[0]
        sent[method] = ops
    assert sent["ddp"] == {"all_reduce": psi}                       # every rank pads nothing here
    assert sent["zero1"] == sent["zero2"] == {"reduce_scatter": psi, "all_gather": psi}
    assert "all_reduce" not in sent["zero2"]                        # ZeRO-2 uses no all-reduce
    assert sent["fsdp"] == {"all_gather": 2 * matrices, "reduce_scatter": matrices, "all_reduce": psi - matrices}
    ring = (world - 1) / world * 4                                   # bytes one rank sends per element, float32
    assert 2 * ring * psi == comm_bytes_per_step(psi, world, 1, 4) == comm_bytes_per_step(psi, world, 0, 4)
    fsdp_bytes = ring * (3 * matrices) + 2 * ring * (psi - matrices)
    assert fsdp_bytes == pytest.approx(comm_bytes_per_step(matrices, world, 3, 4) + 2 * ring * (psi - matrices))
    assert fsdp_bytes / (2 * ring * psi) > 1.45                      # ≈ 1.5×: ZeRO-3 sends more, not less


def _recorded(rank, world, compute_dtype):
    model = FSDP(GPT(CFG), compute_dtype=compute_dtype)
    with count_collectives() as recs:
        model(*batch(CFG, 2, seed=rank))[1].backward()
        model.finish_gradient_synchronization()
    events = list(model.events)
    loss = model(*batch(CFG, 2, seed=rank))[1].item()
    return [(c.op, c.phase, c.bytes_sent) for c in recs], events, loss


def test_fsdp_gathers_each_unit_twice_frees_it_and_casts_before_gathering():
    fp32, events, loss32 = launch(_recorded, 2, None, backend="gloo")[0]
    bf16, _, loss16 = launch(_recorded, 2, torch.bfloat16, backend="gloo")[0]
    gathers = lambda recs: [b for op, _, b in recs if op == "all_gather"]        # noqa: E731
    assert sum(gathers(bf16)) * 2 == sum(gathers(fp32))                           # half the bytes on the wire
    rs = lambda recs: [b for op, _, b in recs if op == "reduce_scatter"]          # noqa: E731
    assert rs(bf16) == rs(fp32)                                                   # gradients reduced in float32
    assert abs(loss16 - loss32) < 0.02 and loss16 != loss32                      # bf16 weights: a little rounding
    units = ["", "blocks.0", "blocks.1"]
    for u in units:
        mine = [(what, phase) for what, unit, phase in events if unit == u]
        assert mine == [("gather", "forward"), ("free", "forward"), ("gather", "backward"), ("free", "backward"),
                        ("reduce_scatter", "backward")], u
    live, most = set(), 0
    for what, unit, _ in events:                       # never more than the root and one block gathered
        live = live | {unit} if what == "gather" else live - {unit} if what == "free" else live
        most = max(most, len(live - {""}))
    assert most == 1


def _accumulate(rank, world, stage):
    model = GPT(CFG, dtype=torch.float64)
    opt = ShardedOptimizer(model.parameters(), torch.optim.SGD, stage=stage, lr=0.5, bucket_cap_mb=0.004)
    tokens, targets = batch(CFG, 8, seed=3)
    for half in (slice(0, 4), slice(4, 8)):                       # two micro-batches, then one step
        mine = slice(half.start + 2 * rank, half.start + 2 * rank + 2)
        (model(tokens[mine], targets[mine])[1] / 2).backward()
    opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("stage", [1, 2])
def test_gradient_accumulation_adds_up_in_the_shards(stage):
    model = GPT(CFG, dtype=torch.float64)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(*batch(CFG, 8, seed=3))[1].backward()
    opt.step()
    got = launch(_accumulate, 2, stage, backend="gloo")[1]
    for n, p in model.named_parameters():
        assert (got[n] - p.detach()).abs().max().item() < TOL, n


def test_flat_layout_pads_and_shards():
    a, b = torch.arange(6.).view(2, 3), torch.arange(6., 11.)
    layout = FlatLayout.of([a, b], world=4)
    assert (layout.numel, layout.padded, layout.shard_numel) == (11, 12, 3)
    flat = layout.flatten([a, None])
    assert flat.tolist() == [0, 1, 2, 3, 4, 5] + [0] * 6
    assert [layout.shard_range(r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 12)]
    x, y = layout.unflatten(layout.flatten([a, b]))
    assert torch.equal(x, a) and torch.equal(y, b)
    assert padded_numel(10, 4) == 12 and padded_numel(12, 4) == 12 and padded_numel(0, 3) == 0
    with pytest.raises(ValueError, match="shape"):
        layout.flatten([b, a])


def _bad(rank, world, what):
    model = GPT(CFG)
    if what == "class":
        ShardedOptimizer(model.parameters(), "adam")
    elif what == "stage":
        ShardedOptimizer(model.parameters(), torch.optim.Adam, stage=3)
    else:
        FSDP(model, compute_dtype=torch.int8)


def test_bad_arguments_get_one_line_errors():
    for what, message in (("class", "optimizer_class must be a torch.optim.Optimizer class"),
                          ("stage", "stage must be an int in 1..2"), ("dtype", "compute_dtype must be None")):
        with pytest.raises(RankError, match=message):
            launch(_bad, 1, what, backend="gloo")
    with pytest.raises(RuntimeError, match="no process group"):
        FSDP(GPT(CFG))
    with pytest.raises(ValueError, match="stage must be an int in 0..3"):
        comm_bytes_per_step(10, 2, 4)
