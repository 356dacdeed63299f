"""Benchmark: labkit's ring all-reduce vs torch.distributed.all_reduce, same ranks, same run.

For each world size and buffer size S (float32), both all-reduces are timed
alternately on the same ranks. Reported (nccl-tests definitions):
    time   = median over repeats of the slowest rank's time (s)
    algbw  = S / time
    busbw  = algbw · 2(N-1)/N      (bytes each link really carries in a ring)
    ratio  = labkit busbw / torch busbw
Target: ratio >= 0.7 at S >= 16 MB with 4 gloo ranks.

    .venv/bin/python benchmarks/collectives.py            # 4 KB .. 64 MB, 2 and 4 ranks
    .venv/bin/python benchmarks/collectives.py --quick    # 3 sizes, fewer repeats
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from labkit.bench import write_results
from labkit.collectives import ring_all_reduce
from labkit.dist import launch

FULL_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
QUICK_SIZES = [4 << 10, 256 << 10, 16 << 20]


def _repeats(n_bytes: int, base: int) -> int:
    return base if n_bytes <= (4 << 20) else max(3, base // 2)


def _time_worker(rank, world_size, sizes, base_repeat):
    """Per size: (median slowest-rank seconds of labkit ring, of dist.all_reduce)."""
    out = []
    for n_bytes in sizes:
        x = torch.ones(n_bytes // 4, dtype=torch.float32)
        samples = {"labkit": [], "torch": []}
        ops = {"labkit": lambda: ring_all_reduce(x), "torch": lambda: dist.all_reduce(x)}
        for name in ops:  # warm-up
            ops[name]()
        for _ in range(_repeats(n_bytes, base_repeat)):
            for name, op in ops.items():
                dist.barrier()
                t0 = time.perf_counter()
                op()
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # harness only: the slowest rank's time
                samples[name].append(float(dt))
        out.append((n_bytes, statistics.median(samples["labkit"]), statistics.median(samples["torch"])))
    return out


def human(n_bytes: int) -> str:
    return f"{n_bytes >> 20} MB" if n_bytes >= 1 << 20 else f"{n_bytes >> 10} KB"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 sizes and fewer repeats")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--no-write", action="store_true", help="print only; do not write benchmarks/results")
    args = ap.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    base = args.repeat or (5 if args.quick else 15)
    header = ["ranks", "size", "labkit time (ms)", "torch time (ms)", "labkit algbw (GB/s)",
              "labkit busbw (GB/s)", "torch busbw (GB/s)", "busbw ratio"]
    rows, target_rows = [], []
    for n in args.world_sizes:
        for n_bytes, t_lab, t_ref in launch(_time_worker, n, sizes, base, backend="gloo", timeout=600)[0]:
            factor = 2 * (n - 1) / n
            alg_lab, alg_ref = n_bytes / t_lab, n_bytes / t_ref
            ratio = (alg_lab * factor) / (alg_ref * factor)
            row = [n, human(n_bytes), t_lab * 1e3, t_ref * 1e3, alg_lab / 1e9,
                   alg_lab * factor / 1e9, alg_ref * factor / 1e9, ratio]
            rows.append(row)
            print(" | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row), flush=True)
            if n == 4 and n_bytes >= 16 << 20:
                target_rows.append(ratio)
    verdict = ("target (>= 0.7x torch busbw at >= 16 MB, 4 ranks): "
               + (("met" if min(target_rows) >= 0.7 else "NOT met") + f", worst ratio {min(target_rows):.2f}"
                  if target_rows else "not measured in this run"))
    print(verdict)
    notes = ("busbw = algbw · 2(N-1)/N, algbw = S / time (nccl-tests definitions); time = median over repeats of the "
             "slowest rank; both all-reduces timed alternately in the same processes. gloo on CPU, float32. "
             + ("(--quick run) " if args.quick else "") + verdict)
    if not args.no_write:
        path = write_results("collectives", "labkit ring all-reduce vs torch.distributed.all_reduce", header, rows, notes,
                             ran_on="cpu (gloo ranks)")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
