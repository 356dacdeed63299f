# Source of notebooks/06_data_parallel.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 06 — Data parallelism: DDP from scratch, overlap, and the parameter server
#
# Data parallelism is the first thing people reach for when one device trains too slowly: every
# rank holds a whole copy of the model, takes its own slice of each batch, and the ranks average
# their gradients before every optimizer step. The averaging is a collective you know from Lab 05
# (an all-reduce). This lab builds it, times it, and hides it behind the backward pass.
#
# **You will be able to**
# 1. explain why N ranks on 1/N of a batch each compute exactly what one process computes on the
#    whole batch — and check it to the last bit that rounding allows;
# 2. group gradients into **buckets** the way PyTorch's `DistributedDataParallel` does, and say why
#    it fills them in reverse order;
# 3. bound a step's time with the overlap formula T ≥ T_fwd + max(T_bwd, T_comm − t_last) + t_last,
#    compute it exactly by replaying the communication channel, and measure naive, per-parameter
#    and bucketed all-reduces against both — and write the bucketed, overlapped DDP yourself;
# 4. compare BSP, ASP and SSP on a real parameter server — each at its best learning rate — and
#    explain why its one link becomes the bottleneck that a ring all-reduce avoids.
#
# How far data parallelism scales, what large batches, compression and local SGD do to the loss,
# and how parallel SGD converges are the second part, `06b_scaling_convergence.ipynb`.
#
# The model throughout is `labkit.model.GPT`, a small GPT (embeddings, pre-norm attention and MLP
# blocks, a tied output layer) that Labs 07 and 09–12 use too. Every rank here is a real process
# talking over `torch.distributed` (gloo on a CPU, NCCL on GPUs).
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch
from IPython.display import HTML, display

import labkit
from labkit.claims import claim
from labkit.data_parallel import DDP, assign_buckets, lab
from labkit.data_parallel.overlap import (exact_step_time, naive_step_time, overlap_step_time, replay_channel,
                                          simulate_overlap)
from labkit.data_parallel.param_server import server_bytes_per_step
from labkit.data_parallel.ssp import ssp_makespan, ssp_start_times
from labkit.grading.check import check_your_work
from labkit.model import GPT, GPTConfig, parameter_count
from labkit.show import show
from labkit.viz import data_parallel as V
from labkit.viz.player import figure_to_html

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. Same result as one process
#
# Each rank computes the mean loss over its own B/N sequences, and backward gives it the gradient
# of that mean. The gradient of the mean over the whole batch is the mean of the N ranks'
# gradients — so DDP divides each gradient by N and all-reduces (sums) it. After that, every rank
# holds the same gradient, takes the same optimizer step, and the replicas stay identical.
#
# Our `DDP` has PyTorch's shape: `DDP(model)` broadcasts rank 0's weights, and a hook on every
# parameter notes when backward has accumulated its gradient, so that the gradient's all-reduce can
# start at once, while backward goes on. You will write that core yourself in section 3
# (Exercises 2 and 3); labkit's version is shown after them.
#
# **Predict first:** 24 sequences, 3 SGD steps in float64. DDP on 4 ranks (6 sequences each) vs one
# process on all 24: equal to the last bit, equal up to rounding, or visibly different?

# %%
eq = lab.equivalence_table(worlds=(1, 2, 4))
print(eq)
errs = dict(zip(eq.column("ranks"), eq.column("max |DDP - one process|")))
claim("one rank equals one process bit for bit; 2 and 4 ranks differ by rounding only",
      errs[1] == 0.0 and 0 < max(errs[2], errs[4]) < 1e-15, f"{errs[2]:.1e}, {errs[4]:.1e}")

# %% [markdown]
# Equal up to rounding (about 1e-17): the sums are taken in a different order (four partial means
# averaged instead of one mean), which changes the last bits of float64, nothing more. The tests
# check this for 1–4 ranks, frozen parameters, gradient accumulation with `no_sync()`, and the
# ring all-reduce of Lab 05 in place of `dist.all_reduce`.
#
# **A common mistake** pictures DDP as "first reduce the gradients to one rank, then broadcast
# them back". A reduce followed by a broadcast *is* an all-reduce — NCCL's tree algorithm is one,
# run over a binary tree and *pipelined*: the buffer goes in chunks, so the broadcast of the first
# chunks overlaps the reduce of the later ones and no link carries the whole buffer many times.
# The mistake is the unpipelined funnel through one rank: that rank receives N − 1 whole
# gradients and sends N − 1 back, while in a ring (reduce-scatter + all-gather, Lab 05) every rank
# sends about 2(N−1)/N of the gradient bytes and none is special. Even an unpipelined binomial tree
# (Lab 05's) sends whole buffers log₂N times from its root:

# %%
from labkit.collectives import formulas

n_ranks, elems = 8, 1 << 20
ring_rank = formulas.ring_all_reduce_bytes(0, n_ranks, elems, 4)[0] / (4 * elems)
tree_root = (formulas.tree_reduce_bytes(0, n_ranks, elems, 4)[1] + formulas.tree_broadcast_bytes(0, n_ranks, elems, 4)[0]) / (4 * elems)
print(f"{n_ranks} ranks, in units of the gradient size S: a ring rank sends {ring_rank:.3f}, the binomial tree's root "
      f"moves {tree_root:.0f},")
print(f"a one-rank funnel's root moves {2 * (n_ranks - 1)}")
claim("on 8 ranks a ring sends 1.75·S per rank; the unpipelined tree's root moves 6·S",
      (ring_rank, tree_root) == (1.75, 6.0))
#
# ## 2. Buckets, filled backwards
#
# One all-reduce per parameter pays the per-message latency α once per parameter (the small
# model below has 28 parameters, GPT-2 small has 148). One all-reduce of everything cannot start until
# backward has finished. **Buckets** sit in between: gradients are packed into flat buffers of
# about `bucket_cap_mb`, and each buffer is reduced as soon as its last gradient is ready.
#
# Backward produces gradients from the last layer to the first — roughly the reverse of the order
# in which the parameters were registered. So the buckets are filled in reverse order: the first
# bucket holds the last layers' gradients and can go while backward is still working on the first
# layers. A bucket closes once it holds at least the cap (the parameter that crosses the cap stays
# in it), and parameters of different dtypes never share a bucket.
#
# **Predict first:** with a cap of 0.004 MiB (4194 bytes), which parameters share the first bucket?

# %%
bt = lab.bucket_table(cap_mb=0.004)
print(bt)
small_params = list(GPT(lab.DATA_PARALLEL_GPT).parameters())
claim("the small model has 28 parameters; PyTorch's DDP forms exactly our buckets",
      len(small_params) == 28 and bt.title.endswith("True") and all(bt.column("PyTorch has it")),
      f"{len(bt.rows)} buckets")
claim("the first bucket holds the last layers' gradients (the final LayerNorm, the last block)",
      all(name.startswith(("ln_f", "b1.")) for name in bt.column("parameters (in the order added)")[0].split(", ")))

# %% [markdown]
# The last column asks PyTorch's own `DistributedDataParallel`, run on two ranks on the same model,
# which buckets it formed: the same ones. *When* PyTorch forms them is worth knowing. Unless told to
# look for unused parameters, it starts with **one bucket holding everything**, watches the order in
# which the first iteration's gradients arrive, and rebuilds its buckets in that order — with the
# cap you give, or by default a small **first bucket of 1 MiB** (so the first all-reduce starts
# early) and **25 MiB** for the rest. Our model of 0.83 M parameters (3.2 MiB of gradients, below),
# under PyTorch's default and with a 1 MiB cap:

# %%
history = lab.torch_bucket_history(GPTConfig(layers=4, hidden=128, heads=4, seq_len=64, vocab=256))
for h in history:
    print(f"bucket_cap_mb={h['cap_mb']} (cap {h['cap_bytes']:,} B): at construction {h['at_construction']},")
    print(f"    after the first step {h['after_first_step']}")
default, one_mib = history
claim("at construction PyTorch has one bucket holding every gradient",
      all(len(h["at_construction"]) == 1 for h in history), f"{default['at_construction'][0]:,} B")
claim("by default it rebuilds a first bucket of just over 1 MiB, then one under 25 MiB",
      default["cap_bytes"] == 25 * 2**20 and 2**20 <= default["after_first_step"][0] < 2 * 2**20
      and len(default["after_first_step"]) == 2, ", ".join(map(str, default["after_first_step"])))
claim("with a 1 MiB cap its rebuilt buckets are the ones our rule forms", one_mib["after_first_step"] == one_mib["ours"],
      f"{len(one_mib['ours'])} buckets")
#
# ### Exercise 1: `bucket_indices`
#
# In `exercises/lab06_data_parallel.py`, write `bucket_indices(param_bytes, param_dtypes, cap_bytes)`
# — the rule above on plain lists. The cell draws your buckets for this model's parameters at
# several caps next to DDP's, then grades the exercise.

# %%
check_your_work("lab06_data_parallel", "bucket_indices", picture=lab.picture("bucket_indices"))

# %% [markdown]
# ## 3. Overlap: hiding communication behind backward
#
# A bucket's all-reduce can start when its last gradient is ready; the buckets share one
# communication channel, so they run one after another. The last bucket (the first layers and the
# embeddings) is ready only when backward ends, so its all-reduce is always exposed.
#
# **Predict first:** backward runs from 0 to 1.0. Two buckets become ready at 0.9 and at 1.0, and
# their all-reduces take 0.5 and 0.1. When does the step's communication end?

# %%
show(replay_channel)
spans = replay_channel([0.9, 1.0], [0.5, 0.1])
exact, bound = exact_step_time(0.0, 1.0, [0.9, 1.0], [0.5, 0.1]), overlap_step_time(0.0, 1.0, [0.5, 0.1])
print("all-reduces run", [(round(a, 2), round(b, 2)) for a, b in spans], f"-> exact {exact:.2f}, formula {bound:.2f}")
claim("replayed, the communication ends at 1.5; the formula below gives only 1.1", (exact, round(bound, 10)) == (1.5, 1.1))

# %% [markdown]
# The first all-reduce starts at 0.9 and holds the channel until 1.4, so the last one, ready at
# 1.0, waits until 1.4 and ends at 1.5. With T_comm the buckets' total all-reduce time and t_last
# the last one's, a formula you will meet everywhere says
#
#     T_step ≥ T_fwd + max(T_bwd, T_comm − t_last) + t_last
#
# It is a **lower bound**: the channel is busy for at least T_comm − t_last before the last bucket,
# which is ready no earlier than the end of backward. It is exact when the channel never waits for
# a bucket — here it sat idle until 0.9, and the bound (1.1) misses by 0.4. `exact_step_time`
# replays the channel instead. Without overlap (every all-reduce after backward) the step is
# T_fwd + T_bwd + T_comm.
#
# **Predict first:** a 4-layer GPT of 0.83 M parameters on 2 ranks. Order the three variants —
# naive (all-reduces after backward), per-parameter overlapped, bucketed (1 MiB) overlapped — from
# fastest to slowest. Which of them waits longest after backward, and why?

# %% tags=["nbval-ignore-output"]
cfg = GPTConfig(layers=4, hidden=128, heads=4, seq_len=64, vocab=256)
print(f"{parameter_count(cfg):,} parameters = {parameter_count(cfg) * 4 / 2**20:.1f} MiB of gradients")
measured = lab.measure_overlap(cfg, batch_per_rank=8, cap_mb=1.0)
ot = lab.overlap_table(measured)
print(ot)
for name, v in measured.variants.items():
    real = V.measured_overlap(v.events, v.fwd, v.bwd)
    display(HTML(figure_to_html(V.overlap_figure(real, f"measured, {name}:"))))
vv = measured.variants
claim("bucketing sends 4 all-reduces where the other two send 52",
      [len(vv[k].events) for k in ("naive", "per-parameter", "bucketed")] == [52, 52, 4])
# how long each waits after backward depends on whether gloo's thread got a core during it (below)
print(f"wait after backward: bucketed {vv['bucketed'].wait * 1e3:.1f} ms, naive {vv['naive'].wait * 1e3:.1f} ms")

# %% [markdown]
# How to read it: the three variants ran their steps in turn (interleaved, so a burst of load from
# other programs hits all three), and the model's inputs — forward, backward and the all-reduces —
# were each measured *alone*; the "model" column combines them: naive T_fwd + T_bwd + the burst of its 52
# all-reduces issued at once ("comm"), the overlapped variants with the bound above ("comm" is
# then the sum of their all-reduces, each timed alone). "wait" is the time after backward until
# every all-reduce has finished; "ARs" counts the all-reduces. Both add
# the **lag**: ranks do not finish backward together (here two ranks share two cores with gloo's
# threads), and no all-reduce can complete before the last rank has started it.
#
# **Naive's wait** is all of its communication: after backward it issues all 52 all-reduces at
# once, and they run one after another — first waiting for the other rank to finish its backward
# (the lag), then 52 small messages, each paying α. On a machine with a core to spare it is by far
# the longest wait and the slowest step. Bucketing wins twice: 13× fewer messages, and the
# reductions run while backward works — if there is a core to run them: when other programs keep
# both cores busy, gloo's thread gets no time during backward and every variant waits after it
# (then only bucketing's fewer messages still show). In the pictures, the black ticks are the moments buckets
# became ready; an orange bar after the end of the blue backward bar is exposed communication.
#
# Compare the last column with 1. The parts measured alone add up to the step only as far as the
# machine stays the same between measurements; on a shared 2-core CPU the ratios scatter from run to
# run (rerun the cell), on a GPU box much less. Two things a CPU shows that a GPU hides: backward
# gets *slower* while all-reduces run beside it (gloo's threads use the same two cores to copy and
# add), and the per-parameter variant pays many small messages. On GPUs the collectives are
# kernels too: NCCL runs each one on a few of the GPU's SMs (a thread block per channel; the
# `NCCL_MIN_NCHANNELS`/`NCCL_MAX_NCHANNELS` settings bound how many) and uses memory bandwidth, so
# an overlapped all-reduce still takes a little from the backward kernels beside it.
#
# **A common mistake** says overlap is "perfect when T_backward ≈ T_comm". Communication hides
# (apart from the last bucket) whenever the channel keeps up with backward — however much shorter
# it is — and shows once it does not. The simulator replays this step from the measured ready
# times, with all-reduce times from an α–β fit of the measured ones (Lab 05's fit), on networks
# from a quarter to four times as slow as the one where T_comm equals T_bwd:

# %% tags=["nbval-ignore-output"]
alpha, beta = lab.fitted_alpha_beta(measured)
print(f"fitted: alpha = {alpha * 1e6:.0f} us, bandwidth 1/beta = {1 / beta / 1e9:.2f} GB/s")
base = simulate_overlap(measured.ready, measured.nbytes, 2**20, 2, alpha, beta, measured.fwd)
t_comm0 = sum(sp.end - sp.start for sp in base.spans)
sim = {}
for ratio in (0.25, 0.5, 1.0, 2.0, 4.0):
    k = ratio * base.t_bwd / t_comm0                       # all-reduces k times slower: T_comm = ratio · T_bwd
    r = simulate_overlap(measured.ready, measured.nbytes, 2**20, 2, alpha * k, beta * k, measured.fwd)
    sim[ratio] = (sum(sp.end - sp.start for sp in r.spans), r)
    print(f"T_comm = {ratio:4} x T_bwd: T_comm {sim[ratio][0] * 1e3:6.1f} ms, T_bwd {r.t_bwd * 1e3:5.1f} ms "
          f"-> exposed {r.exposed * 1e3:6.1f} ms (last bucket {(r.spans[-1].end - r.spans[-1].start) * 1e3:5.1f})")
claim("exposed time never falls below T_comm - T_bwd (the bound), at any speed",
      all(r.exposed >= t - r.t_bwd - 1e-12 for t, r in sim.values()))
claim("once T_comm exceeds T_bwd, the exposed time grows with it",
      sim[4.0][1].exposed > sim[2.0][1].exposed > sim[1.0][1].exposed and sim[4.0][1].exposed >= 3 * sim[4.0][1].t_bwd - 1e-12,
      f"{sim[1.0][1].exposed * 1e3:.1f} -> {sim[4.0][1].exposed * 1e3:.1f} ms")
claim("at a quarter of T_bwd, most of it hides (exposed < half of T_comm)",
      sim[0.25][1].exposed < sim[0.25][0] / 2, f"{sim[0.25][1].exposed * 1e3:.1f} of {sim[0.25][0] * 1e3:.1f} ms")

# %% [markdown]
# Below the crossover most of the communication hides, far from any T_comm ≈ T_bwd; past it, the
# step grows by about the excess T_comm − T_bwd. The widget below replays the same step for any
# bucket cap: small caps pay α many times, one huge bucket cannot start before backward ends.

# %%
V.overlap_widget(measured.ready, measured.nbytes, 2, alpha, beta, measured.fwd)

# %% [markdown]
# `benchmarks/data_parallel.py` times our bucketed DDP against PyTorch's `DistributedDataParallel`
# on the same model, 2 and 4 ranks, in the same processes; its table is in
# `benchmarks/results/data_parallel.md`.
#
# ### Exercise 2: `data_parallel_hooks`
#
# Write DDP's core yourself, per parameter: every gradient's all-reduce starts the moment backward
# has accumulated that gradient and runs while backward goes on, and `finish()` makes sure every
# rank then holds the mean. Watch out for a weight that two modules share (it must be reduced once)
# and for frozen parameters. The check trains the GPT on 2 real ranks with your hooks and compares
# with one process; the grader also checks one asynchronous all-reduce per parameter, each started
# during backward.

# %%
check_your_work("lab06_data_parallel", "data_parallel_hooks", picture=lab.picture("data_parallel_hooks"))

# %% [markdown]
# ### Exercise 3: `bucketed_ddp_hooks`
#
# Now put buckets, hooks and overlap together, as PyTorch's DDP does: `bucketed_ddp_hooks(module,
# buckets)` takes the buckets (lists of indices into the trainable parameters, as your
# `bucket_indices` forms them) and starts ONE asynchronous all-reduce per bucket, of one flat tensor
# holding all of its gradients, in the hook of the bucket's last gradient — while backward is still
# making the others. `finish()` waits and puts each mean back into its parameter's `.grad`. The
# grader trains a tied, partly frozen model on 1–3 real ranks with five bucket lists and checks the
# parameters against one process, that each all-reduce carries exactly its bucket's bytes, and that
# it starts in the hook of its bucket's last gradient (not after backward).
#
# The check trains the small GPT with your buckets on 2 ranks against one process, then **times**
# your version on the 0.83 M-parameter GPT above against labkit's per-parameter and naive DDPs —
# steps interleaved, on this machine. **Predict first:** how many all-reduces does each variant
# send per step, and how many start during backward? Times on a shared 2-core CPU say little about
# a GPU box (section 3): read them, and rerun the cell before trusting a ranking.

# %%
check_your_work("lab06_data_parallel", "bucketed_ddp_hooks", picture=lab.picture("bucketed_ddp_hooks"))

# %% [markdown]
# With 1 MiB buckets your version should send 4 all-reduces a step, all started during backward;
# the per-parameter version sends 52, all during backward, and the naive one 52 after it — the
# counts the grader and the cell above check. Labkit's `DDP` does the same with some recording for
# the timelines (and `overlap=False` for the naive variant): its hook and its reduction, to compare
# with yours —

# %%
show(DDP._on_grad_ready)
show(DDP._reduce)
claim("labkit's DDP sends 4 bucketed all-reduces per step for this model, the per-parameter one 52",
      len(assign_buckets([p for p in GPT(cfg).parameters()], 2**20)) == 4 and len(list(GPT(cfg).parameters())) == 52)

# %% [markdown]
# ## 4. The parameter server: BSP, ASP, SSP
#
# Before all-reduce became the norm, data parallelism used a **parameter server**: a server holds
# the parameters; each worker pulls them, computes a gradient on its own data, and pushes it back.
# The server decides when a worker may go on, which is the **consistency model**:
#
# * **BSP** (Bulk Synchronous Parallel): the server waits for every worker's gradient of a clock,
#   applies their mean, and releases everyone — synchronous SGD, paced by the slowest worker;
# * **ASP** (Asynchronous Parallel): each gradient is applied on arrival and its worker goes on at
#   once; gradients may be *stale* (computed on parameters several updates old);
# * **SSP(s)** (Stale Synchronous Parallel): asynchronous, but no worker may run more than s clocks
#   ahead of the slowest.
#
# (**A common slip** calls these "box synchronous" and "staleness synchronous". The names say what
# they do: *Bulk* Synchronous Parallel — Valiant's model of computation in supersteps, each closed
# by a barrier — and *Stale* Synchronous Parallel, which allows bounded staleness.) Ours is real: rank 0 serves, ranks 1–3 are workers,
# gradients and parameters travel by `dist.send`/`dist.recv`, and worker 1 is slowed down.
#
# **Predict first:** with a persistent straggler three times slower than the others, which of the
# three finishes first? Which reaches the lowest loss after the same number of iterations?

# %% tags=["nbval-ignore-output"]
table, runs, sweep = lab.ps_compare(workers=3, steps=20, compute_s=0.004, straggler_s=0.008, staleness=2,
                                    lr=0.05, lrs=lab.PS_LRS)
print(table)
display(HTML(figure_to_html(V.ps_figure(runs))))
rule = table.column("clock rule")
claim("the clock rule gives all three the straggler's finish, and no run beats it",
      len(set(rule)) == 1 and all(r.seconds >= rule[0] for r in runs.values()), f"{rule[0]:.3f} s")
claim("BSP's gradients are all fresh (fast workers wait); ASP's go stale",
      set(runs["BSP"].staleness) == {0} and max(runs["ASP"].staleness) >= 2,
      f"max staleness {max(runs['BSP'].staleness)}, {max(runs['ASP'].staleness)}")
claim("at the same learning rate ASP ends over 5x lower than BSP", runs["ASP"].loss[-1] * 5 < runs["BSP"].loss[-1],
      f"{runs['ASP'].loss[-1]:.2e} vs {runs['BSP'].loss[-1]:.2e}")

# %%
print({name: r.updates for name, r in runs.items()}, "updates applied;",
      "BSP staleness:", set(runs["BSP"].staleness), "| BSP final loss", f"{runs['BSP'].loss[-1]:.4f}")
claim("BSP applies 20 averaged updates; ASP and SSP apply all 60 gradients",
      [r.updates for r in runs.values()] == [20, 60, 60])

# %% [markdown]
# All three take about the same time: the straggler has to do its 20 iterations whatever the rule
# ("clock rule" is the prediction from the iteration times alone, `ssp_makespan`; on a busy machine
# the measured runs land later, and unevenly). What differs
# is the work done meanwhile. BSP applies one averaged update per clock (20 in all) and the fast
# workers spend most of the run waiting ("fast waited s": the last worker's seconds blocked); ASP
# applies all 60 gradients with no waiting; SSP(2) lets the fast workers run 2 clocks ahead, then
# holds them.
#
# But "ASP ends lower" at one learning rate compares step sizes, not consistency models: BSP takes a
# third as many steps, each on a gradient averaged over three workers, and an averaged gradient is
# less noisy, so it tolerates a larger step. A fair comparison gives each its own best learning
# rate. The same launch ran all three at five rates:
#
# **Predict first:** which consistency model tolerates the largest learning rate?

# %% tags=["nbval-ignore-output"]
print(lab.ps_lr_table(sweep))
start = sweep["BSP", 0.05].loss[0]
best = {name: min((r.loss[-1], lr) for (n_, lr), r in sweep.items() if n_ == name) for name in runs}
claim("staleness limits the step: at lr 0.8 BSP converges while ASP and SSP diverge",
      sweep["BSP", 0.8].loss[-1] < start / 100 and sweep["ASP", 0.8].loss[-1] > start
      and sweep["SSP s=2", 0.8].loss[-1] > start)
same_lr_gap = sweep["BSP", 0.05].loss[-1] / sweep["ASP", 0.05].loss[-1]
best_gap = best["BSP"][0] / best["ASP"][0]
claim("at their best rates the BSP/ASP gap narrows", best_gap < same_lr_gap,
      f"{same_lr_gap:.0f}x at lr 0.05, {best_gap:.1f}x at best")

# %% [markdown]
# At its best learning rate BSP narrows the gap (from over ten times to a few times, varying with
# the order in which ASP's gradients happen to arrive): the same-rate comparison measured the step
# size as much as the consistency model. What remains is real: in the same time, with a straggler, ASP and SSP apply three times as
# many updates, and staleness only halves the learning rate they tolerate. **A common mistake**
# says ASP "does not work": it converges — with gradients up to several updates stale — as long as
# its learning rate respects the staleness; it diverges where BSP is still fine, which is why SSP
# bounds the staleness.
#
# SSP shines when the slowness moves around — one worker slow now, another later, as with shared
# machines. The widget simulates the clock rule (`labkit.data_parallel.ssp`, the same rule the
# server applies): three workers, each slow (3 units) on every third iteration in turn.

# %%
moving = [[3 if (c + k) % 3 == 0 else 1 for c in range(9)] for k in range(3)]
ends = {s_: ssp_makespan(moving, s_) for s_ in (0, 1, 2, None)}
print("finish times: BSP", ends[0], "| SSP s=1", ends[1], "| SSP s=2", ends[2], "| ASP", ends[None])
claim("BSP ends at 27, SSP(1) at 16, SSP(2) at 15 — as soon as ASP",
      (ends[0], ends[1], ends[2], ends[None]) == (27, 16, 15, 15))
V.ssp_widget(moving)

# %% [markdown]
# BSP finishes at 27: every clock waits for whoever is slow. With s = 1 the slow iterations mostly
# overlap and the run ends at 16; with s = 2 at 15 — as fast as ASP, with every gradient's
# staleness still bounded. The staleness
# histogram (right) is what SSP trades for the speed.
#
# ### Why the server is a bottleneck
#
# Every step, every worker pushes its whole gradient into the server and pulls the whole model
# out: the server's link carries 2·W·(model bytes). In a ring all-reduce each rank's link carries
# 2(W−1)/W·(model bytes), whatever W. Our server counts its bytes; the formula says:

# %%
workers, dim = 3, 32
r = runs["BSP"]
headers = (3 + 1) * 8 * workers       # a push carries 3 numbers besides the gradient, a reply 1
print(f"server bytes counted: in {r.bytes_in} + out {r.bytes_out} over {r.updates} clocks "
      f"= {(r.bytes_in + r.bytes_out) // r.updates} per clock")
print(f"formula 2·W·dim·8 = {server_bytes_per_step(workers, dim)}, + headers {headers} "
      f"= {server_bytes_per_step(workers, dim) + headers}")
claim("the server's counted bytes per clock are the formula's, plus the headers",
      (r.bytes_in + r.bytes_out) == r.updates * (server_bytes_per_step(workers, dim) + headers))
sb = lab.server_bytes_table()
print(sb)
claim("the server's link carries W times the model; a ring link under 2x",
      round(sb.column("server link GB/step")[-1], 6) == 64 * 0.8 and max(sb.column("ring link GB/step")) < 0.8,
      f"ratio {sb.column('ratio')[0]:.1f} at W = 2, {sb.column('ratio')[-1]:.1f} at 64")

# %% [markdown]
# **A common mistake** says that "communication gets cheaper with more workers". For a ring, the
# bytes per rank *grow* towards 2× the model (2(W−1)/W → 2), and the latency terms grow with W
# (2(W−1) messages); for a server, its one link carries W times more. Sharding the server over
# several machines (as real parameter servers do) divides that load, at the price of more links.
#
# ### Exercise 4: `ssp_start_times`
#
# Write the clock rule: when does each worker start each iteration under ASP, SSP(s) and BSP?
# The check draws your timelines the way the widget does and compares with labkit's.

# %%
check_your_work("lab06_data_parallel", "ssp_start_times", picture=lab.picture("ssp_start_times"))

# %% [markdown]
# ## 5. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A model of 1.5 B parameters trains with DDP on 64 GPUs, float32 gradients, ring
# all-reduce. How many bytes does each GPU send per step?
#
# <details><summary>Answer</summary>
#
# 2(N−1)/N · S = 2 · 63/64 · 6 GB ≈ **11.8 GB** per GPU per step — almost twice the gradient
# size, and more than with 8 GPUs (10.5 GB).
#
# </details>
#
# **Problem 2.** Forward takes 30 ms, backward 60 ms. Four buckets become ready 15, 30, 45 and 60 ms
# into backward (the last one covers the embeddings), and their all-reduces take 10, 15, 20 and
# 15 ms. What is the step time with overlap, and without? What does the formula
# T_fwd + max(T_bwd, T_comm − t_last) + t_last say?
#
# <details><summary>Answer</summary>
#
# Replay the channel: bucket 1 runs 15–25, bucket 2 30–45, bucket 3 45–65 — past the end of
# backward — so bucket 4, ready at 60, waits until 65 and ends at 80. With overlap: 30 + 80 =
# **110 ms**. Without: 30 + 60 + 60 = **150 ms**. The formula gives 30 + max(60, 45) + 15 =
# **105 ms**, a lower bound: it assumes the channel never waits, but here it sat idle before
# each of the first two buckets was ready.
#
# </details>
#
# **Problem 3.** Parameters of 4, 4, 8, 2 and 2 KiB (registration order, one dtype), cap 8 KiB.
# Which buckets does DDP form?
#
# <details><summary>Answer</summary>
#
# Walking backwards: 2 + 2 = 4 KiB, then + 8 = 12 ≥ 8 → bucket **[4, 3, 2]**; then 4 + 4 = 8 ≥ 8 →
# bucket **[1, 0]**.
#
# </details>
#
# **Problem 4.** Two workers; worker 1's iterations take 1, 4, 1, 1 and worker 2's take 4, 1, 1, 1.
# When does each finish under BSP, and under SSP with s = 1?
#
# <details><summary>Answer</summary>
#
# BSP: each clock lasts its slower iteration, 4 + 4 + 1 + 1 = **10** for both. SSP(1): worker 1
# starts at 0, 1, 5, 6 (its third iteration waits until worker 2 has finished one, at 4; it is
# already past that at 5) and ends at **7**; worker 2 starts at 0, 4, 5, 6 and ends at **7**.
#
# </details>
#
# **Problem 5.** A parameter server with 16 workers trains a 100 M-parameter float32 model, one
# step per second per worker. What bandwidth does the server's link need, and what does a ring
# all-reduce need per link?
#
# <details><summary>Answer</summary>
#
# Server: 2 · 16 · 0.4 GB = **12.8 GB/s**. Ring: 2 · 15/16 · 0.4 GB = **0.75 GB/s** per link.
#
# </details>
#
# %%
# The answers above, computed with labkit (the tests check the same functions).
from labkit.collectives import alpha_beta

claim("P1: 11.8 GB per GPU on 64 GPUs, 10.5 GB on 8",
      [round(alpha_beta.coefficients("ring_all_reduce", n, 1.5e9 * 4)[1] / 1e9, 1) for n in (64, 8)] == [11.8, 10.5])
ready2, comm2 = [15, 30, 45, 60], [10, 15, 20, 15]
claim("P2: 110 ms replayed, 150 ms without overlap, and the formula's bound 105 ms",
      (exact_step_time(30, 60, ready2, comm2), naive_step_time(30, 60, comm2), overlap_step_time(30, 60, comm2))
      == (110, 150, 105))
claim("P3: buckets [4, 3, 2] and [1, 0]", assign_buckets([torch.empty(k * 256) for k in (4, 4, 8, 2, 2)], 8 * 1024)
      == [[4, 3, 2], [1, 0]])
ssp1, bsp = ssp_start_times([[1, 4, 1, 1], [4, 1, 1, 1]], 1), ssp_start_times([[1, 4, 1, 1], [4, 1, 1, 1]], 0)
claim("P4: BSP ends at 10 for both; SSP(1) starts 0, 1, 5, 6 and 0, 4, 5, 6, both end at 7",
      bsp[0][-1] + 1 == bsp[1][-1] + 1 == 10 and ssp1 == [[0, 1, 5, 6], [0, 4, 5, 6]])
claim("P5: the server's link needs 12.8 GB/s, a ring link 0.75 GB/s",
      (server_bytes_per_step(16, 10**8, 4) / 1e9, alpha_beta.coefficients("ring_all_reduce", 16, 0.4e9)[1] / 1e9)
      == (12.8, 0.75))

# %% [markdown]
# ## Further reading
#
# * S. Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training*,
#   VLDB 2020 — DDP's buckets, hooks and overlap.
# * M. Li et al., *Scaling Distributed Machine Learning with the Parameter Server*, OSDI 2014.
# * Q. Ho et al., *More Effective Distributed ML via a Stale Synchronous Parallel Parameter
#   Server*, NeurIPS 2013.
# * A. Sergeev and M. Del Balso, *Horovod: fast and easy distributed deep learning in
#   TensorFlow*, 2018 — ring all-reduce for data parallelism.
# * PyTorch, *DistributedDataParallel notes*:
#   <https://pytorch.org/docs/stable/notes/ddp.html>.
#
# ## Summary
#
# * Data parallelism averages the ranks' gradients with an all-reduce; the result equals one
#   process on the whole batch, up to the order of floating-point sums.
# * Buckets are filled in reverse registration order (the order backward makes gradients) and
#   reduced as soon as they are full — the same buckets as PyTorch's DDP, which forms them after
#   the first iteration (by default a 1 MiB first bucket, then 25 MiB).
# * T_step ≥ T_fwd + max(T_bwd, T_comm − t_last) + t_last, exact when the channel never waits for
#   a bucket; replaying the channel gives the step. Communication hides behind backward as long as
#   the channel keeps up, except the last bucket.
# * BSP is paced by the slowest worker; ASP never waits but uses stale gradients, which lower the
#   learning rate it tolerates; compare them at each one's best rate. SSP bounds the staleness and
#   absorbs stragglers that move around.
# * A parameter server's link carries 2·W·model bytes per step; a ring link carries under twice
#   the model, whatever W.
#
# **Exercises** (in `exercises/lab06_data_parallel.py`): `bucket_indices`, `data_parallel_hooks`,
# `bucketed_ddp_hooks`, `ssp_start_times` here, and `noise_scale` in part 2; each ends its section with a
# "check your work" cell. Grade them all with `python -m labkit.grade --lab 06` (or
# `make grade LAB=06`).
#
# **Next:** part 2, `06b_scaling_convergence.ipynb` — scaling laws, large batches, compression and
# local SGD, and how parallel SGD converges.
