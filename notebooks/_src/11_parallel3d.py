# Source of notebooks/11_parallel3d.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 11 — 3D parallelism: combine data, tensor and pipeline parallelism, and plan it
#
# The largest models are trained with all three kinds of parallelism at once: tensor parallelism
# (Lab 07) splits each layer over the GPUs of a node, pipeline parallelism (Lab 08) splits the
# layers over groups of nodes, and data parallelism (Lab 06, with ZeRO from Lab 10) replicates the
# whole arrangement. Which mix is fastest depends on the model, the batch, the memory (Lab 09) and
# the network (Lab 05). This lab puts the pieces together on real ranks, then builds a planner that
# picks the mix and checks it against the published runs of Megatron-LM; finally it looks at the
# cluster around a job — topology, placement, scheduling, load balance.
#
# **You will be able to**
# 1. number the ranks of a dp × tp × pp grid, and say why tensor parallelism goes innermost;
# 2. train our GPT on 8 processes as 2 × 2 × 2 (and other grids) and check it against one process,
#    byte counts included;
# 3. count a training iteration's FLOPs and a plan's memory per GPU, and spot two common mistakes;
# 4. predict a plan's step time from its parts — compute, bubble, communication — and search all
#    plans for the fastest;
# 5. check each part of the planner's cost model on its own, then the whole against Megatron-LM's
#    throughput from 1.7B to 1T parameters and against runs it was not fitted to;
# 6. measure topology, routing, placement, scheduling, packing and balancing choices on small
#    models of a cluster;
# 7. choose which parallelism to use for a model and a cluster, and check the choice with the planner.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import dataclasses

import torch

import labkit
from labkit.cluster import lab as CL
from labkit.claims import claim, claim_between, claim_close
from labkit.grading.check import check_your_work
from labkit.parallel3d import grid as G
from labkit.parallel3d import lab as grid_lab
from labkit.parallel3d.train import train_step
from labkit.planner import calibrate, lab
from labkit.planner.cost import selene
from labkit.planner.device import A100_80GB, waves
from labkit.planner.published import MEGATRON_2021_TABLE1
from labkit.show import show
from labkit.viz import parallel3d as V
from labkit.viz.player import figure_to_html

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. A grid of ranks
#
# With dp · tp · pp ranks, each rank has a coordinate (dp_index, tp_index, pp_index). The ranks that
# differ only in tp_index split the same layers (a **tp group**); those that differ only in
# dp_index hold the same parameters and average their gradients (a **dp group**); those that differ
# only in pp_index are the stages of one pipeline (a **pp group**). We number ranks
#
#     rank = pp_index · (dp · tp) + dp_index · tp + tp_index,
#
# tensor parallelism innermost. Ranks fill a node in order, so a tp group of up to a node's size
# sits inside one node. PyTorch builds the same groups with
# `init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))`: the mesh is laid
# out row-major, so its last dimension varies fastest.
#
# Eight ranks on nodes of 4 GPUs, coloured by tp group, then by dp group:

# %%
from IPython.display import HTML, display

display(HTML(figure_to_html(V.cluster_figure(2, 2, 2, 4, "tp")) + figure_to_html(V.cluster_figure(2, 2, 2, 4, "dp"))))
show(G.build_grid)

# %% [markdown]
# **Predict first:** per iteration, which dimension moves the most bytes? Take the 39B model that
# Megatron-LM trained on 512 GPUs as tp = 8, pp = 2, dp = 32.

# %%
moved = lab.bytes_by_dimension_table()
print(moved)
gb = {row[0]: row[1] for row in moved.rows}
claim_between("tensor parallelism moves about 30 times the bytes of data parallelism", gb["tp"] / gb["dp"], 20, 40)
claim("the pipeline sends the fewest bytes of the three", gb["pp"] < gb["dp"] < gb["tp"],
      f"pp {gb['pp']:.2f} GB, dp {gb['dp']:.2f} GB, tp {gb['tp']:.0f} GB")

# %% [markdown]
# Tensor parallelism, by a factor of about 30: four all-reduces of a whole micro-batch's
# activations per layer, every micro-batch. Data parallelism sends each gradient once per
# iteration; the pipeline sends one activation per micro-batch per stage boundary. That is why tp
# gets the fastest links (NVLink inside a node) and pp the slowest.
#
# ### Exercise 1: `rank_coords`
#
# In `exercises/lab11_parallel3d.py`, return a rank's (dp_index, tp_index, pp_index) under the
# numbering above. The picture shows your coordinates for 8 ranks on 4-GPU nodes, and how many
# nodes your tp groups span.

# %%
check_your_work("lab11_parallel3d", "rank_coords", picture=lab.picture("rank_coords"))

# %% [markdown]
# ### Exercise 2: `group_ranks`
#
# The ranks of a rank's dp, tp or pp group: those that differ from it in that one coordinate only.

# %%
check_your_work("lab11_parallel3d", "group_ranks", picture=lab.picture("group_ranks"))

# %% [markdown]
# ## 2. Training on a real 3D grid
#
# `labkit.parallel3d` composes the labs before it. Each pipeline stage is a slice of the GPT's
# blocks whose matrices are split Megatron-style over the tp group (Lab 07); the stages run a
# Lab 08 schedule (1F1B or GPipe) over the pp group; after the last backward each rank averages its
# gradients over its dp group (Lab 06) and steps its optimizer. One more piece: the token embedding
# and the output layer share one weight (they are *tied*), but with pp > 1 they live on the first
# and last stages. Each keeps a copy; after backward the two copies' gradients are all-reduced
# (Megatron's *embedding group*), so the copies stay equal.

# %%
show(train_step)

# %% [markdown]
# **Predict first:** five grids on 8 gloo ranks, three steps each, float64. How far from one
# process training on the whole batch will they land? And will the dp replicas and the two copies
# of the tied weight stay *exactly* equal?

# %%
runs = grid_lab.run_grids()
equivalence = grid_lab.equivalence_table(runs)
print(equivalence)
sgd = [row[4] for row in equivalence.rows if row[3] == "sgd"]
adamw = [row[4] for row in equivalence.rows if row[3] == "adamw"]
claim("with SGD every grid lands within 1e-15 of one process", max(sgd) < 1e-15, f"largest {max(sgd):.0e}")
claim_between("with AdamW the largest difference is around 1e-11", max(adamw), 1e-13, 1e-9)
claim("the copies that must be equal are equal to the bit", all(row[5] == 0 for row in equivalence.rows),
      f"{len(equivalence.rows)} grids")

# %% [markdown]
# With SGD, within 1e-15 of one process: the sharded matmuls and the all-reduces add the same
# numbers in another order, which changes the last bits. AdamW lands around 1e-11, and that is
# AdamW, not the parallelism. The largest difference sits in the bias of the key projection, whose
# gradient is zero in exact arithmetic (softmax ignores a shift shared by all keys); rounding leaves
# about 1e-21, different in each summation order, and AdamW's update g/(√v + ε) with ε = 1e-8
# magnifies such a difference up to 10⁸ times. The copies that must be equal are equal to the bit:
# every replica applies the same averaged gradient.
#
# The bytes counted on every rank equal the closed forms of `labkit.parallel3d.comm_bytes`:

# %%
counted = grid_lab.counted_bytes_table(runs[0])
print(counted)
claim("the bytes counted on every rank equal the closed forms",
      all(row[1] == row[2] and row[3] == row[4] for row in counted.rows), f"{len(counted.rows)} dimensions")

# %% [markdown]
# And one step of the 2 × 2 × 2 run, rank by rank. Ranks 0–3 are the first stage, 4–7 the second;
# within a stage the two tp ranks work in lock step (they all-reduce inside every layer), and the
# two dp replicas run side by side until their gradient all-reduce at the end.

# %% tags=["nbval-ignore-output"]
display(HTML(figure_to_html(V.timeline_figure(grid_lab.timeline_of(runs[0])))))

# %% [markdown]
# On 2 cores, 8 processes take turns, so the picture is stretched; the order of events is the
# point. `benchmarks/planner_cpu.py` times every grid of 4 and 8 ranks and compares them with the
# planner of section 5, its constants measured here (Lab 01's matmul rate, Lab 05's α and β). The
# planner ranks them poorly on this machine (its table, `benchmarks/results/planner_cpu.md`, has
# the rank correlations), and the reasons are instructive: with more processes than cores an idle
# pipeline stage lends its core to another rank, so the bubble costs nothing; and per-call
# overheads, not FLOPs, dominate such a small model. A GPU gives each rank its own device, which
# is what the planner assumes. For more machines, the same training runs under torchrun:
# `torchrun --nproc-per-node 8 -m labkit.parallel3d.torchrun_3d --dp 2 --tp 2 --pp 2`.
#
# ## 3. FLOPs per iteration
#
# Per sequence of s tokens, a transformer layer's matmuls cost 24·s·h² FLOPs forward (QKV 6,
# attention output 2, MLP 16) plus 4·s²·h for the attention scores and their product with V; the
# logit layer 2·s·h·V. Backward costs twice the forward. With full activation recomputation the
# layers' forward runs once more — the logit layer's does not. For a batch of B sequences and l
# layers this is Narayanan et al.'s
#
#     96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))       (72·… and V/(12·l·h) without recomputation).
#
# **Predict first:** does the formula match what PyTorch's `FlopCounterMode` counts on our GPT
# exactly, or only roughly?

# %%
flops = lab.flops_table()
print(flops)
claim("FlopCounterMode and the formula agree exactly", all(row[1] == row[2] for row in flops.rows),
      ", ".join(f"{row[0]}: {row[1]:,}" for row in flops.rows))

# %% [markdown]
# Exactly: our model's attention computes the full s × s score matrix, as the formula assumes.
# (FlopCounterMode counts matmuls only; LayerNorms, softmax and GELU are not in either number.)
#
# ### Exercise 3: `flops_per_iteration`
#
# In `exercises/lab11_parallel3d.py`, this section's count, from the layer sizes.

# %%
check_your_work("lab11_parallel3d", "flops_per_iteration", picture=lab.picture("flops_per_iteration"))

# %% [markdown]
# ## 4. Memory per GPU, and two common mistakes
#
# A GPU of the first stage holds Ψ/(tp·pp) parameters' model states — tensor parallelism splits each
# layer and the pipeline splits the layers — with ZeRO dividing some of them by dp (Lab 10), plus
# activations. **A common mistake** writes the budget as "M_model/tp + M_act/pp ≤ M_device".
#
# **Predict first:** under 1F1B, how many layers' activations does the first stage hold as pp goes
# from 1 to 16?

# %%
acts = lab.activations_table()
print(acts)
claim("the first stage holds l = 80 layers' activations whatever pp is", {row[2] for row in acts.rows} == {80},
      f"pp = {[row[0] for row in acts.rows]}")

# %% [markdown]
# Always l = 80. The first stage runs pp micro-batches forward before its first backward, each
# through l/pp layers: pp · l/pp = l. Pipelining does not divide activation memory; recomputation
# does. The shortcut gets both terms wrong — parameters too big by the factor pp, activations too
# small by the same factor:

# %%
mistake = lab.memory_mistake_table()
print(mistake)
claim_close("the shortcut's parameters are about pp = 8 times too big", mistake.rows[0][2] / mistake.rows[0][1], 8,
            rel=0.05)
shrink = mistake.rows[0][3] / mistake.rows[0][4]
claim("and its activations pp = 8 times too small", abs(shrink - 8) < 1e-9, f"{shrink:.6g}")

# %% [markdown]
# ### Exercise 4: `fits_in_memory`
#
# In `exercises/lab11_parallel3d.py`, this section's back-of-envelope budget: model states of
# Ψ/(tp·pp) parameters with ZeRO, and min(m, pp) micro-batches of l/pp layers.

# %%
check_your_work("lab11_parallel3d", "fits_in_memory", picture=lab.picture("fits_in_memory"))

# %% [markdown]
# ## 5. The planner
#
# `labkit.planner.predict(model, cluster, plan, global_batch)` adds up an iteration from parts that
# each stand for something physical, on one GPU, for one micro-batch of b sequences:
#
# * **GEMMs, by shape.** cuBLAS gives each of the A100's 108 streaming multiprocessors (SMs) one
#   256 × 128 tile of the output at a time. A GEMM of m × n outputs is ⌈m/256⌉·⌈n/128⌉ tiles, run in
#   ⌈tiles/108⌉ *waves*; a partly empty last wave costs as much as a full one (*wave
#   quantisation*), and a partial tile as much as a whole one (*tile quantisation*). Then the
#   roofline of Lab 01: a GEMM whose FLOPs per byte fall below the device's ridge point waits on
#   memory, not on arithmetic. Plus a few microseconds per kernel.
# * **Memory-bound kernels** — LayerNorm, softmax, dropout, GELU, bias and residual additions, the
#   optimizer step — from the bytes they read and write, at the memory's bandwidth.
# * **Collectives, as NCCL runs them.** Inside a node, rings over NVLink at NCCL's measured bus
#   bandwidth. Across nodes, NCCL runs several rings at once, each leaving the node through another
#   network card: a DGX A100 has one HDR card (25 GB/s) per GPU, so a group with all 8 of a node's
#   GPUs drives all 8 cards. Ring or tree, whichever is faster for the size.
# * **The pipeline**: the stages' times through 1F1B or the interleaved schedule; when pp does not
#   divide the layers, the stages are cut by cost with the partition DP of exercise 5 (section 7), the embedding
#   counted on the first stage and the logits and loss on the last.
# * **Overlap, where the software overlaps**: PyTorch DDP reduces gradients during the last
#   backward (Lab 06's bound); Megatron-LM from late 2021 hides the backward tensor-parallel
#   all-reduces behind the weight-gradient GEMMs.
# * **Memory with headroom**: a plan fits when its bytes stay below 80 GiB · 95 % − 2 GiB = 74 GiB,
#   leaving room for the CUDA context, NCCL's buffers and the allocator's fragmentation.
#
# Two constants are fitted to published runs (section 6): the share of the per-SM peak a full GEMM
# wave reaches and the share of the memory bandwidth memory-bound kernels reach. Everything else is
# a data sheet, a published measurement, or a stated assumption.
#
# `search` tries every grid, micro-batch size, chunk count, ZeRO stage, recomputation setting and
# sequence parallelism, rejects what does not divide or fit (saying why), and sorts the rest. The
# widget runs it for a model, a GPU count and a batch, and draws the best plan on the cluster: pick
# "pp" or "dp" to see where those groups lie.

# %%
V.plan_widget()

# %% [markdown]
# **Predict first:** how many candidate plans for a 1T-parameter model on 4096 GPUs, and how long
# does the search take?

# %%
one_t = MEGATRON_2021_TABLE1[-1].model
table, result = lab.search_table(one_t, selene(4096), 4096)
print(table)
print(lab.rejection_counts(result))
print(lab.parts_table(result.best))
claim_between("a few thousand candidates", result.considered, 1000, 20000)
claim("the best plan keeps tensor parallelism inside a node", result.best.plan.tp <= 8, f"tp={result.best.plan.tp}")

# %% tags=["nbval-ignore-output"]
print(f"search time: {lab.search_seconds(one_t, selene(4096), 4096):.2f} s")

# %% [markdown]
# A few thousand candidates: divisors of the GPU count for tp and pp, times a handful of
# micro-batch sizes, chunk counts, ZeRO stages and recomputation settings. The count grows with
# the number of divisors, not with the GPU count, and each layer's cost is computed once for all
# plans that share its micro-batch and tp, so the search takes a second or two.
#
# ### 5.1 Each part, checked
#
# A cost model is only as good as its parts. Each is compared here with something measured on this
# machine or with a published measurement.
#
# **GEMMs by shape.** **Predict first:** one layer of the 18.4B model on 8-way tensor parallelism;
# which of its GEMMs wastes the most of the A100 at micro-batch 1?

# %%
shapes = lab.gemm_table()
print(shapes)
claim("waves: 210 tiles take 2 waves on 108 SMs and 3 on 100",
      (waves(A100_80GB, 210), waves(dataclasses.replace(A100_80GB, sms=100), 210)) == (2, 3),
      "NVIDIA/cutlass #335")
gemms = {(row[0], row[1]): row for row in shapes.rows}
claim("at micro-batch 1 att·V fills 44 % of its one wave; at 4 its two waves are 89 % full",
      (f"{gemms[1, 'att·V'][5]:.0%}", f"{gemms[4, 'att·V'][5]:.0%}") == ("44%", "89%"))
claim("the attention scores are memory-bound, fc1 compute-bound",
      gemms[1, "scores"][7] == "memory" and gemms[1, "fc1"][7] == "compute")

# %% [markdown]
# The attention products are the worst: their inner dimension is a head's 128, so each tile does
# little arithmetic for the bytes it writes (the scores are a 2048 × 2048 matrix per head), and
# att·V has too few tiles to fill the SMs. A larger micro-batch fills the waves — one reason
# Megatron-LM ran its small models at micro-batch 8-16.
#
# The same roofline, measured: `torch.mm` on one CPU thread, from a matrix-vector product (2 FLOPs
# per 4-byte weight: memory-bound) through tiny products (a few microseconds of call overhead) to
# square GEMMs. The device model's three constants (peak, memory bandwidth, per-call overhead) are
# fitted on every other shape and compared on the rest, next to a constant FLOP/s. (A CPU thread is
# one "SM" with no tiles, so this checks the roofline and the overhead, not the quantisation.)

# %% tags=["nbval-ignore-output"]
sweep = calibrate.check_sweep(calibrate.cpu_gemm_sweep())
print(lab.cpu_gemm_table(sweep))
print(f"median |error| on the checked half: roofline {sweep.model_error:.0%}, constant {sweep.constant_error:.0%}")
rates = {(s.m, s.n, s.k): s.rate for s in sweep.fitted + sweep.held}
modelled = {(s.m, s.n, s.k): s.flops / calibrate.model_seconds(sweep.device, s) for s in sweep.fitted + sweep.held}
for name, got in (("measured", rates), ("fitted roofline", modelled)):
    square = max(got[n, n, n] for n in (256, 384, 512))
    claim(f"{name}: matrix-vector and 16³ below half the square rate",
          max(got[1, 2048, 2048], got[16, 16, 16]) < 0.5 * square,
          f"{got[1, 2048, 2048] / 1e9:.1f}, {got[16, 16, 16] / 1e9:.1f} vs {square / 1e9:.1f} GFLOP/s")

# %% [markdown]
# Both regimes below the roofline's flat top are there, in the measurements and in the three-constant
# model: the matrix-vector product waits on memory and the tiny product on the call. A constant
# FLOP/s has neither; its error on the checked half is printed next to the roofline's (on a shared
# machine both vary from run to run: timings here are the best of interleaved rounds).
#
# **Memory-bound kernels.** The model times them by their bytes at the memory's bandwidth. On this
# CPU, at one thread:

# %% tags=["nbval-ignore-output"]
kernels = calibrate.cpu_kernels()
print(lab.kernel_table(kernels))
copy_rate = kernels["copy"][0] / kernels["copy"][1]
rate = {k: b / t for k, (b, t) in kernels.items()}
claim("the addition moves its bytes at more than a quarter of copy's rate", rate["add"] > 0.25 * copy_rate,
      f"{rate['add'] / copy_rate:.2f}")
claim("dropout is the slowest, below half the addition's rate", min(rate, key=rate.get) == "dropout"
      and rate["dropout"] < 0.5 * rate["add"], f"{rate['dropout'] / copy_rate:.2f} of copy")

# %% [markdown]
# The addition runs at the same order of bytes per second as the copy (close to it on an idle
# machine), as the model assumes of such kernels. LayerNorm, softmax
# and GELU land lower here and vary from run to run, and dropout is far slower: one CPU thread
# computes reductions, exp, erf and random numbers more slowly than it moves bytes. An A100 has
# 19.5 TFLOP/s of float32 arithmetic for 2 TB/s of memory, almost 10 FLOPs per byte, and these
# kernels do a few per 16-bit element; the fitted memory efficiency of section 6 is their average
# rate there.
#
# **Collectives.** On the A100 side the network model is set from two published nccl-tests results
# (one node; one card) and checked against two others (several cards across nodes):

# %%
nccl = lab.nccl_table()
print(nccl)
checks = [row for row in nccl.rows if row[4] == "check"]
claim("the model is within 15 % of both multi-node results", all(abs(row[3]) < 0.15 for row in checks),
      ", ".join(f"{row[2]:.0f} vs {row[1]:.0f} GB/s" for row in checks))

# %% [markdown]
# The model says what a ring can do; the two clusters reached 88-90 % of it. And on real ranks:
# labkit's ring all-reduce (Lab 05) on 4 gloo ranks, next to the planner's ring model fitted
# through the two largest buffers, where the bytes term dominates. **Predict first:** four times
# the bytes, how many times the time?

# %% tags=["nbval-ignore-output"]
gloo_times, gloo_net = calibrate.gloo_ring(4)
print(lab.gloo_table(gloo_times, gloo_net, 4))
big = gloo_times[16 << 20] / gloo_times[4 << 20]
claim("4× the bytes (4 → 16 MiB) take well over 1.5× the time", big > 1.5, f"{big:.2f}×")

# %% [markdown]
# Usually close to four times on a quiet machine: at these sizes the ring's time is its bytes over
# the link's bandwidth, plus a fixed latency per step. Below a megabyte the measurements scatter:
# four processes on two cores take turns, so a small all-reduce can wait for a process the
# scheduler has parked — the latency here is milliseconds, not NVLink's microseconds — and on a
# busy machine even the large sizes move by tens of percent from run to run.
#
# **One layer, against a published measurement.** Korthikanti et al. (2022) timed one layer of a
# 22B-parameter GPT on 8 A100s (tp = 8, micro-batch 4) under five settings. **Predict first:** full
# recomputation runs the forward once more; does it add half of forward + backward?

# %%
layers, worst = lab.layer_table()
print(layers)
claim_between("every time within 12 % of the published one", worst, 0, 0.12)
full, base = layers.rows[2], layers.rows[0]
claim_between("full recomputation adds about 40 %, not 50 %", (full[2] + full[4]) / (base[2] + base[4]) - 1,
              0.35, 0.45)

# %% [markdown]
# About 40 %: Megatron-LM of 2022 overlaps the backward all-reduces with the weight-gradient GEMMs,
# so the backward costs less than twice the forward, and the recomputed forward is a larger share
# of the rest — the paper measures 39 %. Sequence parallelism splits LayerNorm and dropout over the
# 8 ranks, and both the paper and the model see the forward get faster.
#
# **Uneven stages.** BLOOM-176B put 70 layers on 12 stages: 5, ten of 6, and 5, with the embedding
# on the first stage and the logits on the last. The pipeline formula (the slowest stage m times,
# the others once) next to `labkit.pipeline.simulate` with each stage's forward and backward times:

# %%
stages, worst = lab.pipeline_check()
print(stages)
claim_between("the formula is within 0.1 % of the simulator", worst, 0, 0.001)

# %% [markdown]
# **Overlap.** A run with PyTorch DDP (the 1.7B model of section 6): the planner's exposed
# gradient time, from Lab 06's bound over 25 MiB buckets, next to Lab 06's simulator replaying the
# same buckets:

# %%
exposed, simulated, plain = lab.overlap_check()
print(f"exposed: planner {exposed * 1e3:.2f} ms, simulator {simulated * 1e3:.2f} ms; "
      f"the all-reduce alone takes {plain * 1e3:.1f} ms")
claim("the planner's exposed time is the simulator's", abs(exposed - simulated) <= 1e-9 * simulated,
      f"{exposed * 1e3:.4f} vs {simulated * 1e3:.4f} ms")

# %% [markdown]
# ## 6. Checked against published runs
#
# Narayanan et al. (2021) trained GPT models from 1.7B to 1T parameters on 32 to 3072 A100s (8 per
# node) and published the throughput of each (their Table 1). The model's two constants are fitted
# to these ten rows, each at its own (tp, pp, dp) with full recomputation and the micro-batch the
# model finds fastest. Next to it: the best constant — the one TFLOP/s per GPU whose median error is
# smallest — and the rank correlation between the model and the paper.
#
# **Predict first:** the table's throughput rises from 135-142 TFLOP/s for the small models to 163
# for the largest. Does a model built from GEMM shapes, bytes and links follow that trend?

# %%
table1, t1, t1_rows = lab.megatron_table()
print(table1)
print(f"model: Spearman {t1.spearman:+.2f}, median |error| {t1.median:.1%}, worst {t1.worst:.1%}; "
      f"best constant {t1.constant:.0f} TF: median |error| {t1.constant_median:.1%}")
print(f"fitted on these rows: gemm_efficiency {A100_80GB.gemm_efficiency} ({A100_80GB.gemm_efficiency * 312:.0f} "
      f"TFLOP/s per wave), hbm_efficiency {A100_80GB.hbm_efficiency} ({A100_80GB.hbm_efficiency * 2.039:.2f} TB/s)")
claim_between("the model follows the table's order (Spearman >= 0.6)", t1.spearman, 0.6, 1)
claim("its median error is below the best constant's", t1.median < t1.constant_median,
      f"{t1.median:.1%} vs {t1.constant_median:.1%}")
claim("the largest models run fastest in the model too",
      max(t1_rows, key=lambda r: r.paper.tflops_per_gpu).run.params_billion > 500)
claim("the 18.4B row dips below its smaller neighbours, as in the paper",
      t1_rows[3].paper.tflops_per_gpu < min(r.paper.tflops_per_gpu for r in t1_rows[:3]))
share = {r.run.label: {k: v / r.paper.step_time for k, v in r.paper.parts.items()} for r in t1_rows}
claim("18.4B spends the largest share on tp all-reduces and the smallest on GEMMs",
      max(share, key=lambda k: share[k]["tp"]) == "18.4B" == min(share, key=lambda k: share[k]["gemm"]),
      f"tp {share['18.4B']['tp']:.0%}, GEMM {share['18.4B']['gemm']:.0%}")
claim("1.7B spends the largest share on memory-bound kernels", max(share, key=lambda k: share[k]["elementwise"])
      == "1.7B", f"{share['1.7B']['elementwise']:.0%}")

# %% [markdown]
# Yes, and for the reasons built in. The smallest model spends over a quarter of its time in
# memory-bound kernels: with 24 heads of a 2048 × 2048 score matrix each, softmax and dropout move
# more bytes per FLOP the smaller the hidden size. The 18.4B row dips because 8-way tensor
# parallelism on a hidden size of only 6144 gives it the most all-reduce time per FLOP of any row
# and the smallest share of time in GEMMs. The largest models are almost all GEMM. A constant cannot
# follow any of it (its error grows to 16 % on the largest models).
#
# Fitting two constants to ten rows proves little by itself. The test is runs the model was not
# fitted to: Korthikanti et al. (2022) on the same machine with newer software, with full
# recomputation and with sequence parallelism plus selective recomputation; BLOOM-176B on another
# cluster (4 network cards per node, 70 layers on 12 stages); and MT-NLG 530B with DeepSpeed's
# pipeline. Each as published, next to the Table 1 constant:

# %%
held, ho, ho_rows = lab.held_out_table()
print(held)
print(f"model: Spearman {ho.spearman:+.2f}, median |error| {ho.median:.1%}, worst {ho.worst:.1%}")
print(f"the best constant for these runs themselves ({ho.constant:.0f} TF): median |error| {ho.constant_median:.1%}")
claim("every held-out run within 20 %", ho.worst < 0.20, f"worst {ho.worst:.1%} of {len(ho_rows)} runs")
claim("the model's median error beats even a constant fitted to these runs", ho.median < ho.constant_median,
      f"{ho.median:.1%} vs {ho.constant_median:.1%}")
newer = [r.error for r in ho_rows if r.run.software.name == "Megatron-LM 2022"]
deepspeed = [r.error for r in ho_rows if r.run.name.startswith("MT-NLG")]
claim("it has 7 of 8 Megatron-LM 2022 runs slower than they ran, MT-NLG faster",
      sum(e < 0 for e in newer) >= 7 and min(deepspeed) > 0.10,
      f"{min(newer):+.0%}..{max(newer):+.0%}; {min(deepspeed):+.0%}..{max(deepspeed):+.0%}")

# %% [markdown]
# All twelve within 20 %, and the errors are not noise: the model knows the hardware and what the
# software states (overlaps, sequence parallelism), not how fast each framework's kernels were. Its
# constants come from the 2021 code; the 2022 code was faster (by up to 11 %), DeepSpeed's pipeline
# engine slower (by 14-19 %).
#
# The paper's findings, in the model. First, tensor parallelism beyond a node. **Predict first:**
# tp = 16 puts each all-reduce across two nodes. How much throughput does it cost?

# %%
sweep162 = lab.tp_sweep_table()
print(sweep162)
tf = {row[0]: row[-1] for row in sweep162.rows}
claim("tp = 8, a whole node, is best", max(tf, key=tf.get) == "8×8", f"{tf['8×8']:.0f} TFLOP/s")
claim_between("tp = 16 costs 5-25 %, not half", 1 - tf["16×4"] / tf["8×8"], 0.05, 0.25)

# %% [markdown]
# Best at tp = 8, a whole node, and tp = 16 costs about an eighth — not half. A tp group of 16 has
# all 8 GPUs of each of its two nodes, so NCCL's rings leave through all 8 network cards: 192 GB/s
# of bus bandwidth against NVLink's 232, not one card's 24. What tp = 16 really loses is elsewhere
# in the table: its all-reduces carry the same bytes for half the FLOPs per GPU, and LayerNorm and
# dropout run whole on every rank, so their share doubles. Second, the pipeline bubble at small
# batches, and what interleaving (v = 2 chunks per rank) buys:

# %%
bubbles = lab.batch_table()
print(bubbles)
claim_between("with 12 micro-batches on 12 stages almost half the time is bubble", bubbles.rows[0][1], 0.4, 0.5)
gains = [row[4] for row in bubbles.rows]
claim("interleaving gains most at the smallest batch, less and less after",
      gains == sorted(gains, reverse=True) and gains[0] > 0.2, f"{gains[0]:+.0%} .. {gains[-1]:+.0%}")

# %% [markdown]
# With 12 micro-batches on 12 stages almost half the time is bubble; interleaving cuts it and gains
# about 30 %, a gain that fades as the batch grows — the paper's figure shows the same shape.
#
# ## 7. The cluster around a job
#
# The planner assumed nodes of 8 GPUs with fast links inside and slower ones between. Real
# clusters have a shape (a topology), run many jobs at once, and hand each job whatever GPUs are
# free. `labkit.cluster` measures the choices this brings on small models of a cluster.
#
# **Topology.** Diameter (longest shortest path), degree (links per node) and bisection width (the
# fewest links whose cut splits the nodes into two equal halves), computed from each graph by
# search and next to their closed forms. **A common mistake** gives a ring a bisection of 1 link:
# cutting a ring in two always cuts 2.

# %%
topo = CL.topology_table()
print(topo)
rings = [row for row in topo.rows if row[0].startswith("ring")]
claim("a ring's bisection is 2 links, whatever its size", {row[6] for row in rings} == {2},
      ", ".join(row[0] for row in rings))

# %% [markdown]
# **Hierarchical all-reduce.** Inside a node, reduce-scatter; between nodes, all-reduce the 1/g
# shard each rank holds with its peers in the other nodes; inside the node again, all-gather. Each
# rank then sends only 1/g of the data over the slow links. On 4 real ranks as 2 "nodes" of 2:

# %%
hier = CL.hierarchical_table()
print(hier)
claim("both algorithms give dist.all_reduce's sum exactly", all(row[3] == 0 for row in hier.rows))
claim("the bytes each rank sends equal the formulas", all(row[4] == row[6] and row[5] == row[7] for row in hier.rows))
across = {name: sum(row[5] for row in hier.rows if row[0] == name) for name in ("hierarchical", "flat ring")}
claim("the hierarchical ranks send fewer bytes across nodes in all", across["hierarchical"] < across["flat ring"],
      f"{across['hierarchical']} vs {across['flat ring']} bytes")

# %% [markdown]
# The α–β model with two kinds of link (Lab 05's, once for NVLink at NCCL's measured 232.5 GB/s and
# once for an HDR card at 24 GB/s). The flat all-reduce is NCCL's: one ring per network card, all
# running at once. **Predict first:** with a card per GPU, which wins for a 1 GB gradient?

# %%
allreduce = CL.all_reduce_model_table()
print(allreduce)
per_gpu = [row for row in allreduce.rows if row[1] == "per GPU"]
per_node = [row for row in allreduce.rows if row[1] == "per node"]
claim("a card per GPU: hierarchical wins at 64 KB, NCCL's flat rings at 1 GB, on every shape",
      {row[6] for row in per_gpu if row[2] == "64 KB"} == {"hierarchical"}
      and {row[6] for row in per_gpu if row[2] == "1 GB"} == {"flat"})
claim_between("the flat rings' margin at 1 GB", max(1 / row[5] for row in per_gpu if row[2] == "1 GB"), 1.1, 1.6)
claim("one card per node: hierarchical wins up to 16 MB on every shape",
      {row[6] for row in per_node if row[2] != "1 GB"} == {"hierarchical"})

# %% [markdown]
# With a card per GPU the hierarchical algorithm wins small messages: 2(N − 1) slow latency steps
# instead of the flat ring's 2(p − 1). But its three phases run one after another, while NCCL's
# flat rings keep NVLink and all 8 cards busy at once, so above 100-600 MB the flat rings win, by
# up to 1.5×. (**A common claim** — that the hierarchical all-reduce wins at every size, several
# times over — comes from modelling the flat all-reduce as one ring through one card.) With one
# card per node the flat ring pushes all its bytes through that card, and the hierarchical
# algorithm wins until very large messages on many nodes.
#
# **Placement.** Which ranks share a node decides how many bytes cross the network. Seen as graph
# partitioning — ranks are vertices, bytes between them are edge weights, nodes are parts of fixed
# size — the Kernighan–Lin heuristic swaps pairs of ranks between parts while a swap reduces the
# cut.

# %%
placement = CL.placement_table()
print(placement)
tp_inner = next(row for row in placement.rows if row[0] == "tp,dp,pp")
claim("ranks in order, tp innermost, cross 22 bytes against the optimum of 20",
      (tp_inner[1], tp_inner[5]) == (22.0, 20.0))

# %% [markdown]
# Ranks in order with tp innermost (the first row's naive column) come close, 22 bytes against the
# optimum of 20: a rule of thumb, not a theorem — with dp = 3 a dp group cannot sit whole in a node
# of 4. Kernighan–Lin finds the optimum from most starting points, even random ones.
#
# **Scheduling and fragmentation.** A cluster shared by many jobs: each asks for some GPUs and waits
# in a queue. Free GPUs scattered over nodes may not serve a job that wants a whole node — they are
# *stranded*. Three ways to choose where a job goes:

# %%
print(CL.scheduler_table())

# %% [markdown]
# No policy wins everywhere. When a job spread over more nodes than it needs runs as fast as one
# packed tightly (penalty 0), best-fit strands the fewest GPUs and waits least. When spreading
# costs 25% (penalty 0.25), topology-aware placement — small jobs inside one node, big jobs on whole
# nodes — waits least, although it strands more GPUs.
#
# **Load balancing.** Uneven work makes every synchronous step wait for the slowest worker.
# Graham's bound says any greedy list schedule finishes within (2 − 1/P) of the optimum; work
# stealing finishes in T₁/P + O(T∞) expected time (Blumofe and Leiserson) — **a common mistake**
# calls work stealing "2-competitive", which is Graham's bound for greedy list scheduling.

# %%
balance = CL.balance_table()
print(balance)
ratio = {row[0]: row[3] for row in balance.rows}
claim_between("static assignment pays up to 2.4× the lower bound", max(ratio["round-robin"], ratio["block"]), 2.3, 2.5)
claim("LPT nearly reaches the bound; work stealing lands between it and static",
      ratio["LPT, longest first"] < 1.01 < ratio["work stealing"] < min(ratio["round-robin"], ratio["block"]))

# %% [markdown]
# Static assignments pay for the skew (up to 2.4× the lower bound); taking the longest tasks first
# (LPT) nearly reaches it; work stealing, which needs no knowledge of task times, lands in between.
#
# **Auto-parallel search on a chain of layers.** Cutting the layers into pipeline stages so the
# slowest stage is as fast as possible is a small dynamic programme. On the times of our GPT's
# pieces, measured here:

# %% tags=["nbval-ignore-output"]
costs = CL.measured_layer_costs()
print(CL.stage_partition_table(costs, stages=4))

# %% [markdown]
# ### Exercise 5: `partition_stages`
#
# In `exercises/lab11_parallel3d.py`, cut a chain of layers into pipeline stages so that the
# slowest stage is as fast as possible, by dynamic programming — what the table above did with
# ours on the measured times.

# %%
check_your_work("lab11_parallel3d", "partition_stages", picture=lab.picture("partition_stages"))

# %% [markdown]
# The same idea chooses, layer by layer, how to split each matrix — replicated, by columns, or by
# rows — so that communication plus the conversions between layouts costs least (the idea behind
# Alpa's intra-operator pass). For an MLP it finds Megatron's column-then-row pairing:

# %%
print(CL.sharding_table())

# %% [markdown]
# ### 7.1 The network under the job: several paths, worms, dead links
#
# **Several paths: striping and link balancing.** Between hosts of different pods a k-ary fat tree
# offers (k/2)² shortest paths, one through each core switch. Switches usually pick one per flow
# from a hash of its addresses (ECMP), so two flows can land on one link while another idles.
# *Link balancing* puts each flow on the path whose busiest link is least loaded so far;
# *striping* splits every flow over all the paths. The traffic: a random permutation on a fat tree
# of 16 hosts, every host sending one unit to one other host. With links of one unit per unit of
# time, the transfer lasts as long as its busiest link's load.
#
# **Predict first:** a fat tree has full bisection bandwidth. Does every permutation then finish in
# one unit of time, whatever the routing?

# %%
from labkit.cluster import routing, scheduler, topology

stripe = CL.striping_table()
print(stripe)
sr = {row[0]: row for row in stripe.rows}
claim("striping loads no link above 1 in any of the 200 permutations: full bisection bandwidth",
      sr["stripe"][2] == 1.0 and sr["stripe"][3] == 0.0)
claim_between("ECMP hashing: the busiest link carries 2.6 flows on average", sr["hash"][1], 2.5, 2.8)
claim("... and more than one in every permutation tried", sr["hash"][3] == 100.0)
claim_between("balancing flow by flow: 1.7 on average", sr["balanced"][1], 1.6, 1.9)
claim("... and 2 at worst", sr["balanced"][2] == 2.0)

# %% [markdown]
# Full bisection bandwidth is a promise about the wires; only a routing that spreads the load
# keeps it. Hashing whole flows works for thousands of small flows; training moves a few huge
# ones, and one collision halves a transfer's speed. Hence collective libraries split a transfer
# over several connections, and switches that route adaptively — link balancing, done per packet.
#
# **Worm-hole routing.** A store-and-forward switch receives a whole message before it sends it on:
# h hops of L flits (flow-control units) cost h·(r + L) cycles, r to route the message at each hop.
# A worm-hole switch routes the *head* flit and lets the body follow it link by link, each switch
# holding one flit: h·(r + 1) + L − 1. `routing.simulate_flits` moves the flits cycle by cycle.
#
# **Predict first:** 32 flits over 8 hops, 1 cycle to route: how many times faster is worm-hole?

# %%
flits = CL.flit_table()
print(flits)
claim("the simulation equals both closed forms at every hop count",
      all(row[1] == row[2] and row[3] == row[4] for row in flits.rows), f"{len(flits.rows)} rows")
claim_close("8 hops: worm-hole is 5.6 times faster", flits.rows[-1][5], 5.6, abs_=0.05)
stuck = {m: routing.simulate_flits(8, 32, m, 1, blocked_at=6, blocked_cycles=20)
         for m in ("wormhole", "store_and_forward")}
claim("blocked 20 cycles at the 7th switch, each arrives 20 cycles late",
      [stuck[m]["cycles"] for m in stuck]
      == [routing.wormhole_cycles(8, 32, 1) + 20, routing.saf_cycles(8, 32, 1) + 20])
claim("... but the blocked worm holds all 6 links behind its head; store-and-forward holds none",
      (stuck["wormhole"]["links_held"], stuck["store_and_forward"]["links_held"]) == (6, 0))

# %% [markdown]
# Worm-hole routing makes the latency almost independent of the distance, with tiny buffers: it
# is how supercomputer networks and GPU fabrics forward. The price shows when a worm's head is
# blocked: it keeps every link it spans, and other messages that need them wait too (cut-through
# switching, common in Ethernet and InfiniBand switches, buffers the blocked message instead).
#
# **A dead link.** One link of the topology fails and the traffic is re-routed on the shortest
# paths that remain. **A common mistake** says a ring "tolerates failures": a ring with a dead link
# still connects every node, but it has become a line. **Predict first:** one of the 32 links of
# a 4×4 torus dies. What share of its bisection is lost, and how much longer does an all-to-all
# take?

# %%
dead = CL.dead_link_table()
print(dead)
dl = {row[0]: row for row in dead.rows}
claim("the ring loses half its bisection (2 -> 1); its diameter grows from 4 to 7",
      dl["ring(8)"][1:5] == (4, 7, 2, 1))
claim("... and its all-to-all takes twice as long", dl["ring(8)"][6] == 2.0)
claim("the torus (32 links) loses 1 link of its 8-link bisection (12.5 %), its diameter unchanged",
      dl["torus 4×4"][1:6] == (4, 4, 8, 7, 12.5) and len(topology.torus2d(4, 4).links()) == 32)
claim_between("... yet its all-to-all slows by a quarter: traffic piles up beside the hole", dl["torus 4×4"][6],
              1.2, 1.3)
claim_close("the fat tree: 12.5 % of the bisection, all-to-all 1.2 times slower", dl["fat tree k=4"][6], 1.2, rel=1e-3)

# %% [markdown]
# The bisection is not the whole story: a torus that loses one link in eight slows an all-to-all
# by a quarter, because the shortest paths around the hole all squeeze through the links next to
# it. That is why such networks route adaptively around failures (also over longer paths), and why
# a ring collective with a dead link is better restarted as a new ring than routed around the gap.
#
# ### 7.2 Packing, rebalancing, moving
#
# **Multi-resource bin packing.** A job asks for GPUs, CPU cores and memory; it fits a node only if
# every resource fits. `labkit.cluster.packing` places 12 random jobs on nodes of 8 GPUs, 64 cores
# and 512 GB with first fit (in arrival order) and first-fit decreasing (FFD: largest first), and
# finds the fewest nodes by branch and bound, over 200 seeds.
#
# **Predict first:** counting GPUs alone, the jobs need 4.5 nodes on average. With cores and
# memory too? Does FFD still find the optimum?

# %%
pack, free = CL.packing_table()
print(pack)
print("free on the nodes FFD uses:", ", ".join(f"{k} {100 * v:.0f} %" for k, v in free.items()))
pk = {row[0]: row for row in pack.rows}
claim("GPUs alone (1, 2, 4 or 8 per job): FFD is optimal in all 200 cases",
      pk["GPUs only: FFD"][2] == 0.0 and pk["GPUs only: FFD"][1] == pk["GPUs only: optimum"][1])
claim_between("three resources need about a fifth more nodes", pk["optimum"][1] / pk["GPUs only: optimum"][1],
              1.18, 1.24)
claim("FFD misses the optimum in 7.5 % of cases, first fit in 22 %",
      (pk["FFD, largest share"][2], pk["first fit"][2]) == (7.5, 22.0))
claim_close("at worst FFD uses a third more nodes", pk["FFD, largest share"][3], 4 / 3, rel=1e-3)
claim("the lower bound (total demand / capacity) is not the optimum in a third of the cases",
      30 <= pk["lower bound"][2] <= 40, f"{pk['lower bound'][2]:g} %")
claim("on the nodes FFD uses, about a quarter of each resource stays free", all(0.2 <= v <= 0.3 for v in free.values()),
      ", ".join(f"{v:.2f}" for v in free.values()))

# %% [markdown]
# With one resource and job sizes that divide each other (1, 2, 4, 8 GPUs on nodes of 8) FFD is
# always optimal. A second and third resource break that: a node can run out of memory with GPUs
# to spare, so on the nodes FFD uses about a quarter of each resource stays free. Production
# schedulers weigh the resources into one score (dominant shares, dot products of demand and free
# capacity) — heuristics all, measured against the optimum the same way.
#
# **Threshold rebalancing.** Work that drifts — a mesh that refines, experts that receive more
# tokens — unbalances synchronous steps, and every step waits for the most loaded worker.
# Rebalancing costs a pause (here half a step: moving state). A threshold rule rebalances only when
# the largest load exceeds the mean by more than a threshold θ; each step then runs with max/mean
# at most 1 + θ.
#
# **Predict first:** which θ gives the shortest run — 0 (rebalance whenever the loads differ),
# never, or something in between?

# %%
reb = CL.rebalance_table()
print(reb)
rb = {row[0]: row for row in reb.rows}
claim("no step ran with max/mean above 1 + threshold",
      all(row[5] <= 1 + float(row[0]) + 1e-12 for row in reb.rows if row[0] != "never"))
claim("the best threshold is 0.3", min(reb.rows, key=lambda row: row[4])[0] == "0.3")
claim_between("rebalancing at every step costs 19 % more", rb["0"][6], 1.17, 1.21)
claim_between("never rebalancing: 6.6 times longer", rb["never"][6], 6.4, 6.8)
claim("... as the loads drift apart: a step ran with max/mean above 10", rb["never"][5] > 10, f"{rb['never'][5]:.1f}")

# %% [markdown]
# Both extremes lose: always rebalancing pays the pause at every step, never rebalancing lets the
# slowest worker drift further and further ahead. A threshold bounds the imbalance (1 + θ) and pays
# only when it is crossed; the best θ balances the two costs, and it moves with the price of a
# rebalance and the speed of the drift (try `CL.rebalance_table(rebalance_s=0.1)`).
#
# **Data co-location.** A job reads its input fastest from a node that holds a copy. When it
# reaches the head of the queue, the free nodes may hold none; *delay scheduling* (Zaharia et al.,
# 2010) lets it wait for a few more nodes to be released, and takes the first one with a copy. With
# r copies on N nodes, f of them free, and up to D releases waited, the chance to run beside the
# data is 1 − C(N−r, f)/C(N, f) · C(N−f−r, D)/C(N−f, D). **Predict first:** 3 copies, 100 nodes,
# 5 free. How often is a free node local? After waiting for up to 40 releases?

# %%
loc = CL.locality_table()
print(loc)
lc = {row[0]: row for row in loc.rows}
claim("the formula equals the Monte Carlo within 3 standard errors at every wait",
      all(abs(row[1] - row[2]) <= 3 * row[3] for row in loc.rows), f"{len(loc.rows)} waits")
claim("local right away 14 % of the time; after up to 40 releases 84 %",
      (round(lc[0][1], 2), round(lc[40][1], 2)) == (0.14, 0.84))
claim_between("the mean wait: about 11 s among 1-minute jobs", lc[40][5], 10, 12, unit=" s")
claim_between("... and about 11 minutes among 1-hour jobs", lc[40][6] / 60, 10, 12, unit=" min")

# %% [markdown]
# Releases come every duration/N on average, so the same wait costs seconds among short tasks and
# minutes among hour-long jobs. Delay scheduling suits clusters of short tasks (data analytics, where
# it was proposed); training jobs, few and long, instead copy or cache their data where they run.
#
# **Beyond this course: dynamic placement.** Schedulers also *move* running jobs — to defragment
# the cluster, to follow their data, to make room for a large job. Whether a move pays depends on a
# real cluster's trace (job sizes, lengths, arrivals), which one machine cannot stand in for; any
# number we printed would be an assumption, not a measurement. The parts of the trade-off are here:
# Lab 12 prices the checkpoint and restart that a move costs, the scheduler above the stranded GPUs
# a move could reclaim, and the placement table the bytes a worse placement sends across nodes.
#
# **Worked problems on 7.1–7.2.**
#
# **Problem A.** A message of 64 flits crosses 5 hops; each router needs 2 cycles to route the head.
# How many cycles with store-and-forward, and with worm-hole routing?
#
# **Problem B.** A ring of 12 nodes loses one link. Its bisection width and diameter now?
#
# **Problem C.** A data set has 2 copies on a cluster of 100 nodes; 10 random nodes are free. What
# is the chance that one of them holds a copy?
#
# <details><summary>Answers</summary>
#
# A: 5·(2 + 64) = **330** cycles; 5·(2 + 1) + 64 − 1 = **78**.
# B: it is a line of 12 nodes: bisection **1**, diameter **11**.
# C: 1 − C(98, 10)/C(100, 10) = 1 − (90·89)/(100·99) ≈ **0.191**.
#
# </details>

# %%
# The answers above, computed from the simulations and the graph (the tests check the same rules).
line12 = routing.without_links(topology.ring(12), [(0, 11)])
answers_71 = (routing.simulate_flits(5, 64, "store_and_forward", 2)["cycles"],
              routing.simulate_flits(5, 64, "wormhole", 2)["cycles"],
              topology.bisection_width(line12), topology.diameter(line12),
              round(scheduler.local_probability(100, 2, 10), 3))
print(answers_71)
claim("Problems A-C as answered", answers_71 == (330, 78, 1, 11, 0.191))

# %% [markdown]
# ## 8. Exercises, where they are taught
#
# Each exercise sits at the end of the section that teaches it, with its check-your-work cell:
# `rank_coords` and `group_ranks` in section 1, `flops_per_iteration` in section 3,
# `fits_in_memory` in section 4, and `partition_stages` in section 7. Grade them all with
# `python -m labkit.grade --lab 11`.
#
# ## 9. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** The 1T model (l = 128, h = 25 600, s = 2048, V = 51 200) with full recomputation,
# batch 3072, on 3072 GPUs at Megatron's measured 163 TFLOP/s per GPU. FLOPs per iteration, and
# seconds per iteration?
#
# <details><summary>Answer</summary>
#
# 96·3072·2048·128·25 600²·(1 + 2048/153 600 + 51 200/52 428 800) = **5.14·10¹⁹ FLOPs** (the last
# denominator is 16·l·h = 16·128·25 600); divided by 3072 · 163·10¹² FLOP/s: **103 s** per
# iteration.
#
# </details>
#
# **Problem 2.** GPT-3 175B (l = 96, h = 12 288) on 1024 A100-80GB as tp = 8, pp = 8, dp = 16,
# batch 1536, micro-batch 1, full recomputation, no ZeRO. Memory per GPU?
#
# <details><summary>Answer</summary>
#
# About 175·10⁹/64 = 2.7·10⁹ parameters per GPU, 16 bytes each: 44 GB = 41 GiB of model states
# (1 GiB = 2³⁰ bytes, 7 % more than 10⁹), a little more on the first and last stages, which hold
# the embedding: 42 GiB. With full recomputation only the layer inputs stay, a few GiB: **about
# 47 GiB** — it fits in the 74 GiB an 80 GiB GPU leaves after its headroom.
#
# </details>
#
# **Problem 3.** A pipeline of 8 stages with 64 micro-batches. What fraction of the iteration is
# bubble under 1F1B, and under interleaving with 2 chunks per rank?
#
# <details><summary>Answer</summary>
#
# (p − 1)/(m + p − 1) = 7/71 = **9.9%**; interleaved, the bubble is (p − 1)/(v·m) of the ideal time,
# 7/128, i.e. 7/135 = **5.2%** of the iteration.
#
# </details>
#
# **Problem 4.** A tp group of 16 on DGX A100 nodes of 8 GPUs (8 HDR cards each). Its all-reduces
# cross the network: at what bus bandwidth, against NVLink's 232.5 GB/s inside a node?
#
# <details><summary>Answer</summary>
#
# The group has 8 members on each of its 2 nodes, so NCCL runs its rings through all 8 cards of a
# node: min(232.5, 8 × 24) = **192 GB/s** — a fifth slower than NVLink, not the 24 GB/s of one card.
# Section 6 shows what tp = 16 loses: about an eighth of its throughput, mostly to thinner GEMMs and
# LayerNorms repeated on 16 ranks rather than to the network.
#
# </details>
#
# **Problem 5.** BLOOM-176B put its 70 layers on 12 stages as 5, 6, …, 6, 5, counting the embedding
# as stage work. With a vocabulary of 250 880 and h = 14 336, why do the first and last stages get
# fewer layers?
#
# <details><summary>Answer</summary>
#
# The last stage also computes the logits, T × h · h × V: per token 2hV forward FLOPs against a
# layer's 24h²(1 + s/(6h)), about **1.4 layers' forward**; with its backward and no recomputation
# (a layer with full recomputation runs its forward twice) it costs about one layer. The embedding
# lookup costs little time but holds the same V × h weights. Any stage with 6 layers plus either
# end is slower than 6 layers alone, so both ends get 5. BigScience counted each embedding as a
# layer; the planner's partition DP, timing each piece (the head 0.97 of a layer, the embedding
# 0.01), finds **the same split**.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
answers = lab.worked_answers()
print(f"{answers['1T flops']:.3e} FLOPs, {answers['1T seconds per iteration']:.0f} s; "
      f"175B: {answers['175B model states GB']:.1f} GB = {answers['175B model states GiB']:.1f} GiB of states, "
      f"{answers['175B on 1024: memory 8x8x16']:.0f} GiB in all")
print(f"bubble {answers['bubble p=8 m=64']:.1%}; tp=16 bus {answers['tp16 bus GB/s']:.0f} GB/s")
claim_close("the logit term is V/(16·l·h)", answers["1T last term"], 51200 / (16 * 128 * 25600))
claim_between("5.14e19 FLOPs per iteration", answers["1T flops"], 5.135e19, 5.145e19)
claim_between("103 s per iteration", answers["1T seconds per iteration"], 102.5, 103.5)
claim("44 GB is 41 GiB of model states; 47 GiB in all",
      (round(answers["175B model states GB"]), round(answers["175B model states GiB"]),
       round(answers["175B on 1024: memory 8x8x16"])) == (44, 41, 47))
claim_close("the bubble is 7/71 of the iteration", answers["bubble p=8 m=64"], 7 / 71)
claim_close("a tp group of 16 on two nodes gets 192 GB/s", answers["tp16 bus GB/s"], 192)
claim_close("BLOOM's logits are 1.4 layers' forward", answers["BLOOM logits / layer forward"], 1.42, rel=0.01)
claim("the planner's partition DP finds BLOOM's published split",
      answers["BLOOM split"] == (5,) + (6,) * 10 + (5,), str(answers["BLOOM split"]))

# %% [markdown]
# ## 10. Which parallelism when: a decision guide
#
# The planner answers one question at a time: this model, this cluster, this batch. Practitioners
# start from rules of thumb instead — "data parallel until the model stops fitting, then shard,
# then split the layers". Here are five questions, from a model that fits one GPU to sequences too
# long for any split so far. Each rule is checked by running the planner of section 5 on the case
# (with ZeRO stages 0–3 allowed, so sharding competes with splitting), and `describe` names the
# best plan's parallelism in words:

# %%
from labkit.planner import Plan, why_not
from labkit.planner.search import search
from labkit.planner.grid import worst_span
from labkit.planner.guide import CASES, describe
from labkit.planner.memory import GiB, memory_per_gpu

for c in CASES:
    print(f"{c.name:25s} {c.model.params / 1e9:5.1f}B, batch {c.global_batch:4d}: {c.rule}")
show(describe)

# %% [markdown]
# **Predict first:** for each case, which kinds of parallelism would you use, and would you let a
# tensor-parallel group leave its node?

# %%
guide = lab.guide_search()
print(lab.guide_table(guide))
case = {c.name: c for c in CASES}

# %% [markdown]
# **1. The model states fit one GPU → data parallelism.** A 1.3B model needs 16 bytes × 1.3 billion
# = 20 GiB of model states: every GPU can hold a full replica, so each GPU takes its own share of
# the batch and only the gradients move.

# %%
c, r = case["1.3B on 8 GPUs"], guide["1.3B on 8 GPUs"]
states = 16 * c.model.params
ddp = [p for p in r.plans if p.plan.zero_stage == 0][0]
claim("1.3B's model states fit one GPU with room for activations", states < c.cluster.usable_memory / 2,
      f"{states / GiB:.0f} GiB of {c.cluster.usable_memory / GiB:.0f} GiB usable")
claim("the best plan is pure data parallelism over all 8 GPUs", (r.best.plan.dp, r.best.plan.tp, r.best.plan.pp)
      == (8, 1, 1), describe(r.best.plan, 8))
differ = [k for k, t in r.best.parts.items() if t != ddp.parts[k]]
claim_between("plain DDP is within 5% of it", ddp.step_time / r.best.step_time, 1, 1.05)
claim("ZeRO-1 wins only by a shorter optimizer step (each GPU updates 1/8)", differ == ["optimizer"],
      f"{ddp.optimizer * 1e3:.0f} ms vs {r.best.optimizer * 1e3:.0f} ms")

# %% [markdown]
# **2. The states do not fit one GPU, but fit a node → shard them.** A 13B model's states are
# 190 GiB: plain DDP cannot start. ZeRO (Lab 10) or FSDP keeps 1/N of the optimizer states,
# gradients or parameters on each GPU; tensor parallelism inside the node is the other way in.

# %%
c, r = case["13B on 8 GPUs"], guide["13B on 8 GPUs"]
claim_close("a 13B model's states are 190 GiB", 16 * c.model.params / GiB, 190, rel=0.02, unit=" GiB")
reason = why_not(c.model, c.cluster, Plan(dp=8, tp=1, pp=1), c.global_batch)   # DDP, full recomputation
print("plain DDP on 8 GPUs:", reason)
pure = [p for p in r.plans if p.plan.tp == p.plan.pp == 1]
claim("plain DDP does not fit, even recomputing every activation", reason is not None
      and reason.startswith("needs"), reason.split(",")[0])
claim("with tp = pp = 1 only plans that shard the states fit",
      len(pure) > 0 and all(p.plan.zero_stage >= 1 for p in pure),
      f"{len(pure)} plans, ZeRO stages {sorted({p.plan.zero_stage for p in pure})}")
claim_between("the fastest of them is within 10% of the planner's best", pure[0].step_time / r.best.step_time,
              1, 1.10)
claim("the best shards the optimizer states, tp inside the node", r.best.plan.zero_stage >= 1
      and worst_span("tp", r.best.plan.dp, r.best.plan.tp, 1, 8) == 1, describe(r.best.plan, 8))

# %% [markdown]
# **3. The model does not fit in one node → tensor parallelism inside the node, pipeline across
# nodes.** GPT-3's states are 2.8 TB. Tensor parallelism all-reduces every layer's activations
# twice forward and twice backward, so it needs NVLink; a pipeline sends one activation per stage
# boundary, so it tolerates the slower network between nodes.
#
# **A common mistake** is to grow tensor parallelism past the node because "it splits everything".
# The search leaves such plans out (section 6 shows what tp = 16 loses):

# %%
c, r = case["175B on 64 GPUs"], guide["175B on 64 GPUs"]
claim_close("GPT-3's states are 2.8 TB", 16 * c.model.params / 1e12, 2.8, abs_=0.05, unit=" TB")
b = r.best.plan
wide = why_not(c.model, c.cluster, Plan(dp=4, tp=16, pp=1, zero_stage=1), c.global_batch)
print("tp = 16:", wide)
fsdp = [p for p in r.plans if p.plan.tp == p.plan.pp == 1]
claim("tensor parallelism stays inside a node", worst_span("tp", b.dp, b.tp, b.pp, 8) == 1, describe(b, 8))
claim("and the pipeline crosses nodes", worst_span("pp", b.dp, b.tp, b.pp, 8) > 1,
      f"{worst_span('pp', b.dp, b.tp, b.pp, 8)} nodes per pipeline")
claim("a tp group of 16 would span two nodes of 8", wide is not None and "spans 2 nodes" in wide, wide)
claim_between("FSDP alone (ZeRO-3 over 64 GPUs) fits too, but is 10-50% slower",
              fsdp[0].step_time / r.best.step_time, 1.10, 1.50)

# %% [markdown]
# **4. Many nodes → the same model replica, data parallelism over the replicas.** Once a tp × pp
# group holds one copy of the model, more nodes add more copies; each copy takes its share of the
# batch, and only the gradients cross between them.

# %%
r4 = guide["175B on 1024 GPUs"]
b4 = r4.best.plan
claim("on 1024 GPUs the replica keeps the tp x pp shape it had on 64", (b4.tp, b4.pp) == (b.tp, b.pp),
      f"tp = {b4.tp}, pp = {b4.pp}")
claim("and data parallelism takes the rest", b4.dp == 1024 // (b4.tp * b4.pp) and b4.dp > b.dp,
      describe(b4, 8))

# %% [markdown]
# **5. Long sequences → split the sequence.** At 64k tokens a single sequence is the problem:
# data parallelism cannot split less than one sequence, tensor parallelism stops at the node's 8
# GPUs, and under 1F1B the first pipeline stage keeps all l layers' activations whatever pp is
# (section 4). This planner counts activations as Korthikanti et al. do — attention scores stored,
# 5 bytes each (softmax output, dropout mask and output) — so one layer's scores grow as s²:

# %%
c, r = case["13B, 64k tokens, 64 GPUs"], guide["13B, 64k tokens, 64 GPUs"]
short = search(dataclasses.replace(c.model, seq_len=2048), c.cluster, c.global_batch, zero_stages=(0, 1, 2, 3))
closest = min((memory_per_gpu(c.model, x.plan, c.global_batch) for x in r.rejected if x.reason.startswith("needs")),
              key=lambda m: m.total)
s, a = c.model.seq_len, c.model.heads
tp_max = c.cluster.gpus_per_node             # tp stays in a node: at most 8 ways
scores = 5 * a * s * s / tp_max              # one sequence's scores, heads split over tp_max
print(f"closest plan needs {closest.total / GiB:.0f} GiB; one layer's scores at tp = {tp_max}: "
      f"{scores / GiB:.0f} GiB")
claim("at 2048 tokens the same model has plans that fit on 64 GPUs", len(short.plans) > 0,
      f"{len(short.plans)} plans")
claim("at 64k tokens none does", not r.plans, f"{r.considered} tried")
claim("one layer's attention scores alone outgrow the GPU, even split 8 ways", scores > c.cluster.usable_memory,
      f"{scores / GiB:.0f} GiB > {c.cluster.usable_memory / GiB:.0f} GiB usable")

# %% [markdown]
# Two remedies go beyond this planner. A fused attention kernel (Lab 04's, FlashAttention) never
# stores the s × s scores; and **context parallelism** (Lab 14) splits the sequence itself,
# attention included, over N ranks — dividing both the activations that grow with s and the
# attention compute that grows with s². It composes with the others as a fourth dimension.
#
# **The guide, in order.**
# 1. Do the model states (16 bytes per parameter, section 4 and Lab 09) and activations fit one
#    GPU? Use data parallelism; ZeRO-1 comes almost free.
# 2. If not, shard the states over data-parallel ranks (ZeRO-2/3, FSDP) or add tensor parallelism
#    inside the node — whichever the planner finds faster.
# 3. If one node cannot hold the model, keep tensor parallelism inside the node and run a pipeline
#    across nodes; more nodes add data-parallel replicas of that tp × pp group.
# 4. For long sequences, fuse attention and split the sequence (context parallelism).
# 5. Then search: the rules give the shape of the plan; micro-batch, interleaving, recomputation
#    and ZeRO stage move the step time by tens of percent, and only the numbers decide them.
#
# ## Further reading
#
# * D. Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters Using
#   Megatron-LM*, SC 2021 — 3D parallelism, the interleaved schedule, the FLOPs formula, Table 1.
# * V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022 —
#   activation memory per layer, selective recomputation, sequence parallelism.
# * L. Zheng et al., *Alpa: Automating Inter- and Intra-Operator Parallelism for Distributed Deep
#   Learning*, OSDI 2022 — the planner's search, done for real.
# * PyTorch: *Getting Started with DeviceMesh* (`init_device_mesh`), and TorchTitan, which combines
#   FSDP2, tensor and pipeline parallelism the same way.
# * M. Al-Fares et al., *A Scalable, Commodity Data Center Network Architecture*, SIGCOMM 2008 (fat
#   trees); R. Blumofe and C. Leiserson, *Scheduling Multithreaded Computations by Work Stealing*,
#   JACM 1999.
#
# ## Summary
#
# * Ranks are numbered tp innermost, then dp, then pp: tensor parallelism, which moves by far the
#   most bytes, stays inside a node.
# * 3D training composes the earlier labs — Megatron layers inside pipeline stages, gradients
#   averaged over dp, tied weights synced between the first and last stage — and lands within
#   rounding of one process, with every byte accounted for.
# * An iteration costs 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)) FLOPs with full recomputation. Model
#   states shrink by tp·pp (and ZeRO's dp); under 1F1B activations do not shrink with pp.
# * A planner built from physical parts — GEMMs by shape (roofline, tiles, waves), memory-bound
#   kernels by their bytes, NCCL's rings and trees on NVLink and rail-aligned network cards, the
#   pipeline's schedule with uneven stages, overlap where the software overlaps — each checked on its
#   own, with two fitted constants, follows Megatron-LM's Table 1 (rank correlation near 1, median
#   error below a percent, where the best constant has 2.5 %) and predicts twelve runs it was not
#   fitted to within 20 %.
# * Around the job: topology sets the bisection, placement the cross-node bytes, the scheduler the
#   stranded GPUs, and balancing the waiting at each step.
# * Which parallelism when: data parallelism while a replica fits a GPU; shard the states (ZeRO,
#   FSDP) or add tp inside the node when it does not; tp in a node and pp across nodes when the model
#   outgrows a node, dp over the replicas; context parallelism for long sequences — each rule
#   confirmed by the planner on a concrete case.
#
# **Exercises** (in `exercises/lab11_parallel3d.py`): `rank_coords`, `group_ranks`,
# `fits_in_memory`, `flops_per_iteration`, `partition_stages`; each has a "check your work" cell
# above. Grade them with `python -m labkit.grade --lab 11` (or `make grade LAB=11`).
