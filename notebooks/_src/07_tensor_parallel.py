# Source of notebooks/07_tensor_parallel.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 07 — Tensor parallelism: Megatron layers, sequence and expert parallelism
#
# Data parallelism (Lab 06) copies the whole model to every rank. When one layer's weights — or its
# activations — no longer fit, we split the layer itself: each rank holds a slice of every weight
# matrix and computes a slice of the result. This is **tensor parallelism**, in the form Megatron-LM
# made standard.
#
# **You will be able to**
# 1. split a linear layer by output features (column-parallel) or input features (row-parallel),
#    and say which collective each needs, in which pass;
# 2. explain Megatron's pairing — column then row — and the two conjugate operators f and g that
#    make a transformer layer cost exactly 2 all-reduces forward and 2 backward;
# 3. compute a cross-entropy over a vocabulary split across ranks without ever building the
#    full logits;
# 4. measure what sequence parallelism saves (activations) and what it costs: the same bytes in
#    the layers, plus one small all-reduce of the replicated parameters' gradients;
# 5. route tokens to experts on other ranks with an all-to-all, and count what the capacity
#    factor drops;
# 6. split a convolution by rows with a halo exchange, or by channels like a Megatron pair, and
#    count what each moves.
#
# Everything runs on real gloo ranks and is checked against the unsplit `labkit.model.GPT` — and,
# for the MLP, against PyTorch's own `torch.distributed.tensor.parallel`.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.claims import claim
from labkit.grading.check import check_your_work
from labkit.show import show
from labkit.tensor_parallel import ColumnParallelLinear, RowParallelLinear, lab
from labkit.tensor_parallel.comm import _CopyToTP, _ReduceFromTP
from labkit.viz import tensor_parallel as V

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. Two ways to split y = x·Wᵀ + b
#
# W has shape (out, in). Over t ranks:
#
# * **column-parallel** — rank r keeps out/t output features (rows of W and entries of b). Every
#   rank needs the whole input x and produces its own slice of y. Forward needs no communication.
#   Backward does: each rank's gradient for x covers only its features, so the ranks' gradients
#   must be **summed** (all-reduced).
# * **row-parallel** — rank r keeps in/t input features (columns of W). Its input is a slice of x,
#   and its product is a **partial sum** of the whole y: an all-reduce in forward adds them up (the
#   bias is added once, after). Backward needs no communication.
#
# Megatron names the two places where communication happens:
#
# * **f** — identity in forward, all-reduce in backward (where a replicated x enters the split);
# * **g** — all-reduce in forward, identity in backward (where partial sums leave it).
#
# They are *conjugate*: one's backward is the other's forward. In PyTorch each is a
# `torch.autograd.Function`, whose static `forward` and `backward` you write yourself.

# %% [markdown]
# ### Exercises 1–4: f, g, and the two split layers
#
# In `exercises/lab07_tensor_parallel.py`, write `copy_to_tp` (f) and `reduce_from_tp` (g) as
# autograd functions, then `column_parallel_linear` and `row_parallel_linear` with them. Each cell
# runs your function on 2 real ranks and compares outputs and gradients with the unsplit layer.
# Each is graded on its own: the split layers are run with the grader's f and g, so a stub f or g
# costs only its own points.

# %%
check_your_work("lab07_tensor_parallel", "copy_to_tp", picture=lab.picture("copy_to_tp"))

# %%
check_your_work("lab07_tensor_parallel", "reduce_from_tp", picture=lab.picture("reduce_from_tp"))

# %%
check_your_work("lab07_tensor_parallel", "column_parallel_linear", picture=lab.picture("column_parallel_linear"))

# %%
check_your_work("lab07_tensor_parallel", "row_parallel_linear", picture=lab.picture("row_parallel_linear"))

# %% [markdown]
# Ours, for comparison once yours pass — f, g, and the two layers' `forward`s (labkit's layers
# also record each collective for the tables below and take their group from the context):

# %%
show(_CopyToTP)
show(_ReduceFromTP)
show(ColumnParallelLinear.forward)
show(RowParallelLinear.forward)

# %% [markdown]
# ## 2. Megatron's pairing: column, then row
#
# An MLP is two linear layers with a GELU between. Make the first column-parallel: each rank holds
# a slice of the 4h hidden features. GELU works element by element, so each rank applies it to its
# own slice. Make the second row-parallel: its input is *already* split the right way. The pair
# needs one g (forward) and one f (backward) — and nothing in between. Step through it (colours are
# ranks, grey is replicated, hatched cards are partial sums):

# %%
V.tp_widget("mlp", t=2)

# %% [markdown]
# Why not the other way round, row-parallel first? Then rank i multiplies its slice of the input
# features Xᵢ by its rows Aᵢ of the weight, and holds only a *partial sum*: X·A = Σᵢ XᵢAᵢ. GELU is
# not linear, so it cannot be applied to the pieces: GELU(Σᵢ XᵢAᵢ) ≠ Σᵢ GELU(XᵢAᵢ). The partial sums
# would have to be all-reduced before the GELU — a communication Megatron's order never needs,
# because a column split keeps whole output features on each rank and GELU of a slice is the slice
# of GELU.
#
# **Predict first:** for 2 ranks, how far apart are GELU of the full sum and the sum of GELUs?

# %%
g = torch.Generator().manual_seed(0)
X, A = torch.randn(4, 8, generator=g, dtype=torch.float64), torch.randn(8, 6, generator=g, dtype=torch.float64)
gelu = torch.nn.functional.gelu
full = gelu(X @ A)
rows_first = sum(gelu(X[:, k:k + 4] @ A[k:k + 4]) for k in (0, 4))          # each rank: its input features
cols_first = torch.cat([gelu(X @ A[:, k:k + 3]) for k in (0, 3)], dim=1)    # each rank: its output features
print(f"max |GELU(sum) - sum of GELUs| = {(full - rows_first).abs().max():.3f}; "
      f"column split: {(full - cols_first).abs().max():.1e}")
claim("row-first needs the sums before GELU: GELU(sum) is not the sum of GELUs",
      (full - rows_first).abs().max() > 0.1, f"max difference {(full - rows_first).abs().max():.3f}")
claim("column-first applies GELU to whole output features: the unsplit GELU, to rounding",
      torch.allclose(full, cols_first, rtol=0, atol=1e-12), f"{(full - cols_first).abs().max():.1e}")

# %% [markdown]
# **A common mistake** says that splitting by rows (which ends in an all-reduce) and by columns
# (which ends in an all-gather) "move the same volume". In a ring, an all-reduce sends
# 2(p−1)/p·S bytes per rank and an all-gather (p−1)/p·S — half. What matters is the *pairing*.
#
# **Predict first:** on 2 ranks, how many times more bytes does "gather in between" (all-gather
# the (b, s, 4h) activation between the two layers) send than Megatron's column → row?

# %%
pt = lab.pairing_table(worlds=(2, 4))
print(pt)
sent = {(r[0], r[1].split()[0]): r[2] for r in pt.rows}
claim("gathering in between sends three times Megatron's bytes, on 2 and on 4 ranks",
      all(sent[t, "gather"] == 3 * sent[t, "column→row"] for t in (2, 4)), f"{sent[2, 'gather']} vs {sent[2, 'column→row']}")
from labkit.collectives import alpha_beta

claim("per rank a ring all-reduce sends twice what an all-gather of the same tensor sends",
      alpha_beta.coefficients("ring_all_reduce", 4, 1.0)[1] == 2 * alpha_beta.coefficients("ring_all_gather", 4, 1.0)[1])

# %% [markdown]
# Three times: gathering the (b, s, 4h) activation between the layers, instead of keeping it
# split, adds an all-gather of a tensor four times bigger, in both passes — 2 all-reduces of S
# (4S·(p−1)/p) plus 2 all-gathers of 4S (8S·(p−1)/p).
#
# **Attention** splits the same way, by heads. The input x is replicated, so each rank projects
# Q, K and V for *its own heads* with its share of the qkv weight (column-parallel) — no Q, K or V
# is ever sent anywhere (**a common mistake** says they are broadcast). Heads do not interact
# until the output projection, which is row-parallel:

# %%
V.tp_widget("attention", t=2)

# %% [markdown]
# ## 3. A whole model, and its communication counted
#
# `parallelize(model)` splits our GPT: attention by heads, MLPs Megatron-style, the vocabulary for
# the embedding and the tied output layer. Each split region is entered through an f and left
# through a g.
#
# **Predict first:** with 2 layers, how many all-reduces of b·s·h elements in one forward? In one
# backward?

# %%
mt = lab.model_table(worlds=(1, 2, 4))
print(mt)
claim("the split model's loss equals the unsplit one to rounding on 1, 2 and 4 ranks",
      max(mt.column("|loss - unsplit|")) < 1e-12, f"{max(mt.column('|loss - unsplit|')):.1e}")
claim("with 2 layers: 2L + 1 = 5 all-reduces of b·s·h forward and 5 backward, 3 small ones",
      all((r[2], r[3], r[4]) == (5, 5, 3) for r in mt.rows if r[0] > 1))

# %% [markdown]
# Per transformer layer there are 2 all-reduces forward (attention's g, MLP's g) and 2 backward
# (their f's), each of b·s·h elements. **A common mistake** counts "2 all-reduces per layer",
# forgetting the backward pass. The embedding adds one (forward), the output layer's f one
# (backward), and the loss three tiny ones of b·s numbers: 2L + 1 each way.
#
# The losses agree to rounding, and `tests/test_tensor_parallel.py` checks every parameter's
# gradient (each rank's slice against the same slice of the unsplit gradient) on 1, 2 and 4 ranks.
# `tests/test_tensor_parallel_torch.py` checks our MLP against PyTorch's `ColwiseParallel` /
# `RowwiseParallel` on the same weights, and `benchmarks/tensor_parallel.py` times the two
# (results in `benchmarks/results/tensor_parallel.md`).
#
# ## 4. The vocabulary, split: a loss without full logits
#
# The output layer maps h features to V vocabulary logits — for V = 50 000 and 8 000 tokens, 1.6 GB
# of float32 per rank if every rank built them all. Split the vocabulary instead: rank r computes
# the logits of its V/t words. The cross-entropy log Σ_v exp(z_v) − z_target then needs only three
# all-reduces of one number per token: the maximum (to keep exp from overflowing), the sum of
# exponentials, and the target's logit (found on one rank, zero on the others). The gradient,
# softmax − one-hot, is computed by each rank for its own columns, with no communication.
#
# ### Exercise 5: `vocab_parallel_cross_entropy`

# %%
check_your_work("lab07_tensor_parallel", "vocab_parallel_cross_entropy",
                picture=lab.picture("vocab_parallel_cross_entropy"))

# %% [markdown]
# ## 5. Sequence parallelism: same bytes, fewer activations
#
# Between the split regions (LayerNorms, residual adds) plain tensor parallelism keeps the *whole*
# activation on every rank. Sequence parallelism splits those regions along the sequence instead:
# each rank keeps T/t positions. Where plain TP all-reduces on leaving a split region, SP
# reduce-scatters along the sequence; where f would all-reduce gradients, SP all-gathers on entry.
# A ring reduce-scatter plus a ring all-gather move exactly what one ring all-reduce moves.
#
# **Predict first:** with 4 ranks, how much smaller are the activations the LayerNorms keep for
# backward? How many more bytes are sent?

# %%
mts = lab.model_table(worlds=(2, 4), sequence_parallel=True)
spt = lab.sp_table(worlds=(2, 4))
print(mts)
print(spt)
claim("sequence parallelism: the same loss, an all-gather and a reduce-scatter where TP had an all-reduce",
      max(mts.column("|loss - unsplit|")) < 1e-12 and all((r[2], r[3]) == (10, 10) for r in mts.rows))
claim("the same bytes as plain TP, and the LayerNorms keep 1/t of their activations",
      spt.column("TP bytes") == spt.column("SP bytes") and spt.column("ratio") == [2.0, 4.0])

# %% [markdown]
# The same bytes in the layers, and the LayerNorms' saved activations divided by t — measured by
# counting every tensor autograd saves while a LayerNorm runs. The replicated parameters (the
# LayerNorms' weights and biases) now see only their rank's positions, so their gradients are summed
# once after backward: that small all-reduce, left out of the table's bytes, is the one cost SP adds.
#
# ## 6. Expert parallelism: tokens travel to their experts
#
# A mixture-of-experts layer replaces the MLP by E expert MLPs and a router that sends each token
# to its top-k experts. With experts on different ranks, tokens must move: an **all-to-all** sends
# each rank's tokens to the ranks of their experts, and a second one brings the results back. Each
# expert takes at most *capacity* = ⌈factor · k · tokens / E⌉ tokens from each rank; the rest are
# **dropped** (in a transformer the residual connection carries them on). Our all-to-all is built
# from point-to-point messages and checked against `dist.all_to_all_single`.
#
# **Predict first:** with capacity factor 1.0, will any token choices be dropped?

# %%
moe = lab.moe_table(factors=(0.5, 1.0, 1.25, 2.0))
print(moe)
drop, a2a = moe.column("dropped"), moe.column("a2a bytes")
claim("even at capacity factor 1.0 choices are dropped; larger factors drop fewer",
      drop[1] > 0 and all(a >= b for a, b in zip(drop, drop[1:])), f"dropped {drop}")
claim("all-to-all bytes equal the formula and grow with the factor; the layer equals one process",
      a2a == moe.column("formula") and a2a == sorted(a2a) and all(moe.column("= 1 process")))

# %% [markdown]
# Even at factor 1.0 some choices are dropped: the router does not spread tokens evenly. A larger
# factor drops fewer but pads every expert's buffer, and the all-to-all bytes grow with it. The
# expert-parallel layer equals one process routing the same groups of tokens, outputs and
# gradients (`tests/test_expert_parallel.py`).
#
# ## 7. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A transformer layer with h = 8192, sequence 4096, micro-batch 1, bf16 activations,
# tensor-parallel over 8 GPUs. How many bytes does each GPU send per layer per training step?
#
# <details><summary>Answer</summary>
#
# 4 all-reduces of S = 4096 · 8192 · 2 B = 64 MiB; each sends 2 · 7/8 · S = 112 MiB: **448 MiB**
# per layer per step.
#
# </details>
#
# **Problem 2.** An MLP (h = 1024, 4h hidden) is split over 4 ranks. What shapes do rank 2's fc and
# proj weights have, and which part of the (b·s, 4h) activation does it hold?
#
# <details><summary>Answer</summary>
#
# fc (column): **(1024, 1024)** — 4096/4 output features; proj (row): **(1024, 1024)** — 4096/4
# input features. It holds columns **2048 … 3071** of the activation.
#
# </details>
#
# **Problem 3.** Vocabulary 51 200, 4 ranks, 16 384 tokens in a micro-batch. How many numbers does
# each all-reduce of the vocabulary-parallel loss carry, and how big would the full float32 logits
# be?
#
# <details><summary>Answer</summary>
#
# **16 384** numbers each (three of them); full logits: 16 384 · 51 200 · 4 B ≈ **3.36 GB** per
# rank, of which each rank now builds a quarter.
#
# </details>
#
# **Problem 4.** 64 tokens per rank, 8 experts, top-2 routing, capacity factor 1.25. How many slots
# does each expert offer each rank?
#
# <details><summary>Answer</summary>
#
# ⌈1.25 · 2 · 64 / 8⌉ = **20**.
#
# </details>

# %%
# Two of the answers above, computed with labkit.
from labkit.tensor_parallel.experts import MoEConfig

S = 4096 * 8192 * 2
claim("P1: 4 all-reduces of 64 MiB send 448 MiB per GPU",
      4 * alpha_beta.coefficients("ring_all_reduce", 8, S)[1] / 2**20 == 448)
claim("P4: 20 slots per expert", MoEConfig(hidden=8, experts=8, top_k=2, capacity_factor=1.25).capacity(64) == 20)

# %% [markdown]
# ## 8. Splitting a convolution: by rows with a halo, or by channels like tensor parallelism
#
# A convolution layer can be split two ways. **Spatially**: rank r of p keeps a stripe of H/p rows
# of the image (all channels) and the whole filter. A k × k convolution with 'same' padding computes
# an output row from the k rows around it, so the first and last k // 2 output rows of a stripe need
# rows that live on the neighbouring ranks: the **halo**. Before the convolution each rank sends its
# top k // 2 rows up and its bottom k // 2 rows down, and pads the image's true edges with zeros;
# then it computes exactly its stripe of the unsplit output. In backward the gradients of the halo
# rows travel back to their owners, and the filter's gradient — each rank's partial sum over its
# rows — is added up with one all-reduce, as in data parallelism.
#
# **Predict first:** 3 ranks, a 3 × 3 kernel, float64 images of 2 × 3 × 12 × 8. How many bytes does
# each rank send in forward, and does the middle rank send more?
#
# The animation shows the exchange and then the 3 × 3 window sliding down each stripe, all ranks
# at once (pale rows came from a neighbour, grey rows are the image's zero padding).

# %%
lab.halo_player(12, 6, 3, 3)

# %%
from labkit.claims import claim
from labkit.tensor_parallel import conv

show(conv._HaloExchange)
ct = lab.conv_table()
print(ct)
claim("on 2, 3 and 4 ranks every stripe equals the unsplit layer, gradients too",
      max(r[3] for r in ct.rows) < 1e-12, f"max |diff| {max(r[3] for r in ct.rows):.1e}")
claim("each rank sends (neighbours) x (k // 2) rows x B x C x W x 8 B, forward and backward alike",
      all(r[4] == r[5] == r[6] for r in ct.rows))
claim("an inner rank sends twice what an edge rank sends", ct.rows[3][4] == 2 * ct.rows[2][4],
      f"{ct.rows[3][4]} vs {ct.rows[2][4]} B on 3 ranks")

# %% [markdown]
# ### Exercise 6: `halo_bytes_per_rank`
#
# The bytes each rank sends, as a formula. The check compares yours with what the ranks above sent,
# then grades it.

# %%
check_your_work("lab07_tensor_parallel", "halo_bytes_per_rank", picture=lab.picture("halo_bytes_per_rank"))

# %% [markdown]
# **By channels.** Give each rank a quarter of the *output* channels: it needs the whole input and
# computes whole filters — that is section 1's column-parallel Linear (a convolution is a Linear
# applied at every pixel, over a k × k window of input channels). Split the *input* channels and
# each rank's output is a partial sum: row-parallel, with an all-reduce. So a column-split
# convolution, a ReLU, then a row-split convolution need exactly Megatron's f and g and nothing in
# between — one all-reduce of the block's output in forward, one of its input gradient in backward:
#
# **Predict first:** for conv(3 → 8) · ReLU · conv(8 → 3) on 2 ranks (4 middle channels each), which
# collectives run, and on how many elements?

# %%
show(conv.channel_split_pair)
cc = lab.conv_channel_table()
print(cc)
B_, C_, H_, W_ = lab.CONV_SHAPE
claim("the channel-split pair equals the unsplit one, gradients included", max(r[1] for r in cc.rows) < 1e-12)
claim("it needs one all-reduce of B x C x H x W elements each way, nothing in between",
      cc.rows[0][2].count("all_reduce") == 2 and f"{B_ * C_ * H_ * W_} el." in cc.rows[0][2])

# %% [markdown]
# **Which to choose?** The halo is a surface, the stripe a volume: a rank sends 2·(k // 2) rows
# whatever the image's height, while a channel split all-reduces whole activations. The channel
# split, on the other hand, divides the weights by p, and the spatial split keeps every weight on
# every rank (with a gradient all-reduce per step on top). For an early ResNet layer, with large
# feature maps and few weights:

# %%
cost = lab.conv_cost_table()
print(cost)
claim("for this layer a spatial split sends over 40x fewer bytes than a channel split",
      min(r[3] for r in cost.rows) > 40, f"ratio {min(r[3] for r in cost.rows):.0f} to {max(r[3] for r in cost.rows):.0f}")
claim("but holds all 1.18 MB of weights on each rank, the channel split 1/p of them",
      all(abs(r[5] * r[0] - r[4]) < 1e-9 for r in cost.rows))

# %% [markdown]
# Late layers (7 × 7 maps, 2048 channels) turn this around: little activation, many weights —
# which is why CNNs were split spatially or by samples early in the network, and by channels (or
# not at all) at the end (Krizhevsky's "one weird trick": data parallelism for convolutions, model
# parallelism for the fully connected layers).
#
# **Problem 5.** A 3 × 3 convolution on 8 × 64 × 224 × 224 bf16 images, split by rows over 4 ranks.
# Bytes an inner rank sends per forward? And a 5 × 5 kernel?
#
# <details><summary>Answer</summary>
#
# One row: 8·64·224·2 B = 229,376 B. A 3 × 3 kernel needs 1 row each way: **458,752 B** (0.46 MB); a
# 5 × 5 kernel 2 rows each way: **917,504 B** — against 8·64·224·224·2 = 51 MB for the whole image.
#
# </details>

# %%
claim("Problem 5: an inner rank sends 458,752 B for 3x3 and 917,504 B for 5x5",
      conv.halo_bytes(8, 64, 224, 3, 4, 2)[1] == 458_752 and conv.halo_bytes(8, 64, 224, 5, 4, 2)[1] == 917_504)

# %% [markdown]
# ## Further reading
#
# * M. Shoeybi et al., *Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
#   Parallelism*, 2019 — f and g, the MLP and attention splits.
# * V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022 —
#   sequence parallelism.
# * D. Lepikhin et al., *GShard*, ICLR 2021; W. Fedus et al., *Switch Transformers*, JMLR 2022 —
#   routing, capacity and expert parallelism.
# * A. Krizhevsky, *One weird trick for parallelizing convolutional neural networks*, 2014; N. Dryden
#   et al., *Improving Strong-Scaling of CNN Training by Exploiting Finer-Grained Parallelism*,
#   IPDPS 2019 — spatial (halo) partitioning of convolutions.
# * PyTorch, *Tensor Parallelism* tutorial and `torch.distributed.tensor.parallel`:
#   <https://pytorch.org/tutorials/intermediate/TP_tutorial.html>.
#
# ## Summary
#
# * Column-parallel splits output features (communication in backward, through f); row-parallel
#   splits input features (an all-reduce in forward, through g). f and g are conjugate.
# * Column then row needs nothing in between: 2 all-reduces of b·s·h forward and 2 backward per
#   transformer layer. Gathering in between would send three times as much.
# * Attention splits by heads; Q, K and V never move. The vocabulary splits too, and the loss
#   needs three all-reduces of one number per token.
# * Sequence parallelism sends the same bytes and keeps 1/t of the LayerNorm activations.
# * Expert parallelism moves tokens with two all-to-alls per layer per pass; the capacity factor
#   trades dropped tokens for padding.
# * A convolution split by rows exchanges halos of k // 2 rows with its neighbours (a surface, not a
#   volume); split by channels it is column- then row-parallel, one all-reduce each way.
#
# **Exercises** (in `exercises/lab07_tensor_parallel.py`): `copy_to_tp`, `reduce_from_tp`,
# `column_parallel_linear`, `row_parallel_linear`, `vocab_parallel_cross_entropy`,
# `halo_bytes_per_rank`; each has a
# "check your work" cell above. Grade them with `python -m labkit.grade --lab 07` (or
# `make grade LAB=07`).
