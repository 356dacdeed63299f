# Source of notebooks/09_memory.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 09 — Memory: where a training step's bytes go, and how to need fewer
#
# A model that trains fast on one device is of no use if its step does not fit in the device's
# memory. This lab counts every byte of a training step — exactly, by watching every tensor the
# step creates and frees — and then takes the memory down piece by piece: recomputing activations,
# splitting the batch, storing numbers in fewer bits, and moving state off the device.
#
# **You will be able to**
# 1. say how many bytes per parameter Adam training needs, in fp32 and in mixed precision, and why
#    a 70-billion-parameter model needs over a terabyte before its first activation — and why
#    models outgrew one device (the memory wall);
# 2. count the activations a transformer block keeps for backward, and read a memory timeline of
#    forward, backward and the optimizer step;
# 3. write activation checkpointing yourself and predict its memory for any segment length, with
#    its optimum near √N, and its cost: one extra forward;
# 4. compare selective and full recomputation, and gradient accumulation;
# 5. train in bf16 and fp16, and see what loss scaling rescues; put optimizer states on a slower
#    tier; quantize weights to 8 and 4 bits and measure what it costs;
# 6. size the memory of inference: two activations for a forward-only chain, the KV cache of a
#    decoder, and the activations of a CNN and an RNN.
#
# The measuring instrument is `labkit.memory.tracker.MemoryTracker`: a PyTorch *dispatch mode* that
# sees every operation, counts each tensor storage it creates (views share storage, so they cost
# nothing), and notices the moment each storage is freed. It sorts what is live into parameters,
# gradients, optimizer states and activations.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.grading.check import check_your_work
from labkit.memory import accumulation, lab, mixed_precision, offload, quantize, recompute
from labkit.memory import activation_checkpointing as checkpointing
from labkit.memory.estimate import activation_bytes_per_layer, gpt_layer_saved_bytes
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPTConfig
from labkit.show import show
from labkit.viz import memory as V

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. Model states: 16 bytes per parameter
#
# Training with Adam keeps, for every parameter: the parameter, its gradient, and Adam's two
# running averages m and v. In fp32 that is 4 + 4 + 4 + 4 = 16 bytes. **Mixed precision** computes
# in 16 bits (bf16 or fp16) but keeps an fp32 *master copy* of the weights for the update — tiny
# updates would vanish if added to a 16-bit weight — so it is 2 (bf16 weights) + 2 (bf16 gradients)
# + 4 (fp32 master) + 4 (m) + 4 (v) = 16 bytes again. Mixed precision saves activation memory and
# time, not model-state memory.
#
# **A common mistake** counts Adam's states as m and v alone and puts a 70B model's at 560 GB. That
# forgets the fp32 master weights, the third optimizer state of mixed precision — and the 16-bit
# weights and gradients come on top.
#
# **Predict first:** how many GB do the fp32 master weights, m and v of a 70B model take?

# %%
budget = lab.budget_table(70e9)
print(budget)
gb = dict(zip(budget.column("state"), budget.column("GB")))
claim_close("fp32 master weights, m and v: 840 GB", gb["fp32 master weights"] + gb["Adam m (fp32)"]
            + gb["Adam v (fp32)"], 840)
claim_close("1.12 TB in all: 16 bytes per parameter", gb["total"], 1120)
claim("fourteen 80 GB devices for the states alone", budget.title.split(": ")[1].startswith("14 devices"),
      budget.title.split(": ")[1])

# %% [markdown]
# 840 GB of fp32 states (master weights, m and v) and 1.12 TB in all — fourteen 80 GB devices
# before a single activation. Counting m and v only gives 560 GB, a third too little. This is the
# problem that Lab 10's ZeRO solves by sharding these states over the data-parallel ranks.
#
# Measured, on our small GPT after one Adam step (`MixedPrecisionAdam` keeps the fp32 master copy
# in the optimizer's state, as ZeRO's accounting does):

# %%
states = lab.state_table()
print(states)
claim("16 bytes per parameter plus Adam's step counters, to the byte",
      states.column("total B/p") == states.column("16 + 4·tensors/Ψ"), "fp32 and bf16 + fp32 master")

# %% [markdown]
# Sixteen bytes per parameter, to the byte — plus one 4-byte step counter per parameter tensor
# that PyTorch's Adam keeps. Without the master copy, bf16 updates are lost outright:

# %%
lost = mixed_precision.lost_updates()
print(f"{lost.steps} Adam steps of lr {lost.lr} on a bf16 weight of {lost.start}:")
print(f"  added to the bf16 weight itself:  {lost.without_master}")
print(f"  added to an fp32 master copy:      {lost.master:.6f} (bf16 copy {lost.with_master})")
claim("on the bf16 weight itself every update is lost", lost.without_master == lost.start, "it stays 1.0")
claim("through an fp32 master they add up and reach the bf16 copy", lost.with_master < lost.start,
      f"{lost.with_master}")

# %% [markdown]
# Ten Adam steps of about 0.001 on a bf16 weight of 1.0 leave it at exactly 1.0. bf16 keeps 8
# significant bits (7 stored), so just below 1.0 its numbers are 2⁻⁸ ≈ 0.0039 apart, and a step
# smaller than half of that, 0.002, rounds back to 1.0. With an fp32 master, the updates add up
# there and reach the bf16 copy.
#
# ### 1.1 The memory wall: why models outgrew one device
#
# Sixteen bytes per parameter is a fixed price; what changed is the number of parameters. Put each
# well-known model next to the largest accelerator memory on sale in its year and count how many
# such devices its model states fill, before any activation. For the GPT-shaped models we do not
# copy the paper's rounded count: we build each one from its published shape on PyTorch's `meta`
# device — tensors with shapes but no storage, so even 530 billion parameters cost nothing — and
# count. BERT, PaLM and Llama have other layer shapes; for them we take the count their papers state.
#
# **Predict first:** BERT-Large's training state (2018) fit on one 32 GB V100. How many 80 GB
# devices — the largest of 2021 — does Megatron-Turing NLG's take, three years later?

# %%
import math

from labkit.memory import wall
from labkit.model import GPT

gaps = {}
for m in wall.MODELS:
    if m.config is not None:
        with torch.device("meta"):                 # shapes only: no memory is allocated
            built = sum(p.numel() for p in GPT(m.config).parameters())
        gaps[m.name] = (built, m.params, abs(built - m.stated) / m.stated)
        print(f"{m.name:20s} built {built / 1e9:8.3f} B   paper {m.stated / 1e9:6.3f} B")
claim("each model built on the meta device has exactly labkit's closed-form parameter count",
      all(b == p for b, p, _ in gaps.values()), f"{len(gaps)} models")
claim_between("and each is within 1.5% of the count its paper states", max(g for *_, g in gaps.values()),
              0, 0.015)

# %%
wall_rows = wall.wall_rows()
print(lab.wall_table())
by_name = {r.model.name: r for r in wall_rows}
claim("BERT-Large's states fit on one device in 2018", by_name["BERT-Large"].devices == 1,
      f"{by_name['BERT-Large'].state_bytes / 1e9:.1f} GB on a 32 GB V100")
claim_close("Megatron-Turing NLG's fill 106 of 2021's largest devices",
            by_name["Megatron-Turing NLG"].devices, 106)
claim_close("GPT-3's states alone are 2.8 TB", by_name["GPT-3"].state_bytes / 1e12, 2.8, abs_=0.05, unit=" TB")

# %% [markdown]
# From one device to 106 in three years. Each state byte is the formula of section 1, 16·Ψ; the
# parameter counts are measured. How fast did each side grow? A straight line through log(value)
# against the year gives a factor per year:

# %%
model_growth = wall.growth_per_year([(r.model.year, r.model.params) for r in wall_rows if r.model.year <= 2021])
memory_growth = wall.growth_per_year([(d.year, d.gb) for d in wall.DEVICES])
print(f"model parameters 2018-2021: x{model_growth:.1f} a year")
print(f"largest device memory 2016-2024: x{memory_growth:.2f} a year")
claim_between("models grew about ten-fold a year from 2018 to 2021", model_growth, 8, 16)
claim_between("device memory grew about a third a year", memory_growth, 1.2, 1.5)
claim_between("i.e. it doubled every two to two and a half years", math.log(2) / math.log(memory_growth), 2, 2.5,
              unit=" years")
b200 = wall.largest_device(2024)
fits = b200.gb * wall.GB / wall.model_state_bytes(1)
claim_close("the largest device of 2024 holds the states of a 12B-parameter model", fits / 1e9, 12)
claim("and 2024's Llama 3.1 405B still needs more than 30 of them", by_name["Llama 3.1 405B"].devices > 30,
      f"{by_name['Llama 3.1 405B'].devices} x {b200.name}")

# %% [markdown]
# **A common mistake** is to say the next GPU generation will make room. Memory doubled every two
# to two and a half years (1.35× a year) while the largest models grew about ten-fold a year; the gap
# is the *memory wall*. After 2021 frontier models stopped growing as fast — training on more tokens
# paid better than more parameters — but a 405B model still fills 34 of 2024's largest devices.
# Press Play to watch the gap open year by year:

# %%
lab.wall_player()

# %% [markdown]
# Everything after this section is a response to that gap: this lab keeps fewer bytes per
# device (recomputation, lower precision, offload); Lab 10 shards the states over data-parallel
# ranks (ZeRO); Labs 07, 08 and 11 split the model itself; Lab 11 ends with a guide to which
# split to choose.
#
# ## 2. A step, op by op
#
# The tracker records the bytes live after every op. Here is one training step of a chain of 8
# layers (Linear + Tanh), with Adam's states already present from an earlier step:
#
# **Predict first:** where is the peak — at the end of forward, in backward, or in the optimizer
# step?

# %%
lab.checkpoint_widget(n_layers=8)

# %% [markdown]
# Frame 1 is the plain step (the peak here is of all bytes; the title gives the activations'
# own). Forward piles up activations (red): each layer keeps its input for backward. The peak
# comes early in backward, when the saved activations are all still there and the first gradients
# appear. Backward then frees activations as it consumes them while gradients (orange) grow to
# their full size, and the step ends at the size it began with: Adam updates in place (a few
# temporaries come and go). The other frames are activation checkpointing, section 4. Move the
# slider.

# %%
plain = lab.step_timeline(8)
at_peak = max(plain.samples, key=lambda s: s.total)
forward_end = [x for x in plain.samples if x.phase == "forward"][-1]
step = [x for x in plain.samples if x.phase == "step"]
claim("the peak is in backward, above the end of forward", at_peak.phase == "backward"
      and at_peak.total > forward_end.total, f"{at_peak.total} vs {forward_end.total} bytes")
claim("the step ends at the size it began with", step[0].total == step[-1].total, f"{step[-1].total} bytes")

# %% [markdown]
# ## 3. Activations of a transformer block, counted exactly
#
# What autograd keeps depends on every op: a Linear keeps its input, a GELU its input, a softmax its
# output, a LayerNorm its input and two per-row statistics, and a batched matmul on a transposed
# view keeps a contiguous *copy* of it. For one block of our GPT, with b sequences of s tokens,
# h features, a heads, an MLP of width r·h and e bytes per element:
#
#     (8 + 2r)·b·s·h·e  +  4·b·s·e  +  a·b·s²·e  +  s²
#
# — the inputs of the two LayerNorms, of qkv, of the attention output projection and of fc, three
# copies for q, k and v, GELU's and the MLP projection's inputs; LayerNorm statistics; the
# softmax output; the causal mask (one byte per pair, shared by the batch). On a CPU, LayerNorm
# keeps its statistics in the model's dtype (CUDA keeps them in fp32), so the count below is exact
# on a CPU.
#
# **Predict first:** for 2 layers, batch 4, s = 16, h = 32, a = 4 in bf16, how far will the
# closed form be from what the tracker measures?

# %%
acts = lab.activation_table()
print(acts)
part = dict(zip(acts.column("part"), acts.column("bytes")))
claim_close("the tracker measures the closed form, to the byte", part["measured (tracker)"], part["total"])
claim_close("one layer of ours, reconciled, is Korthikanti's per-layer count exactly", part["  = reconciled"],
            part["Korthikanti 34sbh + 5as²b"])

# %% [markdown]
# Zero bytes apart. The formula of Korthikanti et al. (2022), 34·s·b·h + 5·a·s²·b bytes per layer
# in 16 bits, is widely quoted; it is for *one layer*, so it compares with one of our layers, not
# with the whole model (which adds the final LayerNorm, the head and the loss). The two differ by
# what the models contain: theirs has dropout — two masks of s·b·h bytes, the attention's mask of
# a·s²·b and its output of 2·a·s²·b — which ours does not; ours keeps the LayerNorm statistics
# and the causal mask, which theirs leaves out as small. Added and taken away, the counts agree
# exactly. The term to watch in both is the one in s²: at long sequences the attention scores
# dominate. Which of these tensors are worth keeping is the question of section 5.
#
# ## 4. Activation checkpointing
#
# Keep only some activations in forward and recompute the rest in backward. Cut N layers into
# segments of k; run each segment's forward *without* recording a graph, keeping only its input;
# in backward, run the segment again with recording on, and back-propagate through that. In
# PyTorch this is a `torch.autograd.Function` whose `forward` runs under `torch.no_grad()` and
# saves the segment's input, and whose `backward` recomputes and calls `torch.autograd.backward`.
#
# Memory: ⌈N/k⌉ segment inputs are kept, plus, during one segment's backward, its k recomputed
# activations. The exact peak of our chain,
# with a the bytes of one (B, w) activation, is (⌈N/k⌉ + k + 2)·a plus a layer's gradients and two
# scalars. The cost: every layer runs forward twice, so one extra forward per step.
#
# **Predict first:** 16 layers. Which k gives the lowest peak? Is k = 1 (checkpoint every layer)
# better or worse than no checkpointing at all?

# %%
ck = checkpointing.checkpoint_table(16)
print(ck)
peak = dict(zip(ck.column("k"), ck.column("peak act. bytes")))
claim("every measured peak equals the closed form", ck.column("peak act. bytes") == ck.column("closed form"),
      f"{len(ck.rows)} rows")
claim("k = 4 = √16 is the lowest peak", min(peak, key=lambda k: (peak[k], str(k))) == 4,
      f"{peak[4]} bytes against {peak['none']} without checkpoints")
claim("k = 1 is worse than no checkpointing", peak[1] > peak["none"], f"{peak[1]} > {peak['none']}")
claim("the extra work is one forward for every k", set(ck.column("extra FLOPs")[1:]) == {8192}, "8192 FLOPs")

# %% [markdown]
# k = 4 = √16 is best: about N/k + k activations are kept, smallest near k = √N. k = 1 is
# *worse* than no checkpointing: every layer's input is kept anyway, and the segment machinery
# adds the incoming gradient and the recomputed output. Every
# measurement equals the closed form, and the extra FLOPs are exactly one forward for every k.
# Now go back to the widget in section 2 and step through k: the red hill flattens into ⌈N/k⌉
# small ones.
#
# PyTorch's own `torch.utils.checkpoint` (non-reentrant) recomputes inside the normal backward: it
# keeps one activation fewer than ours here (two when the last segment is shorter). Compare the
# times too (they vary from run to run):

# %% tags=["nbval-ignore-output"]
print(checkpointing.compare_table())

# %% [markdown]
# **A common mistake** says checkpointing "is numerically inconsistent for stochastic layers" such
# as dropout. It is not, if the recomputation draws the same random numbers: save the random
# generator's state before a segment's forward and restore it before recomputing. Without that,
# dropout draws new masks and the gradients are wrong:

# %%
layers = checkpointing.make_chain(6, 8, dropout=0.3, seed=1)
x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2), requires_grad=True)
grads = {}
for label, seg, keep in (("plain", None, True), ("checkpointed", 2, True), ("no RNG restore", 2, False)):
    torch.manual_seed(3)
    x.grad = None
    checkpointing.chain_loss(layers, x, seg, "ours" if seg else "none", preserve_rng_state=keep).backward()
    grads[label] = x.grad.clone()
for label in ("checkpointed", "no RNG restore"):
    print(f"{label:>15}: max |grad - plain| = {(grads[label] - grads['plain']).abs().max().item():.2e}")
claim("with the random state restored, checkpointing with dropout is exact",
      torch.equal(grads["checkpointed"], grads["plain"]), "bit for bit")
claim("without it, dropout draws new masks and the gradients are wrong",
      (grads["no RNG restore"] - grads["plain"]).abs().max().item() > 1e-3, "far from rounding")

# %% [markdown]
# ### Exercise 1: `checkpointed_forward`
#
# In `exercises/lab09_memory.py`, write `checkpointed_forward(layers, x, segment)`: every segment
# run without a graph and recomputed in backward, the random state restored. The cell runs yours
# on a chain with dropout for several k (gradients against the plain chain, peak bytes against
# the closed form), draws your step's memory, and grades it.

# %%
check_your_work("lab09_memory", "checkpointed_forward", picture=lab.picture("checkpointed_forward"))

# %% [markdown]
# Ours, for comparison (the RNG states of CUDA devices are saved too, once CUDA is in use):

# %%
show(checkpointing._Checkpoint)

# %% [markdown]
# ## 5. Selective and full recomputation in a transformer
#
# Checkpointing whole blocks ("full" recomputation) keeps only each block's input, b·s·h·e bytes,
# and runs every Linear twice. Korthikanti et al. observed that the attention core — scores,
# softmax, and the product with V — holds the s² terms but costs few FLOPs, so they recompute only
# that (**selective** recomputation). In our GPT the core is `attention_core`, and recomputing it
# frees exactly the softmax output and the mask:
#
# **Predict first:** how many extra FLOPs does selective recomputation cost, next to full?

# %%
rec = recompute.recompute_table(GPTConfig(layers=2, hidden=32, heads=4, seq_len=32, vocab=64))
print(rec)
flops = dict(zip(rec.column("policy"), rec.column("extra FLOPs")))
kept = dict(zip(rec.column("policy"), rec.column("kept after fwd")))
claim("selective costs 1/7 of full recomputation's extra FLOPs", 7 * flops["selective"] == flops["full"],
      f"7 x {flops['selective']} = {flops['full']}")
claim("extra FLOPs equal the closed form; losses and gradients bit-identical",
      rec.column("extra FLOPs") == rec.column("closed form") and set(rec.column("bitwise")) == {"yes"}, "3 policies")
claim("full keeps far less than selective, selective less than none", kept["full"] < kept["selective"] < kept["none"],
      f"{kept['none']} > {kept['selective']} > {kept['full']} bytes")
claim_between("s/(6h + s) for GPT-3 (s = 2048, h = 12 288): about 2.7 %", 100 * 2048 / (6 * 12288 + 2048), 2.65, 2.75,
              unit=" %")

# %% [markdown]
# Selective saves the s² terms for 1/7 of full recomputation's extra FLOPs; full saves far more
# memory for far more compute. Both give bit-identical losses and gradients. The ratio of extra
# FLOPs is s/(6h + s) (with r = 4): 1/7 here where s = h, but 2.7 % for GPT-3 (s = 2048,
# h = 12 288) — selective recomputation is nearly free at scale.
#
# ### 5.1 Choosing what to keep under a budget
#
# Selective and full recomputation are two hand-picked points among all the subsets of a step's
# activations. In general, keeping tensor i costs its bytes from forward to backward, and dropping
# it costs the FLOPs that recompute it in backward. Given a memory budget, which tensors should
# be kept?
#
# PyTorch can keep exactly the set you choose: *selective activation checkpointing*. Inside a
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)` region, a policy
# built with `torch.utils.checkpoint.create_selective_checkpoint_contexts` answers, for each op,
# `CheckpointPolicy.MUST_SAVE` (keep its output) or `PREFER_RECOMPUTE`; in backward, the region
# is replayed and every op not saved runs again. So the bytes kept are the sum of the saved
# outputs and the FLOPs recomputed the sum of the others' — `labkit.memory.policy` runs a chain
# of bias-free Linear+Tanh layers that way and measures both, with our tracker and PyTorch's FLOP
# counter. The candidates are the chain's matmul outputs: output i is (16, w_{i+1}) float32, and
# recomputing it costs 2·16·w_i·w_{i+1} FLOPs, so the cheap-to-keep and the costly-to-recompute
# are not the same tensors.
#
# **Predict first:** with half of the seven outputs' bytes as the budget, does keeping the
# outputs with the most FLOPs per byte first (greedy) recompute as little as the best choice? And
# keeping the smallest first?

# %%
from labkit.memory import policy as P
from labkit.table import Table

sizes, costs = P.chain_tensors(lab.POLICY_WIDTHS, lab.POLICY_BATCH)


def greedy(order, budget):
    keep, used = [], 0
    for i in order:
        if used + sizes[i] <= budget:
            keep, used = keep + [i], used + sizes[i]
    return sorted(keep)


by_density = sorted(range(len(sizes)), key=lambda i: -costs[i] / sizes[i])
by_size = sorted(range(len(sizes)), key=lambda i: sizes[i])
rows = []
for share in (0.25, 0.5, 0.75):
    budget = int(share * sum(sizes))
    least, best = P.best_by_brute_force(sizes, costs, budget)
    rows.append((budget, P.recomputed(costs, greedy(by_size, budget)),
                 P.recomputed(costs, greedy(by_density, budget)), least))
print(f"sizes {sizes} B\ncosts {costs} FLOPs")
print(Table(["budget B", "smallest first", "FLOPs/byte first", "least possible (all subsets)"], rows,
          title="FLOPs recomputed"))
half = rows[1]
claim("at half the bytes, both greedy orders recompute more than the best",
      half[1] > half[3] and half[2] > half[3], f"{half[1]}, {half[2]} vs {half[3]}")
runs = [(keep, P.measure_chain_policy(lab.POLICY_WIDTHS, lab.POLICY_BATCH, keep))
        for keep in ([], greedy(by_density, half[0]), list(range(len(sizes))))]
claim("selective checkpointing keeps and recomputes exactly the sums",
      all(r.kept_bytes == sum(sizes[i] for i in k) and r.extra_flops == P.recomputed(costs, k) and r.exact
          for k, r in runs), f"{len(runs)} policies, gradients exact")

# %% [markdown]
# Neither greedy order is optimal: the densest tensors first fill the budget badly, and the
# smallest first ignores what they cost. Choosing the subset is the **0/1 knapsack problem** —
# the budget is the capacity, the bytes the weights, the FLOPs avoided the value — and the
# measurements agree with the model: what selective checkpointing keeps and recomputes are
# exactly the sums. (Checkmate, Jain et al. 2020, solves the harder version in which recomputing
# a tensor needs its inputs, as an integer linear program.)
#
# ### Exercise 2: `checkpoint_policy`
#
# In `exercises/lab09_memory.py`, write `checkpoint_policy(sizes, costs, budget)`: the indices of
# the tensors to keep, sorted, that fit the budget and leave the least to recompute. The cell runs
# yours on the chain above for budgets from nothing to everything, keeps what you chose under
# PyTorch's selective checkpointing and measures it, and compares with the best any choice can do.
# The grader checks the budget and the optimum on random cases of up to 12 tensors.

# %%
check_your_work("lab09_memory", "checkpoint_policy", picture=lab.picture("checkpoint_policy"))

# %% [markdown]
# ## 6. Gradient accumulation
#
# Split a batch of B into micro-batches of m, run forward and backward on each with the loss
# divided by the number of micro-batches, and step once: the summed gradients are those of the
# whole batch. Activations scale with m, the model states do not.
#
# **Predict first:** 12 sequences in micro-batches of 1, 2, 3, 4, 6, 12. Does the peak grow in
# proportion to m, or as something plus m times something?

# %%
acc = accumulation.accumulation_table(GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=128), 12,
                                      (1, 2, 3, 4, 6, 12))
print(acc)
peaks, closed = acc.column("peak act. bytes"), acc.column("closed form")
claim("from m = 2 on, the peak is exactly c0 + m·c1", peaks[1:] == closed[1:], f"{len(peaks) - 1} rows")
claim("at m = 1 a moment deeper in backward is higher", peaks[0] > closed[0], f"{peaks[0]} > {closed[0]}")
claim("the gradients agree with the whole batch's to rounding", max(acc.column("max |dgrad|")) < 1e-15,
      f"{max(acc.column('max |dgrad|')):.1e}")

# %% [markdown]
# The peak is exactly c₀ + m·c₁ (the closed form column) once the loss head is the largest thing
# in flight; at m = 1 a moment deeper in backward is higher. Gradients agree to rounding.
#
# ## 7. Mixed precision: bf16, fp16, and loss scaling
#
# bf16 has fp32's exponent range and 8 significant bits; fp16 has 11 significant bits but a range
# that ends at 6·10⁻⁸ (subnormals) and 65 504. Small gradients underflow to zero in fp16. **Loss
# scaling** multiplies the loss by S before backward, so the gradients are S times larger and
# representable, and divides them by S before the update. A *dynamic* scaler starts high, halves S
# and skips the step when a gradient overflows to inf, and doubles S after a run of clean steps:

# %%
show(mixed_precision.DynamicLossScaler.update)
hist = mixed_precision.scale_history_table()
print(hist)
scales, skipped = hist.column("scale S"), hist.column("skipped")
claim("each overflow halves S and skips the step", all(b == a / 2 for a, b, s in zip(scales, scales[1:], skipped)
      if s == "yes"), f"{skipped.count('yes')} skipped of {len(scales)}")

# %% [markdown]
# Ours against PyTorch's `torch.amp.GradScaler` on the same two fp16 runs:

# %%
gs = mixed_precision.gradscaler_table()
print(gs)
claim("ours and torch.amp.GradScaler: the same scales and the same parameters, bit for bit",
      all(gs.column("same scales")) and all(gs.column("same parameters")), "2 runs")

# %% [markdown]
# The same scale at every step and the same parameters bit for bit. With the loss scaled down by 2¹² (as when 4 096 micro-batches are accumulated), plain fp16 loses
# most gradients:
#
# **Predict first:** which modes end near fp32's loss?

# %%
prec = mixed_precision.precision_table()
print(prec)
final = dict(zip(prec.column("mode"), prec.column("final loss")))
flushed = dict(zip(prec.column("mode"), prec.column("flushed grads")))
claim_between("plain fp16 flushes most gradient entries to zero", flushed["fp16"], 0.5, 0.7)
claim("and stalls far above fp32's loss", final["fp16"] - final["fp32"] > 1, f"{final['fp16']:.2f} vs {final['fp32']:.2f}")
claim("scaled fp16, bf16 and bf16 autocast end within 0.01 of fp32",
      max(abs(final[m] - final["fp32"]) for m in ("fp16-scaled", "bf16", "bf16-autocast")) < 0.01, "30 steps")

# %% [markdown]
# fp16 without scaling flushes 60 % of the gradient entries to zero and stalls; with scaling it
# tracks fp32, as do bf16 and bf16 autocast. Autocast keeps the weights in fp32 and runs matmuls in
# bf16 (the logits too; the loss is then computed in fp32): activations shrink by a third, not a
# half, since LayerNorm and the residual stream stay fp32 — and the column counts autocast's cached
# bf16 copies of the weights as well.
#
# ## 8. Offload: optimizer states on a slower tier
#
# ZeRO-Offload's idea: keep Adam's 12 bytes per parameter in host memory for good, send the
# gradients there, run the update there, and send the new weights back; m and v never move. The step costs the bytes moved over the link's
# bandwidth plus the update: T ≈ bytes / bandwidth + T_update. On a GPU box the tier is pinned host
# memory behind PCIe; on this machine the same code keeps the states in a memory-mapped file. The
# bandwidth is measured in the same run (timings vary):

# %% tags=["nbval-ignore-output"]
off = offload.offload_table()
print(off)

# %% [markdown]
# On a GPU box the next cell measures the "pinned" tier: gradients and weights cross PCIe, whose
# nominal rate per direction is 32 GB/s for 4.0 x16 (an A100 PCIe card) and 64 GB/s for 5.0 x16
# (an H100), so the 3.5 MB moved per step cost about 0.05 ms (PCIe 5.0) to 0.11 ms (PCIe 4.0) at
# the very least, against microseconds for the update on the GPU itself — offload trades step
# time for device memory.
#
# The same cell compares the tracker's peak with the CUDA caching allocator's own
# (`torch.cuda.max_memory_allocated`). The allocator reads higher, and for a small model far
# higher: the first matrix multiply allocates the **cuBLAS workspace** through it (several MiB,
# kept for later calls, owned by no tensor); the rest is the allocator's rounding of each block
# to a multiple of 512 bytes.

# %%
moved = off.column("bytes moved/step")[0]          # gradients out, new weights back
for gen, gbps in (("PCIe 4.0 x16", 32e9), ("PCIe 5.0 x16 (H100)", 64e9)):
    print(f"{gen:20}: {moved / gbps * 1e3:.3f} ms per step at the nominal rate")
claim("3.5 MB cost about 0.05 ms on PCIe 5.0 and 0.11 ms on PCIe 4.0", (round(moved / 64e9 * 1e3, 2),
      round(moved / 32e9 * 1e3, 2)) == (0.05, 0.11), f"{moved} bytes moved per step")

# %%
gpu_peaks = None
if torch.cuda.is_available():
    print(offload.offload_table(tiers=("pinned",)))
    gpu_peaks = lab.cuda_peak_table()
    print(gpu_peaks)
else:
    print("No GPU here: on one, this cell times the pinned-memory tier and compares the tracker's peak")
    print("with the CUDA allocator's own (torch.cuda.max_memory_allocated).")

# %%
if gpu_peaks is not None:                           # the claims about a real GPU's allocator
    tracker, allocator, requested, workspace = gpu_peaks.column("peak bytes")
    claim("the allocator's peak is above the tracker's", allocator > tracker, f"{allocator / tracker:.1f}x")
    claim("most of the difference is the cuBLAS workspace", 0 < workspace <= allocator - tracker
          and workspace >= (allocator - tracker) / 2, f"{workspace} of {allocator - tracker} bytes")

# %% [markdown]
# ## 9. Quantization
#
# Store a weight w as an integer code q = round(w / s) with a scale s = max|w| / (2^(bits−1) − 1),
# per tensor, per output channel, or per group of consecutive weights. Each element's error is at
# most s/2; a finer granularity gives each block its own, smaller s, at the cost of storing more
# scales. int4 codes are packed two per byte.
#
# **Predict first:** int4 per tensor vs per channel: which costs less loss, and by how much?

# %%
trained = quantize.train_gpt(quantize.QUANT_CFG, 200)   # one trained model for both tables
quant = quantize.quantization_table(model=trained)
print(quant)
change = {(w, g): c for w, g, *_, c in quant.rows}
claim("int8 is free at this scale", max(abs(change[("int8", g)]) for g in ("tensor", "channel", "group")) < 0.001,
      "|loss change| < 0.001")
claim("int4 costs loss, less with finer scales",
      change[("int4", "tensor")] > change[("int4", "channel")] > change[("int4", "group")] > 0,
      f"{change[('int4', 'tensor')]:+.4f}, {change[('int4', 'channel')]:+.4f}, {change[('int4', 'group')]:+.4f}")

# %% [markdown]
# int8 is free at this scale; int4 costs loss, less with finer scales. Training *through* the
# quantizer (quantization-aware training, with the straight-through estimator: round in forward,
# pass the gradient through as if the rounding were the identity) recovers part of it.
#
# A fair comparison needs a control, and more than one run. From the trained model, QAT trains 40
# more steps through the int4 fake-quantizer, then is quantized; the control trains the same 40
# steps on the same batches without it, then is quantized. Both keep training, so both improve on
# the trained model's PTQ; the question is whether QAT's int4 model ends *below the control's*.
# Five seeds draw five different sets of fine-tuning batches:
#
# **Predict first:** by how much, and in how many of the five?

# %%
qat = quantize.qat_seed_table(trained, seeds=range(5))
print(qat)
d = qat.data
claim("QAT's int4 model ends below the control's in every seed", all(x < 0 for x in d["diffs"]),
      f"{sum(x < 0 for x in d['diffs'])} of {len(d['diffs'])}")
claim("the mean difference is more than 2 standard errors from 0", d["mean"] < -2 * d["se"],
      f"{d['mean']:+.4f} ± {d['se']:.4f}")
claim_between("about 0.009 on average", -d["mean"], 0.006, 0.012)

# %% [markdown]
# QAT's int4 model ends below the control's in each of the five, by about 0.009 on average: it
# learned weights that survive rounding. (The five runs differ only in the fine-tuning batches
# drawn for one trained model; the trained model itself is the same.)
#
# ## 10. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A 13B-parameter model, mixed-precision Adam. How many GB of model states? How many
# 80 GB devices hold them?
#
# <details><summary>Answer</summary>
#
# 16 · 13·10⁹ = **208 GB**, so at least **3** devices (240 GB), leaving 32 GB in all for
# activations — in practice ZeRO (Lab 10) shards the states over more.
#
# </details>
#
# **Problem 2.** One block of GPT-3 175B (h = 12 288, a = 96, s = 2 048, b = 1, bf16): how many
# bytes of activations does our count give, and how many does selective recomputation save?
#
# <details><summary>Answer</summary>
#
# (8 + 8)·2048·12288·2 + 4·2048·2 + 96·2048²·2 + 2048² = **1 614 823 424 B ≈ 1.6 GB**; selective
# saves the last two terms, **809 500 672 B** — half.
#
# </details>
#
# **Problem 3.** 100 layers, checkpointed. Which segment length keeps the fewest activations, and
# how many (segment inputs plus one segment's worth)?
#
# <details><summary>Answer</summary>
#
# k = √100 = **10**: 10 checkpoints + 10 recomputed = **20** activations instead of 100.
#
# </details>
#
# **Problem 4.** Loss scaling starts at S = 2¹⁶ with growth every 2 000 clean steps. Three overflows
# happen in the first 10 steps, none after. What is S at step 10 000?
#
# <details><summary>Answer</summary>
#
# 2¹⁶ halved three times is 2¹³; then 10 000 − 10 clean steps give ⌊9 990 / 2 000⌋ = 4 doublings
# (the count restarts after each skip): **2¹⁷ = 131 072**.
#
# </details>
#
# **Problem 5.** A 7B model's weights in int4 with groups of 128 and bf16 scales. How many GB?
#
# <details><summary>Answer</summary>
#
# 7·10⁹ / 2 bytes of codes + 7·10⁹ / 128 · 2 bytes of scales = 3.5 + 0.109 = **3.61 GB**.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
cfg = GPTConfig(hidden=12288, heads=96, seq_len=2048, vocab=8)
none, selective = (gpt_layer_saved_bytes(cfg, 1, 2048, 2, p) for p in ("none", "selective"))
print(16 * 13e9 / 1e9, none, none - selective, checkpointing.sqrt_rule(100), 2**13 * 2**(9990 // 2000))
print(7e9 / 2 / 1e9 + 7e9 / 128 * 2 / 1e9)
claim("Problems 1-3 as answered", (16 * 13e9 / 1e9, none, none - selective, checkpointing.sqrt_rule(100))
      == (208, 1_614_823_424, 809_500_672, 10), "208 GB, 1 614 823 424 B, 809 500 672 B, k = 10")
claim_close("Problem 5: 3.61 GB", 7e9 / 2 / 1e9 + 7e9 / 128 * 2 / 1e9, 3.61, abs_=0.005, unit=" GB")

# %% [markdown]
# ## 11. Offloading activations
#
# Section 8 moved the optimizer's states to a slower tier. The other large part of a step's memory
# is what autograd keeps for backward — section 3 counted it to the byte. PyTorch lets us intercept
# each saved tensor: inside `torch.autograd.graph.saved_tensors_hooks(pack, unpack)`, every tensor
# an op saves goes through `pack` in forward, and whatever `pack` returned goes through `unpack`
# when backward needs it. Our `ActivationOffload` packs by copying the tensor's storage to the tier
# (an mmap'd file here, pinned host memory under CUDA) and unpacks by copying it back. Parameters
# stay where they are; a storage that several saved tensors view is copied once.

# %%
from labkit.claims import claim, claim_close
from labkit.memory import activation_offload as AO
from labkit.memory.estimate import gpt_saved_activation_bytes

show(AO.ActivationOffload._pack)
show(AO.ActivationOffload._unpack)

# %% [markdown]
# **Predict first:** one forward and backward of a 4-layer GPT (h = 64, 4 sequences of 32 tokens,
# float32). How many bytes go to the tier and back? How much lower is the fast tier at the end of
# forward, and at the step's peak?

# %%
ao = AO.measure_step()
print(f"to the tier {ao.to_tier:,} B, back {ao.from_tier:,} B; saved activations (closed form) "
      f"{ao.saved_bytes:,} B")
print(f"fast tier at the end of forward: {ao.forward_end[False]:,} B -> {ao.forward_end[True]:,} B; "
      f"still held by the caller {ao.held_elsewhere:,} B")
print(f"fast tier peak of the step: {ao.peak[False]:,} B -> {ao.peak[True]:,} B")
claim("bytes moved each way equal the saved-activation bytes of section 3's closed form",
      ao.to_tier == ao.from_tier == ao.saved_bytes == gpt_saved_activation_bytes(AO.DEMO_CFG, 4)["total"],
      f"{ao.to_tier:,} B")
claim_close("after forward the fast tier is lower by what moved less the caller's",
            ao.forward_end[False] - ao.forward_end[True], ao.to_tier - ao.held_elsewhere)
claim("gradients are bit-identical with and without offload", ao.same_grads)
claim("the step's peak falls, by less than what moved", ao.peak[False] - ao.to_tier < ao.peak[True] < ao.peak[False],
      f"{ao.peak[False] - ao.peak[True]:,} B of {ao.to_tier:,} B")

# %% [markdown]
# At the end of forward everything saved has left the fast tier (the token ids and targets stay:
# the caller still holds them). The peak falls by less: backward brings each layer's activations
# back while that layer runs, on top of the gradients it is producing.
#
# **Time.** Here the copies run on the same stream as the compute, so nothing hides: the step
# should take (bytes to)/B_to + (bytes back)/B_back longer, with B measured now for this tier. On
# this machine (timings vary from run to run):

# %% tags=["nbval-ignore-output"]
tm = AO.time_model(ao)
print(f"without offload {tm['without_s'] * 1e3:.2f} ms; with: predicted {tm['predicted_s'] * 1e3:.2f} ms, "
      f"measured {tm['measured_s'] * 1e3:.2f} ms (copies at {tm['to_bw'] / 1e9:.1f} / "
      f"{tm['from_bw'] / 1e9:.1f} GB/s)")

# %% [markdown]
# The rest of the measured time is the hooks' own cost per saved tensor, which the model leaves
# out. On a GPU, copies on a side stream can hide behind compute: a layer does
# about 2·(4 + 2r)·h² FLOPs per token and saves (8 + 2r)·h·e bytes (with a fused attention kernel,
# which keeps no s × s scores), so its copies hide once h ≳ 1.3·F/B.
#
# **Predict first:** an H100 at 40% of its 989 TFLOP/s, s = 4096. Do the copies hide over PCIe
# 5.0 (about 55 GB/s in practice per direction) for h = 4096? For h = 12 288? Over a Grace Hopper's
# NVLink-C2C (450 GB/s)?

# %%
F = 0.4 * 989e12
ratio = {}
for link, bw in (("PCIe 5.0 x16", 55e9), ("NVLink-C2C", 450e9)):
    for h in (4096, 12288):
        compute, copy = AO.layer_hides(h, 4096, F, bw)
        ratio[link, h] = compute / copy
        print(f"{link:>13}, h = {h:>5}: compute {compute * 1e6:5.2f} us, copy {copy * 1e6:5.2f} us per token "
              f"and layer")
claim("over PCIe the copies hide at h = 12288 but not at h = 4096",
      ratio["PCIe 5.0 x16", 12288] > 1 > ratio["PCIe 5.0 x16", 4096],
      f"compute/copy {ratio['PCIe 5.0 x16', 12288]:.2f} and {ratio['PCIe 5.0 x16', 4096]:.2f}")
claim("over NVLink-C2C they hide at both widths", min(ratio["NVLink-C2C", h] for h in (4096, 12288)) > 1,
      f"compute/copy {ratio['NVLink-C2C', 4096]:.1f} and {ratio['NVLink-C2C', 12288]:.1f}")

# %% [markdown]
# PyTorch has the same idea built in: `torch.autograd.graph.save_on_cpu(pin_memory=True)` copies
# every saved tensor (parameters too) to pinned host memory. On a GPU the next cell compares it
# with ours by the CUDA allocator's peak.

# %%
print(AO.save_on_cpu_report())

# %% [markdown]
# ## 12. Inference memory: activation lifetime, the KV cache, CNNs and RNNs
#
# Everything so far was a training step, where autograd keeps activations until backward. Serving
# a model is different: there is no backward, so an activation is needed only until the next
# layer has read it. And generating text one token at a time brings a new kind of state, the
# **KV cache**.
#
# ### 12.1 A forward pass without autograd: two buffers suffice
#
# Under `torch.no_grad()` nothing is saved. While layer i + 1 writes its output, its input (layer
# i's output) is still alive; as soon as it returns, the input can go. So for a chain whose layers
# output a₁, …, a_L bytes the peak is **max(a₁, max_i (a_i + a_{i+1}))** — two neighbouring
# activations, however deep the chain. A training forward keeps what each op needs for backward:
# for Linear + ReLU pairs, every ReLU output (a Linear keeps its input, a ReLU its output, and the
# Linear's own output is freed once its ReLU has run), a sum that grows with depth.
#
# **Predict first:** widths 128 → 128 → … (six widths: five Linear+ReLU pairs, 10 module outputs
# of 8 KiB each at batch 16, float32). The forward-only peak? What does a training forward keep?

# %%
from labkit.memory import inference as Inf
from labkit.memory.lab import chain_table, cnn_rnn_table, kv_table, lifetime_player

ct = chain_table()
print(ct)
claim("the measured forward-only peak is max(a1, max a_i + a_(i+1)) on every chain",
      all(r[4] == r[5] for r in ct.rows), f"{[r[4] for r in ct.rows]}")
claim("for equal widths it is exactly two activations", all(r[4] == 2 * r[3] for r in ct.rows if len(set(
      r[0].split())) == 1), "two buffers")
claim("what a training forward keeps equals the ReLU outputs' sum, and grows with depth",
      all(r[6] == r[7] for r in ct.rows) and ct.rows[2][6] == 5 * ct.rows[2][3])

# %% [markdown]
# The animation steps through both passes of a four-layer chain, module by module: after a module
# has run (its input and its output exist) and after the caller has moved on (the input released).
# The forward-only row never holds more than two boxes; the training row keeps every ReLU output.

# %%
lifetime_player((64, 64, 64, 64), 8)

# %% [markdown]
# ### Exercise 3: `forward_only_peak`
#
# The cell below runs yours on the three chains above, next to the measured peaks, then grades it.

# %%
check_your_work("lab09_memory", "forward_only_peak", picture=lab.picture("forward_only_peak"))

# %% [markdown]
# ### 12.2 The KV cache
#
# A decoder generates token t + 1 from tokens 1 … t. Recomputing every earlier token's keys and
# values at each step would make a step cost grow with t; instead each layer keeps them. One
# token of one sequence costs **2 · layers · kv_heads · head_dim · bytes per element**: K and V,
# every layer. With multi-head attention kv_heads = heads (so kv_heads · head_dim = hidden);
# grouped-query attention (GQA) lets several query heads share one key/value head.
# `labkit.memory.inference.generate` decodes our GPT with a cache (`KVCache`): the model's own
# layers, one new token at a time, each attending to the cached keys and values.
#
# **Predict first:** our GPT with 3 layers, hidden 48, float32, batch 2. Bytes per token? And does
# cached decoding give the same logits as running the whole sequence through the model?

# %%
kvm = Inf.measure_kv_cache(batch=2, tokens=12)
print(f"closed form: {kvm.per_token} B per token (2 x 3 layers x 48 x 4 B x batch 2)")
print(f"cache held after 1..5 tokens: {kvm.held[:5]}")
print(f"live bytes added per step (tracker): {sorted(set(kvm.tracker_growth))}")
print(f"cached logits vs full forward: max |difference| {kvm.max_error:.1e}")
claim("the cache holds t times the closed form after t tokens",
      kvm.held == tuple(kvm.per_token * (t + 1) for t in range(12)), f"{kvm.per_token} B per token")
claim("each decoding step leaves exactly one token's K and V behind (tracker)",
      set(kvm.tracker_growth) == {kvm.per_token})
claim("cached decoding gives the full forward's logits", kvm.same_logits,
      f"within {kvm.tolerance:g}: summation order only")

# %% [markdown]
# At real sizes this is the largest part of serving memory after the weights: for published shapes
# (16-bit), per token and for one 4096-token sequence:

# %%
kt = kv_table()
print(kt)
per = {r[0].split(" (")[0]: r[4] for r in kt.rows}
claim("GPT-3's cache needs 4.5 MiB per token, 19 GB for one 4096-token sequence",
      per["GPT-3 175B"] == 4608 and abs(kt.rows[0][5] - 19.33) < 0.01)
claim("grouped-query attention makes Llama 2 70B's cache smaller than Llama 2 7B's",
      per["Llama 2 70B, GQA"] < per["Llama 2 7B"], f"{per['Llama 2 70B, GQA']:.0f} vs {per['Llama 2 7B']:.0f} KiB")

# %% [markdown]
# ### Exercise 4: `kv_cache_bytes`
#
# The check runs yours against the cache filled while decoding our GPT and on the three published
# shapes, then grades it.

# %%
check_your_work("lab09_memory", "kv_cache_bytes", picture=lab.picture("kv_cache_bytes"))

# %% [markdown]
# ### 12.3 Activations of a small CNN and an RNN
#
# The same bookkeeping works for any network: list what each op keeps for backward, count each
# storage once. In a CNN a convolution keeps its input, a ReLU its output, a max-pooling the
# position of each maximum — as **int64**, twice the bytes of a float32 — and its output, which the
# next layer keeps as its input. A recurrent network keeps every step's hidden state h_t (tanh keeps
# its output), and the input itself, since every step's `x[:, t]` is a view of it. So the CNN's
# activations shrink with each pooling while an RNN's grow with the sequence.
#
# **Predict first:** which single tensor is the CNN's largest? Which costs more, the two poolings'
# indices or their outputs?

# %%
cr = cnn_rnn_table()
print(cr)
tot = {r[0]: r for r in cr.rows if r[1] == "total"}
claim("the CNN's closed form equals the bytes measured at the end of its forward",
      tot["CNN"][2] == tot["CNN"][3], f"{tot['CNN'][3]:,} B")
claim("and the RNN's", tot["RNN"][2] == tot["RNN"][3], f"{tot['RNN'][3]:,} B")
idx = sum(r[2] for r in cr.rows if "indices" in r[1])
outs = sum(r[2] for r in cr.rows if r[1] in ("pool1 output", "pool2 output"))
claim("max-pooling's int64 indices take twice the bytes of its outputs", idx == 2 * outs, f"{idx} vs {outs} B")

# %% [markdown]
# ### 12.4 Worked problems
#
# **Problem 1.** A 24-layer MLP of width 4096, batch 64, bf16, served without autograd. Peak
# activation memory? And kept by a training forward (Linear + ReLU per layer)?
#
# <details><summary>Answer</summary>
#
# One activation: 64·4096·2 = 512 KiB. Forward only: **1 MiB** (two). Training keeps 24 ReLU outputs:
# **12 MiB** — and more with attention or normalisation layers.
#
# </details>
#
# **Problem 2.** Llama 2 70B (80 layers, 8 key/value heads of 128, bf16) serves 32 sequences of
# 4096 tokens. KV cache? With 64 key/value heads (no GQA)?
#
# <details><summary>Answer</summary>
#
# 320 KiB/token · 4096 · 32 = **40 GiB** (42.9 GB); without GQA 8× as much, **320 GiB** — more than
# the 140 GB of the weights themselves.
#
# </details>
#
# **Problem 3.** The CNN above with 32×32 images instead of 16×16. By what factor do its kept
# activations grow?
#
# <details><summary>Answer</summary>
#
# Every feature map has 4× the pixels, so everything but the logits grows **4×** (the Linear layer
# is also 4× wider, but its weights are parameters, not activations).
#
# </details>

# %%
claim("Problem 2: 40 GiB of KV cache for 32 x 4096 tokens of Llama 2 70B",
      Inf.kv_cache_bytes_per_token(80, 8, 128, 2) * 4096 * 32 == 40 * 2**30)
big = Inf.cnn_activation_bytes(4, 8, 16, 32, 10)
small = Inf.cnn_activation_bytes(4, 8, 16, 16, 10)
claim("Problem 3: the CNN's activations (logits aside) grow 4x from 16x16 to 32x32 images",
      big["total"] - big["logits"] == 4 * (small["total"] - small["logits"]))

# %% [markdown]
# ## Further reading
#
# * T. Chen et al., *Training Deep Nets with Sublinear Memory Cost*, 2016 — checkpointing, √N.
# * V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022 —
#   the activation formulas, selective recomputation, sequence parallelism.
# * P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018 — master weights, loss scaling.
# * J. Ren et al., *ZeRO-Offload: Democratizing Billion-Scale Model Training*, USENIX ATC 2021.
# * B. Jacob et al., *Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-
#   Only Inference*, CVPR 2018; Y. Bengio et al., 2013, for the straight-through estimator.
# * PyTorch: *Understanding CUDA Memory Usage* (memory snapshots), `torch.utils.checkpoint`,
#   `torch.amp`.
#
# ## Summary
#
# * Adam needs 16 bytes per parameter in fp32 and in mixed precision; activations come on top and
#   grow with batch and sequence (s² in attention).
# * The memory wall: from 2018 to 2021 the largest models grew about ten-fold a year, device
#   memory about a third a year; Megatron-Turing NLG's states fill 106 devices of 80 GB.
# * A block of our GPT keeps (8 + 2r)·b·s·h·e + 4·b·s·e + a·b·s²·e + s² bytes, measured to the byte
#   on a CPU.
# * Checkpointing keeps segment inputs and recomputes: (N/k + k) activations, best at k ≈ √N, for
#   one extra forward; with the random state restored it is exact, dropout included.
# * Selective recomputation removes the s² terms for little compute; accumulation trades time for
#   activation memory at no change in the gradients.
# * bf16 needs no loss scaling; fp16 does. Offload trades step time for device memory; int8 weights
#   are nearly free, int4 costs some loss that QAT recovers in part (in five of five seeds here).
# * Without autograd a chain needs two activations at a time; a decoder's KV cache costs
#   2·layers·kv_heads·head_dim·e bytes per token; CNN and RNN activations follow from what each op
#   keeps (int64 pooling indices, every hidden state), counted to the byte.
#
# **Exercises** (in `exercises/lab09_memory.py`): `checkpointed_forward`, `checkpoint_policy`,
# `forward_only_peak`, `kv_cache_bytes`;
# each has a "check your work" cell above. Grade them with `python -m labkit.grade --lab 09` (or
# `make grade LAB=09`).
