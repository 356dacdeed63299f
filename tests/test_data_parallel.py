"""labkit.data_parallel: DDP from scratch against one process and against PyTorch's DDP, on real gloo ranks.

Tolerance: float64 throughout; N ranks average N per-rank means where one process takes one mean
over the whole batch, so results agree up to rounding in the order of the sums (1e-12 absolute
on O(1) values after a few SGD steps).
"""
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from labkit.data_parallel import DDP, assign_buckets
from labkit.dist import RankError, launch
from labkit.model import GPT, GPTConfig, batch

CFG = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32)
BATCH, STEPS, LR = 24, 3, 0.5   # 24: equal slices for 1-4 ranks and 2 accumulation steps


def _model(freeze: bool):
    m = GPT(CFG, seed=0, dtype=torch.float64)
    if freeze:
        m.pos_emb.weight.requires_grad_(False)
        m.blocks[0].ln1.bias.requires_grad_(False)
    return m


def _train(model, step_grads, rank=0, world=1, accumulate=1):
    """STEPS of SGD on this rank's slice of each batch; returns the final parameters."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    for step in range(STEPS):
        tokens, targets = batch(CFG, BATCH, seed=step)
        lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
        tokens, targets = tokens[lo:hi], targets[lo:hi]
        opt.zero_grad()
        step_grads(model, tokens, targets, accumulate)
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _plain(model, tokens, targets, accumulate):
    model(tokens, targets)[1].backward()


def _ours(model, tokens, targets, accumulate):
    parts = list(zip(tokens.chunk(accumulate), targets.chunk(accumulate)))
    for k, (t, y) in enumerate(parts):
        ctx = model.no_sync() if k < len(parts) - 1 else torch.enable_grad()
        with ctx:
            (model(t, y)[1] / len(parts)).backward()
    model.finish_gradient_synchronization()


def _ddp_rank(rank, world, cap, comm, freeze, accumulate, overlap=True):
    model = DDP(_model(freeze), bucket_cap_mb=cap, comm=comm, overlap=overlap)
    return _train(model, _ours, rank, world, accumulate)


@pytest.mark.parametrize("world,cap,comm,freeze,accumulate,overlap", [
    (1, None, "torch", False, 1, True), (2, None, "torch", True, 1, True),
    (3, 0.004, "torch", False, 1, True), (4, 0.004, "torch", True, 2, True),
    (2, 0.004, "ring", False, 1, True), (4, None, "ring", True, 1, True),
    (2, 0.004, "torch", False, 2, False),
])
def test_ddp_equals_one_process_on_the_whole_batch(world, cap, comm, freeze, accumulate, overlap):
    want = _train(_model(freeze), _plain)
    got = launch(_ddp_rank, world, cap, comm, freeze, accumulate, overlap, backend="gloo", timeout=120)
    for rank_params in got:
        for a, b in zip(rank_params, want):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    frozen = _model(freeze)
    for a, p in zip(got[0], frozen.parameters()):   # frozen parameters never move
        if not p.requires_grad:
            assert torch.equal(a, p.detach())


def _torch_vs_ours_rank(rank, world, cap):
    torch.manual_seed(rank)                       # replicas start different: both must broadcast
    theirs = TorchDDP(GPT(CFG, seed=rank, dtype=torch.float64), bucket_cap_mb=cap)
    ours = DDP(GPT(CFG, seed=rank, dtype=torch.float64), bucket_cap_mb=cap)
    buckets = None
    for step in range(3):                         # PyTorch rebuilds its buckets in step 2, logs them in 3
        tokens, targets = batch(CFG, 4, seed=10 * step + rank)
        for m in (theirs, ours):
            m.zero_grad()
            m(tokens, targets)[1].backward()
        ours.finish_gradient_synchronization()
    data = theirs._get_ddp_logging_data()
    buckets = [sorted(int(i) for i in b.split()) for b in data["rebuilt_per_bucket_param_indices"].split(",")]
    grads = [(a.grad - b.grad).abs().max().item() for a, b in zip(theirs.module.parameters(), ours.module.parameters())]
    return buckets, [sorted(b) for b in ours.buckets], max(grads)


def test_buckets_and_gradients_equal_pytorch_ddp():
    for rank_result in launch(_torch_vs_ours_rank, 2, 0.004, backend="gloo", timeout=120):
        theirs, ours, grad_err = rank_result
        assert ours == theirs
        assert grad_err < 1e-12


def test_assign_buckets_is_pytorchs_rule_in_reverse_order():
    params = list(GPT(CFG).parameters()) + [torch.zeros(5, dtype=torch.float64), torch.zeros(300)]
    rev = list(reversed(range(len(params))))
    for cap in (1, 500, 4000, 20000, 10 ** 9):
        got = assign_buckets(params, cap)
        theirs, _ = dist._compute_bucket_assignment_by_size([params[i] for i in rev], [cap])
        assert sorted(map(sorted, got)) == sorted(sorted(rev[j] for j in b) for b in theirs)
        assert sorted(i for b in got for i in b) == list(range(len(params)))
    assert assign_buckets(params, 10 ** 9)[0][0] == len(params) - 1      # filled from the last parameter


def _unused_rank(rank, world):
    model = DDP(GPT(CFG, dtype=torch.float64))
    tokens, targets = batch(CFG, 2)
    model.module.tok_emb(tokens).sum().backward()     # only the embedding gets a gradient
    model.finish_gradient_synchronization()


def test_a_parameter_without_gradient_is_a_one_line_error():
    with pytest.raises(RankError, match="got no gradient in this backward"):
        launch(_unused_rank, 2, backend="gloo", timeout=60)


def test_bad_arguments():
    with pytest.raises(RuntimeError, match="no process group"):
        DDP(GPT(CFG))
    with pytest.raises(TypeError, match="overlap must be True or False"):
        DDP(GPT(CFG), overlap="yes")
    with pytest.raises(ValueError, match="comm must be one of"):
        DDP(GPT(CFG), comm="nccl-ish")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        DDP("model")
    with pytest.raises(ValueError, match="cap_bytes"):
        assign_buckets(list(GPT(CFG).parameters()), 0)


def _torch_vs_bucketed_exercise_rank(rank, world, cap):
    """Lab 06's bucketed_ddp_hooks (the reference answer) next to PyTorch's DDP with the same cap."""
    from solutions.lab06_data_parallel import bucketed_ddp_hooks

    theirs = TorchDDP(GPT(CFG, seed=rank, dtype=torch.float64), bucket_cap_mb=cap)
    mine = GPT(CFG, seed=rank, dtype=torch.float64)
    finish = bucketed_ddp_hooks(mine, assign_buckets(list(mine.parameters()), int(cap * 2**20)))
    calls, original = [], dist.all_reduce

    def counted(tensor, *args, **kwargs):
        calls.append(tensor.numel() * tensor.element_size())
        return original(tensor, *args, **kwargs)

    errs = []
    for step in range(3):
        tokens, targets = batch(CFG, 4, seed=10 * step + rank)
        theirs.zero_grad()
        theirs(tokens, targets)[1].backward()
        mine.zero_grad()
        dist.all_reduce = counted
        try:
            mine(tokens, targets)[1].backward()
            finish()
        finally:
            dist.all_reduce = original
        errs.append(max((a.grad - b.grad).abs().max().item()
                        for a, b in zip(theirs.module.parameters(), mine.parameters())))
    data = theirs._get_ddp_logging_data()
    return errs, calls, [int(n) for n in data["rebuilt_bucket_sizes"].split(",")]


def test_bucketed_exercise_answer_equals_pytorch_ddp():
    """Gradients to 1e-12 (float64; both divide by N and sum in the same ranks' order, the buckets'
    flat layouts differ); one all-reduce per bucket, of the byte sizes PyTorch's rebuilt buckets have."""
    for errs, calls, theirs in launch(_torch_vs_bucketed_exercise_rank, 2, 0.004, backend="gloo", timeout=120):
        assert max(errs) < 1e-12, errs
        per_step = len(calls) // 3
        assert sorted(calls[-per_step:]) == sorted(theirs), (calls[-per_step:], theirs)
