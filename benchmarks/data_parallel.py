"""DDP step time: labkit's DDP (bucketed, overlapped) vs PyTorch's DistributedDataParallel.

Both wrap the same seeded `labkit.model.GPT` (float32) with the same bucket cap on the same gloo
ranks, in the same processes; steps alternate ours/theirs so both see the same machine load.
A step is forward + backward + gradient synchronisation + SGD update; its time is rank 0's median
wall time between barriers after warm-up. Also times the naive variant (every all-reduce after
backward) for the overlap gain.

    .venv/bin/python benchmarks/data_parallel.py [--quick]

Writes benchmarks/results/data_parallel.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as TorchDDP  # noqa: E402

from labkit.bench import write_results  # noqa: E402
from labkit.data_parallel import DDP  # noqa: E402
from labkit.dist import launch  # noqa: E402
from labkit.model import GPT, GPTConfig, batch, parameter_count  # noqa: E402


def _step(model, opt, tokens, targets, finish):
    opt.zero_grad(set_to_none=True)
    dist.barrier()
    t0 = time.perf_counter()
    model(tokens, targets)[1].backward()
    finish()
    opt.step()
    return time.perf_counter() - t0


def _bench_rank(rank, world, cfg, batch_per_rank, cap_mb, steps):
    ours = DDP(GPT(cfg, seed=0), bucket_cap_mb=cap_mb)
    naive = DDP(GPT(cfg, seed=0), bucket_cap_mb=cap_mb, overlap=False)
    theirs = TorchDDP(GPT(cfg, seed=0), bucket_cap_mb=cap_mb)
    sides = {"ours": (ours, ours.finish_gradient_synchronization),
             "naive": (naive, naive.finish_gradient_synchronization),
             "torch": (theirs, lambda: None)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, (m, _) in sides.items()}
    times = {k: [] for k in sides}
    for step in range(steps + 2):
        tokens, targets = batch(cfg, batch_per_rank, seed=step * world + rank)
        for k, (m, finish) in sides.items():
            t = _step(m, opts[k], tokens, targets, finish)
            if step >= 2:                     # two warm-up steps: PyTorch rebuilds buckets in step 2
                times[k].append(t)
    same = all(torch.equal(a, b) for a, b in zip(ours.module.parameters(), naive.module.parameters()))
    diff = max((a - b).abs().max().item() for a, b in zip(ours.module.parameters(), theirs.module.parameters()))
    return {k: statistics.median(v) for k, v in times.items()}, same, diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model and fewer steps")
    a = ap.parse_args(argv)
    cfg = GPTConfig(layers=2, hidden=128, heads=4, seq_len=64, vocab=256) if a.quick else \
        GPTConfig(layers=4, hidden=256, heads=4, seq_len=64, vocab=256)
    steps = 5 if a.quick else 20
    rows = []
    for world in (2, 4):
        for cap_mb in (1.0, 25.0):
            t, same, diff = launch(_bench_rank, world, cfg, 4, cap_mb, steps, backend="gloo", timeout=600)[0]
            rows.append([world, cap_mb, t["ours"] * 1e3, t["torch"] * 1e3, t["ours"] / t["torch"],
                         t["naive"] * 1e3, t["naive"] / t["ours"], f"{diff:.1e}"])
            print(*rows[-1], flush=True)
            assert same, "naive and overlapped DDP must give identical parameters"
    worst = max(r[4] for r in rows if r[1] == 1.0)
    notes = (f"Model: labkit.model.GPT {cfg}, {parameter_count(cfg):,} parameters "
             f"({parameter_count(cfg) * 4 / 2**20:.1f} MiB of float32 gradients), 4 sequences of "
             f"{cfg.seq_len} tokens per rank. Step = forward + backward + gradient sync + SGD; median of "
             f"{steps} steps after 2 warm-up steps, rank 0, the three variants alternating step by step "
             "in the same processes. 'naive' = our DDP with overlap=False (all-reduces start after "
             "backward). 'max |diff|' = largest parameter difference between ours and PyTorch's after "
             f"all steps (float32 sums in a different order). gloo on CPU; with 4 ranks the 2 cores are "
             f"oversubscribed. Target: ours <= 1.1x PyTorch at a 1 MiB cap — worst ratio {worst:.2f} "
             f"({'met' if worst <= 1.1 else 'not met'}).")
    path = write_results(
        "data_parallel", "Data parallelism: labkit DDP vs torch.nn.parallel.DistributedDataParallel",
        ["ranks", "cap (MiB)", "ours ms", "torch ms", "ours/torch", "naive ms", "naive/ours",
         "max |diff|"], rows, notes, ran_on="cpu (gloo ranks)")
    print(path.read_text())


if __name__ == "__main__":
    main()
