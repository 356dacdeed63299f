"""Tensor parallelism: our Megatron MLP and attention vs PyTorch's torch.distributed.tensor.parallel.

Both sides get the same weights on the same 2 gloo ranks, in the same processes (alternating
call by call): ours are `labkit.tensor_parallel.blocks` layers; PyTorch's are the unsplit modules
passed through `parallelize_module` with ColwiseParallel (fc; q, k, v) and RowwiseParallel (proj;
out). A sample is forward + backward of a (B, T, h) float32 input; rank 0's median wall time.

    .venv/bin/python benchmarks/tensor_parallel.py [--quick]

Writes benchmarks/results/tensor_parallel.md.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from labkit.bench import write_results  # noqa: E402
from labkit.dist import launch  # noqa: E402
from labkit.model import MLP, GPTConfig  # noqa: E402
from labkit.tensor_parallel.blocks import ParallelAttention, ParallelMLP  # noqa: E402
from labkit.tensor_parallel.layers import RowParallelLinear  # noqa: E402


class Attention(nn.Module):
    """Causal attention with separate q, k, v, out projections (the layout PyTorch's TP API splits
    by heads); ``heads`` is set to the local head count after parallelize_module."""

    def __init__(self, h: int, heads: int):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(h, h) for _ in range(4))
        self.heads, self.hd = heads, h // heads

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (m(x).view(B, T, self.heads, self.hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        s = q @ k.transpose(-2, -1) / math.sqrt(self.hd)
        y = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(B, T, -1))


def _ours_attention(attn: Attention, rank: int, world: int) -> ParallelAttention:
    per = attn.q.out_features // world
    mine = slice(rank * per, (rank + 1) * per)
    w = torch.cat([m.weight.detach()[mine] for m in (attn.q, attn.k, attn.v)])
    b = torch.cat([m.bias.detach()[mine] for m in (attn.q, attn.k, attn.v)])
    return ParallelAttention(w, b, RowParallelLinear.from_linear(attn.out), attn.heads // world, attn.hd)


def _time(fn, x, repeat):
    out = []
    for _ in range(repeat):
        xx = x.clone().requires_grad_()
        dist.barrier()
        t0 = time.perf_counter()
        fn(xx).square().mean().backward()
        out.append(time.perf_counter() - t0)
    return out


def _bench_rank(rank, world, cfg, batch, repeat):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    mlp, attn = MLP(cfg), Attention(cfg.hidden, cfg.heads)
    ours = {"mlp": ParallelMLP.from_module(mlp), "attention": _ours_attention(attn, rank, world)}
    theirs_attn = parallelize_module(attn, mesh, {"q": ColwiseParallel(), "k": ColwiseParallel(),
                                                  "v": ColwiseParallel(), "out": RowwiseParallel()})
    theirs_attn.heads //= world
    theirs = {"mlp": parallelize_module(mlp, mesh, {"fc": ColwiseParallel(), "proj": RowwiseParallel()}),
              "attention": theirs_attn}
    x = torch.randn(batch, cfg.seq_len, cfg.hidden, generator=torch.Generator().manual_seed(1))
    result = {}
    for name in ("mlp", "attention"):
        err = (ours[name](x) - theirs[name](x)).abs().max().item()
        a, b = [], []
        for _ in range(3):                                   # alternate in rounds
            a += _time(ours[name], x, repeat)
            b += _time(theirs[name], x, repeat)
        result[name] = (statistics.median(a[1:]), statistics.median(b[1:]), err)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    a = ap.parse_args(argv)
    cfg = GPTConfig(layers=1, hidden=256, heads=8, seq_len=64, vocab=256) if a.quick else \
        GPTConfig(layers=1, hidden=512, heads=8, seq_len=128, vocab=256)
    batch, repeat = (4, 4) if a.quick else (8, 8)
    res = launch(_bench_rank, 2, cfg, batch, repeat, backend="gloo", timeout=600)[0]
    rows = [[name, cfg.hidden, cfg.seq_len, batch, ours * 1e3, theirs * 1e3, ours / theirs, f"{err:.1e}"]
            for name, (ours, theirs, err) in res.items()]
    for r in rows:
        print(*r)
    worst = max(r[6] for r in rows)
    notes = (f"2 gloo ranks, float32, forward + backward of a ({batch}, {cfg.seq_len}, {cfg.hidden}) input; "
             f"median of {3 * repeat - 1} samples (3 alternating rounds) on rank 0. 'max |diff|' = largest "
             "output difference between the two on the same weights. Target: ours <= 1.2x PyTorch — "
             f"worst ratio {worst:.2f} ({'met' if worst <= 1.2 else 'not met'}).")
    path = write_results("tensor_parallel", "Tensor parallelism: labkit vs torch.distributed.tensor.parallel",
                         ["block", "hidden", "seq", "batch", "ours ms", "torch ms", "ours/torch", "max |diff|"],
                         rows, notes, ran_on="cpu (gloo ranks)")
    print(path.read_text())


if __name__ == "__main__":
    main()
