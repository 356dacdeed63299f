"""The planner's cost model against Narayanan et al. 2021 (Megatron-LM), Table 1, plus the paper's
qualitative findings and the planner's search time. Pure Python: runs in a few seconds anywhere.

For each Table 1 run: the measured TFLOP/s per GPU, the cost model's prediction for the run's own
(tp, pp, dp) — micro-batch and chunks picked by the model, since the paper does not list them —
and the planner's own best plan on the same GPUs and batch. One constant, the matmul efficiency,
is fitted to all rows at once (`labkit.planner.published.fit_efficiency`).

    .venv/bin/python benchmarks/planner_megatron.py

Writes benchmarks/results/planner_megatron.md.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.bench import markdown_table, write_results  # noqa: E402
from labkit.planner import A100_80GB_SELENE, Model, search  # noqa: E402
from labkit.planner.published import (batch_sweep, comparison, comparison_table, fit_efficiency,  # noqa: E402
                                      interleaving_gain, median_abs_error, tp_sweep)


def _plan_text(plan) -> str:
    v = f" v={plan.virtual_stages}" if plan.virtual_stages > 1 else ""
    return f"{plan.tp}×{plan.pp}×{plan.dp}{v} mb={plan.micro_batch} ZeRO-{plan.zero_stage} {plan.recompute}"


def search_time(repeat: int = 5) -> tuple[float, int, int]:
    """Median seconds of `search` for a 1T-parameter GPT on 4096 GPUs; candidates; feasible plans."""
    model = Model(layers=128, hidden=25600, heads=160, seq_len=2048, vocab=51200)
    cluster = A100_80GB_SELENE.with_gpus(4096)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        found = search(model, cluster, 4096)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), found.considered, len(found.plans)


def main():
    t0 = time.perf_counter()
    efficiency = fit_efficiency()
    rows = comparison(efficiency)
    print(comparison_table(rows))
    median, worst = median_abs_error(rows), max(abs(r.error) for r in rows)
    table = []
    for r in rows:
        run, p = r.run, r.paper.plan
        table.append([f"{run.params_billion:.1f}", f"{run.tp}×{run.pp}×{run.dp}", run.gpus, run.batch,
                      run.tflops_per_gpu, round(r.paper.tflops_per_gpu, 1), f"{r.error * 100:+.1f}",
                      f"mb={p.micro_batch} v={p.virtual_stages}", _plan_text(r.best.plan),
                      f"{r.best.step_time:.2f}", f"{r.best.mfu * 100:.1f}", f"{r.speedup:.2f}"])
    print(f"fitted flops_efficiency {efficiency:.3f}; median |error| {median:.1%}, worst {worst:.1%}")

    lo, hi = min(r.paper.tflops_per_gpu for r in rows), max(r.paper.tflops_per_gpu for r in rows)
    first, last = rows[0], rows[-1]
    c = replace(A100_80GB_SELENE, flops_efficiency=efficiency)
    tp_rows = []
    for batch in (32, 128):
        sweep = tp_sweep(batch, c)
        tp_rows.append([batch] + [f"{sweep[tp].tflops_per_gpu:.0f}" if tp in sweep else "-"
                                  for tp in (2, 4, 8, 16, 32)])
    plain, inter = batch_sweep(cluster=c), batch_sweep(virtual_stages=2, cluster=c)
    gain = interleaving_gain(cluster=c)
    batch_rows = [[B, f"{plain[B].tflops_per_gpu:.0f}", f"{plain[B].bubble / plain[B].step_time * 100:.1f}",
                   f"{inter[B].tflops_per_gpu:.0f}", f"{gain[B] * 100:+.1f}"] for B in sorted(gain)]
    seconds, considered, feasible = search_time()
    print(f"search, 1T parameters on 4096 GPUs: {seconds:.3f} s for {considered} candidates ({feasible} feasible)")

    notes = f"""
Measured: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC '21), Table 1 — GPT, sequence 2048, vocabulary 51,200, A100-80GB on Selene (8 GPUs
per node, 8 × 200 Gb/s HDR InfiniBand per node), mixed precision, full activation recomputation;
TFLOP/s per GPU counted with their eq. 3 (recomputation included). tp×pp×dp = the paper's sizes.

Predicted: `labkit.planner` cost model (compute at peak × efficiency on the busiest pipeline stage,
tensor-parallel all-reduces over NVLink, pipeline point-to-point and bubble, data-parallel
all-reduce over InfiniBand, none of it overlapped) with **one fitted constant for all rows**:
flops_efficiency = {efficiency:.3f} (least squares on log(predicted/measured); the cluster constant
A100_80GB_SELENE carries it rounded, {A100_80GB_SELENE.flops_efficiency}). Nothing is tuned per row.
The paper does not list micro-batch sizes or chunk counts, so for its (tp, pp, dp) the model picks
the fastest micro-batch in {{1, 2, 4, 8}} and v | layers/pp ("chosen").
**Median |error| {median:.1%}, worst row {worst:.1%}.**

The errors have a trend: {first.error:+.0%} at {first.run.params_billion}B, {last.error:+.0%} at \
{last.run.params_billion:.0f}B, while the paper's throughput rises from {first.run.tflops_per_gpu:.0f} to \
{last.run.tflops_per_gpu:.0f} TFLOP/s and the model's stays within {lo:.0f}-{hi:.0f}. One efficiency
cannot follow that: the matmul efficiency is really higher for larger matrices, and the non-matmul
work (softmax, GELU, and LayerNorm and dropout, which ran replicated on every tensor-parallel rank
before sequence parallelism) costs relatively more when h/tp is small; the model has neither. The
small models also pay for the data-parallel all-reduce at 25 GB/s per GPU (a flat ring through
each GPU's own card); NCCL can run one ring per card when several dp ranks share a node, which
would make it cheaper than modelled.

Planner's plan: `search` on the same GPUs and batch with every option open (recompute none /
selective / full, ZeRO-0/1, micro-batch 1-8, any v), as tp×pp×dp; its predicted seconds per
iteration, MFU (model FLOPs without recomputation / time / peak) and predicted speed-up over the
paper's configuration. Most of the gain is skipping full recomputation where memory allows (72
instead of 96·B·s·l·h² FLOPs); Korthikanti et al. 2022 report a 29 % speed-up from selective
recomputation (with sequence parallelism) for the 530B model.

Finding (a), tensor parallelism beyond a node: 162.2B-parameter GPT (32 layers, h = 20480, 128
heads) on 64 GPUs, tp × pp = 64, dp = 1, micro-batch 1, 1F1B; predicted TFLOP/s per GPU by tp.
tp = 16 spans two nodes, so its all-reduces run over InfiniBand (25 GB/s per GPU, not 300):

{markdown_table(["batch", "tp=2", "tp=4", "tp=8", "tp=16", "tp=32"], tp_rows)}

Findings (b) and (c), the bubble and interleaving: GPT-3 175B (96 layers, h = 12288) on 96 GPUs, tp = 8,
pp = 12, dp = 1, micro-batch 1 (m = batch); 1F1B TFLOP/s and bubble share of the step, interleaved
(v = 2) TFLOP/s and its gain:

{markdown_table(["batch", "1F1B TFLOP/s", "bubble %", "interleaved TFLOP/s", "gain %"], batch_rows)}

Search time: `search` for a 1T-parameter GPT (128 layers, 160 heads) on 4096 A100s, global batch
4096: {seconds:.3f} s (median of 5) over {considered} candidates, {feasible} feasible. The candidate count
depends on the divisors of heads, layers and layers/pp, not on the number of GPUs.

Whole script: {time.perf_counter() - t0:.1f} s.
"""
    path = write_results(
        "planner_megatron", "Auto-parallel planner vs Megatron-LM (Narayanan et al. 2021, Table 1)",
        ["B params", "paper tp×pp×dp", "GPUs", "batch", "paper TFLOP/s", "model TFLOP/s", "error %",
         "chosen", "planner's plan", "planner s/iter", "planner MFU %", "speed-up"], table, notes,
        ran_on="none (a cost model next to published measurements; nothing timed here)")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
