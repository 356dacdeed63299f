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
# the animation is checked against those runs.

# %%
import warnings

import numpy as np
import torch
import torch.distributed as dist
from IPython.display import HTML, display

import labkit
import labkit.collectives as C
from labkit.collectives import alpha_beta, formulas
from labkit.collectives.primitives import PRIMITIVES, primitive_states
from labkit.dist import launch
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
# 2^(rank·N + b), so any sum decodes uniquely into the blocks it contains. We run
# `torch.distributed`'s own collectives on 4 real ranks and compare with the "after" pictures.

# %%
def primitives_on_ranks(rank, n):
    warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 renames reduce_scatter_tensor; same semantics
    val = lambda b=0: torch.tensor([2.0 ** (rank * n + b)], dtype=torch.float64)
    zero = lambda: torch.zeros(1, dtype=torch.float64)
    out = {}
    t = val() if rank == 0 else zero(); dist.broadcast(t, 0); out["broadcast"] = [t]
    t = zero(); dist.scatter(t, [val(b) for b in range(n)] if rank == 0 else None, src=0); out["scatter"] = [t]
    lst = [zero() for _ in range(n)]; dist.gather(val(), lst if rank == 0 else None, dst=0)
    out["gather"] = lst if rank == 0 else None
    t = val(); dist.reduce(t, 0); out["reduce"] = [t] if rank == 0 else None
    lst = [zero() for _ in range(n)]; dist.all_gather(lst, val()); out["all_gather"] = lst
    t = zero(); dist.reduce_scatter_tensor(t, torch.cat([val(b) for b in range(n)])); out["reduce_scatter"] = [t]
    t = val(); dist.all_reduce(t); out["all_reduce"] = [t]
    return out

real = launch(primitives_on_ranks, N)
for name in PRIMITIVES:
    _, after = primitive_states(name, N)
    ok = all(real[r][name] is None and not any(after[r])
             or [float(t) for t in real[r][name]] == [sum(2.0 ** (q * N + b) for q, b in cell) for cell in after[r]]
             for r in range(N))
    print(f"{name:15s} picture matches torch.distributed: {ok}")

# %% [markdown]
# Note the pairs: **all-reduce = reduce-scatter + all-gather**, and **reduce + broadcast** is
# another all-reduce. Those identities are exactly how the ring and the tree algorithms below
# are built.
#
# ## 2. The ring all-reduce, step by step
#
# Ranks form a ring (r sends to r+1, receives from r−1). The buffer of L elements is cut into N
# chunks; when N does not divide L, **the first L mod N chunks get one extra element** (the
# `torch.tensor_split` rule) and nothing is padded.
#
# * **Reduce-scatter**, steps s = 0 … N−2: rank r sends chunk (r−s−1) mod N and adds the chunk
#   (r−s−2) mod N it receives. After N−1 steps rank r owns the complete sum of chunk r.
# * **All-gather**, steps s = 0 … N−2: rank r forwards chunk (r−s) mod N and stores chunk
#   (r−s−1) mod N. After N−1 more steps every rank has every summed chunk.
#
# The animation comes from `labkit.collectives.simulate` (a pure-Python trace). Each cell lists
# the ranks whose data it already contains; the colour (one hue per chunk) darkens as
# contributions accumulate; thick borders mark the cells written in that step, and the step's
# transfers — one per link — are listed underneath. Here N = 4 and L = 10 (chunks of 3, 3, 2, 2).

# %%
trace = C.simulate("ring_all_reduce", 4, 10)
display(HTML(V.ring_frame(trace, 0)))          # frame 0, static
player(lambda i: V.ring_frame(trace, i), trace.n_steps + 1, interval_ms=900)

# %% [markdown]
# The same trace as text — every transfer of every step:

# %%
for step in trace.steps:
    moves = ", ".join(f"{t.src}→{t.dst}:c{t.chunk}" for t in step.transfers)
    print(f"step {step.index + 1} ({step.phase:14s}) {moves}")
print("after reduce-scatter, complete chunk on each rank:",
      {r: [c for c in range(4) if len(trace.steps[2].buffers[r][c]) == 4] for r in range(4)})

# %% [markdown]
# ### The simulator against a real run
#
# Now the real thing: `labkit.collectives.ring_all_reduce` on 4 gloo ranks. It only ever calls
# `exchange` (an `isend` and an `irecv` posted together, then both waited on — posting both first
# is what keeps a ring from deadlocking). We record every send (which chunk — read off the
# buffer offset — to which rank, at which step) and compare with the trace, and compare the final
# buffers with `dist.all_reduce` and with the trace's numbers.

# %%
L = 10
inputs = np.arange(4 * L, dtype=np.float64).reshape(4, L) % 7 - 3

def ring_on_ranks(rank, n):
    x = torch.from_numpy(inputs[rank].copy())
    with C.recording() as events:
        stats = C.ring_all_reduce(x)
    ref = torch.from_numpy(inputs[rank].copy())
    dist.all_reduce(ref)
    bounds = C.chunk_bounds(L, n)
    sends = [(e.step, e.peer, bounds.index((e.data_ptr - x.data_ptr()) // 8)) for e in events if e.op == "send"]
    return x.numpy(), torch.equal(x, ref), sends, stats

real = launch(ring_on_ranks, 4)
for r, (buf, same_as_torch, sends, stats) in enumerate(real):
    traced = [(s.index, t.dst, t.chunk) for s in trace.steps for t in s.transfers if t.src == r]
    print(f"rank {r}: equals dist.all_reduce: {same_as_torch} | sends match trace: {sends == traced} "
          f"| final buffer equals trace: {np.array_equal(buf, trace.values(inputs)[r])}")
print("result:", real[0][0])

# %% [markdown]
# ## 3. Bytes on the wire
#
# Rank r sends every chunk except chunk r during reduce-scatter and every chunk except chunk r+1
# during all-gather. With c_i the bytes of chunk i and S the buffer's bytes:
#
# **bytes_sent(r) = 2S − c_r − c_(r+1 mod N)**, so **Σ_r bytes_sent(r) = 2(N−1)·S exactly**, and each
# rank is within two elements of **2(N−1)/N · S** (exactly equal when N divides L). That per-rank
# figure is the famous one: it hardly grows with N, and no all-reduce can do with less, because
# every rank must receive (N−1)/N·S for the reduce and as much again for the gather.
#
# Measured on real ranks, float32, L = 1001 elements (S = 4004 bytes, not divisible by 3, 4, 5, 6):

# %%
def ring_bytes(rank, n, length):
    return C.ring_all_reduce(torch.ones(length)).bytes_sent

length, item = 1001, 4
S = length * item
for n in (2, 3, 4, 5, 6):
    sent = launch(ring_bytes, n, length)
    f = [formulas.ring_all_reduce_bytes(r, n, length, item)[0] for r in range(n)]
    print(f"N={n}: sent per rank {sent} | formula {f} | 2(N-1)/N·S = {2 * (n - 1) / n * S:.1f} "
          f"| total {sum(sent)} = 2(N-1)·S = {2 * (n - 1) * S}: {sum(sent) == 2 * (n - 1) * S}")

# %% [markdown]
# ### Trees and recursive doubling
#
# * **Binomial tree** (`tree_broadcast`, `tree_reduce`): ⌈log₂N⌉ rounds; in round k every rank
#   that already has the data sends the *whole* buffer to the rank 2^k further on. Each non-root
#   receives S once, the root sends ⌈log₂N⌉·S — few rounds, but whole buffers.
# * **Recursive doubling** all-reduce: log₂N rounds of "swap the whole buffer with rank r XOR 2^k
#   and add". For N not a power of two, the N−P extra ranks (P the largest power of two ≤ N) first
#   fold their data into ranks 0…N−P−1 and get the answer back at the end: two more rounds.
#   Each rank moves log₂P·S (+S with a fold partner): more than the ring's 2(N−1)/N·S once N > 2.
#
# Measured bytes sent per rank on 6 ranks (S = 4004 bytes) next to the formulas:

# %%
def log_algorithms_bytes(rank, n, length):
    x = torch.ones(length)
    return (C.tree_broadcast(x.clone(), 0).bytes_sent, C.tree_reduce(x.clone(), 0).bytes_sent,
            C.recursive_doubling_all_reduce(x.clone()).bytes_sent, C.ring_all_reduce(x.clone()).bytes_sent)

n = 6
real = launch(log_algorithms_bytes, n, length)
for k, name in enumerate(["tree_broadcast", "tree_reduce", "recursive_doubling_all_reduce", "ring_all_reduce"]):
    key = "recursive_doubling_all_reduce" if name.startswith("recursive") else name
    want = [formulas.BYTES[key](r, n, length, item)[0] for r in range(n)]
    got = [row[k] for row in real]
    print(f"{name:30s} sent {got} formula-match: {got == want} total {sum(got)}")

# %% [markdown]
# ## 4. Correcting the reference notes
#
# The seed notes this course grew from contain errors about the ring; each is checked here.
#
# 1. **"Ring all-reduce costs O(α log p + βM)"** — no: the ring takes **2(p−1)** rounds, so its
#    latency term is **2(p−1)·α**, linear in p. The log p term belongs to trees and recursive doubling.
# 2. **"T = α log₂p + β·M·(2p−1)/p"** — the bandwidth factor is **2(p−1)/p**, not (2p−1)/p:
#    the two differ by M/p per rank (for p = 4: 1.5·M vs 1.75·M). The counted bytes above match
#    2(p−1)/p.
# 3. **The worked 4-GPU example** restarts half-way ("let me redo this"), and its own first step
#    (GPU i sends chunk i) does not lead to "GPU i owns chunk i": with that start, after N−1
#    reduce-scatter steps GPU i owns chunk **(i+1) mod N**. Our schedule starts with chunk i−1, so
#    rank i owns chunk i — which is what `reduce_scatter_tensor` promises.
# 4. **Tables mixing S and 2(N−1)/N·S** for the same all-reduce: per rank it is 2(N−1)/N·S
#    (in *and* out); S is the buffer, and 2(N−1)·S the total over all ranks.

# %%
p, M = 4, 1_000_000
ring_rounds, ring_beta = alpha_beta.coefficients("ring_all_reduce", p, M)
print(f"ring rounds for p={p}: {ring_rounds} = 2(p-1), not log2(p) = {int(np.log2(p))}")
print(f"ring bytes per rank for M={M}: {ring_beta:.0f} = 2(p-1)/p·M; the notes' (2p-1)/p·M = {(2 * p - 1) / p * M:.0f}")

# the notes' schedule: GPU i sends chunk (i - s) % N at step s (chunk i first); which chunk ends complete?
def owner_of_complete_chunk(first_offset, n=4):
    have = [[{r} for _ in range(n)] for r in range(n)]
    for s in range(n - 1):
        sent = [(r, (r - s - first_offset) % n) for r in range(n)]
        old = [[set(c) for c in row] for row in have]
        for r, c in sent:
            have[(r + 1) % n][c] |= old[r][c]
    return {r: [c for c in range(n) if len(have[r][c]) == n][0] for r in range(n)}

print("notes' start (send chunk i first):   GPU i owns chunk", owner_of_complete_chunk(0))
print("labkit start (send chunk i-1 first): rank i owns chunk", owner_of_complete_chunk(1))

# %% [markdown]
# ## 5. The α–β model, fitted on this machine
#
# A message of n bytes costs **α + n·β** (α: latency per message, β: seconds per byte). A round in
# which every rank sends one message costs as much as its largest message. Counting rounds and
# critical-path bytes (p ranks, buffer of n bytes):
#
# | algorithm | rounds (× α) | bytes on the critical path (× β) |
# |---|---|---|
# | ring all-reduce | 2(p−1) | 2(p−1)/p · n |
# | binomial tree all-reduce (reduce + broadcast) | 2⌈log₂p⌉ | 2⌈log₂p⌉ · n |
# | recursive doubling | log₂P (+2 if p ≠ P) | log₂P (+2) · n |
#
# Those coefficients are asserted (in `tests/test_collectives_sim.py`) to equal the round and byte
# counts of the simulator's traces. Small messages: fewer rounds win (recursive doubling, tree).
# Large messages: fewer bytes win (ring). For p = 4 recursive doubling and ring cross where
# 2α + 2nβ = 6α + 1.5nβ, i.e. at **n = 8α/β**.
#
# Now we time the three all-reduces on 4 real ranks over a range of sizes and fit α and β by least
# squares (relative error, so small and large messages count equally). The timing loop is ours:
# a barrier, then each call timed on every rank; the slowest rank's time is the collective's time.
# (The barrier and the max are harness only; the algorithms themselves use no built-in collective.)

# %% tags=["nbval-ignore-output"]
import time

SIZES = [256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
ALGS = {
    "ring_all_reduce": C.ring_all_reduce,
    "recursive_doubling_all_reduce": C.recursive_doubling_all_reduce,
    "tree_all_reduce": lambda x: (C.tree_reduce(x, 0), C.tree_broadcast(x, 0)),
}

def time_on_ranks(rank, n, sizes, repeat=15):
    out = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4)
        for name, fn in ALGS.items():
            fn(x)  # warm-up
            samples = []
            for _ in range(repeat):
                dist.barrier()
                t0 = time.perf_counter()
                fn(x)
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                samples.append(float(dt))
            # the minimum, not the median: on a shared CPU other processes only ever *add* time
            out[(name, nbytes)] = min(samples)
    return out

P_RANKS = 4
t0 = time.perf_counter()
measured = launch(time_on_ranks, P_RANKS, SIZES, timeout=300)[0]
print(f"timed {len(measured)} (algorithm, size) points in {time.perf_counter() - t0:.1f} s")

samples = [(name, P_RANKS, nbytes, t) for (name, nbytes), t in measured.items()]
alpha, beta = alpha_beta.fit_alpha_beta(samples)
print(f"fitted alpha = {alpha * 1e6:.1f} us per message, beta = {beta * 1e9:.3f} ns/byte "
      f"(= {1 / beta / 1e9:.2f} GB/s effective)")
print(f"{'size':>8s} " + " ".join(f"{a[:22]:>24s}" for a in ALGS) + "   (measured / model, ms)")
for nbytes in SIZES:
    cells = [f"{measured[(a, nbytes)] * 1e3:9.3f} / {alpha_beta.predict_time(a, P_RANKS, nbytes, alpha, beta) * 1e3:9.3f}"
             for a in ALGS]
    print(f"{nbytes:8d} " + " ".join(f"{c:>24s}" for c in cells))

# %% tags=["nbval-ignore-output"]
fig = V.alpha_beta_figure(
    SIZES,
    {a: [measured[(a, s)] for s in SIZES] for a in ALGS},
    {a: [alpha_beta.predict_time(a, P_RANKS, s, alpha, beta) for s in SIZES] for a in ALGS},
    title=f"all-reduce on {P_RANKS} gloo ranks: measured vs α–β model")

predicted_x = alpha_beta.crossover_bytes("recursive_doubling_all_reduce", "ring_all_reduce", P_RANKS, alpha, beta)
ring_wins = [s for s in SIZES if measured[("ring_all_reduce", s)] < measured[("recursive_doubling_all_reduce", s)]]
stays = [s for s in SIZES if all(t in ring_wins for t in SIZES if t >= s)]
print(f"model crossover (recursive doubling -> ring): n = 8α/β = {predicted_x / 1024:.0f} KiB")
print("measured: sizes where the ring beat recursive doubling:", [f"{s / 1024:g}K" for s in ring_wins])
print("measured: ring faster at every size from", f"{stays[0] / 1024:g} KiB on" if stays else "— (not within these sizes)")

# %% [markdown]
# What to look for in the plot: at small sizes all curves are flat (α-dominated) and the ring's
# 2(p−1) = 6 rounds make it the slowest; at large sizes the curves are straight lines of slope 1
# (β-dominated) and the ring's 1.5·n beats recursive doubling's 2·n and the tree's 4·n. On a shared
# 2-core CPU, 4 ranks oversubscribe the cores: a round cannot finish until every rank in the
# chain has been scheduled, so small-message times are noisy (we keep the minimum of 15 runs) and
# the ring, with the most rounds, suffers most — gloo's own `dist.all_reduce`, also a ring here,
# shows the same small-message times. The measured crossover can move by a factor of a few
# between runs; the fitted model still shows the shape. On a GPU node
# (NCCL, NVLink) α is a few microseconds and β a fraction of a nanosecond per byte, so the
# crossover moves, but the reasoning is the same.
#
# How does our ring compare with gloo's own `dist.all_reduce`? `benchmarks/collectives.py`
# times both in the same processes, 4 KB … 64 MB, and reports algbw = S/t and
# busbw = algbw · 2(N−1)/N (the nccl-tests definitions) — results in
# `benchmarks/results/collectives.md`. One trick matters there: labkit's reduce-scatter sends
# chunks larger than 1 MiB as 1 MiB segments, so adding one segment overlaps with receiving the
# next (bytes are unchanged; only the message count grows). NCCL and gloo pipeline the same way.
#
# ## Summary
#
# * Seven primitives; all-reduce = reduce-scatter + all-gather = reduce + broadcast.
# * Ring all-reduce: 2(p−1) rounds, **2(p−1)/p·S bytes per rank** (exactly 2(p−1)·S over all
#   ranks, with uneven chunks sent unpadded): bandwidth-optimal, latency linear in p.
# * Binomial tree and recursive doubling: ⌈log₂p⌉-ish rounds but whole-buffer messages; they win
#   for small messages. (Rabenseifner's recursive-halving reduce-scatter + recursive-doubling
#   all-gather gets both: log p rounds *and* 2(p−1)/p·S bytes.)
# * α–β: T = rounds·α + critical-path bytes·β, fitted here from real runs.
#
# ## Exercises
#
# Open `exercises/lab05_collectives.py` and implement, using only `labkit.collectives.exchange`
# (or `dist.isend`/`dist.irecv`):
# `ring_reduce_scatter_chunks`, `ring_all_gather_chunks`, `ring_all_reduce` (composed from the two),
# `tree_broadcast` and `recursive_doubling_all_reduce`. The docstrings are the spec. Grade yourself with
#
#     python -m labkit.grade --lab 05        # or: make grade LAB=05
#
# The graded tests run your functions on 1–4 real ranks with uneven sizes and check both the
# results and the bytes you sent.
