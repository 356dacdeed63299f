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
#    gradients equal those of one process and those of PyTorch's `torch.distributed.pipelining`.
#
# A schedule here is plain data: for each rank, the list of actions it runs in order. An action is
# `F`, the forward of one microbatch through one stage, or `B`, its backward. We print it as
# `F3@s1`: the forward of microbatch 3 on stage 1. Stage `s` lives on rank `s mod p`.

# %%
from fractions import Fraction

import torch
from IPython.display import HTML, display

import labkit
from labkit.pipeline import Action, ScheduleError, check_schedule, schedule, simulate
from labkit.pipeline.async_sim import weight_versions
from labkit.pipeline.executor import MLPConfig, measured_bubble, reference_step, run_pipeline
from labkit.pipeline.torch_ref import torch_executed_order, torch_pipeline_order, torch_step
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
# free and what it depends on has finished.

# %%
one = simulate(schedule("gpipe", 4, 1), 1, 2)
display(HTML(figure_to_html(V.gantt(one, "GPipe, p=4, m=1: one rank busy at a time"))))
print("makespan", one.makespan, "| bubble fraction", one.bubble_fraction)

# %% [markdown]
# Three quarters of all rank-time is idle. With m microbatches of the same total size, each
# microbatch costs 1/m of the work, the pipeline fills in p−1 steps, runs full, and drains in
# p−1 steps. In units of one microbatch's forward+backward on one stage, the step lasts m+p−1 and
# each rank works m of them, so
#
# * **bubble as a share of the step** (idle ÷ (p × step time)): (p−1)/(m+p−1);
# * **bubble relative to the ideal compute** (idle ÷ busy): (p−1)/m.
#
# Both conventions appear in papers; they differ by a factor (m+p−1)/m. The seed notes write the
# second as a time, T_bubble = (p−1)·T_stage/m with T_stage the time of a stage for the *whole*
# batch, which is the same thing. Another seed writes "D − 1 / (D − 1 + N)": the parentheses are
# missing — it is (D−1)/(D−1+N). The simulator with exact fractions checks both conventions:

# %%
p = 4
print(" m | simulated share | (p-1)/(m+p-1) | simulated idle/busy | (p-1)/m")
for m in (1, 2, 4, 8, 16, 32):
    r = simulate(schedule("gpipe", p, m), 1, 2)
    print(f"{m:2d} | {str(r.bubble_fraction):>15s} | {str(Fraction(p - 1, m + p - 1)):>13s} | "
          f"{str(r.bubble_vs_ideal()):>19s} | {str(Fraction(p - 1, m)):>7s}")

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
# holds more than p of them. The total time is the same as GPipe's.

# %%
p, m = 4, 8
g = simulate(schedule("gpipe", p, m), 1, 2)
f = simulate(schedule("1f1b", p, m), 1, 2)
display(HTML(figure_to_html(V.gantt(g, f"GPipe p={p} m={m}"))))
display(HTML(figure_to_html(V.gantt(f, f"1F1B p={p} m={m}"))))
print("makespan   GPipe", g.makespan, "| 1F1B", f.makespan, "| formula (m+p-1)(tf+tb) =", (m + p - 1) * 3)
print("bubble     GPipe", g.bubble_fraction, "| 1F1B", f.bubble_fraction, "| (p-1)/(m+p-1) =", Fraction(p - 1, m + p - 1))
print("peak activations in flight per rank")
print("  GPipe", [g.peak_inflight[r] for r in range(p)], "  (m on every rank)")
print("  1F1B ", [f.peak_inflight[r] for r in range(p)], "  (p - r on rank r; min(p, m) on rank 0)")

# %% [markdown]
# ### A correct 1F1B diagram, from a real run
#
# One of the seed notes draws 1F1B for 4 GPUs and 4 microbatches under the heading "interleaved"
# (it is not), starts rank 0's first backward straight after its fourth forward (before the
# gradient could be back from rank 3), and then gives rank 0 forwards labelled `[F ]` although all
# four microbatches have already been forwarded. Rather than fix the drawing by hand, we take the
# order from PyTorch's `Schedule1F1B` *as it actually executes*: each stage logs its forward calls
# and, through an autograd hook, its backwards, during a real step on 4 gloo ranks. Our generator
# gives the same order, and the simulator places it in time (forward 1, backward 2).
#
# %%
ran = torch_executed_order("1f1b", 4, 4)
ours = schedule("1f1b", 4, 4)
for r in range(4):
    print(f"rank {r}: {row(ran[r]):32s} same as ours: {ran[r] == ours[r]}")
display(HTML(figure_to_html(V.gantt(simulate(ran, 1, 2), "1F1B, p=4, m=4, in the order PyTorch executed"))))

# %% [markdown]
# Rank 0 runs p − 0 = 4 forwards (all of them, since m = 4), rank 3 alternates from the start.
# PyTorch also prints a helper order (`pipeline_order`) for this schedule; for the single-stage
# 1F1B it is *not* what its executor runs — its last rank starts at microbatch 1 and ends with a
# microbatch 4 that does not exist:

# %%
helper = torch_pipeline_order("1f1b", 4, 4)
print("helper order, rank 3:", row(helper[3]))
print("executed,     rank 3:", row(ran[3]))

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
except ScheduleError as e:
    print(e)

# %% [markdown]
# ## 3. Interleaving: more, smaller stages per rank
#
# Give each rank v stages instead of one (rank r holds stages r, r+p, r+2p, …), each with 1/v of
# the rank's layers. Filling the pipe now takes p−1 *small* stage-steps, so the bubble shrinks by
# about v: (p−1)/(v·m+p−1). The price is more communication (v times the boundaries) and more
# activation sets in flight (each 1/v the size). Our `interleaved_1f1b` follows PyTorch's
# `ScheduleInterleaved1F1B` action for action (checked against its schedule IR and a recorded run
# in the tests); here for p = 4, m = 8, v = 2:

# %%
ir = torch_pipeline_order("interleaved_1f1b", 4, 8, 2)
print("equal to PyTorch's pipeline_order on every rank:", ir == schedule("interleaved_1f1b", 4, 8, 2))
p, m = 4, 8
print(" v | simulated bubble | (p-1)/(vm+p-1) | makespan | peak chunk-activations on rank 0")
for v in (1, 2, 4):
    r = simulate(schedule("interleaved_1f1b", p, m, v), Fraction(1, v), Fraction(2, v))
    print(f" {v} | {str(r.bubble_fraction):>16s} | {str(Fraction(p - 1, v * m + p - 1)):>14s} | "
          f"{str(r.makespan):>8s} | {r.peak_inflight[0]}")

# %% [markdown]
# When does the formula hold exactly? The simulator says: for every m ≥ p that the schedule
# accepts (PyTorch's version needs m to be a multiple of max(1, m // p); m does not have to be a
# multiple of p), whatever the forward/backward ratio. For m < p the warm-up cannot be hidden and
# the bubble is larger:

# %%
for m in (2, 3, 4, 5, 6):
    r = simulate(schedule("interleaved_1f1b", 4, m, 2), Fraction(1, 2), 1)
    print(f"p=4 v=2 m={m}: simulated {str(r.bubble_fraction):>5s}, formula {Fraction(3, 2 * m + 3)}")
try:
    schedule("interleaved_1f1b", 4, 9, 2)
except ValueError as e:
    print("m=9:", e)

# %% [markdown]
# ### Zero bubble: split the backward
#
# A backward does two jobs: the gradient with respect to the stage's *input* (call it I), which the
# previous stage is waiting for, and the gradient with respect to its *weights* (W), which nobody
# waits for until the optimizer step. Running I at once and deferring W lets W fill the gaps of the
# drain. `interleaved_zb` follows PyTorch's `ScheduleInterleavedZeroBubble` action for action.
# With per-chunk times tF, tI, tW (tW ≤ tF and tW ≤ tI) the simulator gives a step of exactly
# m·(tF+tI+tW) + (p−1)(tF+tI−tW)/v — with tF = tI = tW the bubble costs (p−1)·tF/v instead of
# (p−1)(tF+tI+tW)/v. Activations live until the W, so memory is not lower.

# %%
print("equal to PyTorch's pipeline_order on every rank:",
      torch_pipeline_order("interleaved_zb", 4, 8, 2) == schedule("interleaved_zb", 4, 8, 2))
p, m, v = 4, 8, 2
a = simulate(schedule("interleaved_1f1b", p, m, v), Fraction(1, v), Fraction(2, v))
z = simulate(schedule("interleaved_zb", p, m, v), Fraction(1, v), Fraction(2, v), weight_time=Fraction(1, v))
print("makespan interleaved 1F1B", a.makespan, "| zero bubble", z.makespan,
      "| formula m(tF+tI+tW) + (p-1)(tF+tI-tW)/v =", m * 3 + Fraction(p - 1, v))
print("bubble   interleaved 1F1B", a.bubble_fraction, "| zero bubble", z.bubble_fraction)
display(HTML(figure_to_html(V.gantt(z, "interleaved zero bubble, p=4 m=8 v=2 (green = W)"))))

# %% [markdown]
# ## 4. Stage balance: the slowest stage sets the pace
#
# The formulas above assume equal stages. Make stage 2 of 4 three times slower (forward 3,
# backward 5 instead of 1 and 2). In steady state every extra microbatch then costs the slowest
# stage's forward + backward, 8 units, whatever the other stages do; for GPipe the step is the
# flow-shop time Σ stages + (m−1) × slowest.

# %%
tf, tb = [1, 1, 3, 1], [2, 2, 5, 2]
for kind in ("gpipe", "1f1b"):
    spans = [simulate(schedule(kind, 4, m), tf, tb).makespan for m in (4, 5, 6, 7, 8)]
    print(f"{kind:5s} makespan for m=4..8: {spans}; increments {[b - a for a, b in zip(spans, spans[1:])]}")
print("GPipe closed form at m=8:", sum(tf) + sum(tb) + 7 * (3 + 5))
r = simulate(schedule("1f1b", 4, 8), tf, tb)
print("1F1B bubble with the slow stage:", round(float(r.bubble_fraction), 3),
      "| balanced:", round(float(simulate(schedule("1f1b", 4, 8), 1, 2).bubble_fraction), 3))
display(HTML(figure_to_html(V.gantt(r, "1F1B, stage 2 three times slower: everyone waits for rank 2"))))

# %% [markdown]
# ## 5. Asynchronous pipelines and weight versions
#
# GPipe and 1F1B are **synchronous**: all microbatches of a step use the same weights, the
# gradients are accumulated, and the optimizer steps once after the flush. The result is exactly
# the gradient of the full batch (section 6 checks this on real ranks). A seed note lists GPipe
# among methods with stale gradients; that is wrong — GPipe has no staleness at all.
#
# **PipeDream** removes the flush: it never stops feeding microbatches and updates the weights
# after every backward. For a backward to be correct it must use the weights its forward used, so
# each stage stashes a copy per in-flight microbatch. **PipeDream-2BW** accumulates gradients
# over m ≥ p microbatches and keeps just two buffers. We replay each stage's non-flushed order and
# count the versions that are alive at once:

# %%
p = 4
for policy in ("gpipe", "pipedream", "pipedream_2bw"):
    t = weight_versions(policy, p, 6 * p)
    print(f"{policy:14s} versions per stage {t.max_versions}   staleness (updates) {t.staleness}")
print("PipeDream expected p - s:", [p - s for s in range(p)])

# %% [markdown]
# Stage s (counting from 0) holds p−s versions under PipeDream — stage 0, with p microbatches in
# flight, the most. 2BW needs at most 2 (1 on the last stage, which never has two microbatches in
# flight), at the price of a gradient that is one update stale.
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
for kind, p, m, v in [("gpipe", 4, 4, 1), ("1f1b", 4, 6, 1), ("interleaved_1f1b", 2, 4, 2), ("interleaved_zb", 2, 4, 2)]:
    cfg = MLPConfig(num_stages=p * v, num_microbatches=m, width=16, batch=4 * m)
    run = run_pipeline(schedule(kind, p, m, v), cfg)
    loss, grads = reference_step(cfg)
    err = max((a - b).abs().max().item() for s in range(cfg.num_stages) for a, b in zip(run.grads[s], grads[s]))
    lt, gt, _ = torch_step(kind, cfg, num_ranks=p)
    err_t = max((a - b).abs().max().item() for s in range(cfg.num_stages) for a, b in zip(run.grads[s], gt[s]))
    print(f"{kind:17s} p={p} m={m} v={v}: loss {run.loss:.10f} | max |grad - one process| < 1e-12: {err < 1e-12}"
          f" | same loss and grads as PyTorch's schedule (1e-12): {abs(lt - run.loss) < 1e-12 and err_t < 1e-12}")

# %% [markdown]
# ### Measured timeline vs simulated
#
# Now with stages heavy enough to time: 4 blocks of Linear(512, 512)+tanh per rank, 256 rows per
# microbatch, float32, on p = 2 ranks (this machine has 2 cores; more ranks would share cores and
# the picture would show the operating system's scheduler, not the pipeline). We record every
# action's start and end on a clock shared by the processes, take the median forward and backward
# time per stage, feed them to the simulator, and compare. Measured numbers change from run to run.

# %% tags=["nbval-ignore-output"]
import statistics

p, m = 2, 8
cfg = MLPConfig(num_stages=p, num_microbatches=m, width=512, layers_per_stage=4, batch=256 * m, dtype=torch.float32)
for kind in ("gpipe", "1f1b"):
    run = run_pipeline(schedule(kind, p, m), cfg, repeats=3)
    tf = [statistics.median([e - s for tl in run.timeline.values() for a, s, e in tl if a.stage == st and a.kind == "F"])
          for st in range(p)]
    tb = [statistics.median([e - s for tl in run.timeline.values() for a, s, e in tl if a.stage == st and a.kind == "B"])
          for st in range(p)]
    sim = simulate(schedule(kind, p, m), tf, tb)
    print(f"{kind}: forward {[round(x * 1e3, 1) for x in tf]} ms, backward {[round(x * 1e3, 1) for x in tb]} ms per stage")
    print(f"  step: measured {run.makespan * 1e3:.1f} ms, simulated {float(sim.makespan) * 1e3:.1f} ms")
    print(f"  bubble: measured {measured_bubble(run.timeline):.3f}, simulated {float(sim.bubble_fraction):.3f}, "
          f"uniform formula (p-1)/(m+p-1) = {(p - 1) / (m + p - 1):.3f}")
    display(HTML(figure_to_html(V.compare_timelines(run.timeline, sim))))

# %% [markdown]
# The measured bubble is usually larger than the simulated one: the simulator has no cost for sending a
# tensor between processes, and on a shared 2-core machine a rank sometimes waits for a core.
# `simulate(..., p2p_latency=...)` adds a per-hop cost if you want to fit it.
#
# ### Our executor vs PyTorch's, step time
#
# Same model and configuration through `torch.distributed.pipelining` (`benchmarks/pipeline.py`
# does this for more configurations and writes `benchmarks/results/pipeline.md`):

# %% tags=["nbval-ignore-output"]
for kind in ("gpipe", "1f1b"):
    ours = run_pipeline(schedule(kind, p, m), cfg, repeats=3)
    _, _, theirs = torch_step(kind, cfg, repeats=3, num_ranks=p)
    t_o, t_t = statistics.median(ours.step_times[1:]), statistics.median(theirs[1:])
    print(f"{kind}: ours {t_o * 1e3:.1f} ms, PyTorch {t_t * 1e3:.1f} ms, ours/PyTorch = {t_o / t_t:.2f}")

# %% [markdown]
# ## 7. Explore: the pipeline widget
#
# Choose the schedule, ranks, microbatches, stages per rank and how much slower the last stage is.
# The chart shows who computes when (blue forward, orange backward or its I part, green W;
# darker/lighter shades are the virtual stages), the activations each rank holds over time, and
# the bubble next to the uniform-stage formula of the non-split schedules. The first frame is shown statically:

# %%
display(HTML(figure_to_html(V.pipeline_frame("interleaved_1f1b", 4, 8, 2, 0.0))))

# %%
V.pipeline_widget()

# %% [markdown]
# ## Summary
#
# * The bubble of a synchronous pipeline is (p−1)/(m+p−1) of the step ((p−1)/m of the ideal
#   compute); more microbatches shrink it. GPipe and 1F1B take the same time.
# * 1F1B holds at most p microbatches of activations on rank 0 (p−r on rank r); GPipe holds m.
# * Interleaving v stages per rank gives (p−1)/(v·m+p−1), exactly for m ≥ p, for more messages.
#   Splitting the backward and deferring the weight gradient (zero bubble) shrinks it further.
# * The slowest stage sets the pace: each extra microbatch costs its forward + backward.
# * GPipe and 1F1B are synchronous. PipeDream keeps p−s weight versions on stage s; 2BW keeps 2.
# * A schedule is data: our executor runs any valid one on real ranks and matches one process
#   and PyTorch's `torch.distributed.pipelining`, gradient for gradient.
#
# **Exercises** (in `exercises/lab08_pipeline.py`): write the 1F1B generator `schedule_1f1b`, the
# bubble formula `bubble_fraction`, and `stage_backward`, the receive–backward–send of one stage
# that the executor calls. Grade them with `python -m labkit.grade --lab 08` (or
# `make grade LAB=08`).
