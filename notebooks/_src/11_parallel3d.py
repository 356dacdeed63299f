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
# 5. compare the planner with Megatron-LM's measured throughput from 1.7B to 1T parameters;
# 6. measure topology, placement, scheduling and balancing choices on small models of a cluster.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.cluster import lab as CL
from labkit.grading.check import check_your_work
from labkit.parallel3d import grid as G
from labkit.parallel3d.train import train_step
from labkit.planner import lab
from labkit.planner.cost import selene
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
print(lab.bytes_by_dimension_table())

# %% [markdown]
# Tensor parallelism, by a factor of about 30: four all-reduces of a whole micro-batch's
# activations per layer, every micro-batch. Data parallelism sends each gradient once per
# iteration; the pipeline sends one activation per micro-batch per stage boundary. That is why tp
# gets the fastest links (NVLink inside a node) and pp the slowest.
#
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
runs = lab.run_grids()
print(lab.equivalence_table(runs))

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
print(lab.counted_bytes_table(runs[0]))

# %% [markdown]
# And one step of the 2 × 2 × 2 run, rank by rank. Ranks 0–3 are the first stage, 4–7 the second;
# within a stage the two tp ranks work in lock step (they all-reduce inside every layer), and the
# two dp replicas run side by side until their gradient all-reduce at the end.

# %% tags=["nbval-ignore-output"]
display(HTML(figure_to_html(V.timeline_figure(lab.timeline_of(runs[0])))))

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
print(lab.flops_table())

# %% [markdown]
# Exactly: our model's attention computes the full s × s score matrix, as the formula assumes.
# (FlopCounterMode counts matmuls only; LayerNorms, softmax and GELU are not in either number.)
#
# ## 4. Memory per GPU, and two common mistakes
#
# A GPU of the first stage holds Ψ/(tp·pp) parameters' model states — tensor parallelism splits each
# layer and the pipeline splits the layers — with ZeRO dividing some of them by dp (Lab 10), plus
# activations. **A common mistake** writes the budget as "M_model/tp + M_act/pp ≤ M_device".
#
# **Predict first:** under 1F1B, how many layers' activations does the first stage hold as pp goes
# from 1 to 16?

# %%
print(lab.activations_table())

# %% [markdown]
# Always l = 80. The first stage runs pp micro-batches forward before its first backward, each
# through l/pp layers: pp · l/pp = l. Pipelining does not divide activation memory; recomputation
# does. The shortcut gets both terms wrong — parameters too big by the factor pp, activations too
# small by the same factor:

# %%
print(lab.memory_mistake_table())

# %% [markdown]
# ## 5. The planner
#
# `labkit.planner.predict(model, cluster, plan, global_batch)` adds up an iteration:
#
# * **compute**: the busiest stage's FLOPs at the GPU's peak times one efficiency;
# * **bubble**: (p − 1)/(v·m) of the ideal pipeline time, for m micro-batches and v chunks per rank
#   (Lab 08);
# * **tp**: the all-reduces of section 1, over NVLink when the tp group fits in a node, over the
#   network when it does not;
# * **pp**: point-to-point sends between stages; **dp**: the gradient all-reduce (Lab 05's α–β),
#   over the network; nothing overlapped.
#
# `search` tries every grid, micro-batch size, chunk count, ZeRO stage and recomputation setting,
# rejects what does not divide or fit (saying why), and sorts the rest. The widget runs it for a
# model, a GPU count and a batch, and draws the best plan on the cluster: pick "pp" or "dp" to see
# where those groups lie.

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

# %% tags=["nbval-ignore-output"]
print(f"search time: {lab.search_seconds(one_t, selene(4096), 4096):.2f} s")

# %% [markdown]
# A few thousand candidates: divisors of the GPU count for tp and pp, times a handful of
# micro-batch sizes, chunk counts, ZeRO stages and recomputation settings. The count grows with
# the number of divisors, not with the GPU count, so exhaustive search stays well under a second.
#
# ## 6. Checked against Megatron-LM
#
# Narayanan et al. (2021) trained GPT models from 1.7B to 1T parameters on 32 to 3072 A100s (8 per
# node) and published the throughput of each (their Table 1). The planner has one free constant —
# the fraction of peak its matmuls reach — fitted once to all rows.
#
# **Predict first:** will one constant fit rows from 1.7B to 1T within 15%?

# %%
table, median_error = lab.megatron_table()
print(table)
print(f"median |error|: {median_error:.1%}")

# %% [markdown]
# Every row within 15%, the median about 4%. The errors have a trend — too optimistic for the small
# models, too pessimistic for the large — which one constant cannot follow: big matmuls run closer
# to peak, and the small models' non-matmul work (softmax, LayerNorm, dropout) costs relatively
# more. The planner's own plans are predicted 1.1–1.4× faster than the paper's, mostly by
# dropping full recomputation where memory allows (the paper recomputes everywhere).
#
# The paper's findings, in the model. First, tensor parallelism beyond a node:

# %%
print(lab.tp_sweep_table())

# %% [markdown]
# Best at tp = 8, a whole node. At tp = 16 the all-reduces cross the network at 25 GB/s per GPU
# instead of NVLink's 300 and throughput halves. Second, the pipeline bubble at small batches, and
# what interleaving (v = 2 chunks per rank) buys:

# %%
print(lab.batch_table())

# %% [markdown]
# With 12 micro-batches on 12 stages almost half the time is bubble; interleaving cuts it and
# gains 31%, a gain that fades as the batch grows — the paper's figure shows the same shape.
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
print(CL.topology_table())

# %% [markdown]
# **Hierarchical all-reduce.** Inside a node, reduce-scatter; between nodes, all-reduce the 1/g
# shard each rank holds with its peers in the other nodes; inside the node again, all-gather. Each
# rank then sends only 1/g of the data over the slow links. On 4 real ranks as 2 "nodes" of 2:

# %%
print(CL.hierarchical_table())

# %% [markdown]
# The α–β model with two kinds of link (Lab 05's, once for NVLink and once for the network):

# %%
print(CL.all_reduce_model_table())

# %% [markdown]
# With a network card per GPU, the hierarchical algorithm wins at every size: the slow links carry
# 1/g of the bytes and far fewer latency terms. With one card per node the g shards' all-reduces
# share it, the inter-node step gets g times slower, and for very large messages the flat ring
# wins (above a few hundred MB here).
#
# **Placement.** Which ranks share a node decides how many bytes cross the network. Seen as graph
# partitioning — ranks are vertices, bytes between them are edge weights, nodes are parts of fixed
# size — the Kernighan–Lin heuristic swaps pairs of ranks between parts while a swap reduces the
# cut.

# %%
print(CL.placement_table())

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
print(CL.balance_table())

# %% [markdown]
# Static assignments pay for the skew (up to 2.4× the lower bound); taking the longest tasks first
# (LPT) nearly reaches it; work stealing, which needs no knowledge of task times, lands in between.
#
# **Auto-parallel search on a chain of layers.** Cutting the layers into pipeline stages so the
# slowest stage is as fast as possible is a small dynamic programme (your exercise 5). On the
# times of our GPT's pieces, measured here:

# %% tags=["nbval-ignore-output"]
costs = CL.measured_layer_costs()
print(CL.stage_partition_table(costs, stages=4))

# %% [markdown]
# The same idea chooses, layer by layer, how to split each matrix — replicated, by columns, or by
# rows — so that communication plus the conversions between layouts costs least (the idea behind
# Alpa's intra-operator pass). For an MLP it finds Megatron's column-then-row pairing:

# %%
print(CL.sharding_table())

# %% [markdown]
# ## 8. Exercises
#
# ### Exercise 1: `rank_coords`
#
# In `exercises/lab11_parallel3d.py`, return a rank's (dp_index, tp_index, pp_index). The picture
# shows your coordinates for 8 ranks on 4-GPU nodes, and how many nodes your tp groups span.

# %%
check_your_work("lab11_parallel3d", "rank_coords", picture=lab.picture("rank_coords"))

# %% [markdown]
# ### Exercise 2: `group_ranks`
#
# The ranks of a rank's dp, tp or pp group.

# %%
check_your_work("lab11_parallel3d", "group_ranks", picture=lab.picture("group_ranks"))

# %% [markdown]
# ### Exercise 3: `fits_in_memory`
#
# The back-of-envelope budget of section 4: model states of Ψ/(tp·pp) parameters with ZeRO, and
# min(m, pp) micro-batches of l/pp layers.

# %%
check_your_work("lab11_parallel3d", "fits_in_memory", picture=lab.picture("fits_in_memory"))

# %% [markdown]
# ### Exercise 4: `flops_per_iteration`
#
# Section 3's count, from the layer sizes.

# %%
check_your_work("lab11_parallel3d", "flops_per_iteration", picture=lab.picture("flops_per_iteration"))

# %% [markdown]
# ### Exercise 5: `partition_stages`
#
# Cut a chain of layers into pipeline stages so that the slowest stage is as fast as possible, by
# dynamic programming (section 7 used ours on measured layer times).

# %%
check_your_work("lab11_parallel3d", "partition_stages", picture=lab.picture("partition_stages"))

# %% [markdown]
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
# 96·3072·2048·128·25 600²·(1 + 2048/153 600 + 51 200/3 276 800) = **5.14·10¹⁹ FLOPs**;
# divided by 3072 · 163·10¹² FLOP/s: **103 s** per iteration.
#
# </details>
#
# **Problem 2.** GPT-3 175B (l = 96, h = 12 288) on 1024 A100-80GB as tp = 8, pp = 8, dp = 16,
# batch 1536, micro-batch 1, full recomputation, no ZeRO. Memory per GPU?
#
# <details><summary>Answer</summary>
#
# About 175·10⁹/64 = 2.7·10⁹ parameters per GPU, 16 bytes each: 44 GiB of model states (a little
# more on the first and last stages, which hold the embedding); with full recomputation only the
# layer inputs stay, a few GiB: **about 47 GiB** — it fits.
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
# **Problem 4.** A tp group of 16 on nodes of 8 GPUs: how many of each rank's 4 all-reduces per
# layer cross the network, and why is the whole all-reduce as slow as that?
#
# <details><summary>Answer</summary>
#
# **All four.** A ring over 16 ranks on 2 nodes has links between the nodes, and every step of the
# ring waits for its slowest link, so each all-reduce runs at the network's speed (25 GB/s per
# GPU here) rather than NVLink's.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
answers = lab.worked_answers()
print(f"{answers['1T flops']:.3e} FLOPs, {answers['1T seconds per iteration']:.0f} s; "
      f"175B: {answers['175B on 1024: memory 8x8x16']:.0f} GiB; bubble {answers['bubble p=8 m=64']:.1%}")

# %% [markdown]
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
# * A planner adding compute, bubble and communication, with one fitted constant, predicts
#   Megatron-LM's throughput from 1.7B to 1T parameters within 15% and reproduces its findings.
# * Around the job: topology sets the bisection, placement the cross-node bytes, the scheduler the
#   stranded GPUs, and balancing the waiting at each step.
#
# **Exercises** (in `exercises/lab11_parallel3d.py`): `rank_coords`, `group_ranks`,
# `fits_in_memory`, `flops_per_iteration`, `partition_stages`; each has a "check your work" cell
# above. Grade them with `python -m labkit.grade --lab 11` (or `make grade LAB=11`).
