"""The fake-CUDA tier: each lab's single-process model paths, run with 'cuda' tensors on this CPU-only
torch under ``torch._subclasses.fake_tensor.FakeTensorMode``.

Fake tensors carry shape, dtype and device but no data, so nothing runs on a GPU, yet every op
checks its operands' devices as CUDA would: a CPU tensor meeting a CUDA one raises ("Expected all
tensors to be on the same device"). A rank here is the one rank of an in-process gloo group that
says it is NCCL's, so `labkit.dist.device()` answers cuda:0 as it would on a GPU box.

Two limits of a CPU-only build shape the tier. ``Tensor.to("cuda")`` and ``Module.to("cuda")`` do
not work on fake tensors there (no CUDA device guard): `fake_gpu` makes the moved copy with a
factory function instead, which gives the same shape, dtype and device. And autograd cannot record
a graph through CUDA leaves without a device guard (the process aborts), so the paths run under
``torch.no_grad()``: forwards, constructors (where shards, flat buffers, masters and optimizer
states are made) and optimizer steps on given gradients. What only a backward touches is checked
on a GPU by ``make gpu-smoke``.
"""
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode

from labkit import dist as ldist
from labkit.model import GPT, GPTConfig, batch

CUDA = torch.device("cuda", 0)
CFG = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=32)


def _is_cuda(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def _basic_index(t, idx):
    """t[idx] for ints, slices, None, Ellipsis and index tensors, through aten ops (the Python
    indexing binding takes a CUDA device guard, which a CPU-only build lacks)."""
    idx = list(idx) if isinstance(idx, tuple) else [idx]
    if any(i is Ellipsis for i in idx):
        at = idx.index(Ellipsis)
        used = sum(1 for i in idx if i is not None and i is not Ellipsis)
        idx[at:at + 1] = [slice(None)] * (t.dim() - used)
    out, dim, tensors = t, 0, []
    for i in idx:
        if i is None:
            out, dim = out.unsqueeze(dim), dim + 1
        elif isinstance(i, bool) or not isinstance(i, (int, slice, torch.Tensor)):
            raise TypeError(f"fake-CUDA indexing does not handle {type(i).__name__}")
        elif isinstance(i, int):
            out = torch.select(out, dim, i)
        elif isinstance(i, slice):
            out = torch.ops.aten.slice.Tensor(out, dim, i.start, i.stop, i.step or 1)
            dim += 1
        else:
            tensors.append((dim, i))
            dim += 1
    if tensors:
        index = [None] * out.dim()
        for d, i in tensors:
            index[d] = i
        out = torch.ops.aten.index.Tensor(out, index)
    return out


class _MoveToFakeCuda(TorchFunctionMode):
    """``t.to("cuda")`` / ``t.cuda()`` as a fresh fake CUDA tensor of the same shape, strides, dtype;
    indexing, ``copy_`` and ``contiguous`` of fake CUDA tensors through aten ops (their Python
    bindings take a CUDA device guard)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.to, torch.Tensor.cuda):
            t = args[0]
            if func is torch.Tensor.cuda:
                device, dtype = CUDA, None
            else:
                device, dtype, *_ = torch._C._nn._parse_to(*args[1:], **kwargs)
            if _is_cuda(device) and t.device.type != "cuda":
                return torch.empty_strided(t.shape, t.stride(), dtype=dtype or t.dtype, device=CUDA,
                                           requires_grad=t.requires_grad)
        on_gpu = isinstance(args[0], torch.Tensor) and args[0].device.type == "cuda" if args else False
        if on_gpu and func is torch.Tensor.__getitem__:
            return _basic_index(*args)
        if on_gpu and func is torch.Tensor.__setitem__:
            t, idx, value = args
            value = value if isinstance(value, torch.Tensor) else torch.full((), value, dtype=t.dtype, device=CUDA)
            torch.ops.aten.copy_.default(_basic_index(t, idx), value)
            return None
        if on_gpu and func is torch.Tensor.copy_:
            return torch.ops.aten.copy_.default(args[0], args[1])
        if on_gpu and func is torch.Tensor.contiguous:
            return args[0] if args[0].is_contiguous() else args[0].clone(memory_format=torch.contiguous_format)
        return func(*args, **kwargs)


def _module_to(self, *args, **kwargs):
    """nn.Module.to for fake tensors: torch swaps a fake parameter for its copy with
    torch.utils.swap_tensors, which a FakeTensor refuses; put the copy in its place instead."""
    device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
    for m in self.modules():
        for table in (m._parameters, m._buffers):
            for k, t in table.items():
                if t is None:
                    continue
                new = t.to(device or t.device, dtype if dtype is not None and t.is_floating_point() else t.dtype)
                if new is not t:
                    table[k] = nn.Parameter(new, requires_grad=t.requires_grad) if table is m._parameters else new
    return self


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A world-1 gloo group in this process (what the paths' collectives run on)."""
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "s"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def fake_gpu(one_rank, monkeypatch):
    """Inside: FakeTensorMode, no autograd, one "GPU", and the group's backend reads as NCCL's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(nn.Module, "to", _module_to)
    # at world 1 a broadcast leaves its tensor as it is; gloo's would ask CUDA to stage it
    monkeypatch.setattr(dist, "broadcast", lambda tensor, src=0, group=None, async_op=False, **kw: None)
    assert ldist.device() == CUDA and ldist.backend() == "nccl"
    with FakeTensorMode(allow_non_fake_inputs=True), _MoveToFakeCuda(), torch.no_grad():
        yield


def _on_cuda(*tensors):
    return all(t.device == CUDA for t in tensors)


def _batch(b=2):
    return tuple(t.to(ldist.device()) for t in batch(CFG, b, seed=1))


# ---------------------------------------------------------------------------------------- the tier

def test_the_tier_catches_a_cpu_tensor_meeting_a_cuda_one(fake_gpu):
    model = GPT(CFG).to(ldist.device())
    with pytest.raises(RuntimeError, match="same device"):
        model(torch.zeros(2, CFG.seq_len, dtype=torch.int64))   # CPU tokens into a CUDA model
    with pytest.raises(RuntimeError, match="same device"):
        model.pos_emb(torch.arange(CFG.seq_len))           # the positions bug the TP model had


def test_gpt_forward_and_an_adamw_step(fake_gpu):
    model = GPT(CFG, dtype=torch.float64).to(ldist.device())
    logits, loss = model(*_batch())
    assert _on_cuda(logits, loss, *model.parameters()) and logits.dtype == torch.float64
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert all(_on_cuda(s["exp_avg"], s["exp_avg_sq"]) for s in opt.state.values())


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tensor_parallel_gpt_at_world_1(fake_gpu, sequence_parallel):
    from labkit.tensor_parallel.parallelize import parallelize
    from labkit.tensor_parallel.vocab import vocab_parallel_cross_entropy

    tp = parallelize(GPT(CFG, dtype=torch.float64).to(ldist.device()), sequence_parallel=sequence_parallel)
    logits, loss = tp(*_batch())
    assert _on_cuda(logits, loss, *tp.parameters())
    targets = _batch()[1].reshape(-1)
    assert _on_cuda(vocab_parallel_cross_entropy(logits.reshape(-1, CFG.vocab), targets, 0))


def test_column_and_row_parallel_layers(fake_gpu):
    """(MoE routing reads values, a slot per token, which fake tensors do not have.)"""
    from labkit.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    fc, proj = nn.Linear(16, 64).to(CUDA), nn.Linear(64, 16).to(CUDA)
    for col, row in ((ColumnParallelLinear.from_linear(fc), RowParallelLinear.from_linear(proj)),
                     (ColumnParallelLinear.from_linear(fc, gather_output=True),
                      RowParallelLinear.from_linear(proj, input_is_parallel=False))):
        x = torch.randn(2, 8, 16, device=CUDA)
        assert _on_cuda(row(torch.nn.functional.gelu(col(x))), *col.parameters(), *row.parameters())


@pytest.mark.parametrize("method", ["ddp", "zero1", "zero2", "fsdp"])
def test_zero_and_fsdp_wrapping_and_a_step(fake_gpu, method):
    from labkit.zero.training import build, local_optimizer

    model, opt = build(method, CFG, torch.float64, bucket_cap_mb=0.004)
    assert _on_cuda(*model.parameters())
    _, loss = model(*_batch())
    assert _on_cuda(loss)
    if method in ("zero1", "zero2"):
        assert all(_on_cuda(b.master) for b in opt.buckets)
        empty = {id(p) for p in opt.buckets[0].params}   # a bucket whose gradients stay None: its
        for p in model.parameters():                     # reduce-scatter input is made of zeros
            p.grad = None if id(p) in empty else torch.zeros_like(p)
        opt.step()
        assert all(_on_cuda(*s.values()) for s in local_optimizer(opt).state.values() for s in [
            {k: v for k, v in s.items() if k != "step"}])


def test_activation_checkpointing_and_the_memory_tracker(fake_gpu):
    from labkit.memory.activation_checkpointing import checkpoint_segment, make_chain
    from labkit.memory.tracker import MemoryTracker

    layers = [m.to(CUDA) for m in make_chain(4, 8, seed=1)]
    x = torch.randn(4, 8, dtype=torch.float64, device=CUDA)
    y = checkpoint_segment(nn.Sequential(*layers), x)
    assert _on_cuda(y)
    model = GPT(CFG).to(ldist.device())
    tracker = MemoryTracker(model)
    with tracker:
        model(*_batch())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert tracker.peak_by_category["parameters"] == weights and tracker.peak_bytes > weights


def test_planner_grid_to_model_stages(fake_gpu):
    from labkit.parallel3d.stages import GPTStage
    from labkit.parallel3d.train import TrainSetup, replica_batch
    from labkit.tensor_parallel.comm import tp_group

    setup = TrainSetup(dp=1, tp=1, pp=1, global_batch=4, micro_batches=2)
    with tp_group(None):
        stage = GPTStage(GPT(CFG, dtype=torch.float64), 0, 1).to(ldist.device())
        tokens, targets = replica_batch(CFG, setup, 0, 0, ldist.device())
        logits = stage(tokens)
        assert _on_cuda(logits, stage.loss(logits, targets), *stage.parameters())


def test_the_tier_is_not_left_on(one_rank):
    assert ldist.device() == torch.device("cpu") and nn.Module.to is not _module_to
    assert GPT(CFG)(*batch(CFG, 1))[1].device.type == "cpu"
