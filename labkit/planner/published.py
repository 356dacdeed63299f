"""The planner against published runs: Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM" (SC '21), Table 1 — weak scaling of GPT models from
1.7B to 1T parameters on Selene (A100-80GB, 8 GPUs per node, HDR InfiniBand), sequence length
2048, vocabulary 51,200, mixed precision, full activation recomputation, throughput counted with
their eq. 3 (`labkit.planner.model.flops_per_iteration` with recompute=True).

    rows = comparison()                 # one `Row` per Table 1 entry (fits the efficiency first)
    median_abs_error(rows)              # the headline number
    tp_sweep(), batch_sweep(), interleaving_gain()   # the paper's qualitative findings, as numbers

**What is predicted.** For each row, "the paper's configuration" is its (tp, pp, dp) and batch
with full recomputation and no ZeRO; the paper does not list the micro-batch size or the number
of model chunks, so the cost model picks the fastest of micro-batch ∈ {1, 2, 4, 8} and v | l/pp
for that (tp, pp, dp) — we report which. "The planner's plan" is `labkit.planner.search` on the
same GPUs and batch with every option open (recompute none/selective/full, ZeRO 0/1).

**One fitted constant.** ``flops_efficiency`` (the fraction of peak the matrix multiplications
reach) is fitted once, to all ten rows together, by least squares on log(predicted / measured)
(`fit_efficiency`); nothing is tuned per row. Everything else is the machine's data sheet.

**Qualitative findings** (set-ups after the paper's §5; micro-batch 1, 1F1B unless interleaved):
`tp_sweep` — a 162.2B-parameter GPT on 64 GPUs, tp × pp = 64, as in the paper's study of tensor
versus pipeline parallelism: throughput peaks at tp = 8 = GPUs per node and collapses at tp = 16,
whose all-reduces cross InfiniBand. `batch_sweep` — GPT-3 175B on 96 GPUs, tp = 8, pp = 12: the
pipeline bubble (p−1)/m shrinks as the batch grows, so throughput rises. `interleaving_gain` — the
same, interleaved (v = 2) vs 1F1B: the interleaved schedule wins most at small batches and the gap
closes as m grows.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from labkit.checks import check_int
from labkit.planner.cost import A100_80GB_SELENE, Cluster, Prediction, _predict
from labkit.planner.grid import Plan
from labkit.planner.model import Model
from labkit.planner.search import _reason, divisors, search
from labkit.table import Table

SEQ_LEN = 2048
VOCAB = 51200


@dataclass(frozen=True)
class PublishedRun:
    """One row of Table 1: the model (billions of parameters, heads, hidden size, layers), its
    tensor- and pipeline-parallel sizes, GPUs, global batch (sequences), and the measured
    throughput: teraFLOP/s per GPU, % of the 312 TFLOP/s peak, aggregate petaFLOP/s."""

    params_billion: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    tflops_per_gpu: float
    percent_of_peak: float
    aggregate_pflops: float

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def model(self) -> Model:
        return Model(self.layers, self.hidden, self.heads, SEQ_LEN, VOCAB)


# Narayanan et al. 2021, Table 1 ("weak-scaling throughput for GPT models ranging from 1 billion
# to 1 trillion parameters"). Columns: parameters (billion), attention heads, hidden size, layers,
# tensor-parallel size, pipeline-parallel size, GPUs, batch size, achieved teraFLOP/s per GPU,
# percentage of theoretical peak, achieved aggregate petaFLOP/s.
MEGATRON_2021_TABLE1 = (
    PublishedRun(1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
    PublishedRun(3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
    PublishedRun(7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
    PublishedRun(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
    PublishedRun(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
    PublishedRun(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
    PublishedRun(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
    PublishedRun(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
    PublishedRun(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
    PublishedRun(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0),
)

PAPER_MICRO_BATCHES = (1, 2, 4, 8)


def best_of(model: Model, cluster: Cluster, global_batch: int, plans) -> Prediction | None:
    """The fastest feasible `Prediction` among ``plans`` (None if none is feasible)."""
    best = None
    for p in plans:
        mem = _reason(model, cluster, p, global_batch, True, False)
        if isinstance(mem, str):
            continue
        r = _predict(model, cluster, p, global_batch, memory=mem)
        if best is None or r.step_time < best.step_time:
            best = r
    return best


def paper_prediction(run: PublishedRun, cluster: Cluster = A100_80GB_SELENE) -> Prediction:
    """The cost model's time for the run's own (tp, pp, dp) and batch, full recomputation, no
    ZeRO, with the fastest micro-batch in {1, 2, 4, 8} and number of chunks v | l/pp."""
    cluster = cluster.with_gpus(run.gpus)
    chunks = divisors(run.layers // run.pp) if run.pp > 1 else [1]
    plans = [Plan(run.dp, run.tp, run.pp, mb, v, 0, "full") for mb in PAPER_MICRO_BATCHES for v in chunks]
    best = best_of(run.model, cluster, run.batch, plans)
    if best is None:
        raise ValueError(f"paper_prediction: no micro-batch size fits the {run.params_billion}B run")
    return best


def fit_efficiency(runs=MEGATRON_2021_TABLE1, cluster: Cluster = A100_80GB_SELENE,
                   lo: float = 0.2, hi: float = 1.0, tol: float = 1e-4) -> float:
    """The one ``flops_efficiency`` that minimises Σ log²(predicted / measured TFLOP/s per GPU) over
    ``runs`` (golden-section search on [lo, hi]; the loss is smooth and has one minimum there)."""
    def loss(e: float) -> float:
        c = replace(cluster, flops_efficiency=e)
        return sum(math.log(paper_prediction(r, c).tflops_per_gpu / r.tflops_per_gpu) ** 2 for r in runs)

    golden = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    x1, x2 = b - golden * (b - a), a + golden * (b - a)
    f1, f2 = loss(x1), loss(x2)
    while b - a > tol:
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - golden * (b - a)
            f1 = loss(x1)
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + golden * (b - a)
            f2 = loss(x2)
    return (a + b) / 2


@dataclass(frozen=True)
class Row:
    """A Table 1 ``run`` next to the cost model's ``paper`` prediction (the run's own tp, pp, dp)
    and the planner's ``best`` plan on the same GPUs and batch."""

    run: PublishedRun
    paper: Prediction
    best: Prediction

    @property
    def error(self) -> float:
        """predicted / measured TFLOP/s per GPU − 1, for the paper's configuration (signed)."""
        return self.paper.tflops_per_gpu / self.run.tflops_per_gpu - 1

    @property
    def speedup(self) -> float:
        """How many times faster the planner's best plan is predicted to be than the paper's."""
        return self.paper.step_time / self.best.step_time


def comparison(efficiency: float | None = None, runs=MEGATRON_2021_TABLE1,
               cluster: Cluster = A100_80GB_SELENE) -> list[Row]:
    """One `Row` per run; ``efficiency`` defaults to `fit_efficiency` (one constant for all rows)."""
    e = fit_efficiency(runs, cluster) if efficiency is None else efficiency
    c = replace(cluster, flops_efficiency=e)
    rows = []
    for run in runs:
        best = search(run.model, c.with_gpus(run.gpus), run.batch).best
        rows.append(Row(run, paper_prediction(run, c), best))
    return rows


def median_abs_error(rows) -> float:
    """Median over rows of |predicted / measured − 1| (a fraction: 0.05 = 5 %)."""
    return statistics.median(abs(r.error) for r in rows)


def comparison_table(rows) -> Table:
    """The comparison as a `labkit.table.Table` (one line per row, for the notebook)."""
    out = []
    for r in rows:
        run, p, b = r.run, r.paper.plan, r.best.plan
        v = f" v{b.virtual_stages}" if b.virtual_stages > 1 else ""
        out.append([run.params_billion, f"{run.tp}x{run.pp}x{run.dp}", run.tflops_per_gpu, r.paper.tflops_per_gpu,
                    r.error * 100, f"mb{p.micro_batch} v{p.virtual_stages}",
                    f"{b.tp}x{b.pp}x{b.dp}{v} mb{b.micro_batch} z{b.zero_stage} {b.recompute}", r.speedup])
    return Table(["B params", "tp×pp×dp", "paper TF", "model TF", "err %", "chosen", "planner's plan", "speed-up"],
                 out, formats={"model TF": ".0f", "err %": "+.1f", "speed-up": ".2f"},
                 title="Narayanan et al. 2021, Table 1 vs the cost model (TF = TFLOP/s per GPU)")


# -- qualitative findings -----------------------------------------------------------------------

GPT_162B = Model(32, 20480, 128, SEQ_LEN, VOCAB)    # 162.2B parameters, the size of the paper's tp-vs-pp study
GPT3_175B = Model(96, 12288, 96, SEQ_LEN, VOCAB)    # GPT-3, used for the paper's schedule studies


def tp_sweep(global_batch: int = 128, cluster: Cluster = A100_80GB_SELENE, gpus: int = 64) -> dict[int, Prediction]:
    """{tp: prediction} for GPT_162B on ``gpus`` GPUs with tp × pp = gpus (dp = 1), 1F1B, micro-batch 1,
    full recomputation — tp over the powers of two whose pp divides the 32 layers."""
    check_int("tp_sweep", "global_batch", global_batch, minimum=1)
    c = cluster.with_gpus(gpus)
    out = {}
    for tp in (1, 2, 4, 8, 16, 32, 64):
        pp = gpus // tp
        if gpus % tp or GPT_162B.layers % pp or GPT_162B.heads % tp:
            continue
        best = best_of(GPT_162B, c, global_batch, [Plan(1, tp, pp, 1, 1, 0, "full")])
        if best is not None:
            out[tp] = best
    return out


def batch_sweep(batches=(12, 24, 36, 48, 60, 96, 192), virtual_stages: int = 1,
                cluster: Cluster = A100_80GB_SELENE) -> dict[int, Prediction]:
    """{global batch: prediction} for GPT3_175B on 96 GPUs, tp = 8, pp = 12, dp = 1, micro-batch 1,
    full recomputation, ``virtual_stages`` chunks per rank (1 = 1F1B)."""
    c = cluster.with_gpus(96)
    out = {}
    for B in batches:
        check_int("batch_sweep", "batch", B, minimum=1)
        best = best_of(GPT3_175B, c, B, [Plan(1, 8, 12, 1, virtual_stages, 0, "full")])
        if best is not None:
            out[B] = best
    return out


def interleaving_gain(batches=(12, 24, 36, 48, 60, 96, 192), virtual_stages: int = 2,
                      cluster: Cluster = A100_80GB_SELENE) -> dict[int, float]:
    """{global batch: interleaved throughput / 1F1B throughput − 1} for the `batch_sweep` set-up."""
    plain = batch_sweep(batches, 1, cluster)
    inter = batch_sweep(batches, virtual_stages, cluster)
    return {B: inter[B].tflops_per_gpu / plain[B].tflops_per_gpu - 1 for B in batches if B in plain and B in inter}
