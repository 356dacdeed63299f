# Source of notebooks/08_pipeline.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 08 — Pipeline parallelism: GPipe, 1F1B, interleaving, and asynchronous weights
#
# When a model does not fit on one device, we can cut it into consecutive **stages** and put each
# stage on its own rank. The activations flow forward through the ranks and the gradients flow
# back. Done naively, only one rank works at a time. Pipelining splits the batch into
# **microbatches** so that the ranks can work on different microbatches at once.
#
# **You will be able to**
# 1. explain where the pipeline *bubble* comes from, and predict its size: (p−1)/(m+p−1) of the step
#    for GPipe and 1F1B, and (p−1)/(v·m+p−1) with v interleaved stages per rank;
# 2. say why 1F1B keeps at most p microbatches of activations on rank 0 where GPipe keeps m;
# 3. show that the slowest stage sets the pace of the whole pipeline;
# 4. count how many weight versions the asynchronous schedules (PipeDream, PipeDream-2BW) keep;
# 5. run any schedule on real gloo ranks, with real sends and receives, and check that its
#    gradients equal those of one process and those of PyTorch's `torch.distributed.pipelining`;
# 6. compare bidirectional pipelines (Chimera, DualPipe) with 1F1B and zero bubble, slice one
#    sequence into a token pipeline (TeraPipe), and count the staleness of asynchronous pipelines.
#
# A schedule here is plain data: for each rank, the list of actions it runs in order. An action is
# `F`, the forward of one microbatch through one stage, or `B`, its backward. We print it as
# `F3@s1`: the forward of microbatch 3 on stage 1. Stage `s` lives on rank `s mod p`.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
from fractions import Fraction

import torch
from IPython.display import HTML, display

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.grading.check import check_your_work
from labkit.pipeline import Action, ScheduleError, check_schedule, lab, schedule, time_schedule
from labkit.pipeline.async_sim import weight_versions
from labkit.pipeline.executor import MLPConfig, run_pipeline
from labkit.pipeline.schedules import _one_f_one_b
from labkit.pipeline.torch_ref import torch_executed_order, torch_pipeline_order, torch_step
from labkit.show import show
from labkit.viz import pipeline as V
from labkit.viz.player import figure_to_html

print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])


def row(acts):
    """One rank's actions as a compact string, e.g. 'F0 F1 B0 ...' (stage left out)."""
    return " ".join(f"{a.kind}{a.microbatch}" for a in acts)


# %% [markdown]
# ## 1. The bubble, and why microbatches help
#
# Take p = 4 ranks and give the whole batch as a single microbatch (m = 1). Every stage's forward
# takes 1 time unit and its backward 2 (backward does about twice the matmul work). Rank 3 cannot
# start before ranks 0–2 have finished, and rank 0 then waits for the gradient to come all the way
# back. The simulator below replays the schedule event by event: an action starts when its rank is
# free and what it depends on has finished. In every Gantt chart, a row is a rank, a bar is one
# action (colour: its kind, see the legend), and the number on a bar is its microbatch.
#
# **Predict first:** with m = 1, what share of the four ranks' time is idle?

# %%
one = time_schedule(schedule("gpipe", 4, 1), 1, 2)
display(HTML(figure_to_html(V.gantt(one, "GPipe, p=4, m=1: one rank busy at a time"))))
print("makespan", one.makespan, "| bubble fraction", one.bubble_fraction)
claim("three quarters of all rank-time is idle", one.bubble_fraction == Fraction(3, 4), "bubble 3/4, makespan 12")

# %% [markdown]
# Three quarters of all rank-time is idle. With m microbatches of the same total size, each
# microbatch costs 1/m of the work, the pipeline fills in p−1 steps, runs full, and drains in
# p−1 steps. In units of one microbatch's forward+backward on one stage, the step lasts m+p−1 and
# each rank works m of them, so
#
# * **bubble as a share of the step** (idle ÷ (p × step time)): (p−1)/(m+p−1);
# * **bubble relative to the ideal compute** (idle ÷ busy): (p−1)/m.
#
# Both conventions appear in papers; they differ by a factor (m+p−1)/m. The second is often
# written as a time, T_bubble = (p−1)·T_stage/m with T_stage the time of one stage for the *whole*
# batch — the same thing. **A common slip** writes the first as "D − 1 / (D − 1 + N)" (D stages,
# N microbatches): read literally that is D − 1/(D−1+N), close to D; the parentheses matter,
# (D−1)/(D−1+N). The simulator, with exact fractions, checks both conventions:

# %%
p = 4
print(" m | simulated share | (p-1)/(m+p-1) | simulated idle/busy | (p-1)/m")
shares = []
for m in (1, 2, 4, 8, 16, 32):
    r = time_schedule(schedule("gpipe", p, m), 1, 2)
    print(f"{m:2d} | {str(r.bubble_fraction):>15s} | {str(Fraction(p - 1, m + p - 1)):>13s} | "
          f"{str(r.bubble_vs_ideal()):>19s} | {str(Fraction(p - 1, m)):>7s}")
    shares.append((r.bubble_fraction == Fraction(p - 1, m + p - 1), r.bubble_vs_ideal() == Fraction(p - 1, m),
                   r.bubble_fraction))
claim("both conventions equal the simulation exactly, for every m", all(a and b for a, b, _ in shares), "6 values of m")
claim("more microbatches shrink the bubble", all(x > y for (*_, x), (*_, y) in zip(shares, shares[1:])),
      "3/4 down to 3/35")

# %% [markdown]
# More microbatches shrink the bubble, but each microbatch gets smaller (less efficient matmuls),
# and — with GPipe — memory grows, as the next section shows.
#
# ## 2. GPipe vs 1F1B: same time, different memory
#
# **GPipe** runs all forwards, then all backwards. Every microbatch's activations must be kept from
# its forward until its backward, so rank 0 holds all m of them at the peak.
#
# **1F1B** (one forward, one backward) starts backwards as early as possible: rank r runs p−r
# forwards to fill the pipe, then alternates one backward and one forward, then finishes the
# remaining backwards. A microbatch's activations are freed after its backward, so rank 0 never
# holds more than p of them. The total time is the same as GPipe's. (Writing this generator is
# the first exercise, below; ours is shown after it.)
#
# **Predict first:** p = 4, m = 8. How many activation sets does rank 0 hold at its peak under
# GPipe, and under 1F1B? Which is faster?

# %%
p, m = 4, 8
g = time_schedule(schedule("gpipe", p, m), 1, 2)
f = time_schedule(schedule("1f1b", p, m), 1, 2)
display(HTML(figure_to_html(V.gantt(g, f"GPipe p={p} m={m}"))))
display(HTML(figure_to_html(V.gantt(f, f"1F1B p={p} m={m}"))))
print("makespan   GPipe", g.makespan, "| 1F1B", f.makespan, "| formula (m+p-1)(tf+tb) =", (m + p - 1) * 3)
print("bubble     GPipe", g.bubble_fraction, "| 1F1B", f.bubble_fraction, "| (p-1)/(m+p-1) =", Fraction(p - 1, m + p - 1))
print("peak activations in flight per rank")
print("  GPipe", [g.peak_inflight[r] for r in range(p)], "  (m on every rank)")
print("  1F1B ", [f.peak_inflight[r] for r in range(p)], "  (p - r on rank r; min(p, m) on rank 0)")
claim("GPipe and 1F1B take the same time, (m+p-1)(tf+tb)", g.makespan == f.makespan == (m + p - 1) * 3, "33")
claim("GPipe holds m sets on every rank, 1F1B p - r on rank r", [g.peak_inflight[r] for r in range(p)] == [m] * p
      and [f.peak_inflight[r] for r in range(p)] == [p - r for r in range(p)], "8 8 8 8 vs 4 3 2 1")

# %% [markdown]
# ### A correct 1F1B diagram, from a real run
#
# **A common mistake** in hand-drawn 1F1B diagrams (4 GPUs, 4 microbatches) is to start rank 0's
# first backward straight after its fourth forward — before the gradient can possibly be back from
# rank 3 — and then to draw more forwards on rank 0 although every microbatch has been forwarded
# already. Such diagrams are also sometimes labelled "interleaved", which 1F1B with one stage per
# rank is not (section 3). Rather than draw it by hand, we take the order from PyTorch's
# `Schedule1F1B` *as it actually executes*: each stage logs its forward calls and, through an
# autograd hook, its backwards, during a real step on 4 gloo ranks. Our generator gives the same
# order, and the simulator places it in time (forward 1, backward 2): rank 0's first backward
# starts at time 10, after the forward has gone through all four stages (4) and the gradient has
# come back through them (2 + 2 + 2).
#
# %%
ran = torch_executed_order("1f1b", 4, 4)
ours = schedule("1f1b", 4, 4)
for r in range(4):
    print(f"rank {r}: {row(ran[r]):32s} same as ours: {ran[r] == ours[r]}")
placed = time_schedule(ran, 1, 2)
display(HTML(figure_to_html(V.gantt(placed, "1F1B, p=4, m=4, in the order PyTorch executed"))))
claim("PyTorch's executed order is ours on every rank", all(ran[r] == ours[r] for r in range(4)), "4 ranks")
first_b = min(iv.start for iv in placed.timeline[0] if iv.action.kind == "B")
claim("rank 0's first backward starts at time 10", first_b == 10, "4 forwards + 3 backwards of 2")

# %% [markdown]
# Rank 0 runs p − 0 = 4 forwards (all of them, since m = 4), rank 3 alternates from the start.
# PyTorch also prints a helper order (`pipeline_order`) for this schedule; for the single-stage
# 1F1B it is *not* what its executor runs — its last rank starts at microbatch 1 and ends with a
# microbatch 4 that does not exist:

# %%
helper = torch_pipeline_order("1f1b", 4, 4)
print("helper order, rank 3:", row(helper[3]))
print("executed,     rank 3:", row(ran[3]))
claim("the helper order is not what runs: it starts at 1 and has a microbatch 4", helper[3] != ran[3]
      and helper[3][0].microbatch == 1 and max(a.microbatch for a in helper[3]) == 4, "m = 4: microbatches 0-3")

# %% [markdown]
# ### Checking a schedule
#
# `check_schedule` proves that a schedule can run: every forward and backward exactly once on the
# right rank, and no rank waiting forever. F of stage s needs F of s−1; B of stage s needs its
# own F and B of s+1. When something is wrong it names the first dependency that breaks, following
# who waits for whom back to the root cause:

# %%
bad = schedule("1f1b", 4, 4)
bad[3] = [Action(3, "B", 0)] + [a for a in bad[3] if a != Action(3, "B", 0)]  # backward before forward
try:
    check_schedule(bad)
    refused = None
except ScheduleError as e:
    refused = str(e)
    print(lab.wrap(e))
claim("the broken schedule is refused, naming the first dependency", refused is not None
      and refused.startswith("rank 3 position 0: B0@s3"), "B0@s3 before its forward")

# %% [markdown]
# ### Exercise: `schedule_1f1b`
#
# Write `schedule_1f1b(num_ranks, num_microbatches)` in `exercises/lab08_pipeline.py` (its
# docstring is the spec). The next cell checks your schedule with `check_schedule`, simulates it
# (forward 1, backward 2), draws it like the charts above and compares it with ours — then the
# grader runs that exercise's tests. Until you write it, it says so.

# %%
check_your_work("lab08_pipeline", "schedule_1f1b", picture=lab.picture("schedule_1f1b"))

# %% [markdown]
# Ours, for comparison (one rank's list; `schedule("1f1b", p, m)` collects it for every rank):

# %%
show(_one_f_one_b)

# %% [markdown]
# ## 3. Interleaving: more, smaller stages per rank
#
# Give each rank v stages instead of one (rank r holds stages r, r+p, r+2p, …), each with 1/v of
# the rank's layers. Filling the pipe now takes p−1 *small* stage-steps, so the bubble shrinks by
# about v: (p−1)/(v·m+p−1). The price is more communication (v times the boundaries) and more
# activation sets in flight (each 1/v the size). Our `interleaved_1f1b` follows PyTorch's
# `ScheduleInterleaved1F1B` action for action. PyTorch keeps every schedule as a *schedule IR*
# (intermediate representation): `pipeline_order`, a table {rank: [action, …]} that its executor
# then runs — the same kind of plain data as ours, so the two can be compared with `==` (the tests
# also compare with a recorded run). Here for p = 4, m = 8, v = 2. Time units: one rank's whole
# share of the model takes 1 forward and 2 backward, so each of its v stages takes 1/v and 2/v.
#
# **Predict first:** p = 4, m = 8. What bubble do v = 1, 2, 4 give?

# %%
ir = torch_pipeline_order("interleaved_1f1b", 4, 8, 2)
print("equal to PyTorch's pipeline_order on every rank:", ir == schedule("interleaved_1f1b", 4, 8, 2))
p, m = 4, 8
print(" v | simulated bubble | (p-1)/(vm+p-1) | makespan | peak activation sets on rank 0")
inter = {}
for v in (1, 2, 4):
    r = time_schedule(schedule("interleaved_1f1b", p, m, v), Fraction(1, v), Fraction(2, v))
    inter[v] = r
    print(f" {v} | {str(r.bubble_fraction):>16s} | {str(Fraction(p - 1, v * m + p - 1)):>14s} | "
          f"{str(r.makespan):>8s} | {r.peak_inflight[0]}")
claim("our interleaved schedule is PyTorch's pipeline_order, action for action", ir == schedule("interleaved_1f1b",
      4, 8, 2), "p=4, m=8, v=2")
claim("the bubble is (p-1)/(vm+p-1) exactly for v = 1, 2, 4", all(inter[v].bubble_fraction
      == Fraction(p - 1, v * m + p - 1) for v in inter), "3/11, 3/19, 3/35")

# %% [markdown]
# When does the formula hold exactly? The simulator says: for every m ≥ p that the schedule
# accepts (PyTorch's version needs m to be a multiple of max(1, m // p); m does not have to be a
# multiple of p), whatever the forward/backward ratio. For m < p the warm-up cannot be hidden and
# the bubble is larger:

# %%
small = {}
for m in (2, 3, 4, 5, 6):
    r = time_schedule(schedule("interleaved_1f1b", 4, m, 2), Fraction(1, 2), 1)
    small[m] = (r.bubble_fraction, Fraction(3, 2 * m + 3))
    print(f"p=4 v=2 m={m}: simulated {str(r.bubble_fraction):>5s}, formula {Fraction(3, 2 * m + 3)}")
claim("exact for m >= p, larger for m < p", all(a == b for m, (a, b) in small.items() if m >= 4)
      and all(a > b for m, (a, b) in small.items() if m < 4), "m = 2, 3 above the formula")
try:
    schedule("interleaved_1f1b", 4, 9, 2)
    refused = None
except ValueError as e:
    refused = str(e)
    print(lab.wrap(f"m=9: {e}"))
claim("m = 9 is refused with one line", refused is not None and "\n" not in refused, "not a multiple of 2 rounds")

# %% [markdown]
# ### Memory: what interleaving costs
#
# An *activation set* is what one stage keeps for one microbatch between its forward and its
# backward; with v stages per rank each set is 1/v of what a whole rank's share would keep. The
# table counts the peak number of sets alive on each rank, and converts the largest into
# rank-shares (sets ÷ v), the unit in which 1F1B holds p on rank 0:

# %%
peaks = lab.peak_table(4, 8, 2)
print(peaks)
pk = {(r[0], r[1]): r for r in peaks.rows}
claim("interleaved with v = 1 holds 7 sets on rank 0, not 1F1B's 4, at the same makespan",
      pk[("interleaved_1f1b", 1)][3] == 7 and pk[("1f1b", 1)][3] == 4
      and pk[("interleaved_1f1b", 1)][5] == pk[("1f1b", 1)][5], "makespan 33")
claim("v = 2 holds 11 half-size sets, 5.5 rank-shares", pk[("interleaved_1f1b", 2)][3] == 11
      and Fraction(pk[("interleaved_1f1b", 2)][4]) == Fraction(11, 2), "against 4 for 1F1B")

# %% [markdown]
# Two things to read in it.
#
# * **Interleaved with v = 1 is not 1F1B**: rank 0 holds 7 sets, not 4, at the same makespan.
#   PyTorch's interleaved schedule warms up with 2(p−1−r) forwards on rank r (plus (v−1)·p more
#   for the later virtual stages) before its first backward, where 1F1B does p−r. The deeper
#   warm-up is what lets a rank with several virtual stages keep busy while gradients travel back
#   through the others; with v = 1 nothing needs it, and it only costs memory (7 = 2·3 + 1 sets
#   on rank 0: 6 warm-up forwards and one more before the first backward arrives).
# * **v = 2 holds 11 sets of half size = 5.5 rank-shares** on rank 0, against 4 for 1F1B: the
#   smaller bubble is paid for in activation memory (and in twice as many messages).
#
# ### Exercise: `bubble_fraction`
#
# Write `bubble_fraction(num_ranks, num_microbatches, virtual_stages)`, returning an exact
# `Fraction`. The picture compares yours with the simulator on six configurations.

# %%
check_your_work("lab08_pipeline", "bubble_fraction", picture=lab.picture("bubble_fraction"))

# %% [markdown]
# ### Zero bubble: split the backward
#
# A backward does two jobs: the gradient with respect to the stage's *input* (call it I), which the
# previous stage is waiting for, and the gradient with respect to its *weights* (W), which nobody
# waits for until the optimizer step. Running I at once and deferring W lets W fill the gaps of the
# drain. `interleaved_zb` follows PyTorch's `ScheduleInterleavedZeroBubble` action for action.
#
# Let TF, TI, TW be the times of the forward, I and W of **one rank's whole share of the model**
# (per-stage times, in the sense of one pipeline stage per rank); each of its v virtual stages
# takes TF/v, TI/v, TW/v. With TW ≤ TF and TW ≤ TI, and m ≥ p, the simulator gives a step of
# exactly
#
# **T = m·(TF + TI + TW) + (p−1)·(TF + TI − TW)/v**
#
# — the bubble shrinks from (p−1)(TF+TI+TW)/v for interleaved 1F1B to (p−1)(TF+TI−TW)/v. Careful:
# the formula needs per-stage times. Plug in the per-virtual-stage times TF/v, … instead and it is
# off by a factor v (last column):
#
# **Predict first:** p = 4, m = 8, v = 2, TF = TI = TW = 1. The step of interleaved 1F1B is
# 3·8 + 3·3/2 = 28.5. What is the zero-bubble step?

# %%
same_zb = torch_pipeline_order("interleaved_zb", 4, 8, 2) == schedule("interleaved_zb", 4, 8, 2)
print("equal to PyTorch's pipeline_order on every rank:", same_zb)
zb = lab.zero_bubble_table([(4, 8, 2, 1, 1, 1), (4, 8, 2, 2, 2, 1), (4, 8, 1, 1, 1, 1), (8, 16, 4, 1, 2, 1)])
print(zb)
claim("our zero-bubble schedule is PyTorch's, action for action", same_zb, "p=4, m=8, v=2")
claim("the per-stage formula equals the simulation in every row", all(zb.column("equal")), "4 rows")
claim("per-virtual-stage times misread it by a factor v", all(sim == v * bad for v, sim, bad in zip(
      zb.column("v"), zb.column("simulated"), zb.column("per-virtual-stage misread"))), "v = 2, 2, 1, 4")
z = lab.simulate_zero_bubble(4, 8, 2, 1, 1, 1)
display(HTML(figure_to_html(V.gantt(z, "interleaved zero bubble, p=4 m=8 v=2"))))

# %% [markdown]
# Memory: an activation set lives until its W, not its I, so one might expect zero bubble to hold
# more. The peak table above says otherwise for this configuration — 8 sets (4 rank-shares, like
# 1F1B) against interleaved 1F1B's 11: PyTorch's zero-bubble schedule warms up less deeply and
# runs the deferred Ws soon enough to free the sets. The bubble and the memory both went down.

# %%
claim("zero bubble: 8 sets (4 rank-shares), not 11, and a shorter step",
      pk[("interleaved_zb", 2)][3] == 8 and Fraction(pk[("interleaved_zb", 2)][4]) == 4
      and Fraction(pk[("interleaved_zb", 2)][5]) < Fraction(pk[("interleaved_1f1b", 2)][5]), "51/2 vs 57/2")

# %% [markdown]
# ## 4. Stage balance: the slowest stage sets the pace
#
# The formulas above assume equal stages. Make stage 2 of 4 three times slower (forward 3,
# backward 5 instead of 1 and 2). In steady state every extra microbatch then costs the slowest
# stage's forward + backward, 8 units, whatever the other stages do.
#
# GPipe's forward pass is a *flow shop*, the classic scheduling problem in which every job (here a
# microbatch) visits the same machines (stages) in the same order. With identical jobs its
# makespan is the sum of the stage times plus (m−1) times the slowest; GPipe's step is that for
# the forwards plus the same for the backwards: Σ(tf + tb) + (m−1)·max(tf + tb).
#
# **Predict first:** by how much does the step grow per extra microbatch?

# %%
tf, tb = [1, 1, 3, 1], [2, 2, 5, 2]
for kind in ("gpipe", "1f1b"):
    spans = [time_schedule(schedule(kind, 4, m), tf, tb).makespan for m in (4, 5, 6, 7, 8)]
    print(f"{kind:5s} makespan for m=4..8: {spans}; increments {[b - a for a, b in zip(spans, spans[1:])]}")
    claim(f"{kind}: every extra microbatch costs the slowest stage's 3 + 5", {b - a for a, b in zip(spans, spans[1:])}
          == {8}, "8 units")
print("GPipe closed form at m=8:", sum(tf) + sum(tb) + 7 * (3 + 5))
claim("GPipe's step is the flow-shop closed form", time_schedule(schedule("gpipe", 4, 8), tf, tb).makespan
      == sum(tf) + sum(tb) + 7 * (3 + 5), "73")
r = time_schedule(schedule("1f1b", 4, 8), tf, tb)
balanced = time_schedule(schedule("1f1b", 4, 8), 1, 2).bubble_fraction
print("1F1B bubble with the slow stage:", round(float(r.bubble_fraction), 3), "| balanced:", round(float(balanced), 3))
claim("the slow stage makes everyone wait", r.bubble_fraction > balanced, f"{float(r.bubble_fraction):.3f} > "
      f"{float(balanced):.3f}")
display(HTML(figure_to_html(V.gantt(r, "1F1B, stage 2 three times slower: everyone waits for rank 2"))))

# %% [markdown]
# ## 5. Asynchronous pipelines and weight versions
#
# GPipe and 1F1B are **synchronous**: all microbatches of a step use the same weights, the
# gradients are accumulated, and the optimizer steps once after the flush. The result is exactly
# the gradient of the full batch (section 6 checks this on real ranks). **A common mistake** lists
# GPipe among the methods with stale gradients; it has none — the table below counts one weight
# version and staleness 0 for it.
#
# **PipeDream** removes the flush: it never stops feeding microbatches and updates the weights
# after every backward. For a backward to be correct it must use the weights its forward used, so
# each stage stashes a copy per in-flight microbatch. **PipeDream-2BW** accumulates gradients
# over m ≥ p microbatches and keeps just two buffers. We replay each stage's non-flushed order and
# count the versions that are alive at once:

# %%
p = 4
versions = {}
for policy in ("gpipe", "pipedream", "pipedream_2bw"):
    t = versions[policy] = weight_versions(policy, p, 6 * p)
    print(f"{policy:14s} versions per stage {t.max_versions}   staleness (updates) {t.staleness}")
print("PipeDream expected p - s:", [p - s for s in range(p)])
claim("GPipe: one weight version, staleness 0", versions["gpipe"].max_versions == [1] * p
      and versions["gpipe"].staleness == [0] * p, "synchronous")
claim("PipeDream keeps p - s versions on stage s", versions["pipedream"].max_versions == [p - s for s in range(p)],
      "4 3 2 1")
claim("2BW needs at most 2, one on the last stage", versions["pipedream_2bw"].max_versions == [2, 2, 2, 1],
      "at the price of one update of staleness")

# %% [markdown]
# Stage s (counting from 0) holds p−s versions under PipeDream — stage 0, with p microbatches in
# flight, the most. 2BW needs at most 2 (1 on the last stage, which never has two microbatches in
# flight), at the price of a gradient that is one update stale.
#
# ### Pipelines train
#
# **A common mistake** says pipeline parallelism is "only for inference", since a model cut into
# stages seems to leave nowhere to put the backward pass. GPipe was built for training: every
# stage runs its backwards, accumulates its parameters' gradients over the microbatches, and
# steps its own optimizer after the flush. Here the executor of section 6 trains the MLP for ten
# SGD steps with GPipe on 4 gloo ranks (4 microbatches a step; the targets are what another,
# fixed MLP makes of the inputs), next to the same training in one process on whole batches:

# %%
trained = lab.training_table("gpipe", p=4, m=4, steps=10)
print(trained)
tl = trained.data
claim("GPipe trains: the loss halves in ten steps", tl["losses"][-1] < tl["losses"][0] / 2,
      f"{tl['losses'][0]:.4f} -> {tl['losses'][-1]:.4f}")
claim("every step's loss and the final weights are one process's", max(abs(a - b) for a, b in zip(tl["losses"],
      tl["reference"])) < 1e-12 and tl["max_param_diff"] < 1e-12, f"max |param difference| {tl['max_param_diff']:.0e}")
#
# ## 6. The real executor
#
# `labkit.pipeline.executor.run_step` runs *any* valid schedule on gloo ranks: for F it receives
# the activation from the rank of the previous stage (`dist.recv`), runs the stage and sends its
# output on (`dist.isend`); for B it receives the output gradient, backpropagates, and sends the
# input gradient back (a split backward does the same in two parts, I then W). Parameter
# gradients accumulate over the microbatches; the loss of each
# microbatch is divided by m. In float64, the gradients equal one process's full-batch gradients
# up to rounding (the sums are done in a different order), for every schedule:

# %%
ex = lab.executor_table()
print(ex)
claim("every schedule's loss and gradients equal one process's and PyTorch's", all(ex.column("= one process"))
      and all(ex.column("= PyTorch")), "to 1e-12, 4 schedules")

# %% [markdown]
# ### Exercise: `stage_backward`
#
# The executor's own backward step is the answer to this exercise, so it is not shown here; once
# yours passes, compare it with `show(labkit.pipeline.executor.run_step)` (the `B` branch).
#
# Write `stage_backward` — the receive, backward and send of one stage for one microbatch. The
# picture plugs yours into the real executor for one 1F1B step on 2 gloo ranks, draws the measured
# timeline and compares loss and gradients with one process.

# %%
check_your_work("lab08_pipeline", "stage_backward", picture=lab.picture("stage_backward"))

# %% [markdown]
# ### Measured timeline vs simulated
#
# Now with stages heavy enough to time: 4 blocks of Linear(512, 512)+tanh per rank, 256 rows per
# microbatch, float32, on p = 2 ranks (this machine has 2 cores; more ranks would share cores and
# the picture would show the operating system's scheduler, not the pipeline). We record every
# action's start and end on a clock shared by the processes, take the median forward and backward
# time per stage, feed them to the simulator, and compare. Measured numbers change from run to run.

# %% tags=["nbval-ignore-output"]
p, m = 2, 8
cfg = MLPConfig(num_stages=p, num_microbatches=m, width=512, layers_per_stage=4, batch=256 * m,
                dtype=torch.float32)
for kind in ("gpipe", "1f1b"):
    measured = lab.measure(kind, cfg)
    print(measured.lines())
    display(HTML(figure_to_html(V.compare_timelines(measured.run.timeline, measured.sim))))

# %% [markdown]
# The measured bubble is usually larger than the simulated one: the simulator has no cost for sending a
# tensor between processes, and on a shared 2-core machine a rank sometimes waits for a core.
# `time_schedule(..., p2p_latency=...)` adds a per-hop cost if you want to fit it.
#
# ### Our executor vs PyTorch's, step time
#
# Same model and configuration through `torch.distributed.pipelining` (`benchmarks/pipeline.py`
# does this for more configurations and writes `benchmarks/results/pipeline.md`):

# %% tags=["nbval-ignore-output"]
import statistics

for kind in ("gpipe", "1f1b"):
    ours = run_pipeline(schedule(kind, p, m), cfg, repeats=3)
    _, _, theirs = torch_step(kind, cfg, repeats=3, num_ranks=p)
    t_o, t_t = statistics.median(ours.step_times[1:]), statistics.median(theirs[1:])
    print(f"{kind}: ours {t_o * 1e3:.1f} ms, PyTorch {t_t * 1e3:.1f} ms, ours/PyTorch = {t_o / t_t:.2f}")

# %% [markdown]
# ## 7. Explore: the pipeline widget
#
# Choose the schedule, ranks, microbatches, stages per rank and how much slower the last stage is.
# The chart shows who computes when (the legend names the colours), the activation sets each
# rank holds over time, and the bubble next to the uniform-stage formula of the schedule
# ((p−1)/(vm+p−1), or (p−1)/(3vm+p−1) for zero bubble with I = W = F).
#
# Things to try: 1F1B with m = 4, 8, 16 (the bubble shrinks, rank 0's peak stays at p);
# interleaved with v = 1 vs 1F1B (same time, more memory); an imbalance of 1 (everyone waits).

# %%
V.pipeline_widget()

# %% [markdown]
# ## 8. Four more designs: Chimera, DualPipe, TeraPipe, asynchronous pipelines
#
# Everything so far runs one pipeline, in one direction, over micro-batches, with a flush at the
# end of the step. Each design below drops one of those assumptions. They are timed with the
# same event simulator; the two bidirectional ones need a stage placement the lab's
# `stage s on rank s mod p` cannot express, so `labkit.pipeline.chimera` adds an explicit one
# (`Layout`) and `simulate_placed`, which gives exactly `time_schedule`'s results on the lab's own
# placement (the tests check this schedule by schedule).
#
# ### 8.1 Chimera: two pipelines in opposite directions
#
# Chimera (Li & Hoefler, SC 2021) runs a *down* pipeline (model stage j on rank j) and an *up*
# pipeline (model stage j on rank D−1−j) over the same D ranks. Half the micro-batches go each way,
# each direction runs 1F1B, and the two per-rank lists are merged. Every rank therefore stores two
# stages: **twice the weights** of 1F1B, and the two copies of a stage add up their gradients at
# the end of the step. In the paper's slot model (forward and backward one slot each), a
# direction's micro-batches enter every second slot, so on any rank the two directions'
# forwards fall on slots of opposite parity, and so do their backwards — the merge never
# collides (D even):

# %%
from labkit.pipeline import chimera, dualpipe, staleness, terapipe

show(chimera.chimera_slots)

# %% [markdown]
# **Predict first:** D = 4 ranks, N = 4 micro-batches, forward = backward = 1. 1F1B takes
# (N + D − 1)·2 = 14. How long does Chimera take, and what share of it is bubble?

# %%
D, N = 4, 4
ch = chimera.simulate_placed(chimera.chimera_schedule(D, N), chimera.bidirectional_layout(D, N), 1, 1)
display(HTML(figure_to_html(V.gantt(ch, "Chimera D=4 N=4 (virtual stage 0: down pipeline, 1: up)"))))
chi = chimera.chimera_table([(4, 4), (4, 8), (8, 8), (8, 16)])
print(chi)
claim("the paper's (D-2)/(2N+D-2) exactly, in every row", chi.column("bubble") == chi.column("paper (F=B)"), "4 rows")
claim("Chimera's step is shorter than 1F1B's in every row", all(int(a) < int(b) for a, b in zip(chi.column("step"),
      chi.column("1F1B step"))), "10 vs 14, ...")
claim("activation sets peak at D in the middle ranks and D/2 + 1 at the ends", all(
      max(pk_) == D and pk_[0] == pk_[-1] == D // 2 + 1 for D, pk_ in zip(chi.column("D"), chi.column("peak sets per rank"))),
      "[3, 4, 4, 3] for D = 4")

# %% [markdown]
# The simulator gives the paper's (D−2)/(2N+D−2) exactly, for N a multiple of D (Chimera runs
# units of D micro-batches back to back): D − 2 idle slots per rank against 1F1B's 2(D − 1).
# The activation sets peak at D in the middle ranks and D/2 + 1 at the ends, as the paper says.
# The formula assumes forward = backward; with backward = 2 × forward each rank idles
# (D−2)·B in one unit and (D−2)(B−F) more per extra unit (the next unit no longer slots into
# the previous one's drain; the paper has refinements for this that we do not model):

# %%
chi2 = chimera.chimera_table([(4, 4), (4, 8), (8, 8)], 1, 2)
print(chi2)
idle = chimera.chimera_idle(4, 8, 1, 2)
print("idle per rank, D=4 N=8, F=1 B=2:", idle)
claim("with backward = 2 x forward the bubble is above the paper's formula", all(Fraction(a) > Fraction(b) for a, b
      in zip(chi2.column("bubble"), chi2.column("paper (F=B)"))), "3 rows")
claim("idle = (D-2)B in one unit + (D-2)(B-F) per extra unit", idle == (4 - 2) * 2 + (4 - 2) * (2 - 1) * 1,
      "D=4, N=8: 2 units, 6")

# %% [markdown]
# ### 8.2 DualPipe: both directions, overlapped and split
#
# **A common mistake** calls Chimera "DeepSeek's pipeline". DeepSeek-V3 trains with **DualPipe**
# (DeepSeek-V3 technical report, 2024): also two directions over the same ranks (so also twice the
# parameters), but built for overlap. In the steady state a rank runs the forward of one
# direction and the backward of the other as *one overlapped block* (F&B), so that one's
# communication hides behind the other's compute; near the ends, backwards are split into I
# (input gradient) and a deferred W (weight gradient), as in zero bubble. Our
# `dualpipe_schedule` replays the eight steps of DeepSeek's reference implementation
# (`DualPipe.step`) as lab actions, one neighbouring F, B pair per overlapped block; the
# simplification is that a result reaches the next rank the moment it is computed.
#
# The report compares bubbles in time units: F a forward chunk, B a full backward, W its
# weight part, F&B an overlapped pair: 1F1B (PP−1)(F+B), ZB1P (PP−1)(F+B−2W) and DualPipe
# (PP/2−1)(F&B+B−3W), with PP, PP and PP+1 activation sets per device.
#
# **Predict first:** PP = 8, m = 16, F = 1, B = 2, W = 1. 1F1B idles 7·3 = 21 and ZB1P
# 7·1 = 7 time units. And DualPipe, with F&B = F + B = 3 (no overlap gain) and with F&B = 2.5?

# %%
duo = dualpipe.comparison_table([(8, 16, 1, 2, 1, None), (8, 16, 1, 2, 1, Fraction(5, 2)), (4, 8, 1, 2, 1, None)])
print(duo)
claim("every bubble equals the report's formula, every peak its count", duo.column("bubble") == duo.column("formula")
      and duo.column("peak act.") == duo.column("report"), f"{len(duo.rows)} rows")
by = {(r[0], r[2], r[3]): Fraction(r[5]) for r in duo.rows}
claim("DualPipe idles least; Chimera more than ZB1P (no split backward)", all(
      by[(pp, fb, "DualPipe")] < by[(pp, fb, "ZB1P")] < by[(pp, fb, "Chimera")] for pp, fb, _ in by),
      "3 configurations")
dp = dualpipe.simulate_dualpipe(4, 8, 1, 2, 1)
display(HTML(figure_to_html(V.gantt(dp, "DualPipe PP=4 m=8 (virtual stage 0: enters at rank 0, 1: at rank 3)"))))

# %% [markdown]
# "bubble" is the largest idle time of a rank (makespan minus its compute; when F&B < F + B the
# middle ranks, which overlap least, idle most). The report's three formulas come out exactly,
# and so do its activation counts (PP + 1 on every rank for DualPipe). The DualPipe formula holds
# in our simulator when the input-gradient part I = B − W equals F (and W ≤ F), the usual
# zero-bubble setting; with F > I ≥ W we measure (PP/2−1)(F&B+F−2W) instead (the tests sweep
# both). Chimera, in the same units, idles more than ZB1P here: it has no split backward.
#
# ### 8.3 TeraPipe: pipelining the tokens of one sequence
#
# With one very long sequence per step there are no micro-batches to pipeline. TeraPipe (Li et
# al., ICML 2021) pipelines **slices of tokens** instead: in a causal transformer slice j needs
# only slices ≤ j, so stage s can run slice j as soon as stage s−1 has passed it on and stage s
# has finished slice j−1 (whose keys and values it attends to). A later slice costs more: it
# attends over a longer prefix. With K equal stages the latency is Σ t_j + (K−1)·max t_j; many
# small slices shrink the second term but pay a per-slice overhead each. Which slicing is best?
# A sequence of L blocks has 2^(L−1) slicings: a million for L = 21, far too many to try for a
# real sequence. The paper chooses the slicing by dynamic programming.
#
# ### Exercise: `optimal_slicing`
#
# In `exercises/lab08_pipeline.py`, write `optimal_slicing(seq_len, num_stages, cost)`: given the
# cost model `cost(length, context)` of one slice on one stage (here `terapipe.SliceCost`:
# overhead + per_token·length + per_pair·(the causal query-key pairs)), return the least latency
# and a slicing that has it. The sum Σ t_j alone would split into independent choices over
# prefixes of the sequence; the max term is what couples the slices. The check compares your
# latency with brute force over all slicings (L = 10) and with ours (L = 16, 32), and the latency
# your slices really take with the one you return; all times are exact fractions.

# %%
check_your_work("lab08_pipeline", "optimal_slicing", picture=lab.picture("optimal_slicing"))

# %% [markdown]
# **Predict first:** a sequence of L = 32 blocks of tokens on K = 8 stages. Will the best slices
# be equal, longer at the start, or longer at the end?

# %%
tera = terapipe.slicing_table([(16, 4), (32, 8)])
print(tera)
dp10, brute10 = terapipe.optimal_slicing(10, 4)[0], terapipe.brute_force_slicing(10, 4)[0]
print("L=10, K=4: DP", dp10, "| brute force over all 512 slicings", brute10)
claim("the DP finds the brute-force optimum", dp10 == brute10, f"{dp10}")
whole, dp = float(tera.rows[1][2]), float(tera.rows[1][4])
claim_between("slicing 32 blocks on 8 stages is about 3.4 x faster than the whole sequence", whole / dp, 3.3, 3.5)
gains = [float(x) for x in tera.column("uniform/DP")]
claim("the DP beats the best equal slicing by a few per cent", all(1 < g < 1.1 for g in gains),
      ", ".join(f"{g:.3f}" for g in gains))
claim("its slices shrink along the sequence", all(list(map(int, s.split())) == sorted(map(int, s.split()),
      reverse=True) for s in tera.column("DP slice lengths")), "longest first")

# %% [markdown]
# Slicing at all is the big win (32 blocks on 8 stages: about 3.4 × faster than the whole
# sequence); the DP's gain over the best equal slicing is a few per cent here. Its slices shrink
# along the sequence, so that the late slices, which see the longest prefix, do not set max t_j.

# %% [markdown]
# Ours, for comparison (after your check): a bound t_max on every slice's time fixes the max term,
# and what is left is a shortest path over prefixes of the sequence; only the distinct slice times
# need trying as the bound.

# %%
show(terapipe._optimal_slicing)

# %% [markdown]
# ### 8.4 Asynchronous pipelines: no flush, stale weights
#
# AMPNet (Gaunt et al., 2017) and PipeMare (Yang et al., 2021) drop the flush: each stage applies
# its update as soon as its gradient for a micro-batch is ready. No bubble — but a micro-batch's
# forward on stage s uses weights some updates older than those its backward finds. We count that
# staleness from timed runs on two machines: one processor per stage alternating F and B (the
# 1F1B order, run for many micro-batches), and a fully pipelined machine that runs a forward and
# a backward per tick on every stage (AMPNet's and PipeMare's setting).
#
# **Predict first:** p = 4 stages, one update per micro-batch. How many updates behind is stage
# 0's forward on each machine?

# %%
stale = staleness.staleness_table(4, (1, 2))
print(stale)
claim("counted staleness equals the closed forms on both machines", all(stale.column("equal")), "4 rows")

# %% [markdown]
# Stage s (from 0) is p−1−s updates stale on the alternating machine and 2(p−s)−1 on the fully
# pipelined one (PipeMare counts stages from 1: 2(P−i)+1); accumulating N micro-batches per update
# divides by N, rounded up. What does it do to training? A 4-layer tanh network learns a random
# teacher, one SGD step per micro-batch, its forwards delayed as above. PipeMare proposes two
# remedies, tried here in simplified form: *learning-rate rescheduling* (a stage with delay τ
# takes steps divided by τ, early on or throughout) and *discrepancy correction* (the backward
# uses the current weights moved back along their recent drift, towards those the forward saw).

# %%
st = staleness.training_table(4, (0.4, 1.2))
print(st)
res = {r[0].strip(): r[1:] for r in st.rows}
claim("at lr 0.4 the delays cost a little: every run converges", all(v[0] != "diverged" for v in res.values()),
      f"sync {res['synchronous (delays 0)'][0]}, full {res['async full (delays 7 5 3 1)'][0]}")
claim("at lr 1.2 the fully pipelined run diverges where synchronous SGD converges",
      res["async full (delays 7 5 3 1)"][1] == "diverged" and res["synchronous (delays 0)"][1] != "diverged", "")
claim("stashing or correcting does not save it; lr / tau throughout does",
      res["same, stashed weights"][1] == res["same, discrepancy correction"][1] == "diverged"
      and float(res["same, lr / tau throughout"][1]) < float(res["same, lr / tau annealed to lr"][1]),
      f"{res['same, lr / tau throughout'][1]} vs annealed {res['same, lr / tau annealed to lr'][1]}")

# %% [markdown]
# At the smaller step the delays cost a little; at the larger one the fully pipelined run
# diverges where synchronous SGD converges. Stashing or correcting the backward's weights does
# not save it: the trouble is the delayed forward, and only smaller steps for the most delayed
# stages keep it stable (here dividing by τ throughout; annealed back to the full step it ends
# close to the edge).

# %% [markdown]
# ## 9. Worked problems
#
# Try each before opening the answer. (Stage times: forward 1, backward 2 unless stated.)
#
# **Problem 1.** A synchronous pipeline over p = 8 ranks runs m = 32 microbatches. What share of
# the step is bubble? With v = 2 interleaved stages per rank? How many microbatches would bring
# it to 5 % or less with v = 1?
#
# <details><summary>Answer</summary>
#
# (p−1)/(m+p−1) = 7/39 ≈ **17.9 %**; with v = 2, 7/(64+7) = 7/71 ≈ **9.9 %**. For 5 %:
# 7/(m+7) ≤ 1/20 ⇔ m ≥ 133.
#
# </details>
#
# **Problem 2.** Same pipeline (p = 8, m = 32); the activations one stage keeps for one
# microbatch take 2 GB. What does rank 0 hold at its peak under GPipe, and under 1F1B?
#
# <details><summary>Answer</summary>
#
# GPipe keeps every microbatch until the backwards start: 32 sets, **64 GB**. 1F1B keeps at most
# min(m, p) = 8 on rank 0: **16 GB** — for the same step time.
#
# </details>
#
# **Problem 3.** Four stages take forward 1, 1, 3, 1 and backward 2, 2, 5, 2. How long is a
# GPipe step with m = 8, and how much longer with m = 9?
#
# <details><summary>Answer</summary>
#
# Σ(tf + tb) + (m−1)·max(tf + tb) = 17 + 7·8 = **73**; each extra microbatch adds the slowest
# stage's 3 + 5 = **8**, so 81. Section 4's table measures the same increments in the simulator.
#
# </details>
#
# **Problem 4.** PipeDream on p = 4 stages; one copy of stage 0's weights takes 5 GB. How much
# weight memory does stage 0 need? And with PipeDream-2BW?
#
# <details><summary>Answer</summary>
#
# Stage s keeps p − s versions: stage 0 keeps **4 copies, 20 GB**. 2BW keeps 2: **10 GB**, at the
# price of gradients one update stale.
#
# </details>
#
# **Problem 5.** Zero bubble with v = 1, p = 4, m = 8 and TF = TI = TW = 1. What is the step, and
# what was it for 1F1B (backward = I + W = 2)?
#
# <details><summary>Answer</summary>
#
# m(TF+TI+TW) + (p−1)(TF+TI−TW) = 24 + 3 = **27**, against (m+p−1)·3 = **33** for 1F1B. The
# bubble falls from 9/33 to 3/27 of the step. (The table in section 3 has this row.)
#
# </details>
#
# ## Further reading
#
# * Y. Huang et al., *GPipe: Efficient Training of Giant Neural Networks using Pipeline
#   Parallelism*, NeurIPS 2019.
# * D. Narayanan et al., *PipeDream: Generalized Pipeline Parallelism for DNN Training*,
#   SOSP 2019 — 1F1B and weight stashing.
# * D. Narayanan et al., *Memory-Efficient Pipeline-Parallel DNN Training*, ICML 2021 —
#   PipeDream-2BW.
# * D. Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters Using
#   Megatron-LM*, SC 2021 — the interleaved schedule.
# * P. Qi et al., *Zero Bubble Pipeline Parallelism*, ICLR 2024.
# * S. Li and T. Hoefler, *Chimera: Efficiently Training Large-Scale Neural Networks with
#   Bidirectional Pipelines*, SC 2021.
# * DeepSeek-AI, *DeepSeek-V3 Technical Report*, 2024 — DualPipe; reference implementation at
#   <https://github.com/deepseek-ai/DualPipe>.
# * Z. Li et al., *TeraPipe: Token-Level Pipeline Parallelism for Training Large-Scale Language
#   Models*, ICML 2021.
# * A. Gaunt et al., *AMPNet: Asynchronous Model-Parallel Training for Dynamic Neural Networks*,
#   2017; B. Yang et al., *PipeMare: Asynchronous Pipeline Parallel DNN Training*, MLSys 2021.
# * PyTorch, *torch.distributed.pipelining*:
#   <https://pytorch.org/docs/stable/distributed.pipelining.html>.
#
# ## Summary
#
# * The bubble of a synchronous pipeline is (p−1)/(m+p−1) of the step ((p−1)/m of the ideal
#   compute); more microbatches shrink it. GPipe and 1F1B take the same time.
# * 1F1B holds at most p microbatches of activations on rank 0 (p−r on rank r); GPipe holds m.
# * Interleaving v stages per rank gives (p−1)/(v·m+p−1), exactly for m ≥ p, for more messages.
#   Splitting the backward and deferring the weight gradient (zero bubble) shrinks it further.
# * The slowest stage sets the pace: each extra microbatch costs its forward + backward.
# * GPipe and 1F1B are synchronous, and they train: a pipeline's steps equal one process's.
#   PipeDream keeps p−s weight versions on stage s; 2BW keeps 2.
# * A schedule is data: our executor runs any valid one on real ranks and matches one process
#   and PyTorch's `torch.distributed.pipelining`, gradient for gradient.
# * Two directions over the same ranks halve the bubble for twice the weights: Chimera idles
#   D−2 slots against 1F1B's 2(D−1); DualPipe (DeepSeek-V3) adds overlapped F&B blocks and split
#   backwards and idles (PP/2−1)(F&B+B−3W), holding PP+1 activation sets.
# * TeraPipe pipelines token slices of one sequence; its DP picks slices that shrink along the
#   sequence. Without a flush, stage s runs 2(p−s)−1 updates stale (fully pipelined) and large
#   steps diverge unless the most delayed stages take smaller ones.
#
# **Exercises** (in `exercises/lab08_pipeline.py`): the 1F1B generator `schedule_1f1b`, the
# bubble formula `bubble_fraction`, `stage_backward`, the receive–backward–send of one stage
# that the executor calls, and TeraPipe's `optimal_slicing` (§8.3); each has a "check your work"
# cell above. Grade all four with `python -m labkit.grade --lab 08` (or `make grade LAB=08`).
