"""The Lab 11 notebook's one-liners for 3D parallelism and the planner, and its "check your work"
pictures. (The placement, topology and balance sections use `labkit.cluster.lab`.)

    bytes_by_dimension_table(...)   closed-form bytes per GPU per step along dp, tp, pp for a big model
    run_grids(grids)                the real dp × tp × pp runs on 8 gloo ranks (one launch)
    equivalence_table(runs)         each grid vs one process; replicas and tied copies identical
    counted_bytes_table(run)        bytes counted per dimension on every rank vs the closed forms
    timeline_of(run)                a run's last step, for `labkit.viz.parallel3d.timeline_figure`
    flops_table(cfg)                FLOPs counted by FlopCounterMode vs flops_per_iteration
    activations_table(...)          activations in flight on the first stage as pp grows
    memory_mistake_table(...)       memory per GPU vs "M_model/tp + M_act/pp"
    megatron_table()                Table 1 of Narayanan et al. 2021 vs the planner
    tp_sweep_table(), batch_table() the paper's findings: TP across nodes, the bubble, interleaving
    search_table(model, cluster, B) the planner's best plans and why others were rejected
    picture(exercise)               a learner's function next to the lab's answer

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import re
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from labkit.cluster.autoparallel import partition_stages
from labkit.memory.estimate import activation_bytes_per_layer
from labkit.model import GPT, GPTConfig, batch, parameter_count
from labkit.parallel3d.comm_bytes import DIMENSIONS, bytes_per_step, rank_bytes_per_step
from labkit.parallel3d.train import Timeline3D, TrainSetup, max_abs_diff, reference_training, train_3d_many
from labkit.planner.cost import Cluster
from labkit.planner.grid import Plan, coords, groups, nodes_spanned
from labkit.planner.memory import first_stage_bytes, layers_in_flight, memory_per_gpu
from labkit.planner.model import Model, flops_per_iteration
from labkit.planner.published import (MEGATRON_2021_TABLE1, PublishedRun, batch_sweep, comparison, comparison_table,
                                      interleaving_gain, median_abs_error, tp_sweep)
from labkit.planner.search import search
from labkit.table import Table

SMALL = GPTConfig(layers=4, hidden=32, heads=4, seq_len=8, vocab=64)
GRIDS = ((2, 2, 2, 4, "1f1b", "sgd"), (1, 2, 4, 4, "gpipe", "adamw"), (4, 1, 2, 2, "1f1b", "adamw"),
         (2, 1, 4, 4, "1f1b", "sgd"), (1, 4, 2, 2, "gpipe", "sgd"))   # dp, tp, pp, micro-batches, schedule, optimizer
GB, GiB = 1e9, 2 ** 30


def _run(name: str) -> PublishedRun:
    """A Table 1 row by its size in billions ("145.6")."""
    return next(r for r in MEGATRON_2021_TABLE1 if f"{r.params_billion:g}" == name)


def bytes_by_dimension_table(params_billion: str = "39.1", micro_batches: int = 48, itemsize: int = 2) -> Table:
    """Bytes one GPU of the first pipeline stage sends per step along each dimension, from the closed
    forms of `labkit.parallel3d.comm_bytes`, for a Table 1 model at the paper's tp, pp, dp."""
    run = _run(params_billion)
    m = run.model
    cfg = GPTConfig(layers=m.layers, hidden=m.hidden, heads=m.heads, seq_len=m.seq_len, vocab=m.vocab)
    per = rank_bytes_per_step(cfg, run.dp, run.tp, run.pp, run.batch, micro_batches, itemsize, rank=0)
    total = sum(per.values())
    how = {"dp": "ring all-reduce of its gradients, once per step",
           "tp": "4 all-reduces of b·s·h per layer per micro-batch",
           "pp": "activations out, gradients back, per micro-batch",
           "embedding": "the tied weight's gradient, first <-> last stage"}
    rows = [(d, per[d] / GB, per[d] / total, how[d]) for d in DIMENSIONS]
    return Table(["dimension", "GB per step", "share", "what moves"], rows,
                 formats={"GB per step": ".2f", "share": ".1%"},
                 title=f"{params_billion}B model, tp={run.tp} pp={run.pp} dp={run.dp}, batch {run.batch} in "
                       f"{micro_batches} micro-batches, bf16: rank 0")


def run_grids(grids=GRIDS, cfg: GPTConfig = SMALL, global_batch: int = 16, steps: int = 3, world: int = 8):
    """Train ``cfg`` on every grid (dp, tp, pp, micro-batches, schedule, optimizer) of ``world`` gloo
    ranks, all in one launch, float64; returns the `Run3D`s (labkit.parallel3d.train)."""
    setups = [TrainSetup(dp, tp, pp, global_batch, m, steps=steps, schedule=s, optimizer=o)
              for dp, tp, pp, m, s, o in grids]
    return train_3d_many(cfg, setups, world)


def equivalence_table(runs, cfg: GPTConfig = SMALL) -> Table:
    """Each run's parameters vs one process on the whole batch (the same steps), the spread between
    copies that must be identical (dp replicas, the two copies of the tied weight), and whether the
    bytes counted on every rank equal the closed forms."""
    rows = []
    for run in runs:
        s = run.setup
        want, _ = reference_training(cfg, s)
        formula = bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8)
        exact = all(run.total_bytes[d] == formula[d] for d in DIMENSIONS)
        rows.append((f"{s.dp}×{s.tp}×{s.pp}", s.micro_batches, s.schedule, s.optimizer,
                     max_abs_diff(run.params, want), run.replica_spread, "yes" if exact else "NO"))
    return Table(["dp×tp×pp", "m", "schedule", "optimizer", "max |Δ| vs 1 process",
                  "copies differ by", "bytes = formula"], rows,
                 formats={"max |Δ| vs 1 process": ".0e", "copies differ by": ".0e"},
                 title=f"{runs[0].setup.steps} steps, float64, global batch {runs[0].setup.global_batch}; "
                       f"GPT with {parameter_count(cfg):,} parameters on 8 gloo ranks")


def counted_bytes_table(run, cfg: GPTConfig = SMALL) -> Table:
    """Bytes the run's ranks sent in its last step, per dimension: counted vs the closed forms (float64)."""
    s = run.setup
    formula = bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8)
    per0 = rank_bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8, rank=0)
    rows = [(d, int(run.rank_bytes[0][d]), int(per0[d]), int(run.total_bytes[d]), int(formula[d]))
            for d in DIMENSIONS]
    return Table(["dimension", "rank 0 counted", "rank 0 formula", "all ranks counted", "all ranks formula"],
                 rows, title=f"bytes sent in one step, {s.dp}×{s.tp}×{s.pp}, {s.micro_batches} micro-batches")


def timeline_of(run) -> Timeline3D:
    """The run's last step as a `Timeline3D` (draw it with labkit.viz.parallel3d.timeline_figure)."""
    return Timeline3D(run.timeline, run.step_times[-1], run.coords, run.setup)


def counted_flops(cfg: GPTConfig, batch_size: int, recompute: bool) -> int:
    """FLOPs FlopCounterMode counts for one forward + backward of GPT(cfg) on ``batch_size`` sequences
    of seq_len tokens (matmuls only), plus one more forward of the blocks with ``recompute``."""
    model = GPT(cfg)
    tokens, targets = batch(cfg, batch_size)
    with FlopCounterMode(display=False) as counter:
        _, loss = model(tokens, targets)
        loss.backward()
        if recompute:
            with torch.no_grad():
                x = model.tok_emb(tokens) + model.pos_emb(torch.arange(cfg.seq_len))
                for block in model.blocks:
                    x = block(x)
    return counter.get_total_flops()


def flops_table(cfg: GPTConfig = GPTConfig(layers=3, hidden=48, heads=4, seq_len=32, vocab=96),
                batch_size: int = 4) -> Table:
    """`flops_per_iteration` vs FlopCounterMode on our GPT, with and without recomputation."""
    model = Model.from_config(cfg)
    rows = []
    for recompute in (False, True):
        counted = counted_flops(cfg, batch_size, recompute)
        formula = flops_per_iteration(model, batch_size, recompute)
        rows.append(("full" if recompute else "none", counted, formula, "yes" if counted == formula else "NO"))
    return Table(["recompute", "counted (FlopCounterMode)", "closed form", "equal"], rows,
                 title=f"one iteration, GPT l={cfg.layers} h={cfg.hidden} s={cfg.seq_len} V={cfg.vocab}, "
                       f"batch {batch_size}")


def activations_table(params_billion: str = "145.6", micro_batches: int = 96, pps=(1, 2, 4, 8, 16)) -> Table:
    """Layers' activations (one micro-batch each) the first stage keeps at its peak under 1F1B, as pp
    grows, next to "l/pp" — and the bytes, with full recomputation off, micro-batch 1, tp = 8."""
    run = _run(params_billion)
    m = run.model
    per_layer = activation_bytes_per_layer(m.seq_len, 1, m.hidden, m.heads, 8)
    rows = []
    for pp in pps:
        held = layers_in_flight(m.layers, pp, micro_batches, 1, 0)
        rows.append((pp, m.layers / pp, held, held * per_layer / GiB))
    return Table(["pp", "layers per stage (l/pp)", "layers in flight", "GiB of activations"], rows,
                 formats={"layers per stage (l/pp)": ".0f", "layers in flight": ".0f", "GiB of activations": ".1f"},
                 title=f"{params_billion}B model (l={m.layers}), first stage, 1F1B, {micro_batches} micro-batches")


def memory_mistake_table(params_billion: str = "145.6") -> Table:
    """For the Table 1 run's grid at each recompute setting: model states and activations per GPU by
    `memory_per_gpu`, next to the common shortcut's two terms M_model/tp (16·Ψ/tp bytes) and M_act/pp
    (l · bytes per layer / pp)."""
    run = _run(params_billion)
    m = run.model
    rows = []
    for recompute in ("none", "selective", "full"):
        plan = Plan(run.dp, run.tp, run.pp, 1, 1, 0, recompute)
        mem = memory_per_gpu(m, plan, run.batch)
        per_layer = activation_bytes_per_layer(m.seq_len, 1, m.hidden, m.heads, run.tp, recompute=recompute)
        rows.append((recompute, mem.model_states / GiB, 16 * m.params / run.tp / GiB, mem.activations / GiB,
                     m.layers * per_layer / run.pp / GiB))
    cols = ("model states", "M_model/tp", "activations", "M_act/pp")
    return Table(["recompute", *cols], rows, formats={c: ".1f" for c in cols},
                 title=f"GiB per GPU, {params_billion}B on tp={run.tp} pp={run.pp} dp={run.dp}, micro-batch 1, "
                       "ZeRO off")


def megatron_table() -> tuple[Table, float]:
    """(Table 1 vs the planner, median |error| of the predicted TFLOP/s per GPU)."""
    rows = comparison()
    return comparison_table(rows), median_abs_error(rows)


def tp_sweep_table(global_batch: int = 128) -> Table:
    """162B model on 64 GPUs (8 per node), tp × pp = 64: where the time goes as tp grows past a node."""
    rows = [(f"{p.plan.tp}×{p.plan.pp}", p.compute, p.bubble, p.tp_comm, p.pp_comm, p.tflops_per_gpu)
            for p in tp_sweep(global_batch).values()]
    return Table(["tp×pp", "compute s", "bubble s", "tp comm s", "pp comm s", "TFLOP/s per GPU"], rows,
                 formats={"compute s": ".1f", "bubble s": ".1f", "tp comm s": ".1f", "pp comm s": ".2f",
                          "TFLOP/s per GPU": ".0f"},
                 title=f"162B parameters, 64 A100s (8 per node), batch {global_batch}, micro-batch 1")


def batch_table(batches=(12, 24, 48, 96, 192)) -> Table:
    """GPT-3 175B on 96 GPUs (tp 8, pp 12): throughput and bubble vs batch, 1F1B and interleaved."""
    plain, inter2 = batch_sweep(batches, 1), batch_sweep(batches, 2)
    gain = interleaving_gain(batches, 2)
    rows = [(B, plain[B].bubble / plain[B].step_time, plain[B].tflops_per_gpu, inter2[B].tflops_per_gpu, gain[B])
            for B in batches]
    return Table(["batch", "bubble share (1F1B)", "TF/GPU 1F1B", "TF/GPU interleaved v=2", "interleaving gain"],
                 rows, formats={"bubble share (1F1B)": ".1%", "TF/GPU 1F1B": ".0f", "TF/GPU interleaved v=2": ".0f",
                                "interleaving gain": "+.1%"},
                 title="GPT-3 175B, 96 A100s, tp=8 pp=12 dp=1, micro-batch 1")


def search_table(model: Model, cluster: Cluster, global_batch: int, top: int = 5) -> tuple[Table, object]:
    """The ``top`` fastest plans and a count of the rejected ones by reason; returns (Table, SearchResult)."""
    result = search(model, cluster, global_batch)
    rows = [(str(p.plan), p.step_time, p.tflops_per_gpu, p.mfu, p.memory.total / GiB) for p in result.plans[:top]]
    table = Table(["plan", "s / iteration", "TFLOP/s per GPU", "MFU", "GiB per GPU"], rows,
                  formats={"s / iteration": ".2f", "TFLOP/s per GPU": ".0f", "MFU": ".1%", "GiB per GPU": ".1f"},
                  title=f"{model.params / 1e9:.0f}B parameters on {cluster.gpus} GPUs, batch {global_batch}: "
                        f"{len(result.plans)} feasible of {result.considered}")
    return table, result


def rejection_counts(result) -> Table:
    """How many candidate plans were rejected, by kind of reason (numbers replaced by n)."""
    counts: dict[str, int] = {}
    for r in result.rejected:
        key = re.sub(r"\d+(\.\d+)?", "n", r.reason)
        counts[key] = counts.get(key, 0) + 1
    return Table(["reason", "plans"], sorted(counts.items(), key=lambda kv: -kv[1]), title="rejected")


def search_seconds(model: Model, cluster: Cluster, global_batch: int) -> float:
    """Wall seconds of one `search` (timing: the notebook tags the cell that prints it)."""
    start = time.perf_counter()
    search(model, cluster, global_batch)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------ pictures

def coords_picture(fn, dp: int = 2, tp: int = 2, pp: int = 2, gpus_per_node: int = 4) -> Table:
    """The learner's rank_coords on a 2×2×2 grid, next to ours, and how many nodes their tp groups span."""
    rows, tp_groups = [], {}
    for rank in range(dp * tp * pp):
        got = tuple(fn(rank, dp, tp, pp))
        want = coords(rank, dp, tp, pp)
        tp_groups.setdefault((got[0], got[2]), []).append(rank)
        rows.append((rank, rank // gpus_per_node, str(got), str(want), "yes" if got == want else "NO"))
    spans = max(nodes_spanned(g, gpus_per_node) for g in tp_groups.values())
    return Table(["rank", "node", "yours (dp, tp, pp)", "ours", "same"], rows,
                 title=f"dp={dp} tp={tp} pp={pp}, {gpus_per_node} GPUs per node: your tp groups span up to "
                       f"{spans} node{'s' if spans > 1 else ''}")


def groups_picture(fn, rank: int = 5, dp: int = 2, tp: int = 2, pp: int = 2) -> Table:
    ours = groups(dp, tp, pp)
    rows = []
    for kind in ("dp", "tp", "pp"):
        want = sorted(next(g for g in ours[kind] if rank in g))
        got = list(fn(rank, kind, dp, tp, pp))
        rows.append((kind, str(got), str(want), "yes" if got == want else "NO"))
    return Table(["kind", "yours", "ours", "same"], rows, title=f"the groups of rank {rank}, dp={dp} tp={tp} pp={pp}")


def memory_picture(fn, params_billion: str = "145.6") -> Table:
    """The learner's fits_in_memory on a Table 1 model's grid as pp varies (tp·pp·dp fixed)."""
    run = _run(params_billion)
    m = run.model
    per_layer = activation_bytes_per_layer(m.seq_len, 1, m.hidden, m.heads, run.tp, recompute="full")
    rows = []
    for pp in (4, 8, 16):
        dp = run.gpus // (run.tp * pp)
        micro = run.batch // dp
        args = (m.params, m.layers, per_layer, dp, run.tp, pp, micro, 1, 80 * GiB)
        fits, needed = fn(*args)
        want = first_stage_bytes(*args[:-1])
        rows.append((f"{run.tp}×{pp}×{dp}", needed / GiB, want / GiB, bool(fits), want <= 80 * GiB))
    return Table(["tp×pp×dp", "yours GiB", "ours GiB", "yours fits", "ours fits"], rows,
                 formats={"yours GiB": ".2f", "ours GiB": ".2f"},
                 title=f"{params_billion}B, ZeRO-1, full recomputation, micro-batch 1, 80 GiB GPUs")


def flops_picture(fn, cfg: GPTConfig = GPTConfig(layers=3, hidden=48, heads=4, seq_len=32, vocab=96)) -> Table:
    """The learner's flops_per_iteration vs ours and vs FlopCounterMode on our GPT; and the 1T model."""
    rows = []
    for recompute in (False, True):
        got = fn(cfg.layers, cfg.hidden, cfg.seq_len, cfg.vocab, 4, recompute)
        rows.append((f"small GPT, recompute={recompute}", got, flops_per_iteration(Model.from_config(cfg), 4, recompute),
                     counted_flops(cfg, 4, recompute)))
    big = _run("1008")
    got = fn(big.model.layers, big.model.hidden, big.model.seq_len, big.model.vocab, big.batch, True)
    rows.append(("1T model, batch 3072, recompute", got, flops_per_iteration(big.model, big.batch, True), "-"))
    return Table(["case", "yours", "ours", "FlopCounterMode"], rows, title="FLOPs per iteration")


def partition_picture(fn, costs=(1.3, 2.4, 2.5, 2.4, 2.6, 2.5, 2.4, 1.2), stages: int = 3) -> Table:
    """The learner's partition_stages on a GPT-like chain (embedding, 6 blocks, head) next to ours."""
    got_sizes, got_b = fn(list(costs), stages)
    want_sizes, want_b = partition_stages(costs, stages)

    def stage_costs(sizes):
        out, i = [], 0
        for n in sizes:
            out.append(round(sum(costs[i:i + n]), 2))
            i += n
        return str(out)

    rows = [("yours", str(list(got_sizes)), stage_costs(got_sizes), got_b),
            ("ours", str(want_sizes), stage_costs(want_sizes), want_b)]
    return Table(["", "layers per stage", "stage costs", "bottleneck"], rows, formats={"bottleneck": ".2f"},
                 title=f"costs {list(costs)} on {stages} stages")


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab11_parallel3d.py."""
    draw = {"rank_coords": coords_picture, "group_ranks": groups_picture, "fits_in_memory": memory_picture,
            "flops_per_iteration": flops_picture, "partition_stages": partition_picture}[exercise]
    return lambda fn: print(draw(fn))


def worked_answers() -> dict:
    """The numbers of the notebook's worked problems (tests check them)."""
    model = _run("1008").model
    flops = flops_per_iteration(model, 3072, True)
    seconds = flops / (3072 * 163e12)
    gpt3 = Model(96, 12288, 96, 2048, 51200)
    return {"1T flops": flops, "1T seconds per iteration": seconds,
            "175B on 1024: memory 8x8x16": memory_per_gpu(gpt3, Plan(16, 8, 8), 1536).total / GiB,
            "bubble p=8 m=64": 7 / (64 + 7)}


__all__ = ["SMALL", "GRIDS", "bytes_by_dimension_table", "run_grids", "equivalence_table", "counted_bytes_table",
           "timeline_of", "counted_flops", "flops_table", "activations_table", "memory_mistake_table",
           "megatron_table", "tp_sweep_table", "batch_table", "search_table", "rejection_counts", "search_seconds",
           "picture", "worked_answers"]
