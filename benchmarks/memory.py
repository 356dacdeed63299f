"""Lab 09's speed and memory figures: our activation checkpointing vs torch.utils.checkpoint, the
offload time model vs a measured offloaded step, on this machine (or a GPU box: pinned tier too).

Checkpointing: a chain of Linear(w, w) + Tanh layers (float64), one forward + backward of each
variant; peak activation bytes (MemoryTracker, exact) and the median step time of ours and of
PyTorch's non-reentrant checkpoint with the same segments, in the same process, alternating.
Offload: `labkit.memory.offload.time_offloaded_step` — bytes moved, the tier's bandwidth and the
update time measured in the same run, predicted vs measured step time.

    .venv/bin/python benchmarks/memory.py [--quick]

Writes benchmarks/results/memory.md.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from labkit.bench import median_time, write_results  # noqa: E402
from labkit.memory.checkpointing import chain_loss, chain_peak_bytes, make_chain, measure_chain  # noqa: E402
from labkit.memory.offload import cuda_available, time_offloaded_step  # noqa: E402
from labkit.model import GPTConfig  # noqa: E402


def checkpoint_rows(n_layers: int, width: int, batch: int, segments, repeat: int):
    layers = make_chain(n_layers, width)
    x = torch.randn(batch, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_()
    plain = median_time(lambda: chain_loss(layers, x, None, "none").backward(), repeat=repeat)
    rows = []
    for k in segments:
        times = {impl: median_time(lambda impl=impl: chain_loss(layers, x, k, impl).backward(), repeat=repeat)
                 for impl in ("ours", "torch")}
        peaks = {impl: measure_chain(n_layers, k, batch, width, impl=impl).peak_activation_bytes
                 for impl in ("ours", "torch")}
        rows.append(["checkpoint", f"k={k}", peaks["ours"], chain_peak_bytes(n_layers, k, batch, width, 8, "ours"),
                     peaks["torch"], times["ours"] * 1e3, times["torch"] * 1e3, times["ours"] / times["torch"],
                     times["ours"] / plain])
    return rows, plain


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    a = ap.parse_args(argv)
    n, w, b = (16, 64, 32) if a.quick else (32, 512, 256)
    repeat = 3 if a.quick else 9
    rows, plain = checkpoint_rows(n, w, b, (1, 2, 4, 6, 8) if not a.quick else (2, 4), repeat)
    for row in rows:
        print(*row, flush=True)
    cfg = GPTConfig(layers=2, hidden=128, heads=4, seq_len=32, vocab=256) if a.quick else \
        GPTConfig(layers=4, hidden=512, heads=8, seq_len=64, vocab=1024)
    offload = []
    for tier in ("mmap", "pinned") if cuda_available() else ("mmap",):
        t = time_offloaded_step(cfg, tier, device="cuda" if tier == "pinned" else "cpu", repeat=repeat)
        offload.append([tier, t.params, t.bytes_moved, t.bandwidth / 1e9, t.predicted_s * 1e3, t.measured_s * 1e3,
                        t.ratio, t.adam_s * 1e3])
        print(*offload[-1], flush=True)
    worst = max(r[7] for r in rows)
    notes = (f"Checkpointing: {n} layers Linear({w},{w})+Tanh, batch {b}, float64; plain step {plain * 1e3:.2f} ms. "
             "'ours peak' = measured peak activation bytes of our every-segment checkpoint, 'closed form' = "
             "(⌈N/k⌉ + k + 2)·a + g + 2e (equal by test), 'torch peak' = torch.utils.checkpoint (non-reentrant), "
             f"'vs plain' = our step time over the plain step's (one extra forward). Worst ours/torch {worst:.2f}.\n\n"
             "Offload:\n\n| tier | parameters | bytes moved/step | GB/s | predicted ms | measured ms | "
             "measured/predicted | Adam in memory ms |\n|---|---|---|---|---|---|---|---|\n" +
             "\n".join("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r) + " |"
                       for r in offload) +
             f"\n\nOffload model: {cfg}; predicted = grad bytes / to-tier bandwidth + param bytes / from-tier "
             "bandwidth + update time, each measured in the same run; on a CPU the 'mmap' tier is a memory-mapped "
             "file in the page cache, on a GPU box 'pinned' is page-locked host memory behind PCIe.")
    path = write_results("memory", "Memory: our checkpointing vs torch.utils.checkpoint; the offload time model",
                         ["what", "segments", "ours peak B", "closed form B", "torch peak B", "ours ms", "torch ms",
                          "ours/torch", "ours vs plain"], rows, notes,
                         ran_on="cpu" + (" (the pinned tier: cuda)" if cuda_available() else ""))
    print(path.read_text())


if __name__ == "__main__":
    main()
