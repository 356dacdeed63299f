"""The Lab 11 notebook's one-liners for the planner, and its "check your work" pictures. (The real
3D-parallel runs are `labkit.parallel3d.lab`'s; placement, topology and balance `labkit.cluster.lab`'s.)

    bytes_by_dimension_table(...)   closed-form bytes per GPU per step along dp, tp, pp for a big model
    flops_table(cfg)                FLOPs counted by FlopCounterMode vs flops_per_iteration
    activations_table(...)          activations in flight on the first stage as pp grows
    memory_mistake_table(...)       memory per GPU vs "M_model/tp + M_act/pp"
    parts_table(...)                one plan's predicted iteration, part by part
    gemm_table(...), cpu_gemm_table(...), kernel_table(...), nccl_table(), gloo_table(...),
    layer_table(), pipeline_check(), overlap_check()
                                    each term of the cost model next to a measurement or a
                                    published figure (§5)
    megatron_table()                Table 1 of Narayanan et al. 2021 vs the model, with the best
                                    constant and the rank correlation; held_out_table() the runs
                                    the model was not fitted to
    tp_sweep_table(), batch_table() the paper's findings: TP across nodes, the bubble, interleaving
    search_table(model, cluster, B) the planner's best plans and why others were rejected
    guide_search(), guide_table()   the decision guide (§10): each `labkit.planner.guide.Case`'s
                                    search, and its best plan named in words
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
from labkit.model import GPT, GPTConfig, batch
from labkit.parallel3d.comm_bytes import DIMENSIONS, rank_bytes_per_step
from labkit.planner import calibrate as C
from labkit.planner.cost import (A100_80GB_SELENE, MEGATRON_2021_TORCH_DDP, MEGATRON_2022, Cluster, piece_times,
                                 predict, selene)
from labkit.planner.device import A100_80GB, GiB, gemm_time, waves
from labkit.planner.grid import Plan
from labkit.planner.layer import layer_gemms
from labkit.planner.memory import first_stage_bytes, layers_in_flight, memory_per_gpu, stage_params
from labkit.planner.model import Model, flops_per_iteration, layer_forward_flops, logit_forward_flops
from labkit.planner.network import DGX_A100, Network, all_reduce_time
from labkit.planner.published import (BLOOM_176B, GPT_22B, HELD_OUT, MEGATRON_2021_TABLE1, PublishedRun,
                                      Summary, batch_sweep, held_out_rows, held_out_table as _held,
                                      interleaving_gain, summarise, table1_rows, tp_sweep)
from labkit.planner.search import search
from labkit.table import Table

GB = 1e9


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
    rows = []
    for recompute in (False, True):
        counted = counted_flops(cfg, batch_size, recompute)
        formula = flops_per_iteration(cfg, batch_size, recompute)
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


def parts_table(prediction) -> Table:
    """One plan's predicted iteration, part by part (seconds and share of the step)."""
    total = prediction.step_time
    rows = [(k, v, v / total) for k, v in prediction.parts.items()] + [("step", total, 1.0)]
    return Table(["part", "seconds", "share"], rows, formats={"seconds": ".3f", "share": ".1%"},
                 title=f"{prediction.plan}: {prediction.tflops_per_gpu:.0f} TFLOP/s per GPU")


# ------------------------------------------------------------------------------ §5: the terms, checked

def gemm_table(params_billion: str = "18.4", micro_batches=(1, 4), device=A100_80GB) -> Table:
    """The GEMMs of one layer of a Table 1 model on one tensor-parallel rank of an A100, by shape:
    256 × 128 tiles, waves on 108 SMs, how full the last wave is, the TFLOP/s the model gives and
    whether the roofline makes it compute- or memory-bound."""
    run = _run(params_billion)
    rows = []
    for b in micro_batches:
        for g in layer_gemms(run.model, b, run.tp):
            t = gemm_time(device, g.m, g.n, g.k, g.batch)
            fill = t.tiles / (t.waves * device.sms)
            shape = f"{g.batch}×" if g.batch > 1 else ""
            rows.append((b, g.name, f"{shape}{g.m}×{g.n}×{g.k}", t.tiles, t.waves, fill, t.achieved_flops / 1e12,
                         t.bound))
    return Table(["mb", "GEMM", "(batch×) m×n×k", "tiles", "waves", "last-wave fill", "TFLOP/s", "bound"], rows,
                 formats={"last-wave fill": ".0%", "TFLOP/s": ".0f"},
                 title=f"{params_billion}B, tp={run.tp}: a layer's forward GEMMs, A100 ({device.sms} SMs, "
                       f"{device.tile[0]}×{device.tile[1]} tiles, {device.gemm_efficiency:.2f} of peak per wave)")


def cpu_gemm_table(check) -> Table:
    """A `labkit.planner.calibrate.SweepCheck`: each measured GEMM next to the fitted roofline device
    and a constant rate (which half each sample was in)."""
    dev, rows = check.device, []
    for role, samples in (("fit", check.fitted), ("check", check.held)):
        for s in samples:
            model = C.model_seconds(dev, s)
            rows.append((f"{s.m}×{s.n}×{s.k}", role, s.rate / 1e9, s.flops / model / 1e9, model / s.seconds - 1,
                         check.constant_rate / 1e9))
    return Table(["m×n×k", "half", "measured GFLOP/s", "roofline GFLOP/s", "roofline err", "constant"], rows,
                 formats={"measured GFLOP/s": ".1f", "roofline GFLOP/s": ".1f", "roofline err": "+.0%",
                          "constant": ".1f"},
                 title=f"torch.mm float32, 1 thread; fitted: {dev.peak_flops / 1e9:.0f} GFLOP/s, "
                       f"{dev.hbm_bandwidth / 1e9:.1f} GB/s, {dev.kernel_overhead * 1e6:.1f} µs per call")


def kernel_table(results: dict) -> Table:
    """`labkit.planner.calibrate.cpu_kernels`' results: bytes per element, GB/s, share of copy's."""
    copy = results["copy"][0] / results["copy"][1]
    rows = [(k, C.KERNEL_BYTES[k], b / t / 1e9, b / t / copy) for k, (b, t) in results.items()]
    return Table(["kernel", "bytes per element", "GB/s", "÷ copy"], rows, formats={"GB/s": ".1f", "÷ copy": ".2f"},
                 title="memory-bound kernels on 4M float32 elements, 1 thread (best of interleaved rounds)")


# nccl-tests all-reduce bus bandwidth published for A100 nodes (GB/s), and where (module docstring of
# labkit.planner.network): (case, members per node, nodes, cards per node, measured, source)
NCCL_PUBLISHED = (("1 node × 8", 8, 1, 8, 232.5, "nccl #1048", "sets NVLink"),
                  ("one HDR card", 1, 2, 8, 24.0, "nccl #412", "sets a card"),
                  ("2 nodes × 8, 4 cards", 8, 2, 4, 86.0, "nccl #1048", "check"),
                  ("3 nodes × 8, 4 cards", 8, 3, 4, 84.8, "nccl-tests #119", "check"))


def nccl_table(network: Network = DGX_A100) -> Table:
    """The network model's bus bandwidth next to published nccl-tests all-reduce results (GitHub
    issues of NVIDIA/nccl and NVIDIA/nccl-tests; #412's figure is the NCCL maintainer's; #119's the
    mean over sizes)."""
    import dataclasses

    rows = []
    for case, k, nodes, cards, measured, source, role in NCCL_PUBLISHED:
        net = dataclasses.replace(network, nics_per_node=cards)
        model = net.bus_bandwidth(k, nodes) / 1e9
        rows.append((case, measured, model, model / measured - 1, role, source))
    return Table(["all-reduce", "published GB/s", "model GB/s", "err", "use", "source"], rows,
                 formats={"published GB/s": ".1f", "model GB/s": ".1f", "err": "+.0%"},
                 title="NCCL bus bandwidth on A100 nodes (NVLink3 300 GB/s, HDR 25 GB/s per card)")


def gloo_table(times: dict, net: Network, world: int) -> Table:
    """Labkit's ring all-reduce on gloo ranks next to the planner's ring model fitted through the two
    largest buffers."""
    fitted = sorted(times)[-2:]
    rows = [(n, "fit" if n in fitted else "check", t * 1e3, C.ring_model(net, world, n) * 1e3,
             C.ring_model(net, world, n) / t) for n, t in sorted(times.items())]
    return Table(["bytes", "use", "measured ms", "ring model ms", "model ÷ measured"], rows,
                 formats={"measured ms": ".2f", "ring model ms": ".2f", "model ÷ measured": ".2f"},
                 title=f"ring all-reduce on {world} gloo ranks; fitted α = {net.intra_latency * 1e6:.0f} µs, "
                       f"bandwidth {net.nvlink_bandwidth / 1e9:.2f} GB/s")


# Korthikanti et al. 2022, Table 4: one layer of the 22B model (a 64, h 6144, tp 8, micro-batch 4),
# forward and backward milliseconds (backward includes recomputation)
TABLE4 = ((("none", False), "baseline", 7.7, 11.9), (("none", True), "sequence parallel", 7.2, 11.8),
          (("full", False), "full recompute", 7.7, 19.5), (("selective", False), "selective recompute", 7.7, 13.2),
          (("selective", True), "selective + SP", 7.2, 13.1))


def layer_table() -> tuple[Table, float]:
    """One transformer layer of the 22B model: the model's forward and backward (+ recomputation)
    milliseconds next to Korthikanti et al.'s Table 4; returns (table, worst |error|)."""
    c = A100_80GB_SELENE.with_gpus(8)
    rows, worst = [], 0.0
    for (rec, sp), name, fwd, bwd in TABLE4:
        layer = piece_times(GPT_22B, c, Plan(1, 8, 1, 4, 1, 0, rec, sp), MEGATRON_2022).layer
        f, b = layer.forward.total * 1e3, (layer.backward.total + layer.recompute.total) * 1e3
        worst = max(worst, abs(f / fwd - 1), abs(b / bwd - 1))
        rows.append((name, fwd, f, bwd, b))
    return (Table(["layer", "paper fwd ms", "model fwd ms", "paper bwd ms", "model bwd ms"], rows,
                  formats={"model fwd ms": ".1f", "model bwd ms": ".1f"},
                  title="22B model, one layer, tp=8, micro-batch 4 (Korthikanti et al. 2022, Table 4)"), worst)


def pipeline_check(micro_batches=(12, 48, 128)) -> tuple[Table, float]:
    """BLOOM-176B's published stages (70 layers on 12: 5, 10 × 6, 5, the embedding and the head on
    the ends): the pipeline formula next to `labkit.pipeline.simulate` with each stage's forward
    and backward times; returns (table, worst |formula / simulator − 1|)."""
    from labkit.pipeline import schedule, time_schedule
    from labkit.planner.cost import MEGATRON_DEEPSPEED_BF16
    from labkit.planner.network import JEAN_ZAY_A100
    from labkit.planner.pipeline import pipeline_time

    split = (5,) + (6,) * 10 + (5,)
    cluster = Cluster(384, network=JEAN_ZAY_A100)
    plan = Plan(8, 4, 12, 2, 1, 1, "full", stage_layers=split)
    pieces = piece_times(BLOOM_176B, cluster, plan, MEGATRON_DEEPSPEED_BF16)
    L = pieces.layer
    fwd = [n * L.forward.total + pieces.p2p for n in split]
    bwd = [n * (L.backward.total + L.recompute.total) + pieces.p2p for n in split]
    fwd[0] += pieces.embedding.forward.total
    bwd[0] += pieces.embedding.backward.total
    fwd[-1] += pieces.head.forward.total
    bwd[-1] += pieces.head.backward.total
    rows, worst = [], 0.0
    for m in micro_batches:
        sim = time_schedule(schedule("1f1b", 12, m), fwd, bwd).makespan
        formula = pipeline_time([f + b for f, b in zip(fwd, bwd)], m)
        worst = max(worst, abs(formula / sim - 1))
        rows.append((m, sim, formula, formula / sim - 1))
    return (Table(["micro-batches", "simulator s", "formula s", "formula err"], rows,
                  formats={"simulator s": ".2f", "formula s": ".2f", "formula err": "+.2%"},
                  title="BLOOM-176B stages 5/6×10/5 (+ embedding, + head): 1F1B makespan"), worst)


def overlap_check(params_billion: str = "1.7") -> tuple[float, float, float]:
    """A Table 1 run with PyTorch DDP: the planner's exposed data-parallel time (Lab 06's bound over
    25 MiB buckets) next to `labkit.data_parallel.overlap.simulate_overlap` with the buckets ready
    evenly through the last micro-batch's backward; returns (planner s, simulator s, all-reduce s
    without overlap)."""
    from labkit.data_parallel.overlap import simulate_overlap

    run = _run(params_billion)
    c = selene(run.gpus)
    plan = Plan(run.dp, run.tp, run.pp, run.micro_batch)
    ddp = predict(run.model, c, plan, run.batch, software=MEGATRON_2021_TORCH_DDP)
    plain = predict(run.model, c, plan, run.batch)
    grads = 2 * stage_params(run.model, run.tp, run.pp, "only")
    pieces = piece_times(run.model, c, plan)
    t_bwd = run.layers * pieces.layer.backward.total + pieces.head.backward.total
    buckets = -(-grads // MEGATRON_2021_TORCH_DDP.bucket_bytes)
    per = all_reduce_time(c.network, run.dp, grads / buckets, run.gpus // c.gpus_per_node)
    # one "parameter" per bucket, ready at even steps; α = 0 and β chosen so a bucket takes `per`
    ready = [t_bwd * (i + 1) / buckets for i in range(buckets)]
    sim = simulate_overlap(ready, [1] * buckets, None, 2, 0.0, per, overlap=True)
    return ddp.dp_comm, sim.exposed, plain.dp_comm


# ------------------------------------------------------------------------------ §6: published runs

def megatron_table() -> tuple[Table, Summary, list]:
    """(Table 1 vs the model, its `Summary` — rank correlation, median |error|, the best constant —
    and the rows)."""
    rows = table1_rows(with_search=False)
    s = summarise([r.paper.tflops_per_gpu for r in rows], [r.run.tflops_per_gpu for r in rows])
    return Table(
        ["B params", "tp×pp×dp", "paper TF", "model TF", "err %", f"{s.constant:.0f} TF err %", "model's mb, v"],
        [[r.run.params_billion, f"{r.run.tp}×{r.run.pp}×{r.run.dp}", r.run.tflops_per_gpu, r.paper.tflops_per_gpu,
          r.error * 100, (s.constant / r.run.tflops_per_gpu - 1) * 100,
          f"{r.paper.plan.micro_batch}, {r.paper.plan.virtual_stages}"] for r in rows],
        formats={"model TF": ".0f", "err %": "+.1f", f"{s.constant:.0f} TF err %": "+.1f"},
        title="Narayanan et al. 2021, Table 1 vs the cost model (TF = TFLOP/s per GPU)"), s, rows


def held_out_table() -> tuple[Table, Summary, list]:
    """The published runs the model was not fitted to (Korthikanti et al. 2022, BLOOM-176B, MT-NLG):
    (table with a constant baseline, `Summary`, rows)."""
    rows = held_out_rows(HELD_OUT)
    s = summarise([r.predicted_tflops for r in rows], [r.run.tflops_per_gpu for r in rows])
    return _held(rows, table1_constant()), s, rows


def table1_constant() -> float:
    """The best constant TFLOP/s for Table 1 (the baseline carried to the held-out runs)."""
    from labkit.planner.published import best_constant
    return best_constant([r.tflops_per_gpu for r in MEGATRON_2021_TABLE1])[0]


def tp_sweep_table(global_batch: int = 128) -> Table:
    """162B model on 64 GPUs (8 per node), tp × pp = 64: where the time goes as tp grows past a node."""
    rows = [(f"{p.plan.tp}×{p.plan.pp}", p.gemm, p.elementwise, p.tp_comm, p.bubble, p.pp_comm, p.tflops_per_gpu)
            for p in tp_sweep(global_batch).values()]
    return Table(["tp×pp", "GEMM s", "elementwise s", "tp comm s", "bubble s", "pp s", "TFLOP/s per GPU"], rows,
                 formats={"GEMM s": ".1f", "elementwise s": ".1f", "tp comm s": ".1f", "bubble s": ".1f",
                          "pp s": ".2f", "TFLOP/s per GPU": ".0f"},
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
    table = Table(["plan", "s/it", "TF/GPU", "MFU", "GiB"], rows,
                  formats={"s/it": ".2f", "TF/GPU": ".0f", "MFU": ".1%", "GiB": ".1f"},
                  title=f"{model.params / 1e9:.0f}B parameters on {cluster.gpus} GPUs, batch {global_batch}: "
                        f"{len(result.plans)} feasible of {result.considered}")
    return table, result


def guide_search(cases=None) -> dict:
    """{case name: `SearchResult`} for each `labkit.planner.guide.Case` (default: `CASES`)."""
    from labkit.planner.guide import CASES, Case

    out = {}
    for c in CASES if cases is None else cases:
        if not isinstance(c, Case):
            raise TypeError(f"guide_search: cases must hold labkit.planner.guide.Case, got {type(c).__name__}")
        out[c.name] = search(c.model, c.cluster, c.global_batch, zero_stages=c.zero_stages)
    return out


def guide_table(results: dict, cases=None) -> Table:
    """Each case's best plan in words (`labkit.planner.guide.describe`), its time, MFU and memory per
    GPU, from ``results`` = `guide_search`'s; "no plan fits" where none does."""
    from labkit.planner.guide import CASES, describe

    rows = []
    for c in CASES if cases is None else cases:
        r = results[c.name]
        if r.plans:
            b = r.best
            rows.append((c.name, describe(b.plan, c.cluster.gpus_per_node), f"{b.step_time:.3g}", f"{b.mfu:.0%}",
                         f"{b.memory.total / GiB:.0f}"))
        else:
            rows.append((c.name, f"no plan fits ({r.considered} tried)", "-", "-", "-"))
    return Table(["case", "the planner's best plan", "s/it", "MFU", "GiB"], rows)


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
        rows.append((f"small GPT, recompute={recompute}", got, flops_per_iteration(cfg, 4, recompute),
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
    from labkit.parallel3d.lab import coords_picture, groups_picture

    draw = {"rank_coords": coords_picture, "group_ranks": groups_picture, "fits_in_memory": memory_picture,
            "flops_per_iteration": flops_picture, "partition_stages": partition_picture}[exercise]
    return lambda fn: print(draw(fn))


def worked_answers() -> dict:
    """The numbers of the notebook's worked problems (tests check them)."""
    model = _run("1008").model
    flops = flops_per_iteration(model, 3072, True)
    seconds = flops / (3072 * 163e12)
    gpt3 = Model(96, 12288, 96, 2048, 51200)
    mem = memory_per_gpu(gpt3, Plan(16, 8, 8), 1536)
    return {"1T flops": flops, "1T seconds per iteration": seconds,
            "1T last term": model.vocab / (16 * model.layers * model.hidden),
            "175B params per GPU": gpt3.params / 64,
            "175B model states GB": 16 * gpt3.params / 64 / 1e9,
            "175B model states GiB": 16 * gpt3.params / 64 / GiB,
            "175B on 1024: memory 8x8x16": mem.total / GiB,
            "175B on 1024: model states GiB": mem.model_states / GiB,
            "bubble p=8 m=64": 7 / (64 + 7),
            "tp16 bus GB/s": DGX_A100.bus_bandwidth(8, 2) / 1e9,
            "tp8 bus GB/s": DGX_A100.bus_bandwidth(8, 1) / 1e9,
            "BLOOM logits / layer forward": logit_forward_flops(BLOOM_176B, 1) / layer_forward_flops(BLOOM_176B, 1),
            "BLOOM split": bloom_split()}


def bloom_split() -> tuple:
    """The planner's stages for BLOOM-176B as it ran (tp 4, pp 12, dp 8, micro-batch 2, batch 2048,
    Jean Zay): 70 layers balanced by cost with the partition DP."""
    from labkit.planner.cost import MEGATRON_DEEPSPEED_BF16, stage_split
    from labkit.planner.network import JEAN_ZAY_A100

    return stage_split(BLOOM_176B, Plan(8, 4, 12, 2, 1, 1, "full"), Cluster(384, network=JEAN_ZAY_A100),
                       MEGATRON_DEEPSPEED_BF16)


__all__ = ["bytes_by_dimension_table", "counted_flops", "flops_table", "activations_table", "memory_mistake_table",
           "parts_table", "gemm_table", "cpu_gemm_table", "kernel_table", "nccl_table", "gloo_table", "layer_table",
           "pipeline_check", "overlap_check", "megatron_table", "held_out_table", "table1_constant",
           "tp_sweep_table", "batch_table", "search_table", "rejection_counts", "search_seconds",
           "picture", "worked_answers", "NCCL_PUBLISHED", "TABLE4"]
