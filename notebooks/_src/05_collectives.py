# Source of notebooks/05_collectives.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 05 — Collectives: ring, tree and recursive doubling, from point-to-point messages
#
# Data-parallel training ends every step with an **all-reduce** of the gradients; tensor and
# pipeline parallelism add all-gathers, reduce-scatters and broadcasts. In this lab we build those
# collectives ourselves out of nothing but `isend`/`irecv` between real `torch.distributed`
# processes (gloo on this CPU), count every byte they move, and predict their speed with a
# two-number model.
#
# **You will be able to**
# 1. state what each of the seven primitives (broadcast, scatter, gather, reduce, all-gather,
#    reduce-scatter, all-reduce) leaves on each rank — and check it against `torch.distributed`;
# 2. step through a ring all-reduce (reduce-scatter, then all-gather) and say which chunk crosses
#    which link at each step;
# 3. count the bytes per rank of ring, binomial-tree and recursive-doubling algorithms and match
#    them to closed-form formulas, including uneven chunk sizes;
# 4. fit the α–β model to timings from this machine and find where the ring starts to beat the
#    latency-friendly algorithms.
#
# Everything below runs on real ranks started by `labkit.dist.launch`; the simulator that drives
# the animation is checked against those runs. Cells that would take a page of harness code call
# one function of `labkit.collectives.lab` instead; `show(...)` prints the code that matters.
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import math

import numpy as np
import torch
from IPython.display import HTML, display

import labkit
import labkit.collectives as C
from labkit.claims import claim, claim_between
from labkit.collectives import alpha_beta, lab
from labkit.collectives.primitives import PRIMITIVES, primitive_states
from labkit.grading.check import check_your_work
from labkit.show import show
from labkit.viz import collectives as V
from labkit.viz.player import player

torch.manual_seed(0)
print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. The seven primitives
#
# Four ranks, named A–D. A label like `B2` is "rank B's block 2"; `A+B+C+D` is a sum; `·` means
# nothing meaningful is there (torch leaves it unspecified). The root of the rooted primitives is
# rank 0. Colours only group blocks; darker = more ranks summed in.

# %%
N = 4
display(HTML("".join(V.primitive_html(name, *primitive_states(name, N)) for name in PRIMITIVES)))

# %% [markdown]
# Pictures are claims, so let us check them: each rank's block *b* carries the number
# 2^(rank·N + b), so any sum decodes uniquely into the blocks it contains.
# `lab.primitives_vs_torch` runs `torch.distributed`'s own seven collectives on 4 real ranks and
# compares what they leave with the "after" pictures.
#
# **Predict first:** which of the seven leave *the same* data on every rank?

# %%
pvt = lab.primitives_vs_torch(N)
print(pvt)
claim("all seven pictures match what torch.distributed leaves on 4 real ranks", all(pvt.column(pvt.columns[1])))
same = [name for name in PRIMITIVES
        if all(cells == primitive_states(name, N)[1][0] for cells in primitive_states(name, N)[1])]
claim("broadcast, all-gather and all-reduce, and only they, leave all ranks the same data",
      same == ["broadcast", "all_gather", "all_reduce"])

# %% [markdown]
# Broadcast, all-gather and all-reduce leave every rank with the same data. Note the pairs:
# **all-reduce = reduce-scatter + all-gather**, and **reduce + broadcast** is another all-reduce.
# Those identities are exactly how the ring and the tree algorithms below are built.
#
# ## 2. The ring all-reduce, step by step
#
# Ranks form a ring (r sends to r+1, receives from r−1). The buffer of L elements is cut into N
# chunks; when N does not divide L, **the first L mod N chunks get one extra element** (the
# `torch.tensor_split` rule) and nothing is padded.
#
# * **Reduce-scatter**, steps s = 0 … N−2: rank r sends chunk (r−s−1) mod N and adds the chunk
#   (r−s−2) mod N it receives.
# * **All-gather**, steps s = 0 … N−2: rank r forwards the chunk it completed last and stores the
#   one it receives. After N−1 more steps every rank has every summed chunk.
#
# The animation comes from `labkit.collectives.simulate` (a pure-Python trace). Each cell lists
# the ranks whose data it already contains; the colour (one hue per chunk) darkens as
# contributions accumulate; thick borders mark the cells written in that step, and the step's
# transfers — one per link — are listed underneath. Here N = 4 and L = 10 (chunks of 3, 3, 2, 2).
#
# **Predict first:** after the 3 reduce-scatter rounds, which chunk is complete on rank 2? How
# many elements did rank 2 send by then?

# %%
trace = C.trace_collective("ring_all_reduce", 4, 10)
player(lambda i: V.ring_frame(trace, i), trace.n_steps + 1, interval_ms=900)

# %% [markdown]
# The same trace as text — every transfer of every step:

# %%
for step in trace.steps:
    moves = ", ".join(f"{t.src}→{t.dst}:c{t.chunk}" for t in step.transfers)
    print(f"step {step.index + 1} ({step.phase:14s}) {moves}")
complete = {r: [c for c in range(4) if len(trace.steps[2].buffers[r][c]) == 4] for r in range(4)}
sent2 = sum(t.numel for s in trace.steps[:3] for t in s.transfers if t.src == 2)
print("after reduce-scatter, complete chunk on each rank:", complete)
claim("after 3 reduce-scatter steps rank r holds the complete chunk r, and only that one",
      complete == {r: [r] for r in range(4)})
claim("rank 2 sent 8 elements by then: chunks 1, 0 and 3 (3 + 3 + 2)", sent2 == 8, f"{sent2}")
claim("every transfer of the ring goes to the next rank", all(t.dst == (t.src + 1) % 4 for st in trace.steps
                                                              for t in st.transfers), f"{trace.n_steps} steps")

# %% [markdown]
# So after N−1 reduce-scatter steps rank r owns the complete sum of chunk r: in step s it receives
# chunk (r−s−2) mod N, and the last, s = N−2, brings chunk r. In the all-gather, step s forwards
# chunk (r−s) mod N and stores chunk (r−s−1) mod N.

# %% [markdown]
# ### The simulator against a real run
#
# Each half of our ring only ever calls `exchange`: an `isend` and an `irecv` posted together, then both
# waited on. Posting both before waiting is what keeps a ring from deadlocking — if every rank
# first waited for its send to be received, nobody would be receiving.

# %%
show(C.exchange)

# %% [markdown]
# Now the real thing on 4 gloo ranks, L = 10. `lab.ring_vs_trace` records every send (which
# chunk — read off the buffer offset — to which rank, at which step) and compares it with the
# trace, and compares the final buffers with `dist.all_reduce` and with the trace's numbers:

# %%
table, result = lab.ring_vs_trace(4, 10)
print(table)
print("result:", result)
claim("on 4 real ranks the ring equals dist.all_reduce, sends and ends as traced",
      all(all(table.column(c)) for c in table.columns[1:]), f"{len(table.rows)} ranks")

# %% [markdown]
# ### Exercises: the ring
#
# In `exercises/lab05_collectives.py` write `ring_reduce_scatter_chunks`, `ring_all_gather_chunks`
# and `ring_all_reduce` (composed from the two). Each cell below runs *your* function on 4 real
# ranks, L = 10 — every element of rank r's buffer is 2^r, so the result decodes into the ranks
# it contains — and draws it like the animation above: your recorded sends as a ring animation,
# your final buffers next to the simulator's (red = different), your bytes next to the formulas.
# Then the grader runs that exercise's graded tests. Until you write the function it says so.

# %%
check_your_work("lab05_collectives", "ring_reduce_scatter_chunks",
                picture=lab.picture("ring_reduce_scatter_chunks"))

# %%
check_your_work("lab05_collectives", "ring_all_gather_chunks",
                picture=lab.picture("ring_all_gather_chunks"))

# %%
check_your_work("lab05_collectives", "ring_all_reduce", picture=lab.picture("ring_all_reduce"))

# %% [markdown]
# Ours, for comparison once yours pass: `labkit.collectives.ring_all_reduce` is the two halves one
# after the other, on a flat view of the tensor cut by `chunk_bounds`:

# %%
show(C.ring_all_reduce)

# %% [markdown]
# ## 3. Bytes on the wire
#
# Rank r sends every chunk except chunk r during reduce-scatter and every chunk except chunk r+1
# during all-gather. With c_i the bytes of chunk i and S the buffer's bytes:
#
# **Predict first:** float32, L = 1001 elements (S = 4004 bytes). How many bytes does each of
# N = 4 ranks send? (1001 = 4·250 + 1, so chunk 0 has 251 elements.) And all four together?

# %%
rb = lab.ring_bytes_table(sizes=(2, 3, 4, 5, 6), length=1001)
print(rb)
claim("every rank's bytes equal 2S - c_r - c_(r+1), and the total is 2(N-1)·S exactly, N = 2..6",
      all(rb.column("= formula")) and all(rb.column("= 2(N-1)·S")))
claim("each rank is within two elements (8 bytes) of 2(N-1)/N·S",
      all(abs(b - mean) <= 8 for per, mean in zip(rb.column("bytes sent per rank"), rb.column("2(N-1)/N·S"))
          for b in per))

# %% [markdown]
# **bytes_sent(r) = 2S − c_r − c_(r+1 mod N)**, so **Σ_r bytes_sent(r) = 2(N−1)·S exactly**, and
# each rank is within two elements of **2(N−1)/N · S** (exactly equal when N divides L). That
# per-rank figure is the famous one: it hardly grows with N, and no all-reduce can do with less,
# because every rank must receive (N−1)/N·S for the reduce and as much again for the gather.

# %% [markdown]
# ### Trees and recursive doubling
#
# * **Binomial tree** (`tree_broadcast`, `tree_reduce`): ⌈log₂N⌉ rounds; in round k every rank
#   that already has the data sends the *whole* buffer to the rank 2^k further on. Each non-root
#   receives S once, the root sends ⌈log₂N⌉·S — few rounds, but whole buffers. Here is the reduce,
#   which is the broadcast played backwards (partial sums flow towards the root):

# %%
show(C.tree_reduce)

# %% [markdown]
# **A common mistake** says these trees are built "like Prim's or Kruskal's algorithm". Those build a
# *minimum spanning tree* of a weighted graph; a collective's tree is fixed by rank numbers alone.
# In round k, relative rank v < 2^k sends to v + 2^k: a **binomial tree**, the same for every
# message, and with N − 1 edges every rank is reached in ⌈log₂N⌉ rounds. (A ring, for its part,
# only ever uses the links between neighbours.) The simulator's broadcast on 8 ranks, root 0, and
# on 6 ranks, root 2:

# %%
for n_, root in ((8, 0), (6, 2)):
    tb = C.trace_collective("tree_broadcast", n_, 4, root=root)
    edges = [(t.src, t.dst) for st in tb.steps for t in st.transfers]
    print(f"N={n_}, root {root}: " + " | ".join(", ".join(f"{a}->{b}" for a, b in
                                                         [(t.src, t.dst) for t in st.transfers]) for st in tb.steps))
    rel = [((a - root) % n_, (b - root) % n_) for a, b in edges]
    claim(f"N = {n_}: binomial, v -> v + 2^k in round k; N - 1 edges in ceil(log2 N) rounds",
          all(b - a == 1 << k for k, st in enumerate(tb.steps) for a, b in
              (((t.src - root) % n_, (t.dst - root) % n_) for t in st.transfers))
          and sorted(b for _, b in rel) == list(range(1, n_)) and tb.n_steps == math.ceil(math.log2(n_)),
          f"{len(edges)} edges, {tb.n_steps} rounds")

# %% [markdown]
# * **Recursive doubling** all-reduce: log₂N rounds of "swap the whole buffer with rank r XOR 2^k
#   and add". For N not a power of two, the N−P extra ranks (P the largest power of two ≤ N)
#   first fold their data into ranks 0…N−P−1 and get the answer back at the end: two more rounds.
#   Each rank moves log₂P·S (+S with a fold partner): more than the ring's 2(N−1)/N·S once N > 2.
#
# **Predict first:** on 6 ranks, which ranks send the most in recursive doubling, and how many S?
# Measured bytes sent per rank on 6 ranks (S = 4004 bytes) next to the formulas:

# %%
lb = lab.log_bytes_table(n=6, length=1001)
print(lb)
lbr = dict(zip(lb.column("algorithm"), lb.column("bytes sent per rank")))
claim("every count equals its formula", all(lb.column("= formula")))
claim("recursive doubling on 6 ranks: ranks 0 and 1 send most, 3·S", lbr["recursive_doubling_all_reduce"][:2]
      == [3 * 4004] * 2 and max(lbr["recursive_doubling_all_reduce"]) == 3 * 4004)
claim("recursive doubling sends more in all than the ring", sum(lbr["recursive_doubling_all_reduce"])
      > sum(lbr["ring_all_reduce"]), f"{sum(lbr['recursive_doubling_all_reduce'])} vs {sum(lbr['ring_all_reduce'])}")

# %% [markdown]
# ### Exercises: tree broadcast and recursive doubling
#
# Write `tree_broadcast` and `recursive_doubling_all_reduce`. The pictures run yours on 6 ranks
# (the tree's root is rank 2, so relative ranks matter; 6 is not a power of two, so the fold
# matters) and compare the final buffers and bytes with the simulator and the formulas.

# %%
check_your_work("lab05_collectives", "tree_broadcast", picture=lab.picture("tree_broadcast"))

# %%
check_your_work("lab05_collectives", "recursive_doubling_all_reduce",
                picture=lab.picture("recursive_doubling_all_reduce"))

# %% [markdown]
# ## 4. Common mistakes about the ring
#
# Each of these is said often; each is checked here.
#
# 1. **A claim you will often meet: "ring all-reduce costs O(α log p + βM)".** No: the ring takes
#    **2(p−1)** rounds, so its latency term is **2(p−1)·α**, linear in p. The log p term belongs
#    to trees and recursive doubling. The table counts the ring's rounds on the simulator's trace
#    and lists each algorithm's model cost (rounds·α + bytes·β for an S-byte buffer).
# 2. **Another: "ring all-reduce is the best choice on high-latency networks".** It is the
#    opposite: with 2(p−1) latency terms the ring is the *worst* when α dominates (small buffers,
#    slow links, many ranks); it wins when bytes dominate.
# 3. **Another: "the ring's time is independent of the number of ranks".** Only the bandwidth
#    term nearly is (2(p−1)/p → 2); the latency term grows linearly with p.
# 4. **"Recursive halving is not bandwidth-optimal."** Rabenseifner's all-reduce — reduce-scatter
#    by recursive *halving* (exchange half the buffer with rank r XOR p/2, then a quarter with
#    r XOR p/4, …), then all-gather by recursive doubling — sends 2(p−1)/p·S per rank like the
#    ring, in **2·log₂p** rounds (log₂p each way) instead of 2(p−1).
#
# **Predict first:** how many rounds does the ring need on 64 ranks? Rabenseifner?

# %%
rt = lab.rounds_table(ps=(2, 4, 8, 16, 64))
print(rt)
claim("the traced ring takes 2(p-1) rounds: 126 on 64 ranks; Rabenseifner 2·log2 p = 12",
      rt.column("ring rounds traced") == [2 * (q - 1) for q in (2, 4, 8, 16, 64)]
      and rt.column("Rabenseifner")[-1].startswith("12α"))

# %% [markdown]
# 5. **A formula you will meet: "T = α·log₂p + β·M·(2p−1)/p".** Besides the latency term, the
#    bandwidth factor is **2(p−1)/p**, not (2p−1)/p: the two differ by M/p per rank (for p = 4:
#    1.5·M vs 1.75·M). The bytes counted in section 3 match 2(p−1)/p.
# 6. **Two more figures you will meet for the same quantity: "an all-reduce moves S bytes per
#    rank", and "it moves 2(N−1)·S per rank".** Per rank it is 2(N−1)/N·S sent *and* as much
#    received; S is the buffer, and 2(N−1)·S is the total over all N ranks, not any one rank's share.

# %%
p, M = 4, 1_000_000
ring_rounds, ring_bytes = alpha_beta.coefficients("ring_all_reduce", p, M)
print(f"ring bytes per rank for M={M}: {ring_bytes:.0f} = 2(p-1)/p·M, not (2p-1)/p·M = "
      f"{(2 * p - 1) / p * M:.0f} and not M")
print(f"ring bytes over all {p} ranks: {p * ring_bytes:.0f} = 2(p-1)·M")
claim("the model's ring bytes are 1.5·M per rank on 4 ranks (not 1.75·M, not M), 6·M in all",
      ring_bytes == 1.5 * M and p * ring_bytes == 2 * (p - 1) * M, f"{ring_bytes:.0f}")
claim("the real ring of section 3 sent 1.5·S per rank on average (S = 4004)",
      sum(rb.column("bytes sent per rank")[2]) == 4 * 1.5 * 4004, f"{rb.column('bytes sent per rank')[2]}")

# %% [markdown]
# 7. **A worked example you may meet** has GPU i send chunk i at the first reduce-scatter step
#    and then says "GPU i owns chunk i". With that start, after N−1 steps GPU i owns chunk
#    **(i+1) mod N**. Our schedule starts with chunk i−1, so rank i owns chunk i — which is what
#    `reduce_scatter_tensor` promises. `lab.complete_chunk_owner` plays both starts:

# %%
own0, own1 = lab.complete_chunk_owner(0, 4), lab.complete_chunk_owner(1, 4)
print("start with chunk i   (offset 0): rank i owns chunk", own0)
print("start with chunk i-1 (offset 1): rank i owns chunk", own1)
claim("starting with chunk i, GPU i ends with chunk (i+1) mod N; starting with i-1, with chunk i",
      own0 == {i: (i + 1) % 4 for i in range(4)} and own1 == {i: i for i in range(4)})

# %% [markdown]
# 8. **A claim you will often meet: "a ring survives a node failure"** — traffic just goes around
#    the other way. It does not. Every step of a ring all-reduce needs every rank: each one waits to
#    receive from its left neighbour, so one rank that stops answering stalls its right neighbour,
#    then the next, until no rank can finish — and no all-reduce, ring or not, can produce the sum
#    without the missing rank's data. Below, 4 real ranks run two all-reduces; between them rank 2
#    either hangs (stops answering, as a frozen or unreachable node does) or crashes (its process
#    exits). The launcher's timeout is what ends a hang:

# %%
show(lab._failing_rank)

# %% tags=["nbval-ignore-output"]
ft, fruns = lab.failure_table(n=4, dead=2, timeout=3.0)
print(ft)
claim("before the failure every rank finishes the all-reduce; after it, no rank does",
      all(r.done == ((0, 1, 2, 3), ()) for r in fruns), f"{len(fruns)} launches")
claim("a hang stalls the ring and gloo's own all-reduce until the launch times out",
      [r.ended for r in fruns if r.failure == "hangs"] == ["TimeoutError"] * 2
      and all(r.seconds >= 3.0 for r in fruns if r.failure == "hangs"))
claim("a crash ends the launch with an error that names rank 2",
      [r.message.startswith("rank 2 ") for r in fruns if r.failure == "crashes"] == [True],
      next(r.message for r in fruns if r.failure == "crashes")[:36])

# %% [markdown]
# A crash at least fails fast (the neighbours' connections close); a hang waits for a timeout — in
# training jobs NCCL's watchdog plays the launcher's part. Surviving a failure takes more than the
# collective: a restart from a checkpoint, with the dead rank replaced or the job shrunk (Lab 12).

# %% [markdown]
# ## 5. The α–β model, fitted on this machine
#
# A message of n bytes costs **α + n·β** (α: latency per message, β: seconds per byte). A round in
# which every rank sends one message costs as much as its largest message. Counting rounds and
# critical-path bytes (p ranks, P the largest power of two ≤ p, buffer of n bytes):
#
# | algorithm | rounds (× α) | bytes on the critical path (× β) |
# |---|---|---|
# | ring all-reduce | 2(p−1) | 2(p−1)/p · n |
# | binomial tree all-reduce (reduce + broadcast) | 2⌈log₂p⌉ | 2⌈log₂p⌉ · n |
# | recursive doubling | log₂P (+2 if p ≠ P) | log₂P (+2) · n |
# | Rabenseifner (model only) | 2·log₂P (+2 if p ≠ P) | 2(P−1)/P · n (+2n) |
#
# The first three are asserted (in `tests/test_collectives_sim.py`) to equal the round and byte
# counts of the simulator's traces. Small messages: fewer rounds win (recursive doubling, tree).
# Large messages: fewer bytes win (ring). For p = 4 recursive doubling and ring cross where
# 2α + 2nβ = 6α + 1.5nβ, i.e. at **n = 8α/β**.
#
# Now we time the three all-reduces — and gloo's own `dist.all_reduce`, in the same processes —
# on 4 real ranks over a range of sizes. The timing loop (`lab.time_all_reduces`): a barrier, then
# each call timed on every rank; the slowest rank's time is the collective's time; we keep the
# minimum of 15 calls (on a shared CPU, other processes only ever *add* time). The barrier and the
# max are harness only; our algorithms themselves use no built-in collective.
#
# **Predict first:** which of our three is fastest at 256 bytes, and which at 16 MiB? Is gloo's
# `dist.all_reduce` at 256 bytes closer to our ring or to recursive doubling?

# %% tags=["nbval-ignore-output"]
import time

P_RANKS, SIZES = 4, lab.SIZES
t0 = time.perf_counter()
measured = lab.time_all_reduces(P_RANKS, SIZES)
print(f"timed {len(measured)} (algorithm, size) points in {time.perf_counter() - t0:.1f} s")
print(lab.times_table(measured, SIZES))
ms = {a: measured[(a, 256)] * 1e3 for a in lab.TIMED}
print(f"256 B: gloo {ms['gloo_all_reduce']:.2f} ms, our ring {ms['ring_all_reduce']:.2f} ms, "
      f"rec. doubling {ms['recursive_doubling_all_reduce']:.2f} ms "
      f"-> gloo / our ring = {ms['gloo_all_reduce'] / ms['ring_all_reduce']:.2f}")
claim("at 256 B our ring, with 6 rounds, is the slowest of our three",
      ms["ring_all_reduce"] > max(ms["recursive_doubling_all_reduce"], ms["tree_all_reduce"]),
      f"{ms['ring_all_reduce']:.2f} ms vs {ms['recursive_doubling_all_reduce']:.2f} and {ms['tree_all_reduce']:.2f}")

# %% [markdown]
# Read the last line. At 256 B every algorithm is latency-bound: its time is its number of rounds
# times the cost of a round. gloo's all-reduce runs its rounds in C++, ours go through Python for
# each one, so a gloo round is cheaper — but it still pays for its rounds, and whether that beats
# our recursive doubling's 2 Python rounds (or even our 6-round ring) is what the last line
# measures on your machine. Timings vary from run to run; compare orders of magnitude.
#
# ### One α and β for everything?
#
# The simplest fit uses one (α, β) for all three algorithms — least squares on the *relative*
# error, so small and large messages count equally. Then we fit each algorithm on its own
# samples. The second table lists measured / model for every size, with the joint fit and with
# the algorithm's own fit.

# %% tags=["nbval-ignore-output"]
table, fits = lab.fit_table(measured, P_RANKS)
print(table)
print(lab.ratio_table(measured, P_RANKS, fits, SIZES))
medians = {}
for a in lab.TIMED[:3]:
    joint, own = (lab.median_ratio(measured, P_RANKS, fits[k], a) for k in ("joint", a))
    medians[a] = joint
    print(f"{a:30s} median measured/model: joint fit {joint:.2f}, own fit {own:.2f}")
import os

if (os.cpu_count() or 1) < P_RANKS:
    claim(f"{os.cpu_count()} cores for {P_RANKS} ranks: one (α, β) misprices tree against ring",
          medians["ring_all_reduce"] > 1.3 * medians["tree_all_reduce"],
          f"medians {medians['ring_all_reduce']:.2f} and {medians['tree_all_reduce']:.2f}")
else:
    print(f"{os.cpu_count()} cores for {P_RANKS} ranks: every rank has a core; compare the fits yourself")
beta_ring = fits["ring_all_reduce"][1]
claim("β through gloo's loopback is over 10x NVLink's (1/300 GB/s = 3.3 ps/B)", beta_ring > 10 / 300e9,
      f"{beta_ring * 1e12:.0f} ps/B")

# %% [markdown]
# On a machine with fewer cores than ranks (this course's 2-core CPU: the check above runs only
# there) the joint fit is off by a *factor at nearly every size*: measured / model comes out well
# above 1 for the ring (and recursive doubling) and below 1 for the tree. That is not noise, it is
# a missing term. When 4 ranks share 2 cores, in every round of the ring and of recursive doubling
# all 4 ranks send and add at the same time, so each gets half a core; in half of the tree's
# rounds only 2 ranks are busy (the reduce's last round and the broadcast's first involve ranks 0
# and 1 only). So "one round" is not one price: fitted per algorithm, the ring's and recursive
# doubling's α and β come out larger than the tree's, and each algorithm's own fit leaves ratios
# scattered around 1 — what is left is scheduler noise, not a constant factor. On a GPU node each
# rank has its own GPU and links, and one (α, β) per link describes all three far better.
#
# The plot shows the measured times (markers) and each algorithm's own α–β line.

# %% tags=["nbval-ignore-output"]
from labkit.viz.player import figure_to_html

ALGS = lab.TIMED[:3]
fig = V.alpha_beta_figure(
    SIZES,
    {a: [measured[(a, s)] for s in SIZES] for a in ALGS},
    {a: [alpha_beta.predict_time(a, P_RANKS, s, *fits[a]) for s in SIZES] for a in ALGS},
    title=f"all-reduce on {P_RANKS} gloo ranks: measured vs α–β model (one fit per algorithm)")
display(HTML(figure_to_html(fig)))
RD, RING = "recursive_doubling_all_reduce", "ring_all_reduce"
joint_x = alpha_beta.crossover_bytes(RD, RING, P_RANKS, *fits["joint"])
own_x = alpha_beta.crossover_fitted(RD, fits[RD], RING, fits[RING], P_RANKS)
ring_wins = [s for s in SIZES if measured[(RING, s)] < measured[(RD, s)]]
stays = [s for s in SIZES if all(t in ring_wins for t in SIZES if t >= s)]
print(f"model crossover, recursive doubling -> ring: joint fit 8α/β = {joint_x / 1024:.0f} KiB, "
      f"own fits {own_x / 1024:.0f} KiB")
print("measured: ring faster at every size from", f"{stays[0] / 1024:g} KiB on" if stays else "- (not here)")
claim("in the model the ring beats recursive doubling past 8α/β (at 4·8α/β)",
      alpha_beta.predict_time(RING, P_RANKS, 4 * joint_x, *fits["joint"])
      < alpha_beta.predict_time(RD, P_RANKS, 4 * joint_x, *fits["joint"]), f"8α/β = {joint_x / 1024:.0f} KiB")

# %% [markdown]
# What to look for in the plot: at small sizes all curves are flat (α-dominated) and the ring's
# 2(p−1) = 6 rounds make it the slowest (checked at 256 B above); at large sizes the curves are
# straight lines of slope 1 (β-dominated). In the model the ring's 1.5·n then beats recursive
# doubling's 2·n and the tree's 4·n; on a 2-core CPU the measured large-message times need not
# follow, because the tree keeps fewer ranks busy at once (the paragraph above) and the ring's
# lead over recursive doubling is small. Small message times on a shared CPU are noisy too, so the
# measured crossover can move by a factor of a few between runs.
#
# ### The same model on real interconnects
#
# Here the ring's own fit gave β in the printed table above — of the order of a nanosecond per byte
# on a 2-core CPU (≈ 1 GB/s through the loopback and busy cores). Links between GPUs are far faster:
# β = 1 / (bandwidth in one direction). Vendors quote links in *bits* per second, or add both
# directions together, so convert first:
#
# - PCIe 4.0 x16: 16 lanes × 16 GT/s × 128/130 (encoding) / 8 ≈ 31.5, about **32 GB/s per direction**
#   (PCIe 5.0 doubles it);
# - InfiniBand HDR is **200 Gb/s = 25 GB/s** — a common mistake writes "200 GB/s" — and NDR is
#   **400 Gb/s = 50 GB/s** per port and direction;
# - NVLink's "600 GB/s" (A100) and "900 GB/s" (H100) count both directions: 300 and 450 GB/s each way.
#
# A second rule of thumb you will often meet — **"switch from tree to ring above 1–10 KB"** — only
# holds for one α/β ratio. With α = 5 µs (a typical NCCL latency), the recursive-doubling/ring
# crossover on 4 ranks, 8α/β, lands in the megabytes:

# %%
links = lab.link_table(alpha_s=5e-6, p=4)
print(links)
gbs = dict(zip(links.column("link"), links.column("GB/s one way")))
claim("PCIe 4.0 x16 carries 16 x 16 GT/s x 128/130 / 8 = 31.5, about 32 GB/s each way",
      round(16 * 16 * 128 / 130 / 8, 1) == 31.5 and abs(gbs["PCIe 4.0 x16"] - 31.5) < 1)
claim("InfiniBand: HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s",
      (gbs["HDR InfiniBand, 200 Gb/s"], gbs["NDR InfiniBand, 400 Gb/s"]) == (200 / 8, 400 / 8))
cross = dict(zip(links.column("link"), links.column(links.columns[-1])))
claim("with α = 5 µs the crossover 8α/β lands between 1 and 20 MB on every link",
      all(1 <= mb <= 20 for mb in cross.values()), f"{min(cross.values()):.1f} to {max(cross.values()):.1f} MB")
claim("NVLink 3's β is a few picoseconds per byte", links.column("β (ps/B)")[3] < 5,
      f"{links.column('β (ps/B)')[3]:.1f} ps/B")

# %% [markdown]
# NVLink's β is a few **picoseconds** per byte (≈ 3 ps/B at 300 GB/s per direction), far smaller
# than gloo's through a CPU's loopback (checked with the fits above). The smaller β, the larger the buffers for which latency, not bandwidth,
# decides — which is why NCCL switches between ring and tree algorithms by message size and node
# count.
#
# ### On a GPU box: gloo next to NCCL
#
# With two or more GPUs this cell times `dist.all_reduce` over NCCL on CUDA tensors next to gloo
# on CPU tensors (`lab.builtin_times(n, backend="nccl")`, an importable rank function started by
# `labkit.dist.launch`) and prints the bus bandwidth busbw = S/t · 2(n−1)/n (the nccl-tests
# definition: the bytes a ring moves per rank, per second).

# %% tags=["nbval-ignore-output"]
if torch.cuda.device_count() >= 2:
    print(lab.gloo_vs_nccl(min(4, torch.cuda.device_count())))
else:
    print("No 2 GPUs here: on a GPU box this cell times dist.all_reduce over NCCL next to gloo.")

# %% [markdown]
# How does our ring compare with gloo's own `dist.all_reduce` at large sizes?
# `benchmarks/collectives.py` times both in the same processes, 4 KB … 64 MB, and reports
# algbw = S/t and busbw = algbw · 2(N−1)/N — results in `benchmarks/results/collectives.md`. One
# trick matters there: labkit's reduce-scatter sends chunks larger than 1 MiB as 1 MiB segments,
# so adding one segment overlaps with receiving the next (bytes are unchanged; only the message
# count grows). NCCL and gloo pipeline the same way.
#
# ## 6. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A data-parallel job all-reduces 1 GB of gradients over 8 GPUs with a ring. How
# many bytes does each GPU send, and how many rounds does it take?
#
# <details><summary>Answer</summary>
#
# 2(p−1)/p · S = 2·7/8 · 1 GB = **1.75 GB** sent (and as much received) per GPU, in 2(p−1) = **14**
# rounds. Over all 8 GPUs: 2(p−1)·S = 14 GB.
#
# </details>
#
# **Problem 2.** float32, L = 10 elements, N = 4 ranks. What are the chunk sizes, and how many
# bytes does rank 1 send in a ring all-reduce?
#
# <details><summary>Answer</summary>
#
# Chunks of 3, 3, 2, 2 elements (the first L mod N = 2 get the extra one): 12, 12, 8, 8 bytes.
# Rank 1 sends everything but chunk 1 in the reduce-scatter and everything but chunk 2 in the
# all-gather: 2S − c₁ − c₂ = 80 − 12 − 8 = **60 bytes**.
#
# </details>
#
# **Problem 3.** Recursive doubling on N = 6 ranks. How many rounds, and how many buffers does
# rank 0 send? Rank 5?
#
# <details><summary>Answer</summary>
#
# P = 4: a fold round, log₂4 = 2 swap rounds, an unfold round: **4 rounds**. Rank 0 has a fold
# partner (rank 4): it receives in the fold, sends in both swaps and in the unfold: **3·S**. Rank 5
# only sends its buffer to rank 1 in the fold: **1·S** (the table in section 3 shows 12012 and 4004
# bytes for S = 4004).
#
# </details>
#
# **Problem 4.** On 4 GPUs with NVLink (α = 5 µs, 300 GB/s per direction), from which buffer size on
# is the ring faster than recursive doubling? And for a 64 KB buffer, how long does each take?
#
# <details><summary>Answer</summary>
#
# β = 1/300 GB/s ≈ 3.3 ps/B; the crossover is 8α/β = 8 · 5 µs · 300 GB/s = **12 MB**. For 64 KB
# (65 536 B): ring 6α + 1.5·n·β = 30 µs + 0.33 µs ≈ **30.3 µs**; recursive doubling 2α + 2nβ =
# 10 µs + 0.44 µs ≈ **10.4 µs**. Small gradients want few rounds.
#
# </details>
#
# **Problem 5.** Rabenseifner's all-reduce on p = 16: rounds and bytes per rank, compared with
# the ring?
#
# <details><summary>Answer</summary>
#
# 2·log₂16 = **8 rounds** against the ring's 2·15 = 30, and the same **2(p−1)/p·S = 1.875·S** bytes.
# (MPICH uses it for long messages and recursive doubling for short ones: Thakur et al. 2005.)
#
# </details>

# %%
# The answers above, from labkit's formulas and models (the tests check them against real runs).
from labkit.collectives import formulas
from labkit.collectives.chunking import chunk_sizes

r1, b1 = alpha_beta.coefficients("ring_all_reduce", 8, 1e9)
claim("P1: 1.75 GB per GPU in 14 rounds", (r1, b1) == (14, 1.75e9))
claim("P2: chunks 3, 3, 2, 2; rank 1 sends 60 bytes", chunk_sizes(10, 4) == [3, 3, 2, 2]
      and formulas.ring_all_reduce_bytes(1, 4, 10, 4)[0] == 60)
r3, _ = alpha_beta.coefficients("recursive_doubling_all_reduce", 6, 4004)
claim("P3: 4 rounds; rank 0 sends 3·S, rank 5 1·S", r3 == 4 and [formulas.recursive_doubling_bytes(r, 6, 1001, 4)[0]
                                                               for r in (0, 5)] == [3 * 4004, 4004])
x4 = alpha_beta.crossover_bytes("recursive_doubling_all_reduce", "ring_all_reduce", 4, 5e-6, 1 / 300e9)
t4 = [alpha_beta.predict_time(a, 4, 65536, 5e-6, 1 / 300e9) * 1e6 for a in ("ring_all_reduce",
                                                                          "recursive_doubling_all_reduce")]
claim("P4: crossover 12 MB; at 64 KB ring 30.3 us, recursive doubling 10.4 us",
      round(x4 / 1e6) == 12 and [round(t, 1) for t in t4] == [30.3, 10.4])
claim("P5: Rabenseifner on 16 ranks: 8 rounds and 1.875·S, against the ring's 30",
      alpha_beta.coefficients("rabenseifner_all_reduce", 16, 1.0) == (8, 1.875)
      and alpha_beta.coefficients("ring_all_reduce", 16, 1.0)[0] == 30)

# %% [markdown]
# ## Summary
#
# * Seven primitives; all-reduce = reduce-scatter + all-gather = reduce + broadcast.
# * Ring all-reduce: 2(p−1) rounds, **2(p−1)/p·S bytes per rank** (exactly 2(p−1)·S over all
#   ranks, with uneven chunks sent unpadded): bandwidth-optimal, latency linear in p.
# * Binomial tree and recursive doubling: ⌈log₂p⌉-ish rounds but whole-buffer messages; they win
#   for small messages. Rabenseifner's recursive-halving reduce-scatter + recursive-doubling
#   all-gather gets both: **2·log₂p rounds** *and* 2(p−1)/p·S bytes.
# * α–β: T = rounds·α + critical-path bytes·β, fitted here from real runs — per algorithm, because
#   on an oversubscribed CPU a round's price depends on how many ranks are busy.
# * β is ~1 ns/B through this CPU's loopback and a few ps/B over NVLink; the crossover between
#   latency- and bandwidth-friendly algorithms moves with α/β.
#
# ## Further reading
#
# * R. Thakur, R. Rabenseifner, W. Gropp, *Optimization of Collective Communication Operations in
#   MPICH*, IJHPCA 2005 — the ring, recursive doubling/halving and Rabenseifner algorithms with
#   their α–β costs.
# * P. Patarasuk, X. Yuan, *Bandwidth Optimal All-reduce Algorithms for Clusters of Workstations*,
#   JPDC 2009 — why 2(p−1)/p·S is the lower bound and the ring reaches it.
# * R. Rabenseifner, *Optimization of Collective Reduction Operations*, ICCS 2004.
# * NVIDIA NCCL documentation, "Collective Operations", and the `nccl-tests` performance notes
#   (algbw vs busbw): <https://docs.nvidia.com/deeplearning/nccl/> and
#   <https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md>.
# * PyTorch, *Distributed communication package — torch.distributed*:
#   <https://pytorch.org/docs/stable/distributed.html>.
# * A. Sergeev, M. Del Balso, *Horovod: fast and easy distributed deep learning in TensorFlow*,
#   2018 — the ring all-reduce brought to deep learning.
#
# ## Exercises
#
# Open `exercises/lab05_collectives.py` and implement, using only `labkit.collectives.exchange`
# (or `dist.isend`/`dist.irecv`):
# `ring_reduce_scatter_chunks`, `ring_all_gather_chunks`, `ring_all_reduce` (composed from the
# two), `tree_broadcast` and `recursive_doubling_all_reduce`. The docstrings are the spec. The
# "check your work" cells in sections 2 and 3 show each one through the lab's pictures and grade
# it; grade all of them with
#
#     python -m labkit.grade --lab 05        # or: make grade LAB=05
#
# The graded tests run your functions on 1–4 real ranks with uneven sizes and check both the
# results and the bytes you sent.
