"""Lab 09's speed and memory figures: our activation checkpointing vs torch.utils.checkpoint, the
offload time model vs a measured offloaded step, on this machine (or a GPU box: pinned tier too).

Checkpointing: a chain of Linear(w, w) + Tanh layers (float64), one forward + backward of each
variant; peak activation bytes (MemoryTracker, exact) and the median step time of ours and of
PyTorch's non-reentrant checkpoint with the same segments, in the same process, alternating.
Offload: `labkit.memory.offload.time_offloaded_step` — bytes moved, the tier's bandwidth and the
update time measured in the same run, predicted vs measured step time.
Activation offload: `labkit.memory.activation_offload.measure_step` — bytes to the tier and back
against the saved-activation closed form, the fast tier at the end of forward and at the peak,
and the step time with and without, next to the time model (copies on the compute stream); on a
GPU also PyTorch's save_on_cpu.

    .venv/bin/python benchmarks/memory.py [--quick]

Writes benchmarks/results/memory.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from labkit.bench import median_time, write_results  # noqa: E402
from labkit.memory.activation_checkpointing import chain_loss, chain_peak_bytes, make_chain, measure_chain  # noqa: E402
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
    from labkit.memory import activation_offload as AO

    acts = []
    acfg = GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128) if a.quick else \
        GPTConfig(layers=4, hidden=256, heads=8, seq_len=128, vocab=1024)
    for tier in ("mmap", "pinned") if cuda_available() else ("mmap",):
        dev = "cuda" if tier == "pinned" else "cpu"
        st = AO.measure_step(acfg, batch_size=4, tier=tier, device=dev, repeat=repeat)
        tm = AO.time_model(st, tier, dev)
        acts.append([tier, st.to_tier, st.from_tier, st.saved_bytes, st.forward_end[False] - st.forward_end[True],
                     st.peak[False], st.peak[True], tm["without_s"] * 1e3, tm["measured_s"] * 1e3,
                     tm["predicted_s"] * 1e3, tm["measured_s"] / tm["predicted_s"]])
        print(*acts[-1], flush=True)
    if cuda_available():
        r = AO.compare_save_on_cpu(acfg)
        save_on_cpu = (f" On this GPU, CUDA allocator peaks: plain {r['plain'][0]:,} B, torch save_on_cpu "
                       f"{r['save_on_cpu'][0]:,} B, ours {r['ours'][0]:,} B.")
    else:
        save_on_cpu = " torch.autograd.graph.save_on_cpu runs on a GPU box only (pinned host memory)."
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
             "file in the page cache, on a GPU box 'pinned' is page-locked host memory behind PCIe.\n\n"
             "Activation offload:\n\n| tier | to tier B | back B | closed form B | fast tier at forward end: "
             "drop B | peak B | peak with offload B | step ms | with offload ms | predicted ms | "
             "measured/predicted |\n|---|---|---|---|---|---|---|---|---|---|---|\n" +
             "\n".join("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r) + " |"
                       for r in acts) +
             f"\n\nActivation offload model: {acfg}, batch 4, float32; closed form = "
             "estimate.gpt_saved_activation_bytes (equal by test); the drop at the end of forward equals what "
             "moved less the token ids and targets the caller holds; predicted = step + to/B_to + back/B_back "
             "(copies on the compute stream; the hooks' own cost per saved tensor is left out)." + save_on_cpu)
    notes += (f"\n\nLoad average (1 min) at the end of the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
              "(other jobs shared the machine; times are comparable within a row, pairs alternate).")
    path = write_results("memory", "Memory: our checkpointing vs torch.utils.checkpoint; the offload time model",
                         ["what", "segments", "ours peak B", "closed form B", "torch peak B", "ours ms", "torch ms",
                          "ours/torch", "ours vs plain"], rows, notes,
                         ran_on="cpu" + (" (the pinned tier: cuda)" if cuda_available() else ""))
    print(path.read_text())


if __name__ == "__main__":
    main()
