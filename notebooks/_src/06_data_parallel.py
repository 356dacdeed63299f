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
#    and bucketed all-reduces against both;
# 4. compare BSP, ASP and SSP on a real parameter server — each at its best learning rate — and
#    explain why its one link becomes the bottleneck that a ring all-reduce avoids;
# 5. fit Amdahl's and Gustafson's laws to measured scaling, and measure what large batches,
#    gradient compression and local SGD do to the loss;
# 6. measure what staleness and batch size do to convergence: stale gradients and the step they
#    allow, steps to a target against the batch, the gradient noise scale, and AdaScale.
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
from labkit.claims import claim, claim_between, claim_close
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
# parameter starts the all-reduce of its gradient the moment backward has accumulated it:

# %%
show(DDP._on_grad_ready)
show(DDP._reduce)

# %% [markdown]
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
# Write DDP's core yourself: broadcast rank 0's weights, register a post-accumulate-grad hook on
# every parameter that requires grad, and in it divide the gradient by the world size and start an
# asynchronous all-reduce; `finish()` waits for them. Watch out for a weight that two modules share
# (it must be reduced once) and for frozen parameters. The check trains the GPT on 2 real ranks with
# your hooks and compares with one process; the grader also checks that every all-reduce started
# during backward.

# %%
check_your_work("lab06_data_parallel", "data_parallel_hooks", picture=lab.picture("data_parallel_hooks"))

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
# ### Exercise 3: `ssp_start_times`
#
# Write the clock rule: when does each worker start each iteration under ASP, SSP(s) and BSP?
# The check draws your timelines the way the widget does and compares with labkit's.

# %%
check_your_work("lab06_data_parallel", "ssp_start_times", picture=lab.picture("ssp_start_times"))

# %% [markdown]
# ## 5. How far does it scale?
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
# different (and wrong) answer. Efficiency η = speedup / n. Measured on this machine with our DDP.
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
# N ranks with b sequences each compute one step of batch N·b (section 1). For a fixed number of
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
# ## 6. Worked problems
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
# **Problem 6.** A data-parallel run on 8 GPUs spends 20 % of its step time in serial work. What
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
claim("P6: Gustafson 6.6; Amdahl 3.33, never above 5",
      (round(gustafson_speedup(0.2, 8), 2), round(amdahl_speedup(0.2, 8), 2), round(amdahl_speedup(0.2, 10**9), 2))
      == (6.6, 3.33, 5.0))

# %% [markdown]
# ## 7. How parallel SGD converges
#
# Sections 4 and 5 timed the rules. This section follows the loss: how many gradients and how
# much time each rule needs to reach a target, what the theory promises, and how the batch size
# changes the number of steps.
#
# ### 7.1 Stale gradients: per gradient and per second
#
# Once the server has taken its gradients, the run is fixed: worker k's gradient of clock c is
# the gradient of its c-th mini-batch at the parameters of the version it read. So the order in
# which the server took them — (worker, clock, version read), which our server records — is all
# that is needed to compute the run again. `convergence.replay` does that with the server's own
# float64 operations; `convergence.simulate` takes the order from the clock rule of section 4
# instead, so loss against gradients and against time comes out of one deterministic function.
# SSP with s = 0 is BSP: everybody reads the same version, and applying a clock's W gradients one
# by one with step lr is the averaged update with step W·lr (the linear scaling rule of section 5).
#
# The timelines: four workers, each iteration four times longer with probability 0.15 (a machine
# busy now and then), ten seeded timelines, every gradient applied with the same step lr.
#
# **Predict first:** at lr = 0.1 and at lr = 0.2, does ASP need more gradients than BSP to bring
# the loss to a thousandth of its start? Does it need more time?

# %%
from labkit.claims import claim, claim_between, claim_close
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
# ### 7.2 Why staleness needs a smaller step
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
# have a mean staleness near 3 and stretches of up to 14. That is the whole of 7.1: staleness
# costs little at a step far from the limit and a lot near it. (A bounded staleness is a crude
# picture of asynchrony — delays vary from gradient to gradient — but the shape of the limit is
# the reason asynchronous systems train with smaller steps, or bound the staleness.)
#
# ### 7.3 Batch size: perfect scaling, then diminishing returns
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
# ### Exercise 4: `noise_scale`
#
# In `exercises/lab06_data_parallel.py`, write `noise_scale(g_small_sq, g_big_sq, b_small, b_big)`:
# |G|², tr(Σ) and B_simple from the two squared norms. Mind the bias: |G_big|² is not |G|². The
# cell runs yours on this run's norms and draws the steps your B_simple predicts.

# %%
check_your_work("lab06_data_parallel", "noise_scale", picture=lab.picture("noise_scale"))

# %% [markdown]
# ### 7.4 AdaScale: a learning rate that scales only as far as the noise allows
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
# floor of 7.3; its gain saturates below 1 + B_simple/2 ≈ 15, because past the noise scale a
# larger batch does not allow a larger step. The linear rule takes steps of 0.125·S: fine at 4×,
# far off at 16× and unstable from 64×.
#
# ### 7.5 Why large-batch rules stop working, and the generalisation gap
#
# Three reasons, the first two measured above:
#
# 1. **Beyond the noise scale, examples are wasted.** The steps cannot fall below S_min; batch 1024
#    used 39 times the examples of batch 1 for a 26-fold saving in steps.
# 2. **The step hits the curvature.** The linear rule assumes that one step of S·lr does what S
#    steps of lr would, which holds only while each step changes the gradient little. Once lr·S
#    approaches 2/λ_max the run oscillates or diverges (7.4).
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
# ### 7.6 Worked problems
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
# * S. Li et al., *PyTorch Distributed: Experiences on Accelerating Data Parallel Training*,
#   VLDB 2020 — DDP's buckets, hooks and overlap.
# * M. Li et al., *Scaling Distributed Machine Learning with the Parameter Server*, OSDI 2014.
# * Q. Ho et al., *More Effective Distributed ML via a Stale Synchronous Parallel Parameter
#   Server*, NeurIPS 2013.
# * P. Goyal et al., *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, 2017.
# * Y. Lin et al., *Deep Gradient Compression*, ICLR 2018; F. Seide et al., *1-Bit Stochastic
#   Gradient Descent*, Interspeech 2014.
# * B. McMahan et al., *Communication-Efficient Learning of Deep Networks from Decentralized
#   Data*, AISTATS 2017 (FedAvg).
# * J. Gustafson, *Reevaluating Amdahl's Law*, CACM 1988.
# * A. Sergeev and M. Del Balso, *Horovod: fast and easy distributed deep learning in
#   TensorFlow*, 2018 — ring all-reduce for data parallelism.
# * PyTorch, *DistributedDataParallel notes*:
#   <https://pytorch.org/docs/stable/notes/ddp.html>.
# * S. McCandlish, J. Kaplan, D. Amodei et al., *An Empirical Model of Large-Batch Training*,
#   2018 — the noise scale and the critical batch.
# * T. Johnson, P. Agrawal, H. Gu and C. Guestrin, *AdaScale SGD*, ICML 2020.
# * N. S. Keskar et al., *On Large-Batch Training for Deep Learning: Generalization Gap and Sharp
#   Minima*, ICLR 2017; E. Hoffer, I. Hubara and D. Soudry, *Train longer, generalize better*,
#   NeurIPS 2017; L. Dinh et al., *Sharp Minima Can Generalize For Deep Nets*, ICML 2017.
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
# **Exercises** (in `exercises/lab06_data_parallel.py`): `bucket_indices`, `data_parallel_hooks`,
# `ssp_start_times`, `noise_scale`; each has a "check your work" cell above. Grade them all with
# `python -m labkit.grade --lab 06` (or `make grade LAB=06`).
