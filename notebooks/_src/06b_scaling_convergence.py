# Source of notebooks/06b_scaling_convergence.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 06b — Data parallelism, part 2: scaling, large batches, and how parallel SGD converges
#
# Lab 06 built DDP, hid its communication behind backward and compared it with a parameter server.
# This part asks what happens as the ranks multiply: how far the speed-up goes, what a larger global
# batch does to training, how to send fewer bytes, and how staleness and batch size change the
# number of steps to a target.
#
# **You will be able to**
# 1. fit Amdahl's and Gustafson's laws to measured scaling, and measure what large batches,
#    gradient compression and local SGD do to the loss;
# 2. measure what staleness and batch size do to convergence: stale gradients and the step they
#    allow, steps to a target against the batch, the gradient noise scale, and AdaScale.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch
from IPython.display import HTML, display

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.data_parallel import lab
from labkit.grading.check import check_your_work
from labkit.model import GPTConfig
from labkit.viz import data_parallel as V
from labkit.viz.player import figure_to_html

cfg = GPTConfig(layers=4, hidden=128, heads=4, seq_len=64, vocab=256)   # Lab 06's timing model
print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. How far does it scale?
#
# **Strong scaling** keeps the total batch and adds ranks; **weak scaling** keeps the batch per rank.
# Two laws describe them with one number, the **serial fraction** s — the share of time that does
# not shrink with more ranks (here: communication, Python overhead, the ranks sharing two cores):
#
# * Amdahl (strong): t(n) = t(1)·(s + (1 − s)/n), speedup 1/(s + (1 − s)/n), never above 1/s;
# * Gustafson (weak): scaled speedup n − s·(n − 1), with s the serial fraction of the *parallel*
#   run.
#
# **A common slip** writes Gustafson's law with the *parallel* fraction p in place of s. With
# s = 0.1 on 10 ranks the law gives 10 − 0.1·9 = 9.1; putting p = 0.9 there gives 1.9 — a
# different (and wrong) answer. Efficiency η = speedup / n. Measured on this machine with our DDP (Lab 06).
# This 2-core machine can only show 1 and 2 ranks honestly, and **two points fix s exactly**: each
# law has one free parameter, so its curve passes through both measurements whatever the truth.
# The rows for 8, 64 and 1024 ranks are therefore *extrapolations from two points*, not tests of
# either law — they show what each law would predict if s stayed what two ranks measured.

# %% tags=["nbval-ignore-output"]
from labkit.data_parallel.scaling import amdahl_speedup, gustafson_speedup

strong, weak, s_a, s_g = lab.scaling_tables(cfg, worlds=(1, 2))
print(strong)
print(weak)
ceiling = 1 / s_a if s_a > 0 else float("inf")
print("extrapolated from the two measured points (1 and 2 ranks):")
for n in (8, 64, 1024):
    print(f"n = {n:4d}: Amdahl {amdahl_speedup(s_a, n):5.2f}x (ceiling 1/s = {ceiling:.1f}), "
          f"Gustafson {gustafson_speedup(s_g, n):7.1f}x")
clipped = "clipped" in strong.title + weak.title
claim("two points fix s: each fitted law passes through both measured speedups (or s was clipped)",
      clipped or (abs(strong.column("speedup")[1] - strong.column("Amdahl fit")[1]) < 1e-9
                  and abs(weak.column("scaled speedup")[1] - weak.column("Gustafson fit")[1]) < 1e-9))

# %% [markdown]
# Extrapolated this way, the same machine looks poor under Amdahl (a fixed problem soon stops
# speeding up) and fine under Gustafson (a problem that grows with the machine keeps the ranks
# busy); to *test* either law takes more than two points, on a machine with a core per rank. Data parallelism is weak
# scaling: more ranks, bigger global batch. Which brings its own limit:
#
# ### Large batches
#
# N ranks with b sequences each compute one step of batch N·b (Lab 06, section 1). For a fixed number of
# training samples, a bigger batch means fewer steps. Keep the learning rate and the model falls
# behind; scale it **linearly** with the batch (lr ∝ B, Goyal et al.) or with its **square root**
# (lr ∝ √B). **Predict first:** which rule wins at 4× the base batch, and at 64×?

# %%
lb = lab.large_batch_table()
print(lb)
num = {b: [float(v) if v != "diverged" else float("inf") for v in row[2:5]] for b, row in zip(lb.column("batch"), lb.rows)}
claim("at 4x the linear rule wins", min(num[32]) == num[32][1], f"{num[32]}")
claim("at 16x the linear step is worse than not scaling; at 64x it diverges while sqrt still helps",
      num[128][1] > num[128][0] and num[512][1] == float("inf") and num[512][2] < num[512][0])
claim("every large batch ends above the small one", all(min(num[b]) > num[8][0] for b in (32, 128, 512)),
      f"batch 8: {num[8][0]:.3f}")

# %% [markdown]
# At 4× the linear rule wins; by 16× its step is too large (worse than not scaling at all), and at
# 64× it diverges, while the square-root rule still helps. Every large batch ends above the small
# one: for this model, the same samples in fewer, bigger steps learn less. Real training pushes
# the limit further with warm-up and optimizers such as LAMB, but the limit exists.
#
# ### Sending less: compression and local SGD
#
# Two ways to cut the bytes. **Compression**: send only the largest 1 % of each gradient (top-k,
# values and indices), or one bit per entry plus a scale (1-bit SGD). With **error feedback** each
# rank keeps what it did not send and adds it to the next gradient, so nothing is lost for good.
# **Local SGD** (FedAvg): take H steps alone, then average the parameters once.

# %%
ct, lt = lab.compression_table(), lab.local_sgd_table()
print(ct)
print(lt)
cl = dict(zip(ct.column("method"), ct.column("held-out loss")))
cb = dict(zip(ct.column("method"), ct.column("bytes/rank/step")))
claim("top-k sends 30x fewer bytes; it learns much less without error feedback",
      cb["dense"] > 30 * cb["topk"] and cl["topk"] > cl["topk+ef"] + 0.3 and cl["topk+ef"] < cl["dense"] + 0.15,
      f"{cl['dense']:.3f}, {cl['topk']:.3f}, {cl['topk+ef']:.3f}")
claim("1-bit with error feedback even beats dense SGD here", cl["sign+ef"] < cl["dense"])
lb_bytes, lb_loss = lt.column("bytes sent per rank"), lt.column("held-out loss")
claim("averaging every 16 steps sends 16x fewer bytes for nearly the same loss",
      lb_bytes[0] == 16 * lb_bytes[-1] and abs(lb_loss[-1] - lb_loss[0]) < 0.05, f"{lb_loss[0]:.3f} vs {lb_loss[-1]:.3f}")

# %% [markdown]
# Top-k without error feedback throws information away and learns much less; with it, 33× fewer
# bytes cost little. The 1-bit method even beats dense SGD here: sign·mean|g| takes equal-sized
# steps in every coordinate, which for this model acts like a larger learning rate — a reminder to
# compare methods at their own best learning rates. Averaging every 16 steps sends 16× fewer bytes
# for nearly the same loss; with H = 1 local SGD *is* data-parallel SGD (the tests check it to
# rounding).

# %% [markdown]
# **Worked problem.** A data-parallel run on 8 GPUs spends 20 % of its step time in serial work. What
# scaled speedup does Gustafson's law give? If instead 20 % of a *fixed* problem's one-GPU time
# were serial, what speedup would 8 GPUs give, and what could no number of GPUs exceed?
#
# <details><summary>Answer</summary>
#
# Gustafson: 8 − 0.2 · 7 = **6.6**. Amdahl: 1 / (0.2 + 0.8/8) ≈ **3.33**, and never more than
# 1/0.2 = **5**.
#
# </details>

# %%
claim("Gustafson 6.6; Amdahl 3.33, never above 5",
      (round(gustafson_speedup(0.2, 8), 2), round(amdahl_speedup(0.2, 8), 2), round(amdahl_speedup(0.2, 10**9), 2))
      == (6.6, 3.33, 5.0))

# %% [markdown]
# ## 2. How parallel SGD converges
#
# Lab 06's section 4 and section 1 above timed the rules. This section follows the loss: how many gradients and how
# much time each rule needs to reach a target, what the theory promises, and how the batch size
# changes the number of steps.
#
# ### 2.1 Stale gradients: per gradient and per second
#
# Once the server has taken its gradients, the run is fixed: worker k's gradient of clock c is
# the gradient of its c-th mini-batch at the parameters of the version it read. So the order in
# which the server took them — (worker, clock, version read), which our server records — is all
# that is needed to compute the run again. `convergence.replay` does that with the server's own
# float64 operations; `convergence.simulate` takes the order from the clock rule of Lab 06's section 4
# instead, so loss against gradients and against time comes out of one deterministic function.
# SSP with s = 0 is BSP: everybody reads the same version, and applying a clock's W gradients one
# by one with step lr is the averaged update with step W·lr (the linear scaling rule of section 1).
#
# The timelines: four workers, each iteration four times longer with probability 0.15 (a machine
# busy now and then), ten seeded timelines, every gradient applied with the same step lr.
#
# **Predict first:** at lr = 0.1 and at lr = 0.2, does ASP need more gradients than BSP to bring
# the loss to a thousandth of its start? Does it need more time?

# %%
from labkit.data_parallel import convergence as C
from labkit.data_parallel.param_server import PSConfig

stale, stale_runs = lab.staleness_runs()
print(stale)
row = {(r[0], r[1]): dict(zip(stale.columns, r)) for r in stale.rows}
bsp1, asp1, bsp2, asp2 = row[(0.1, "BSP (s=0)")], row[(0.1, "ASP")], row[(0.2, "BSP (s=0)")], row[(0.2, "ASP")]
claim_close("lr 0.1: ASP needs about as many gradients as BSP", asp1["gradients to target"],
            bsp1["gradients to target"], rel=0.1)
claim_between("... and reaches the target in about 60 % of BSP's time", asp1["time to target"] / bsp1["time to target"],
              0.55, 0.65)
every = [r[4] for r in stale.rows if r[0] == 0.1]
claim("lr 0.1: every rule needs 42 to 45 gradients", 42 <= min(every) <= max(every) <= 45,
      ", ".join(f"{x:g}" for x in every))
claim_between("lr 0.2: ASP needs about twice BSP's gradients", asp2["gradients to target"] / bsp2["gradients to target"],
              1.5, 2.5)
claim("... and more time than BSP", asp2["time to target"] > bsp2["time to target"],
      f"{asp2['time to target']:.1f} vs {bsp2['time to target']:.1f}")
display(HTML(figure_to_html(V.convergence_figure({label: r for (lr, label), r in stale_runs.items() if lr == 0.2},
                                                 title="lr 0.2 per gradient, timeline 0"))))

# %% [markdown]
# At the small step, staleness is almost free: every rule needs about 44 gradients, and the rules
# that do not wait get there sooner — ASP in about 60 % of BSP's time. At twice the step, stale
# gradients cost progress: ASP needs about twice BSP's gradients and now loses on time as well.
# Move the rule and the learning rate here:

# %%
V.convergence_widget(stale_runs)

# %% [markdown]
# **What the theory promises.** Ho et al. (2013) proved that SSP converges for convex losses: with
# step sizes falling as 1/√t, the regret after T updates of P workers under staleness bound s is
# at most 4FL·√(2(s + 1)PT) (F bounds the distance between parameter vectors, L the gradients).
# The average regret falls as 1/√T whatever s is, and staleness costs a factor √(s + 1) in the
# guarantee (the table's last column, sqrt(s+1)). The bound holds for *every* timeline, so it keeps growing
# with s. A real timeline caps the staleness itself: the largest seen here stays at 14 from s = 4
# on, and so does the cost.

# %%
worst = {r[1]: r[2] for r in stale.rows if r[0] == 0.2}
claim("the staleness seen stops growing from s = 4 on", worst["SSP s=4"] == worst["SSP s=8"] == worst["ASP"],
      f"max staleness {worst['SSP s=4']} for s = 4, 8 and ASP")
claim_between("... with a mean near 3", row[(0.2, "ASP")]["mean stale"], 2.5, 3.2)
claim("... while the bound's factor keeps growing", C.ssp_regret_bound(1, 1, 8, 4, 100)
      > C.ssp_regret_bound(1, 1, 4, 4, 100), "sqrt(9) > sqrt(5)")

# %% [markdown]
# The same timeline on the real server: three runs on gloo ranks, each worker sleeping through
# its iterations. Wall times depend on the machine (the clock rule ignores the cost of messages
# and of processes sharing two cores); what does not depend on it is the run itself. Each run is
# replayed from the order its server recorded:

# %% tags=["nbval-ignore-output"]
real = lab.real_staleness_runs()
print(real)

# %%
claim("replaying each real run from its order of events gives its losses bit for bit",
      real.column("replay = real, bit for bit") == ["yes"] * len(real.rows), f"{len(real.rows)} of {len(real.rows)} runs")

# %% [markdown]
# ### 2.2 Why staleness needs a smaller step
#
# Take the simplest case: a quadratic of curvature λ, and every gradient exactly τ updates old:
# x_{t+1} = x_t − η·λ·x_{t−τ}. With fresh gradients (τ = 0) it converges for η·λ < 2. With delay
# τ, it converges exactly when η·λ < 2·sin(π/(2(2τ + 1))), about π/(2τ + 1) for large τ: the
# largest safe step shrinks in proportion to the delay. Next to it, a bisection on the iteration's
# growth factor (the largest root of z^{τ+1} − z^τ + η·λ), which knows nothing of the formula:

# %%
print(lab.delay_table())
worst_gap = max(abs(C.delay_step_limit(t) - C.largest_stable_step(t)) for t in range(9))
claim("the closed form and the bisection agree for tau = 0..8", worst_gap < 1e-9, f"largest difference {worst_gap:.0e}")
below, above = (C.delayed_descent(f * C.delay_step_limit(4), 4, 3000)[-1] for f in (0.95, 1.05))
claim("tau = 4: 5 % below the limit the error shrinks, 5 % above it grows", below < 1e-6 < 1e6 < above,
      f"{below:.0e}, {above:.0e}")
lam_max = C.curvature(PSConfig(), 4)
tolerated = {lr: C.tolerated_delay(lr * lam_max) for lr in (0.1, 0.2)}
claim_close("its largest curvature is about 1.74", lam_max, 1.74, abs_=0.01)
claim("the server's problem tolerates staleness up to 8 at lr 0.1, only up to 3 at lr 0.2",
      tolerated == {0.1: 8, 0.2: 3})

# %% [markdown]
# The server's least-squares problem has a largest curvature of about 1.74. At lr 0.1 its stiffest
# direction tolerates gradients up to 8 updates old; at lr 0.2 only up to 3 — and the runs above
# have a mean staleness near 3 and stretches of up to 14. That is the whole of 2.1: staleness
# costs little at a step far from the limit and a lot near it. (A bounded staleness is a crude
# picture of asynchrony — delays vary from gradient to gradient — but the shape of the limit is
# the reason asynchronous systems train with smaller steps, or bound the staleness.)
#
# ### 2.3 Batch size: perfect scaling, then diminishing returns
#
# Data parallelism grows the batch. How many *steps* does a larger batch save? McCandlish et al.
# (2018) found a simple shape across many models: with the learning rate tuned for each batch
# size, the steps S to reach a given loss and the examples E = S·B used for it trade off as
# S ≈ S_min + E_min/B. Below the **critical batch** B_crit = E_min/S_min, doubling the batch
# halves the steps; far above it, the steps stop falling and the extra examples are wasted.
#
# To measure it we need a model we can train hundreds of times: linear regression in 32
# dimensions, input variances from 1 down to 1/30, every step on fresh examples, the loss known
# in closed form (`labkit.data_parallel.noise_scale`). For each batch from 1 to 1024, the fewest
# steps after which six seeded runs have all brought the loss to 0.3 % of its start, over a grid
# of learning rates.
#
# **Predict first:** from batch 1 to batch 1024, by how much do the steps fall? Where does the
# curve bend?

# %%
batch_table, sw, (s_min, e_min, b_crit), ns_run = lab.batch_size_study()
print(batch_table)
steps = dict(zip(sw.batches, sw.steps))
small = [steps[b] * b for b in (1, 2, 4)]
claim("up to B = 4, doubling the batch halves the steps", max(small) / min(small) < 1.05,
      f"S·B = {', '.join(map(str, small))}")
claim_between("from B = 256 to 1024 the steps fall by at most 10 %", steps[1024] / steps[256], 0.9, 1.0)
claim("S·B stays between 384 and 400 up to B = 4; the floor is about 15 steps",
      384 <= min(small) <= max(small) <= 400 and steps[1024] <= 16, f"{steps[1024]} at B = 1024")
claim("batch 1024 uses 39 times the examples of batch 1, for 26 times fewer steps",
      (round(steps[1024] * 1024 / steps[1]), round(steps[1] / steps[1024])) == (39, 26))
claim_close("the fit S = S_min + E_min/B puts the bend near B = 29", b_crit, 29, rel=0.1)

# %% [markdown]
# Perfect scaling up to a batch of 4 (the examples used stay between 384 and 400), then the bend, then a
# floor of about 15 steps: batch 1024 uses 39 times the examples of batch 1 and takes 26 times
# fewer steps, not 1024 times fewer.
#
# **Predicting the bend: the gradient noise scale.** Why does a bigger batch stop helping? Its
# gradient is less noisy, and once the noise is small next to the gradient itself, less noise
# buys nothing. McCandlish et al. measure that ratio as the *noise scale*
# B_simple = tr(Σ)/|G|²: G is the true gradient and Σ the covariance of a single example's
# gradient (its trace, the summed variance). A batch whose size is near B_simple has a gradient
# about as noisy as it is large. And it can be measured during training, from what data
# parallelism computes anyway: each rank's gradient over its b examples and the all-reduced one
# over N·b. Over a batch of B examples,
#
#     E |G_B|² = |G|² + tr(Σ)/B,
#
# so the two sizes give two equations for the two unknowns. Here a run of 16 ranks × 64 examples
# recorded both norms at every step; averaged over the run, they give B_simple, and the curve
# S_min·(1 + B_simple/B) in the table's last column and the picture:

# %%
b_simple = ns_run.b_simple
print(f"B_simple from the run: {b_simple:.1f} (the bend fitted to the steps: {b_crit:.1f})")
claim_close("the noise scale of the run predicts the bend within 10 %", b_simple, b_crit, rel=0.1)
pred = [s_min * (1 + b_simple / b) for b in sw.batches]
worst_pred = max(abs(p_ / s - 1) for p_, s in zip(pred, sw.steps))
claim("S_min(1 + B_simple/B) is within 15 % of every measured step count", worst_pred < 0.15,
      f"largest miss {worst_pred:.0%}")
lr_of = dict(zip(sw.batches, sw.lrs))
claim("the best lr grows with the batch up to 4, then stays below 2/λ_max",
      lr_of[4] / lr_of[1] > 3 and max(sw.lrs) < 2, f"{lr_of[1]:.2f}, {lr_of[4]:.2f}, at most {max(sw.lrs):.2f}")
display(HTML(figure_to_html(V.batch_size_figure(sw.batches, sw.steps, sw.lrs, s_min, b_simple, 2.0))))

# %% [markdown]
# The noise scale measured during one run lands within 10 % of the bend fitted to
# eleven batch sizes, and predicts every step count within 15 %. (McCandlish et al. find B_simple
# and the critical batch within a small factor of each other across many models, not equal: the
# noise scale changes as training goes on, and with it the bend. Here it was averaged over the
# run.) The right panel is the other side of the same coin: the best learning rate grows about
# in proportion to the batch at first — the linear scaling rule — and then stops, capped by the
# curvature (2/λ_max = 2 for this problem).
#
# ### Exercise 5: `noise_scale`
#
# In `exercises/lab06_data_parallel.py`, write `noise_scale(g_small_sq, g_big_sq, b_small, b_big)`:
# |G|², tr(Σ) and B_simple from the two squared norms. Mind the bias: |G_big|² is not |G|². The
# cell runs yours on this run's norms and draws the steps your B_simple predicts.

# %%
check_your_work("lab06_data_parallel", "noise_scale", picture=lab.picture("noise_scale"))

# %% [markdown]
# ### 2.4 AdaScale: a learning rate that scales only as far as the noise allows
#
# The linear rule multiplies the learning rate by S when the batch grows S times — right while
# the noise dominates, far too much once it does not. **AdaScale** (Johnson et al., 2020) scales
# it by a measured *gain* instead: with σ² the variance of one base batch's gradient and μ² = |G|²,
#
#     r = (σ² + μ²) / (σ²/S + μ²),
#
# between 1 (no noise: a bigger batch gives the same step) and S (all noise). Both are estimated
# every step from the S base-batch gradients, exactly as above, and the run goes on until the sum
# of its gains equals the steps of the base run — each step counts for r base steps.
#
# **Predict first:** a base run at batch 2 and lr 0.125 takes 273 steps. At batches 4 to 256
# times larger, does the linear rule still reach the base run's loss? How large does AdaScale's
# gain get?

# %%
ada_table, ada_runs = lab.adascale_table()
print(ada_table)
ada = {r[1]: dict(zip(ada_table.columns, r)) for r in ada_table.rows}
base_final = ada[1]["AdaScale final"]
claim("AdaScale ends at or below the base run's loss at every scale",
      all(ada[S]["AdaScale final"] <= base_final for S in (4, 16, 64, 256)), f"base {base_final:.2e}")
claim("the linear rule blows up at 64 and 256 times the batch",
      ada[64]["linear rule final"] == ada[256]["linear rule final"] == "blew up", f"lr {0.125 * 64:g} and {0.125 * 256:g}")
ceiling = 1 + b_simple / 2
claim("AdaScale's gain stays below 1 + B_simple/b0", max(max(r.gains) for r in ada_runs.values()) < ceiling,
      f"largest {max(max(r.gains) for r in ada_runs.values()):.1f} < {ceiling:.1f}")
claim_between("... and its steps fall from 273 to about S_min", ada[256]["AdaScale steps"], 15, 25)
display(HTML(figure_to_html(V.adascale_figure(ada_runs, ceiling))))

# %% [markdown]
# AdaScale reaches the base run's loss at every scale, in steps that fall from 273 towards the
# floor of 2.3; its gain saturates below 1 + B_simple/2 ≈ 15, because past the noise scale a
# larger batch does not allow a larger step. The linear rule takes steps of 0.125·S: fine at 4×,
# far off at 16× and unstable from 64×.
#
# ### 2.5 Why large-batch rules stop working, and the generalisation gap
#
# Three reasons, the first two measured above:
#
# 1. **Beyond the noise scale, examples are wasted.** The steps cannot fall below S_min; batch 1024
#    used 39 times the examples of batch 1 for a 26-fold saving in steps.
# 2. **The step hits the curvature.** The linear rule assumes that one step of S·lr does what S
#    steps of lr would, which holds only while each step changes the gradient little. Once lr·S
#    approaches 2/λ_max the run oscillates or diverges (2.4).
# 3. **Early training is different.** Curvature is largest at the start, so large-batch recipes
#    warm the learning rate up over the first epochs (Goyal et al., 2017), and layer-wise rules
#    such as LARS and LAMB adapt the step to each layer's gradient-to-weight ratio.
#
# And the **generalisation gap**: Keskar et al. (2017) saw large-batch training of deep networks
# reach the same training loss with a worse test loss, and attributed it to *sharp* minima; Hoffer
# et al. (2017) found much of the gap closes when large batches get as many updates; Dinh et al.
# (2017) showed that sharpness can be changed by rescaling a network without changing what it
# computes, so it cannot be the whole story. On a finite training set of our linear problem (256
# examples, label noise) — one minimum, so no sharp or flat ones — the two parts can be told apart:

# %%
gap = lab.gap_table()
print(gap)
g = {r[0]: dict(zip(gap.columns, r)) for r in gap.rows}
small_run, large_run, longer = g["small batch"], g["large, same epochs"], g["large, same steps"]
claim("after one epoch the large batch's test loss is worse", large_run["test loss"] > small_run["test loss"] + 0.2,
      f"{large_run['test loss']:.3f} vs {small_run['test loss']:.3f}")
claim("... but its gap is within 0.03 of the small batch's: it is training loss",
      abs(large_run["gap"] - small_run["gap"]) < 0.03, f"{large_run['gap']:.3f} vs {small_run['gap']:.3f}")
claim("given as many steps, the large batch has the lowest test loss", longer["test loss"] < small_run["test loss"],
      f"{longer['test loss']:.3f}")

# %% [markdown]
# At a fixed number of epochs the large batch takes 16 times fewer steps and ends with a worse
# test loss — but also a worse *training* loss: its gap is the small batch's. Given as many steps
# it does best. What remains of the gap in deep networks at equal training loss needs many
# minima to choose between, which a convex problem does not have; measuring it takes a deep
# network trained to convergence at several batch sizes, hours of CPU: beyond this course.
#
# ### 2.6 Worked problems
#
# **Problem 1.** Eight ranks of 32 examples each. Averaged over a run, each rank's |gradient|² is
# 5.0 and the all-reduced gradient's is 1.5. What are |G|², tr(Σ) and B_simple?
#
# <details><summary>Answer</summary>
#
# 5.0 = |G|² + tr(Σ)/32 and 1.5 = |G|² + tr(Σ)/256. Subtracting: tr(Σ)·(1/32 − 1/256) = 3.5, so
# **tr(Σ) = 128**, **|G|² = 1.0**, **B_simple = 128**. (Taking 1.5 as |G|² would give 85.)
#
# </details>
#
# **Problem 2.** A model needs S_min = 1 000 steps and E_min = 512 000 examples. How many steps at
# batches 128, 512 and 4 096, and how many examples?
#
# <details><summary>Answer</summary>
#
# B_crit = 512; S = 1 000·(1 + 512/B): **5 000, 2 000 and 1 125 steps**, i.e. 0.64 M, 1.02 M and
# 4.6 M examples. Past B_crit, 8 times the batch saves under half the steps.
#
# </details>
#
# **Problem 3.** A quadratic with largest curvature λ_max = 4. The largest stable learning rate
# with fresh gradients, and with gradients 2 updates stale?
#
# <details><summary>Answer</summary>
#
# Fresh: η < 2/4 = **0.5**. With τ = 2: η < 2·sin(π/10)/4 = 0.618/4 ≈ **0.155**.
#
# </details>
#
# **Problem 4.** AdaScale at S = 8 when the variance of a base batch's gradient is three times
# |G|². What is the gain?
#
# <details><summary>Answer</summary>
#
# r = (3 + 1)/(3/8 + 1) = 4/1.375 ≈ **2.91** — far from the linear rule's 8.
#
# </details>
#
# **Problem 5.** By what factor does the SSP regret bound grow from s = 0 to s = 3, at the same
# number of updates and workers?
#
# <details><summary>Answer</summary>
#
# √(s + 1): **2×**. The average regret still falls as 1/√T.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
from labkit.data_parallel.noise_scale import noise_scale

p1 = noise_scale(5.0, 1.5, 32, 256)
p2 = [1000 * (1 + 512 / b) for b in (128, 512, 4096)]
p3 = (2 / 4, C.delay_step_limit(2) / 4)
p4 = (3 + 1) / (3 / 8 + 1)
p5 = C.ssp_regret_bound(1, 1, 3, 4, 100) / C.ssp_regret_bound(1, 1, 0, 4, 100)
print(p1, p2, [round(x, 3) for x in p3], round(p4, 2), p5)
claim("Problem 1: |G|^2 = 1, tr = 128, B_simple = 128", [round(x, 9) for x in p1] == [1.0, 128.0, 128.0])
claim("... and without the correction about 85", round(p1[1] / 1.5) == 85, f"{p1[1] / 1.5:.1f}")
claim("Problem 2: 5000, 2000 and 1125 steps", [round(x) for x in p2] == [5000, 2000, 1125])
claim("Problem 3: 0.5 and 0.155", (p3[0], round(p3[1], 3)) == (0.5, 0.155))
claim_close("Problem 4: a gain of 2.91", p4, 2.91, abs_=0.005)
claim_close("Problem 5: twice the bound", p5, 2.0, abs_=1e-12)

# %% [markdown]
# ## Further reading
#
# * J. Gustafson, *Reevaluating Amdahl's Law*, CACM 1988.
# * P. Goyal et al., *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, 2017.
# * Y. Lin et al., *Deep Gradient Compression*, ICLR 2018; F. Seide et al., *1-Bit Stochastic
#   Gradient Descent*, Interspeech 2014.
# * B. McMahan et al., *Communication-Efficient Learning of Deep Networks from Decentralized
#   Data*, AISTATS 2017 (FedAvg).
# * Q. Ho et al., *More Effective Distributed ML via a Stale Synchronous Parallel Parameter
#   Server*, NeurIPS 2013 — SSP's convergence guarantee.
# * S. McCandlish, J. Kaplan, D. Amodei et al., *An Empirical Model of Large-Batch Training*,
#   2018 — the noise scale and the critical batch.
# * T. Johnson, P. Agrawal, H. Gu and C. Guestrin, *AdaScale SGD*, ICML 2020.
# * N. S. Keskar et al., *On Large-Batch Training for Deep Learning: Generalization Gap and Sharp
#   Minima*, ICLR 2017; E. Hoffer, I. Hubara and D. Soudry, *Train longer, generalize better*,
#   NeurIPS 2017; L. Dinh et al., *Sharp Minima Can Generalize For Deep Nets*, ICML 2017.
#
# ## Summary
#
# * Amdahl (strong scaling) and Gustafson (weak scaling) both use the serial fraction s (two
#   measured points fit either law exactly; what lies beyond is extrapolation); data parallelism
#   grows the batch, and large batches need a scaled learning rate — up to a limit.
# * Compression with error feedback and local SGD cut bytes by 16–33× here for little loss.
# * Stale gradients cost little at a small step and a lot near the stability limit, which
#   staleness lowers: 2·sin(π/(2(2τ+1))) instead of 2. SSP's guarantee degrades as √(s + 1).
# * Steps to a target fall as 1/B up to the critical batch, then stop; the gradient noise scale,
#   measured from the two gradients DDP already has, predicts the bend. AdaScale scales the
#   learning rate only as far as the noise allows.
#
# **Exercise** (in `exercises/lab06_data_parallel.py`, with Lab 06's others): `noise_scale`, with its
# "check your work" cell in section 2.3. Grade the lab with `python -m labkit.grade --lab 06` (or
# `make grade LAB=06`).
