# Source of notebooks/10_zero.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 10 — ZeRO and FSDP: shard the model states over the data-parallel ranks
#
# Data parallelism (Lab 06) keeps a whole copy of everything on every rank: parameters, gradients
# and Adam's states, 16 bytes per parameter (Lab 09). With N ranks that is N copies of the same
# numbers. ZeRO — the *Zero Redundancy Optimizer* of Rajbhandari et al. (2020) — keeps one copy,
# cut into N shards, and moves the pieces where they are needed when they are needed. PyTorch's
# FSDP (fully sharded data parallel) is its third stage.
#
# **You will be able to**
# 1. compute what one rank holds at each ZeRO stage, and why "4× and 8× less" are limits, not
#    what 8 ranks give;
# 2. follow, moment by moment, which shards each rank holds during a step of each stage;
# 3. train with ZeRO-1, -2 and -3 on real ranks and check them against one process and against
#    PyTorch's `ZeroRedundancyOptimizer` and `fully_shard`;
# 4. count what each stage sends: stages 1 and 2 send exactly what DDP sends in a plain step,
#    stage 3 half as much again — and see where that changes (gradient accumulation, PyTorch's
#    ZeroRedundancyOptimizer);
# 5. write a ZeRO-1 step and FSDP's gather → compute → free yourself.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import re

import torch

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.grading.check import check_your_work
from labkit.show import show
from labkit.table import Table
from labkit.zero import FSDP, ShardedOptimizer, lab
from labkit.zero.formulas import comm_bytes_per_step, model_state_bytes

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. What one rank holds
#
# With Ψ parameters and mixed-precision Adam — 2 bytes of bf16 parameter, 2 of gradient, K = 12 of
# optimizer state (fp32 master copy, m and v) — on N data-parallel ranks:
#
#     stage 0 (DDP)                  (2 + 2 + 12)·Ψ
#     stage 1: shard the optimizer   (2 + 2)·Ψ + 12·Ψ/N
#     stage 2: and the gradients     2·Ψ + (2 + 12)·Ψ/N
#     stage 3: and the parameters    (2 + 2 + 12)·Ψ/N
#
# The ZeRO paper's example is a 7.5B-parameter model on 64 GPUs.
#
# **Predict first:** how many GB per GPU at each stage? And how many times less than DDP do stages
# 1 and 2 hold on **8** GPUs?

# %%
stages = lab.stage_table(7.5e9, 64)
print(stages)
gb = stages.column("GB per rank")
claim("120, 31.4, 16.6 and 1.9 GB per GPU: the paper's figure", [round(g, 1) for g in gb] == [120.0, 31.4, 16.6, 1.9],
      ", ".join(f"{g:.2f}" for g in gb))
less8 = stages.column("x less, N=8")
claim("on 8 ranks stages 1 and 2 save 2.9x and 4.3x, not 4x and 8x", (round(less8[1], 1), round(less8[2], 1))
      == (2.9, 4.3), f"{less8[1]:.2f}x, {less8[2]:.2f}x")

# %% [markdown]
# 120, 31.4, 16.6 and 1.9 GB — the paper's figure. **A common mistake** quotes "4× less" for stage 1
# and "8× less" for stage 2 as if any number of ranks gave them. They are limits as N grows:
# (2 + 2 + 12)/(2 + 2) = 4 and 16/2 = 8. On 8 ranks the savings are 2.9× and 4.3×.
#
# ## 2. Who holds what, moment by moment
#
# Each unit (a layer) is cut into N shards; rank r owns shard r. Dark cells are a rank's own
# shard, light cells the others' shards it holds as well (a whole unit), empty cells nothing. Pick
# a stage and step through the moments of one step: forward through the units, backward through
# them in reverse, and the optimizer step.

# %%
lab.shards_widget(world=4, units=3)

# %% [markdown]
# What to look for:
#
# * **stage 1** — the optimizer states (green) are sharded all the time; gradients are whole until
#   the step, which reduce-scatters them (each rank gets the sum of its shard), updates its shard
#   of the parameters, and all-gathers the parameters.
# * **stage 2** — each unit's gradient is reduce-scattered as soon as backward has produced it,
#   and only the shard stays: the gradient column never fills up.
# * **stage 3** — parameters too are sharded. Just before a unit's forward its parameters are
#   all-gathered, and freed right after; the same again before its backward. In this picture only
#   one unit is whole at any moment; section 5 shows that a real FSDP also keeps its root unit
#   (embeddings and the tied output layer) whole through each pass.
#
# The "sent so far" figure at the last moment is the step's traffic: at stage 3, two all-gathers
# and a reduce-scatter per unit, 1.5× what stages 0–2 send.

# %%
from labkit.zero.timeline import WHOLE, step_moments

moments = {stage: step_moments(stage, 4, 3, unit_numel=1 / 3) for stage in range(4)}
sent = [moments[stage][-1].bytes_sent for stage in range(4)]
claim("stage 3 sends 1.5x what stages 0-2 send", sent[0] == sent[1] == sent[2] and sent[3] == 1.5 * sent[0],
      f"{sent[3]:g} vs {sent[0]:g} (Ψ bytes)")
whole = max(sum(h == WHOLE for h in m.held["parameters"]) for m in moments[3])
claim("stage 3: one unit whole at any moment", whole == 1, "the picture's model: no root unit")
grads = max(sum(h == WHOLE for h in m.held["gradients"]) for m in moments[2])
claim("stage 2: the gradient column never fills up", grads < 3, f"at most {grads} of 3 units whole")
#
# ## 3. The real thing, checked
#
# `ShardedOptimizer` (stages 1 and 2) has the shape of PyTorch's `ZeroRedundancyOptimizer`: wrap any
# elementwise optimizer class. Its step, bucket by bucket: reduce-scatter the gradients, step the
# master shard, all-gather the parameters.
#
# `FSDP` (stage 3) gathers a unit's parameters in a forward pre-hook and frees them in a forward
# hook. Autograd would keep the gathered weights until backward, since a Linear saves its weight:
# a saved-tensor hook stores a note instead, and the first backward op that needs the weights
# gathers them again. (Exercises 2 and 3 write both ideas small; our code is shown after them.)
#
# **Predict first:** three AdamW steps in float64, each rank on its slice of the batch. How far
# from one process on the whole batch will each method land?

# %%
eq = lab.equivalence_table(worlds=(1, 2, 4))
print(eq)
err = eq.column("max |param - one process|")
claim("every method, ours and PyTorch's, lands within 1e-13 of one process", max(err) < 1e-13,
      f"largest {max(err):.1e}")
claim("on one rank, ours equal one process bit for bit", all(e == 0 for (m, n, e) in eq.rows if n == 1), "0.0")

# %% [markdown]
# About 1e-14: the sums are taken in another order and Adam runs on flat vectors instead of one
# tensor at a time, which changes the last bits, nothing more. PyTorch's `ZeroRedundancyOptimizer`
# (with `DistributedDataParallel`) and FSDP2's `fully_shard` land on the same parameters.
# `tests/test_zero.py` also checks frozen parameters, the tied embedding, gradient accumulation,
# and every world size from 1 to 4.
#
# ## 4. The bytes a rank holds, measured
#
# The tracker of Lab 09 counts what rank 0 holds after a step. The formulas need one adjustment:
# to cut a group of parameters into N equal shards it is padded to Ψ' = ⌈Ψ/N⌉·N elements. Our
# ZeRO-1 and -2 keep an fp32 master shard even for an fp32 model, as DeepSpeed does, so K = 4 + 8.
# In our FSDP the fp32 shards *are* the master weights, so K = 8 (m and v); by default it shards
# only matrices and keeps 1-D parameters (biases, LayerNorm scales) whole. Bytes held after a step
# are not the whole story: during the step a rank also holds activations and what is in flight —
# ZeRO-1's full gradients until the step reduce-scatters them, FSDP's gathered units. The last
# column is the peak of the step itself.
#
# **Predict first:** rank 0 of 4, float32. Will ZeRO-1's optimizer bytes be a quarter of DDP's?
# Which stage has the lowest peak?

# %%
mem = lab.memory_table(world=4)
held = Table(mem.columns[:-1], [r[:-1] for r in mem.rows], title=mem.title.split(";")[0])
print(held)
m = {r[0]: dict(zip(mem.columns, r)) for r in mem.rows}
claim("after the step, every row equals the formula to the byte", mem.column("total B") == mem.column("formula B"),
      "4 methods")
claim("ZeRO-1 keeps more than a quarter of DDP's optimizer bytes (the master shard)",
      m["zero1"]["optimizer B"] > m["ddp"]["optimizer B"] / 4, f"{m['zero1']['optimizer B']} vs "
      f"{m['ddp']['optimizer B']} / 4")

# %% [markdown]
# And the peak of the step itself. Its last few KiB can move from run to run: a collective's
# worker thread lets go of its input a moment after the call has returned, so a busy machine
# sees a buffer live a little longer. The order of the peaks does not move:

# %% tags=["nbval-ignore-output"]
print(Table(["method", "total B", "step peak B"], [(k, r["total B"], r["step peak B"]) for k, r in m.items()]))
claim("each peak is above what the step leaves", all(r["step peak B"] > r["total B"] for r in m.values()),
      "activations and what is in flight")
claim("peaks fall from DDP to ZeRO-1 to ZeRO-2", m["ddp"]["step peak B"] > m["zero1"]["step peak B"]
      > m["zero2"]["step peak B"], " > ".join(str(m[k]["step peak B"]) for k in ("ddp", "zero1", "zero2")))
claim("FSDP holds the least after the step, yet peaks above ZeRO-2 here", m["fsdp"]["total B"] == min(
      r["total B"] for r in m.values()) and m["fsdp"]["step peak B"] > m["zero2"]["step peak B"],
      f"{m['fsdp']['step peak B']} vs {m['zero2']['step peak B']}")

# %% [markdown] slide="slide"
# Equal to the formula to the byte, in every row. (Adam's step counters, 4 bytes per tensor it
# steps, are included in the formula column.) ZeRO-1 holds more optimizer bytes than a quarter of
# DDP's because of the master shard: 12 bytes per element against DDP's 8. FSDP's optimizer bytes
# are 8 per sharded element plus 8 for each whole 1-D parameter.
#
# The peaks tell more. ZeRO-1 still builds every full gradient before its step reduce-scatters
# them; ZeRO-2 frees each bucket's full gradients as soon as they are reduce-scattered, so its
# peak is lower. FSDP holds the least between steps, but at its peak a gathered unit, its full
# gradient before the reduce-scatter and the activations all sit on top of the shards — in a model
# this small they outweigh what sharding saved. With billions of parameters the model states
# dominate and the order of the "after" column is the order of the peaks too; the transient part
# is what FSDP's unit size (and prefetching, below) controls.
#
# ## 5. What a step sends
#
# **Common mistakes:** "ZeRO-1 needs minimal communication: only optimizer states", "ZeRO-2 uses
# all-reduce", "ZeRO-3 reduces communication".
#
# **Predict first:** per step on 4 ranks, how many bytes does each stage send, compared with DDP?

# %% slide="subslide"
traffic = lab.traffic_table(world=4)
print(traffic)
print(f"closed forms per rank, float32: stages 0-2 {comm_bytes_per_step(1.0, 4, 1, 4):.2f}·Ψ bytes, "
      f"stage 3 {comm_bytes_per_step(1.0, 4, 3, 4):.2f}·Ψ")
t = {r[0]: dict(zip(traffic.columns, r)) for r in traffic.rows}
claim("every count equals its closed form", traffic.column("bytes sent") == traffic.column("formula"), "5 rows")
claim("ZeRO-1 and -2 send what DDP sends, with no all-reduce", all(t[k]["x DDP"] == 1 and t[k]["all-reduce"] == 0
      for k in ("zero1", "zero2")), "1.00x")
claim_close("FSDP sends about 1.5x", t["fsdp"]["x DDP"], 1.5, abs_=0.05)
claim_close("PyTorch's ZeroRedundancyOptimizer sends 1.5x DDP: all-reduce + broadcast", t["torch-zero1"]["x DDP"],
            1.5)

# %% [markdown]
# Optimizer states never move. Stages 1 and 2 replace DDP's all-reduce (2(N−1)/N·Ψ per rank) by a
# reduce-scatter of the gradients and an all-gather of the parameters — (N−1)/N·Ψ each, the same
# total, and no all-reduce. Stage 3 all-gathers each unit twice (forward and backward) plus the
# reduce-scatter: 3(N−1)/N·Ψ, 1.5× DDP (1.47 here, since our FSDP all-reduces the small 1-D
# parameters like DDP). ZeRO-3 buys memory with communication.
#
# PyTorch's `ZeroRedundancyOptimizer` is ZeRO-1 *on top of* `DistributedDataParallel`: DDP still
# all-reduces every gradient (each rank then uses only its shard's), and after the step each
# owner **broadcasts** its updated parameters: 2(N−1)/N·Ψ + (N−1)/N·Ψ, 1.5× DDP — more than DDP,
# where our ZeRO-1's reduce-scatter sends only what each rank needs. (Its collectives were read
# with `torch.profiler` from the gloo events of one backward and step.)
#
# **Gradient accumulation changes the count.** With k micro-batches per step, DDP (with
# `no_sync`) and ZeRO-1 add the micro-batches' gradients up locally and reduce once. ZeRO-2 keeps
# only a gradient *shard*, so it must reduce-scatter every micro-batch's gradients as soon as
# they are ready: k reduce-scatters per step.
#
# **Predict first:** k = 4 micro-batches on 4 ranks. How many times DDP's bytes does ZeRO-2 send?

# %%
accum = lab.accumulation_table(world=4, micro_batches=(1, 4))
print(accum)
a = {(r[0], r[1]): dict(zip(accum.columns, r)) for r in accum.rows}
claim("every count equals its closed form", accum.column("bytes sent") == accum.column("formula"), "6 rows")
claim("k = 4: ZeRO-2 reduce-scatters 4 times, DDP and ZeRO-1 reduce once",
      (a[(4, "zero2")]["reduce-scatters"], a[(4, "zero1")]["reduce-scatters"], a[(4, "ddp")]["all-reduces"]) == (4, 1, 1),
      "per step")
claim_close("ZeRO-2 then sends (k + 1)/2 = 2.5x DDP's bytes", a[(4, "zero2")]["x DDP"], 2.5)

# %% [markdown]
# ZeRO-2 sends (k + 1)(N−1)/N·Ψ per step where DDP sends 2(N−1)/N·Ψ: its gradient traffic alone is k
# times ZeRO-1's. Large accumulation makes ZeRO-2's memory saving expensive; ZeRO-1 (or a larger
# micro-batch) avoids it.
#
# FSDP's own order of events, one step, on 2 ranks. The root unit holds the embeddings, the final
# LayerNorm and — through the tie — the output layer, which the model uses at both ends; so the
# root is gathered first and freed last in each pass, and one block at a time is gathered inside
# it. With a bf16 `compute_dtype` the shards are cast before the all-gather.
#
# **Predict first:** how many units are whole at most, at any moment? And how many times fewer
# bytes do the all-gathers send in bf16?

# %%
trace = lab.fsdp_trace(world=2)
print(trace)
most = max(len(w.split(" + ")) for w in trace.column("whole now") if w != "-")
claim("two units whole at most: the root and one block", most == 2, "our FSDP does not prefetch")
fp32, bf16 = map(int, re.search(r"fp32 (\d+), bf16 (\d+)", trace.title).groups())
claim_close("bf16 halves the all-gathered bytes", fp32 / bf16, 2.0)

# %% [markdown]
# Two at most: the root and one block — because our FSDP gathers a unit only when it is needed.
# Half the bytes on the wire in bf16, while the master shards and the gradients stay float32 (the
# title's last words).
#
# PyTorch's FSDP **prefetches**: it issues the next unit's all-gather before the current unit has
# finished computing, so that communication overlaps compute. In backward, FSDP2's `fully_shard`
# prefetches one unit ahead by default (FSDP1: `backward_prefetch=BACKWARD_PRE`); in forward it
# runs the all-gathers on their own CUDA stream, so the next unit's gather can start while the
# current unit computes, and `set_modules_to_forward_prefetch` / `..._backward_prefetch` ask for
# more. With one unit prefetched, three can be whole at once (the root, the current block, the
# next): more memory for less waiting.
#
# PyTorch's FSDP also shards **every** parameter, 1-D ones included: `fully_shard` turns each
# into a DTensor cut along dim 0, where our FSDP keeps biases and LayerNorm scales whole (and
# all-reduces their gradients):

# %%
placed = lab.fsdp2_placements(world=2)
print(placed)
one_d = [r for r in placed.rows if len(r[1]) == 1]
claim("every parameter is sharded on dim 0, 1-D ones included", all(r[2] == "S(0)" for r in placed.rows)
      and all(r[3][0] * 2 == r[1][0] for r in one_d), f"{len(one_d)} 1-D of {len(placed.rows)} parameters")

# %% [markdown]
# `benchmarks/zero.py` times our stages against PyTorch's on 2 and 4 ranks and checks the bytes
# held against the formula; its table is in `benchmarks/results/zero.md`.
#
# ## 6. Exercises
#
# ### Exercise 1: `model_state_bytes`
#
# In `exercises/lab10_zero.py`, write the per-rank bytes of section 1 for any stage and byte sizes.

# %%
check_your_work("lab10_zero", "model_state_bytes")

# %% [markdown]
# Ours, for comparison:

# %%
show(model_state_bytes)

# %% [markdown]
# ### Exercise 2: `zero1_step`
#
# A ZeRO-1 step of SGD with momentum on a flat parameter vector of P elements: pad to a multiple of
# N, reduce-scatter the gradient, keep and update only your shard of the momentum and the
# parameters, all-gather. The cell runs yours on 1 to 4 ranks (P = 10, so 3 and 4 ranks need
# padding) against one process, and shows how much state each rank kept.

# %%
check_your_work("lab10_zero", "zero1_step")

# %% [markdown]
# Ours, for comparison: `ShardedOptimizer.step`, the same three moves on buckets of a real model.

# %%
show(ShardedOptimizer.step)

# %% [markdown]
# ### Exercise 3: `fsdp_linear`
#
# FSDP's gather → compute → free for one Linear layer, as an autograd function: gather the weight
# in forward and do not keep it; gather it again in backward; reduce-scatter its gradient. The
# cell checks outputs and gradients against the unsharded layer and measures the bytes forward
# leaves behind.

# %%
check_your_work("lab10_zero", "fsdp_linear")

# %% [markdown]
# Ours, for comparison: how our `FSDP` keeps a note instead of a gathered weight for backward.

# %%
show(FSDP._pack)
show(FSDP._unpack)

# %% [markdown]
# ## 7. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A 70B model, mixed-precision Adam, 64 data-parallel ranks. Bytes per rank at stage
# 2? Does it fit in 80 GB with 20 GB of activations?
#
# <details><summary>Answer</summary>
#
# 2·70·10⁹ + 14·70·10⁹/64 = 140 + 15.3 = **155.3 GB**: no — the bf16 parameters alone are 140 GB.
# Stage 3: 16·70·10⁹/64 = **17.5 GB**, which fits.
#
# </details>
#
# **Problem 2.** On how many ranks does ZeRO-2 hold 6× less than DDP?
#
# <details><summary>Answer</summary>
#
# 16 / (2 + 14/N) = 6 gives 14/N = 2/3: **N = 21**.
#
# </details>
#
# **Problem 3.** A 1.3B model in bf16 on 16 ranks over 25 GB/s links (per direction). Ring
# traffic per rank and time per step at stage 2 and stage 3?
#
# <details><summary>Answer</summary>
#
# Stage 2: 2·15/16·1.3·10⁹·2 B = **4.875 GB**, 0.195 s. Stage 3: 1.5× that, **7.31 GB**, 0.29 s
# (before any overlap with compute).
#
# </details>
#
# **Problem 4.** A unit of 10 000 001 parameters, 8 ranks, our padding rule. How many elements does
# each rank own, and how many are padding?
#
# <details><summary>Answer</summary>
#
# ⌈10 000 001 / 8⌉ = **1 250 001** each; 8 · 1 250 001 − 10 000 001 = **7** padding elements, all in
# the last rank's shard.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
import math

print(model_state_bytes(70e9, 64, 2) / 1e9, model_state_bytes(70e9, 64, 3) / 1e9, 16 / (2 + 14 / 21))
s2, s3 = comm_bytes_per_step(1.3e9, 16, 2), comm_bytes_per_step(1.3e9, 16, 3)
print(s2 / 1e9, s2 / 25e9, s3 / 1e9, s3 / 25e9, math.ceil(10_000_001 / 8), 8 * math.ceil(10_000_001 / 8) - 10_000_001)
claim("Problems 1-4 as answered", (round(model_state_bytes(70e9, 64, 2) / 1e9, 1), model_state_bytes(70e9, 64, 3) / 1e9,
      round(16 / (2 + 14 / 21), 9), round(s2 / 1e9, 3), round(s3 / 1e9, 4), 8 * math.ceil(10_000_001 / 8) - 10_000_001)
      == (155.3, 17.5, 6.0, 4.875, 7.3125, 7), "155.3 GB, 17.5 GB, N = 21, 4.875 / 7.31 GB, 7 padding")

# %% [markdown]
# ## 8. Prefetch: hiding ZeRO-3's traffic behind compute
#
# Section 5's FSDP gathers each unit just before it computes, so every all-gather stalls the
# compute that needs it. **Prefetch** posts the next unit's all-gather as soon as the current unit
# has its parameters: in forward the next unit in the model's order, in backward the one that ran
# before it in forward (the root, whose output layer's backward comes first, posts the last block).
# The transfer then runs while the current unit computes; the next unit waits only for what is
# left. Our `FSDP(prefetch=True)`; PyTorch's FSDP2 prefetches the same way by default.

# %%
from labkit.claims import claim, claim_between, claim_close
from labkit.zero import prefetch as P

show(FSDP._prefetch)
show(FSDP._prefetch_before)

# %% [markdown]
# **Predict first:** with prefetch, how many blocks are gathered at most at one moment? Does the
# traffic change?

# %%
tr = P.trace_table(world=2)
print(tr)
at_most = max(len(r[4].split(" + ")) for r in tr.rows)
claim("with prefetch two blocks and the root are gathered at once (one unit more than without)", at_most == 3,
      f"{at_most} units")

# %% [markdown]
# Each block is still gathered once in forward and once in backward: the same bytes, sent earlier.
# The price is memory: one more unit is whole at the peak. Measured on 2 gloo ranks, the same model
# trained with and without prefetch in the same processes, step by step:

# %%
pf = P.measure(world=2)
print(f"gathered parameters at their peak: {pf.gathered_peak[False]:,} B without prefetch, "
      f"{pf.gathered_peak[True]:,} B with")
print(f"one block's gathered vector: {pf.unit_bytes:,} B; step peak (MemoryTracker): "
      f"{pf.peak[False]:,} B vs {pf.peak[True]:,} B")
claim_close("prefetch holds exactly one unit more of gathered parameters",
            pf.gathered_peak[True] - pf.gathered_peak[False], pf.unit_bytes)
claim("prefetch changes no number: the parameters after training are bit-identical", pf.max_diff == 0.0,
      f"max |difference| {pf.max_diff}")

# %% [markdown]
# Here the step's overall peak moved by at most that unit — activations dominate it at this size.
# How much of the traffic did prefetch hide on this machine? The time each rank spent blocked on
# all-gathers, with and without (timings vary from run to run on a shared 2-core machine, where the
# gloo thread and the compute share the cores):

# %% tags=["nbval-ignore-output"]
print(f"step: {pf.step_s[False] * 1e3:.1f} ms without prefetch, {pf.step_s[True] * 1e3:.1f} ms with")
print(f"blocked on all-gathers: {pf.wait_s[False] * 1e3:.2f} ms without, {pf.wait_s[True] * 1e3:.2f} ms with: "
      f"{pf.hidden_fraction:.0%} of it hidden")

# %% [markdown]
# **When does the traffic hide completely?** A unit of Ψᵤ parameters computes 2·Ψᵤ·T FLOPs in
# forward for T tokens per rank, and its all-gather moves (N − 1)/N·Ψᵤ·e bytes. At F FLOP/s and B
# bytes/s the compute covers the transfer once
#
#     T ≥ T_min = F · e · (N − 1) / (2 · N · B)         tokens per rank,
#
# whatever the unit's size (backward doubles both sides). **Predict first:** for 8 H100s in bf16,
# how many tokens per GPU over NVLink? Over one InfiniBand NDR link per GPU?

# %%
hw = P.hardware_table(world=8)
print(hw)
nvlink, ib = hw.column("T_min tokens/rank")
claim_between("8 H100s over NVLink hide ZeRO-3's gathers from about 1 900 tokens per GPU", nvlink, 1800, 2000)
claim_close("over InfiniBand NDR it takes 9x as many tokens (450 vs 50 GB/s)", ib / nvlink, 9.0, rel=1e-12)

# %% [markdown]
# A training run with 4 sequences of 4 096 tokens per GPU is far above both. Small per-GPU batches
# across nodes — many GPUs, a fixed global batch — are where ZeRO-3's traffic stops hiding. This
# machine's own F and B, measured (a block's matmuls on one rank; a block's all-gather over gloo):

# %% tags=["nbval-ignore-output"]
F, B = P.rates(world=2)
print(P.hardware_table(world=8, here=(F, B, 4, 2)))

# %% [markdown]
# `benchmarks/zero.py` times `FSDP(prefetch=True)` against FSDP2's `fully_shard` (which prefetches
# by default); its table is in `benchmarks/results/zero.md`.

# %% [markdown]
# ## Further reading
#
# * S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*,
#   SC 2020 — the three stages, the 7.5B figure, the communication analysis.
# * Y. Zhao et al., *PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel*, VLDB 2023.
# * PyTorch: `torch.distributed.optim.ZeroRedundancyOptimizer`; *Getting Started with Fully Sharded
#   Data Parallel (FSDP2)*, `torch.distributed.fsdp.fully_shard`.
# * J. Ren et al., *ZeRO-Offload*, 2021, and S. Rajbhandari et al., *ZeRO-Infinity*, 2021 — Lab 09's
#   offload, at scale.
#
# ## Summary
#
# * Per rank: (p + g + k)Ψ at stage 0; stage 1 divides k by N, stage 2 g + k, stage 3 everything.
#   "4×" and "8×" are the limits of stages 1 and 2 as N grows.
# * Stages 1 and 2 send what DDP sends, as a reduce-scatter and an all-gather instead of an
#   all-reduce; stage 3 sends 1.5× as much, gathering each unit before forward and again before
#   backward. With k accumulated micro-batches ZeRO-2 reduce-scatters k times ((k + 1)/2 × DDP);
#   PyTorch's ZeroRedundancyOptimizer, on top of DDP, sends 1.5× DDP.
# * Peaks include what is in flight: ZeRO-2 frees full gradients as it goes; FSDP's gathered units
#   (more of them with prefetching) come on top of its shards. PyTorch's FSDP shards 1-D
#   parameters too.
# * Padding each group to a multiple of N makes the shards equal; the bytes a rank holds then
#   equal the formula exactly.
# * Our ZeRO-1/2 and FSDP give the same parameters as one process and as PyTorch's implementations.
#
# **Exercises** (in `exercises/lab10_zero.py`): `model_state_bytes`, `zero1_step`, `fsdp_linear`;
# each has a "check your work" cell above. Grade them with `python -m labkit.grade --lab 10` (or
# `make grade LAB=10`).
