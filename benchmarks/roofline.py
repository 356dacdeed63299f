"""Lab 01 benchmark: this machine's measured roofline and the fused vs unfused element-wise chain.

Run: .venv/bin/python benchmarks/roofline.py [--quick] [--threads N]
Writes benchmarks/results/roofline.md. Peak = best torch.mm FLOP/s over square sizes (2n^3 FLOPs per call);
bandwidth = STREAM-style copy (2n*4 bytes) and triad (3n*4 bytes) on arrays far larger than the last-level cache.
Fusion: e = d + (a + b) * c, unfused (3 torch kernels into preallocated buffers, 9 arrays moved) vs torch.compile
(one loop, 5 arrays); the roofline predicts a time ratio of 9/5 for memory-bound code.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import labkit  # noqa: E402,F401
from labkit.bench import write_results  # noqa: E402
from labkit.roofline import measure as R  # noqa: E402
from labkit.roofline import model as M  # noqa: E402


def best_of(rounds, *fns):
    """Best (min-time) Measurement per fn over interleaved rounds; robust to other programs on the machine."""
    runs = [[fn() for fn in fns] for _ in range(rounds)]
    return [min((r[i] for r in runs), key=lambda m: m.seconds) for i in range(len(fns))]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads while timing (default: 1 on CPU, as in the notebook; 0 = torch's default)")
    args = p.parse_args(argv)
    device = R.default_device()
    threads = args.threads if args.threads is not None else (1 if device.type == "cpu" else 0)
    threads = threads or None
    sizes = (256, 512, 1024) if args.quick else (256, 512, 1024, 2048, 4096 if device.type == "cuda" else 2048)
    n_bw = 1 << (22 if args.quick else 24)
    n_chain = 1 << (21 if args.quick else 23)
    rounds = 2 if args.quick else 5

    with R.threads(threads):
        peak = max(best_of(rounds, lambda: R.peak_matmul(sizes=sizes, repeat=3, device=device)),
                   key=lambda m: m.flops_per_s)
        copy, triad = best_of(rounds, lambda: R.bandwidth(n_bw, "copy", device=device, repeat=9),
                              lambda: R.bandwidth(n_bw, "triad", device=device, repeat=9))
        a, b, c, d = R.chain_inputs(n_chain, device=device)
        out, tmp = torch.empty_like(a), (torch.empty_like(a), torch.empty_like(a))
        t0 = time.perf_counter()
        fused, arrays, how = R.make_fused_chain()
        fused(a, b, c, d, out)
        compile_s = time.perf_counter() - t0
        unf, fus = best_of(
            rounds,
            lambda: R.measure(M.elementwise_chain(n_chain, fused=False), lambda: R.chain_unfused(a, b, c, d, out, tmp)),
            lambda: R.measure(M.OpCost(f"chain fused n={n_chain}", 3 * n_chain, arrays * n_chain * 4),
                              lambda: fused(a, b, c, d, out)))
    bw = max(copy.bytes_per_s, triad.bytes_per_s)
    ratio = unf.seconds / fus.seconds
    rows = [
        ["peak compute: " + peak.name, f"{peak.flops_per_s / 1e9:.2f} GFLOP/s", f"{peak.seconds * 1e3:.3f} ms", "-"],
        [f"bandwidth: copy n={n_bw}", f"{copy.bytes_per_s / 1e9:.2f} GB/s", f"{copy.seconds * 1e3:.3f} ms", "-"],
        [f"bandwidth: triad n={n_bw}", f"{triad.bytes_per_s / 1e9:.2f} GB/s", f"{triad.seconds * 1e3:.3f} ms", "-"],
        ["ridge point", f"{M.ridge_intensity(peak.flops_per_s, bw):.2f} FLOP/B", "-", "-"],
        [unf.name + " (3 kernels, 9 arrays)", f"{unf.bytes_per_s / 1e9:.2f} GB/s", f"{unf.seconds * 1e3:.3f} ms",
         "1.00 (reference)"],
        [fus.name + f" ({arrays} arrays)", f"{fus.bytes_per_s / 1e9:.2f} GB/s", f"{fus.seconds * 1e3:.3f} ms",
         f"{ratio:.2f}x faster (roofline: {9 / arrays:.2f}x)"],
    ]
    for r in rows:
        print(" | ".join(r))
    notes = (f"Timed with torch threads = {threads or 'default'}; best of {rounds} interleaved rounds, each a median "
             f"of repeats (labkit.bench.median_time). Fused with: {how}; first call (compile) took {compile_s:.1f} s. "
             "Bytes are the compulsory traffic of the cost model (each operand read once, each result written once per "
             "kernel); a write-allocate cache moves more for writes, so measured fusion ratios can exceed 9/5.")
    path = write_results("roofline", "Lab 01: measured roofline and fusion",
                         ["quantity", "rate", "time per call", "vs unfused chain"], rows, notes, ran_on=str(device))
    print("wrote", path)


if __name__ == "__main__":
    main()
