"""Our Megatron MLP against PyTorch's own tensor parallelism (torch.distributed.tensor.parallel:
ColwiseParallel for fc, RowwiseParallel for proj, on a device mesh from init_device_mesh) on the
same weights, 2 gloo ranks. float64; the two split the work the same way: 1e-12 absolute."""
import torch
from torch import nn

from labkit.dist import launch
from labkit.model import GPTConfig, MLP
from labkit.tensor_parallel import count_collectives
from labkit.tensor_parallel.blocks import ParallelMLP

CFG = GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32)


def _mlp():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MLP(CFG).double()


def _rank(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    x = torch.randn(2, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    theirs = parallelize_module(_mlp(), init_device_mesh("cpu", (world,)),
                                {"fc": ColwiseParallel(), "proj": RowwiseParallel()})
    ours = ParallelMLP.from_module(_mlp())
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = theirs(xa), ours(xb)
    ya.square().sum().backward()
    with count_collectives() as recs:
        yb.square().sum().backward()
    local = lambda t: t.to_local() if isinstance(t, DTensor) else t          # noqa: E731
    pairs = list(zip(theirs.parameters(), ours.parameters()))
    assert len(pairs) == 4 and all(local(a.grad).shape == b.grad.shape for a, b in pairs)
    grads = [(local(a.grad) - b.grad).abs().max().item() for a, b in pairs]
    return (local(ya) - yb).abs().max().item(), (xa.grad - xb.grad).abs().max().item(), max(grads), len(recs)


def test_our_mlp_equals_pytorch_tensor_parallel():
    for out_err, x_err, grad_err, backward_collectives in launch(_rank, 2, backend="gloo", timeout=120):
        assert out_err < 1e-12 and x_err < 1e-12 and grad_err < 1e-12
        assert backward_collectives == 1                 # f's all-reduce of the input gradient
