# Source of notebooks/14_long_context.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 14 — Long sequences, sharding specs and experts
#
# Labs 06–11 split a model's batch, its layers, its weights and its states. Three things that
# today's training runs need were left out. A **long sequence** — 100 000 tokens and more — makes
# one attention layer too big for one device, however the model is split. **Sharding specs**
# describe *any* split of a tensor over a grid of devices, not just Lab 07's "by columns or by
# rows". And a **mixture of experts** only works if its router spreads the tokens over the
# experts, which it does not do by itself.
#
# **You will be able to**
# 1. compute softmax attention one block of keys at a time (the online softmax), and say why the
#    running maximum is needed;
# 2. run ring attention and DeepSpeed-Ulysses on real ranks, check them against full attention,
#    and count the bytes each sends per rank;
# 3. measure the causal load imbalance of contiguous chunks and remove it with a zig-zag layout;
# 4. read and write DTensor placements — Shard, Replicate, Partial — on a 2-D mesh, and predict the
#    placement of a matmul's output and when a collective is needed;
# 5. keep a mixture-of-experts router balanced with the Switch Transformer's loss and the z-loss,
#    and measure what that does to dropped tokens.
#
# Before this lab: Lab 05 (collectives), Lab 07 (tensor and expert parallelism), Lab 10 (sharding).
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.context_parallel import formulas, lab
from labkit.context_parallel.ring import _RingAttention
from labkit.grading.check import check_your_work
from labkit.show import show

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. Why a long sequence needs its own parallelism
#
# Attention compares every position with every other: per layer and head it builds an S × S
# matrix of scores. Fused kernels (Lab 04) never store that matrix, but the activations that
# scale with S — queries, keys, values, outputs of every layer — still have to live somewhere,
# and the compute grows as S². Splitting the *batch* does not help when a single sequence is the
# problem; Megatron's sequence parallelism (Lab 07) splits only the parts outside attention.
# **Context parallelism** splits the sequence itself, attention included, over N ranks.
#
# **Predict first:** how many bytes would one head's score matrix take, in bf16, at S = 131 072?

# %%
S = 131_072
score_bytes = S * S * 2
print(f"one head's S x S scores at S = {S}: {score_bytes / 2**30:.0f} GiB")
claim_close("one head's score matrix at 128k tokens is 32 GiB in bf16", score_bytes / 2**30, 32)

# %% [markdown]
# ## 2. Attention one block at a time
#
# A query row's output is Σⱼ softmax(s)ⱼ·vⱼ over all keys j. Split the keys into blocks and keep,
# per row, a running state: m, the largest score so far; l, the sum of exp(s − m); and acc, the
# sum of exp(s − m)·v. A new block with scores s moves the maximum to m' = max(m, max s), and the
# old sums must be **rescaled** by exp(m − m') before the block's terms are added. After the last
# block the answer is acc / l. This is the *online softmax* of Milakov and Gimelshein (2018), the
# heart of FlashAttention — and of ring attention, where the blocks arrive from other ranks.
#
# The maximum is not a detail: exp() of a score above 88.7 is infinite in float32.
#
# **Predict first:** scores that rise block by block, up to about 150. What does the plain sum of
# exp(score) give in float32, and how far is the block-by-block answer from softmax at once?

# %%
b = lab.blockwise()
for j, (m, l) in enumerate(b["states"]):
    print(f"after block {j + 1}: running max m = {m:7.2f}, l = {l:.4f}")
print(f"plain sum of exp(score) in float32: {b['naive_sum']}")
print(f"block by block vs softmax at once: max |difference| {b['max_diff']:.1e}")
claim("the plain sum of exp(score) overflows in float32", b["naive_sum"] == float("inf"), f"{b['naive_sum']}")
claim_between("block by block equals softmax at once", b["max_diff"], 0, 1e-12)

# %% [markdown]
# The running maximum moved at every block, and l stayed near 1: each time, the new block held the
# largest scores, and the old sums shrank to almost nothing when rescaled.
#
# ### Exercise 1: `softmax_step`
#
# In `exercises/lab14_long_context.py`, write one step of the online softmax. Two things to get
# right: rescale the old sums when the maximum grows, and leave a row alone while all its scores
# are −∞ (a causal mask does that to early queries): −∞ − (−∞) is NaN. The cell runs yours on the
# blocks above and on a row masked in its first block.

# %%
check_your_work("lab14_long_context", "softmax_step")

# %% [markdown]
# ## 3. Ring attention
#
# Each of N ranks holds a contiguous chunk of the sequence: its queries, keys and values. The
# queries stay put; the key/value blocks travel round a ring. At step s rank r holds the block that
# started on rank r − s, folds it into its queries' online softmax, and meanwhile passes it on to
# rank r + 1 — the send for the next step is posted *before* this step computes, so the transfer
# overlaps the compute. After N steps every query has seen every key, and no rank ever held more
# than two blocks (Liu, Zaharia and Abbeel, 2023).
#
# The animation plays a causal ring on 4 ranks: the S × S score matrix by tile, the tiles each
# rank computes in the current step (dark), those it has done (pale), the ones the causal mask
# lets it skip (hatched), and, above, the block each rank holds. It plays contiguous chunks, then
# zig-zag chunks (section 4).

# %%
lab.ring_player(world=4, seq=16)

# %% [markdown]
# The forward pass. `forward_block` runs the online softmax over the tiles of one block; the
# posted `_pass_on` is the overlap:

# %%
show(_RingAttention.forward)

# %% [markdown]
# Backward is a second lap: the key/value blocks go round again, and with each travels the running
# sum of its gradient (dK, dV); each rank adds its queries' share, and after the lap the sums take
# one last hop home. So per rank, with one block = B·H·(S/N)·D elements of k (and as many of v):
# forward sends (N − 1)·2 blocks, backward (N − 1)·2 + N·2.
#
# **Predict first:** on 4 ranks, float64, how far from one process will the outputs and the
# gradients of q, k and v be? And will the bytes match those formulas exactly?

# %%
eq = lab.equivalence_table(worlds=(1, 2, 4))
print(eq)
worst = max(max(eq.column("out err")), max(eq.column("grad err")))
claim_between("ring and Ulysses attention equal full attention, outputs and gradients", worst, 0, 1e-12)
fwd_b, bwd_b = eq.column("fwd bytes"), eq.column("bwd bytes")
claim("the bytes counted on the ranks equal the closed forms, forward and backward",
      [r[5] for r in eq.rows] == [r[6] for r in eq.rows] and [r[7] for r in eq.rows] == [r[8] for r in eq.rows],
      f"{len(eq.rows)} rows")

# %% [markdown]
# Exact to the last bits (the sums are taken in another order), and the bytes match the formulas
# to the byte. Ulysses' rows come in section 5.
#
# ## 4. The causal mask and load balance
#
# With a causal mask a query sees only keys at or before it. Rank r's contiguous chunk needs the
# blocks of ranks 0 … r only: rank 0 computes one (half-masked) tile, rank N − 1 computes N. The
# blocks still travel the whole ring, so every step waits for the busiest rank.
#
# **A common mistake** is to say that a causal mask halves ring attention's time. It halves the
# *work*; the time is set by the last rank, which still does all of its tiles.
#
# **Predict first:** on 4 ranks, how many times the average work does the busiest rank do? What if
# each rank holds one early and one late half-chunk (chunks r and 2N − 1 − r of 2N: "zig-zag")?

# %%
work = lab.causal_work_table(world=4)
print(work)
contiguous, zigzag = work.rows
claim("FLOPs measured on the ranks equal 4·D times the score entries each rank computes",
      contiguous[1] == contiguous[2] and zigzag[1] == zigzag[2])
claim_close("contiguous chunks: the busiest rank does 2N/(N+1) times the mean work", contiguous[3], 2 * 4 / 5,
            rel=1e-12)
claim_close("zig-zag chunks: every rank does the same work", zigzag[3], 1.0, rel=1e-12)

# %% [markdown]
# The busiest rank does 1.6× the mean with contiguous chunks (2N/(N + 1), approaching 2), and
# zig-zag chunks make every rank equal — and do less in all, since finer tiles let more of them be
# skipped. Llama 3's context parallelism and PyTorch's own use this layout.
#
# ## 5. DeepSpeed-Ulysses: trade the split
#
# Attention mixes positions but never heads. So instead of passing blocks round, an **all-to-all**
# turns "every rank has all H heads of S/N positions" into "every rank has H/N heads of all S
# positions"; each rank runs ordinary attention for its heads, and a second all-to-all turns the
# output back (Jacobs et al., 2023). It needs H divisible by N.
#
# ### Exercise 2: `all_to_all_4d`
#
# Write the exchange: cut x into N pieces along `scatter_dim`, send piece j to rank j, join what
# arrives along `gather_dim`. The cell runs yours on 2 ranks, then builds Ulysses attention on it
# (your exchange is also its own backward, with the dimensions swapped) and compares it with full
# attention.

# %%
check_your_work("lab14_long_context", "all_to_all_4d")

# %% [markdown]
# Ours, and Ulysses built on it:

# %%
from labkit.context_parallel.ulysses import all_to_all_4d, ulysses_attention

show(all_to_all_4d)
show(ulysses_attention)

# %% [markdown]
# Each all-to-all keeps 1/N of a rank's tensor and sends the rest: forward moves q, k, v in and the
# output back, 4·(N − 1)/N blocks; backward the same. Ring attention sends (N − 1)·2 blocks
# forward. Section 3's table counted both on real ranks.
#
# **Predict first:** per rank and layer, forward plus backward, for 4096 tokens of 64 heads in
# bf16: which sends more on 4 ranks, and by what factor? On 64?

# %%
bt = lab.bytes_table()
print(bt)
for n in (2, 4, 16):
    r, u = formulas.ring_bytes(1, 64, 4096, 128, n, 2), formulas.ulysses_bytes(1, 64, 4096, 128, n, 2)
    claim_close(f"forward, N = {n}: ring sends N/2 times Ulysses' bytes", r["forward"] / u["forward"], n / 2,
                rel=1e-12)
claim("ring's bytes per rank grow towards a constant as N grows, Ulysses' fall",
      all(a < b for a, b in zip(bt.column("ring MiB"), bt.column("ring MiB")[1:]))
      and all(a > b for a, b in zip(bt.column("Ulysses MiB"), bt.column("Ulysses MiB")[1:])))

# %% [markdown]
# Ring attention sends about four blocks' worth of the *whole* sequence per rank — k and v round
# the ring, twice, and dK and dV home — however many ranks share it; Ulysses' per-rank bytes fall
# as 1/N. What Ulysses gives up: N can be no larger than the number of heads (fewer still with
# grouped-query attention, whose k and v have fewer heads), and an all-to-all crosses every link
# at once, where a ring uses only neighbour links and hides each hop behind a block's compute.
# Production systems combine them: Ulysses inside a node, a ring across nodes.
#
# PyTorch has its own context parallelism, `torch.distributed.tensor.experimental.context_parallel`
# (a ring with the same zig-zag balance). It shards PyTorch's CUDA attention kernels; on a GPU box
# the next cell compares it with our ring.

# %%
print(lab.torch_context_parallel(world=2))

# %% [markdown] slide="slide"
# ## 6. Sharding specs on a device mesh
#
# Lab 07 split a weight by columns or by rows, Lab 10 cut flat vectors into shards. Mesh-TensorFlow
# (Shazeer et al., 2018) and GSPMD (Xu et al., 2021) describe every such split the same way:
# arrange the devices in a **mesh** (a 2 × 2 grid of 4 ranks, say) and give a tensor one
# **placement** per mesh dimension. PyTorch's DTensor has three:
#
# * `Shard(i)` — "S(i)": the tensor's dimension i is cut into pieces along this mesh dimension;
# * `Replicate()` — "R": every rank along it holds the same thing;
# * `Partial()` — "P": every rank holds a summand, and the tensor is their sum.
#
# Column-parallel is W as S(1) on a line of ranks, row-parallel S(0); its output is P until the
# all-reduce. On a 2 × 2 mesh, ("S(0)", "S(1)") cuts rows over the mesh's first dimension and
# columns over its second: each rank holds a quarter block.
#
# What does a matmul A @ B do to placements? DTensor decides, moving data when it must. Here it is
# for every pair of placements on a line of 2 ranks, with the collectives it ran (counted by
# PyTorch's `CommDebugMode`).
#
# **Predict first:** A cut by columns (S(1)) times B cut by rows (S(0)): which output placement, and
# how many collectives? And A replicated times B cut by rows?

# %% slide="subslide"
pt = lab.placement_table()
print(pt)
claim("the rule agrees with DTensor on all 16 pairs", all(a == "yes" for a in pt.column("agree")),
      f"{len(pt.rows)} pairs")

# %% [markdown]
# Seven pairs need no communication. The rule, one mesh dimension at a time, with letters naming
# the einsum's dimensions (A @ B is "mk,kn->mn"):
#
# * R with R gives R; P with R gives P (a sum of summands times a constant);
# * an operand cut along letter x, with the other cut along the same letter — **or replicated**
#   (a replicated operand can cut itself locally, for free) — gives S(x's place in the output), or
#   P if x is summed away (the contracted k);
# * everything else — cuts along different letters, P with S, P with P — needs a redistribution
#   first. Which one DTensor picks depends on the sizes (it minimises bytes moved).
#
# ### Exercise 3: `einsum_placement`
#
# Write that rule for any two-operand einsum. The cell prints your answers next to DTensor's.

# %%
check_your_work("lab14_long_context", "einsum_placement")

# %% [markdown]
# On a mesh the rule applies to each mesh dimension separately — with one catch. A letter cut
# along two mesh dimensions is cut in their order: the first makes the big pieces. So two operands'
# pieces of a shared letter line up only if the mesh dimensions that cut it in one operand begin
# the list of those that cut it in the other. `propagate` adds that condition; the last two rows
# below fail it, though each mesh dimension alone looks fine.

# %%
mt = lab.mesh_table()
print(mt)
claim("our mesh rule agrees with DTensor on a 2 x 2 mesh of gloo ranks", all(a == "yes" for a in mt.column("agree")),
      f"{len(mt.rows)} cases")

# %% [markdown]
# ### A 2-D-sharded MLP
#
# Why cut along two mesh dimensions at all? Take y = gelu(x·W1)·W2, x of m tokens by h features, W1
# h by f = 4h. **1-D tensor parallelism** (Lab 07) keeps x whole on every rank and ends with one
# all-reduce of y: 2·(N − 1)/N·m·h elements sent per rank, about 2·m·h however large N is. A **2-D
# layout** on an N1 × N2 mesh cuts activations and weights along both: x is ("R", "S(1)"), W1
# ("S(1)", "S(0)"), the product ("S(1)", "P") by the rule; a reduce-scatter and an all-gather along
# one mesh dimension feed gelu, and the same along the other bring y back to x's layout:
# 2·(N2 − 1)·m·f/N + 2·(N1 − 1)·m·h/N — falling like 1/√N on a square mesh.
#
# **Predict first:** on 4 ranks (a 2 × 2 mesh), which sends fewer bytes?

# %%
ml = lab.mlp_table()
print(ml)
one_d, two_d = ml.rows[0], ml.rows[1]
claim("bytes counted on the ranks equal the closed forms, 1-D and 2-D",
      one_d[1] == one_d[2] and two_d[1] == two_d[2], f"{one_d[1]} and {two_d[1]} bytes")
claim("on a 2 x 2 mesh the 2-D layout sends more than 1-D", two_d[1] > one_d[1], f"{two_d[1]} > {one_d[1]}")
from labkit.sharding import mlp

claim("the 2-D layout sends less from a 5 x 5 mesh on (f = 4h)", mlp.crossover(h=8, f=32) == 5,
      f"crossover {mlp.crossover(h=8, f=32)}")

# %% [markdown]
# On 4 ranks 2-D loses: its f-wide hidden activation crosses the mesh where 1-D moves only y. They
# tie on 4 × 4 and 2-D wins from 5 × 5 on (the table's last rows), while each rank holds only 1/N2
# of x. Large meshes, and the weights of very large layers, are where 2-D and 3-D layouts pay.
#
# ## 7. Keeping experts busy: router balance
#
# Lab 07's mixture-of-experts routes each token to its top-k experts, each with room for
# `capacity = ⌈factor · k · T / E⌉` choices; the rest are dropped. Nothing in the task loss keeps
# the router from favouring a few experts — and the experts it favours learn fastest, so it
# favours them more. The Switch Transformer (Fedus et al., 2021) adds an auxiliary loss,
#
#     E · Σᵢ fᵢ · Pᵢ     fᵢ: fraction of the choices that go to expert i (a count)
#                        Pᵢ: mean router probability of expert i (differentiable)
#
# which is 1 when both are uniform and larger when both favour the same experts; its gradient,
# through P, pushes down the experts that get the most tokens. ST-MoE (Zoph et al., 2022) adds the
# **z-loss**, the mean of (log Σₑ exp zₑ)², which keeps the router's logits small.
#
# ### Exercise 4: `load_balancing_loss`
#
# Write the loss. A tempting shortcut takes P from the argmax — then P equals f and no gradient
# reaches the router. The cell compares yours with the formula on two routers.

# %%
check_your_work("lab14_long_context", "load_balancing_loss")

# %% [markdown]
# Ours, and the z-loss:

# %%
from labkit.tensor_parallel.experts import load_balancing_loss, router_z_loss

show(load_balancing_loss)
show(router_z_loss)

# %% [markdown]
# A short training run: an 8-expert, top-2 layer learns a regression task whose inputs share an
# offset (so every token starts with nearly the same router logits), with the balance loss (α),
# the z-loss (β), both, or neither. Measured on held-out tokens: the choices each expert receives,
# max/mean load, the coefficient of variation (std/mean), the fraction of choices dropped at
# capacity factors 1.0 and 1.25, the task loss and both auxiliary losses.
#
# **A common mistake:** "with a capacity factor of 1.0 every token fits". Only if the router is
# balanced: capacity is set for the *average* expert.
#
# **Predict first:** without the balance loss, how many of the 8 experts get any tokens? What
# fraction of choices is dropped at a capacity factor of 1.25?

# %%
runs = lab.router_runs()
print(lab.router_table(runs))
plain, light, strong, z_only, both = runs
claim("without the balance loss the router collapses", plain.max_over_mean > 3 and plain.dropped[1.25] > 0.5,
      f"max/mean {plain.max_over_mean:.2f}, {plain.dropped[1.25]:.0%} dropped at 1.25")
claim("α = 0.1 balances the load (max/mean < 1.5, < 5% dropped at 1.25)",
      strong.max_over_mean < 1.5 and strong.dropped[1.25] < 0.05,
      f"{strong.max_over_mean:.2f}, {strong.dropped[1.25]:.1%}")
claim("even α = 0.01 cuts the dropped choices at factor 1.0 by more than half",
      light.dropped[1.0] < plain.dropped[1.0] / 2, f"{light.dropped[1.0]:.1%} vs {plain.dropped[1.0]:.1%}")
claim("the z-loss shrinks the router's log-sum-exp more than tenfold", z_only.z_loss < plain.z_loss / 10,
      f"{z_only.z_loss:.2f} vs {plain.z_loss:.2f}")

# %% [markdown]
# Without the balance loss two experts take nearly everything and three quarters of the choices
# are dropped even at a factor of 1.25. α = 0.01 (the paper's value) helps; α = 0.1 balances the
# load almost perfectly and drops nothing at 1.25 — at some cost in task loss here, the trade the
# coefficient sets. The z-loss alone does not balance anything: it keeps the logits small, which
# matters for training in bf16.
#
# ## 8. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** One layer, S = 131 072 tokens, 32 heads of 128, bf16, batch 1, on 8 ranks. Bytes
# per rank, forward plus backward, for ring attention and for Ulysses?
#
# <details><summary>Answer</summary>
#
# One block = 32·16 384·128·2 B = 128 MiB. Ring: 7·2 + 7·2 + 8·2 = **44 blocks = 5.5 GiB**.
# Ulysses: 8·7/8 = **7 blocks = 0.875 GiB**, 6.3× less.
#
# </details>
#
# **Problem 2.** Causal ring attention with contiguous chunks on 8 ranks. How many times the mean
# work does the busiest rank do?
#
# <details><summary>Answer</summary>
#
# 2N/(N + 1) = 16/9 = **1.78**.
#
# </details>
#
# **Problem 3.** On a line of ranks, A @ B with A placed S(0) and B placed S(1). Can DTensor compute
# it without communication? And A as S(1) with B replicated?
#
# <details><summary>Answer</summary>
#
# **No**: the cuts are along different letters (m and n); one operand must be gathered. A S(1) with
# B R: B cuts itself along k, and the product is **P** with no communication.
#
# </details>
#
# **Problem 4.** 8 experts, top-2, 4096 tokens, capacity factor 1.25. Slots per expert? If the router
# sends a quarter of all choices to one expert, how many of them are dropped?
#
# <details><summary>Answer</summary>
#
# ⌈1.25·2·4096/8⌉ = **1280** slots. A quarter of the 8192 choices is 2048: **768** dropped.
#
# </details>

# %%
# The answers above, computed (the tests check the same formulas).
from labkit.sharding import einsum_placement
from labkit.tensor_parallel.experts import MoEConfig

r, u = formulas.ring_bytes(1, 32, 131_072, 128, 8, 2), formulas.ulysses_bytes(1, 32, 131_072, 128, 8, 2)
block = 32 * 16_384 * 128 * 2
print((r["forward"] + r["backward"]) / block, (u["forward"] + u["backward"]) / block, 2 * 8 / 9)
print(einsum_placement("mk,kn->mn", "S(0)", "S(1)"), einsum_placement("mk,kn->mn", "S(1)", "R"))
slots = MoEConfig(experts=8, top_k=2, capacity_factor=1.25).capacity(4096)
print(slots, 8192 // 4 - slots)

# %% [markdown]
# ## Further reading
#
# * M. Milakov and N. Gimelshein, *Online normalizer calculation for softmax*, 2018; T. Dao et al.,
#   *FlashAttention*, NeurIPS 2022, and T. Dao, *FlashAttention-2*, 2023.
# * H. Liu, M. Zaharia and P. Abbeel, *Ring Attention with Blockwise Transformers for Near-Infinite
#   Context*, 2023; W. Brandon et al., *Striped Attention*, 2023 (balancing the causal ring).
# * S. A. Jacobs et al., *DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme
#   Long Sequence Transformer Models*, 2023.
# * N. Shazeer et al., *Mesh-TensorFlow*, NeurIPS 2018; Y. Xu et al., *GSPMD: General and Scalable
#   Parallelization for ML Computation Graphs*, 2021.
# * PyTorch: *DTensor* (`torch.distributed.tensor`), `CommDebugMode`, and
#   `torch.distributed.tensor.experimental.context_parallel`.
# * W. Fedus, B. Zoph and N. Shazeer, *Switch Transformers*, JMLR 2022; B. Zoph et al., *ST-MoE:
#   Designing Stable and Transferable Sparse Expert Models*, 2022.
#
# ## Summary
#
# * Softmax attention can be computed one block of keys at a time from a running maximum, sum and
#   weighted sum; the running maximum keeps exp() finite and must rescale the old sums.
# * Ring attention passes key/value blocks round N ranks and hides each hop behind a block's
#   compute; per rank it sends about 4× the sequence's k (or v) per layer, whatever N. Ulysses
#   re-shards heads with all-to-alls and sends 4·(N − 1)/N blocks each way — N/2 times less
#   forward — but needs N ≤ H.
# * With a causal mask contiguous chunks leave the last rank 2N/(N + 1) times the mean work;
#   zig-zag chunks balance it.
# * A placement per mesh dimension (Shard, Replicate, Partial) describes any split; a matmul's
#   output placement follows from its inputs' letters, and anything else costs a collective.
#   2-D layouts send per rank bytes that fall like 1/√N.
# * A router left alone collapses onto a few experts; the balance loss spreads the load and cuts
#   the dropped tokens, the z-loss keeps the logits small.
#
# **Exercises** (in `exercises/lab14_long_context.py`): `softmax_step`, `all_to_all_4d`,
# `einsum_placement`, `load_balancing_loss`; each has a "check your work" cell above. Grade them
# with `python -m labkit.grade --lab 14` (or `make grade LAB=14`).
