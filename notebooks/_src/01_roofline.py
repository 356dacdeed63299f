# Source of notebooks/01_roofline.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 01 — Arithmetic intensity, the roofline, MFU and fusion
#
# **Learning objectives.** After this lab you can
# 1. count the FLOPs and the bytes moved by an operation and compute its **arithmetic intensity** (FLOP/byte);
# 2. **measure** this machine's compute peak (a large matmul) and memory bandwidth (STREAM-style copy and triad);
# 3. draw the **roofline** `min(peak, I × bandwidth)` and place measured operations on it;
# 4. explain with the roofline why **fusing** element-wise operations makes them faster, and measure it;
# 5. compute **MFU** and **HFU**, including the activation-checkpointing case (MFU = ¾·HFU);
# 6. find the batch size above which a layer's matmul becomes compute-bound — the roofline result that matters
#    most for serving and training large models.
#
# Code: `labkit.roofline.model` (formulas, pure Python), `labkit.roofline.measure` (timing with torch),
# `labkit.roofline.lab` (the notebook's one-line tables and the check-your-work pictures), `labkit.viz.roofline`
# (plots and the widget); `show(...)` prints the code where it is taught. Whenever you see **Predict first**, write
# your guess down before running the next cell.

# %%

import labkit
import torch
from labkit.claims import claim, claim_between, claim_close
from labkit.env import report
from labkit.grading.check import check_your_work
from labkit.roofline import lab
from labkit.roofline import measure as R
from labkit.roofline import model as M
from labkit.show import show
from labkit.viz import roofline as V

DEVICE = R.default_device()
# On a CPU shared with other work, two OpenMP threads on two busy cores wait for each other and timings become
# erratic; we measure ONE thread so the numbers are stable. Everything below is "per core" on a CPU.
THREADS = 1 if DEVICE.type == "cpu" else None
print("device:", DEVICE.type, "| threads used for timing:", THREADS or "default")


def best_seconds(fns, rounds=4):
    """Min over interleaved rounds of each fn's median time: other programs on the machine only ever
    add time, so the checks below compare these rather than single measurements."""
    runs = [[R.measure(M.OpCost("t", 1, 1), fn, repeat=3).seconds for fn in fns] for _ in range(rounds)]
    return [min(r[i] for r in runs) for i in range(len(fns))]

# %% tags=["nbval-ignore-output"]
report();

# %% [markdown]
# ## 1. Counting FLOPs and bytes
#
# **Convention used throughout the course.** One FLOP per add, multiply, compare, exp or divide on one element
# (a multiply-add is 2). Bytes moved = the *compulsory* traffic: each operand read once and each result written once
# **per kernel** (perfect caching inside a kernel, none between kernels). Arithmetic intensity
# `I = FLOPs / bytes`.
#
# - element-wise add `c = a + b` on n float32: n FLOPs, 3n·4 bytes → `I = 1/12` (the table below prints 0.0833).
#   People often say 1/3 — one operation per three reads/writes — which counts *elements*, not bytes; section 7
#   measures why the roofline needs bytes.
# - the chain `e = d + (a + b) * c`: 3 FLOPs per element. **Unfused** (3 kernels) each kernel reads 2 arrays and
#   writes 1 → 9 arrays; **fused** (1 kernel) reads a, b, c, d and writes e → 5 arrays.
# - matmul (m×k)·(k×n): `2mkn` FLOPs, `(mk + kn + mn)·4` bytes; for square n, `I = n/6` — it grows with n.
# - row softmax (fused): 5 FLOPs per element (max, subtract, exp, sum, divide), read once + write once → `I = 5/8`.

# %%
ops = [M.elementwise_add(1 << 20), M.elementwise_chain(1 << 20, fused=False), M.elementwise_chain(1 << 20, fused=True),
       M.matmul(64, 64, 64), M.matmul(1024, 1024, 1024), M.matmul(4096, 4096, 1), M.softmax(4096, 1024)]
print(f"{'op':28} {'FLOPs':>14} {'bytes':>14} {'FLOP/byte':>10}")
for op in ops:
    print(f"{op.name:28} {op.flops:14,d} {op.bytes:14,d} {op.intensity:10.4f}")
add, unf, fus, mm, sm = ops[0], ops[1], ops[2], ops[4], ops[6]
claim("an add's intensity is 1/12 FLOP/B", 12 * add.flops == add.bytes, f"{add.flops:,} / {add.bytes:,}")
claim("fusing the chain keeps its FLOPs and cuts its bytes by 9/5",
      fus.flops == unf.flops and unf.bytes * 5 == fus.bytes * 9, f"{unf.bytes:,} vs {fus.bytes:,} bytes")
claim("a square matmul's intensity is n/6 (n = 1024)", 6 * mm.flops == 1024 * mm.bytes, f"{mm.intensity:.4f}")
claim("a fused row softmax's intensity is 5/8", 8 * sm.flops == 5 * sm.bytes, f"{sm.intensity:.4f}")

# %% [markdown]
# ### Exercises: `matmul_intensity` and `chain_intensity`
#
# Write both in `exercises/lab01_roofline.py`. Each cell compares yours with labkit's counts on a few cases
# (a matrix–vector product among them), draws your matmuls on the roofline of an example machine, then grades
# the exercise.

# %%
check_your_work("lab01_roofline", "matmul_intensity", picture=lab.picture("matmul_intensity"))

# %%
check_your_work("lab01_roofline", "chain_intensity", picture=lab.picture("chain_intensity"))

# %% [markdown]
# ## 2. Measuring the machine
#
# **Peak compute**: the best FLOP/s of `torch.mm` on square float32 matrices (2n³ FLOPs per call) over a few sizes,
# median of repeats. This is a *measured* peak — what the BLAS achieves here — not a datasheet number.
#
# **Memory bandwidth**: STREAM-style kernels on arrays much larger than the last-level cache
# (2²⁴ float32 = 64 MiB each): *copy* `a[:] = b` moves 2n·4 bytes (read + write), *triad* `a = b + 2c` moves 3n·4.
# We count bytes the program must move; a cache that writes-allocate may move a little more.
#
# Timings vary from run to run and machine to machine, so the cells that print them are not compared by the tests.
# Here is how the bandwidth is measured:

# %%
show(R.bandwidth)

# %% [markdown]
# **Predict first:** this machine's ridge point (peak ÷ bandwidth) — below 1, around 10, or above 100 FLOP/B?

# %% tags=["nbval-ignore-output"]
with R.threads(THREADS):
    peak = R.peak_matmul(sizes=(256, 512, 1024, 2048), repeat=3, device=DEVICE)
    copy = R.bandwidth(1 << 24, "copy", device=DEVICE)
    triad = R.bandwidth(1 << 24, "triad", device=DEVICE)
PEAK, BW = peak.flops_per_s, max(copy.bytes_per_s, triad.bytes_per_s)
print(f"peak compute : {PEAK / 1e9:8.2f} GFLOP/s  ({peak.name}, {peak.seconds * 1e3:.2f} ms per call)")
print(f"copy         : {copy.bytes_per_s / 1e9:8.2f} GB/s     ({copy.bytes / 2**20:.0f} MiB moved in {copy.seconds * 1e3:.2f} ms)")
print(f"triad        : {triad.bytes_per_s / 1e9:8.2f} GB/s     ({triad.bytes / 2**20:.0f} MiB moved in {triad.seconds * 1e3:.2f} ms)")
print(f"ridge point  : {M.ridge_intensity(PEAK, BW):8.2f} FLOP/byte = peak / bandwidth")

# %% [markdown]
# ## 3. The roofline
#
# An operation with intensity `I` cannot run faster than the memory system feeds it (`I × bandwidth`) nor faster than
# the arithmetic units (`peak`): **attainable = min(peak, I × bandwidth)**. Left of the ridge point `peak/bandwidth`
# an op is memory-bound, right of it compute-bound. The formula is exact for the model; a quick check with round
# numbers (a machine of 100 GFLOP/s and 10 GB/s, ridge at 10 FLOP/B):

# %%
for i in (0.25, 8.0, 64.0):
    print(f"I = {i:5} FLOP/B on (100 GFLOP/s, 10 GB/s): attainable {M.attainable_flops(i, 100e9, 10e9) / 1e9:6.1f} GFLOP/s,"
          f" {M.bound(i, 100e9, 10e9)}-bound")
claim_close("the ridge of a 100 GFLOP/s, 10 GB/s machine is 10 FLOP/B", M.ridge_intensity(100e9, 10e9), 10)
claim("the roof is I x bandwidth left of the ridge, the peak right of it",
      [M.attainable_flops(i, 100e9, 10e9) for i in (0.25, 8.0, 64.0)] == [2.5e9, 80e9, 100e9],
      "2.5, 80, 100 GFLOP/s")

# %% [markdown]
# ### Exercise: `attainable_flops`

# %%
check_your_work("lab01_roofline", "attainable_flops", picture=lab.picture("attainable_flops"))

# %% [markdown]
# Now measure real operations and put them on this machine's roofline. Each point: x = the op's modelled intensity,
# y = its modelled FLOPs ÷ measured time. A point near the roof is as fast as the hardware allows.
#
# **Predict first:** which of these reaches the highest GFLOP/s — the add, the softmax, or a 512×512 matmul? Which
# is closest to *its* roof?

# %% tags=["nbval-ignore-output"]
n = 1 << 23
a, b, c, d = R.chain_inputs(n, device=DEVICE)
out, tmp = torch.empty_like(a), (torch.empty_like(a), torch.empty_like(a))
mats = {s: (torch.randn(s, s, device=DEVICE), torch.randn(s, s, device=DEVICE)) for s in (32, 128, 512)}
X = torch.randn(4096, 1024, device=DEVICE)
with R.threads(THREADS):
    measured = [
        R.measure(M.elementwise_add(n), lambda: torch.add(a, b, out=out)),
        R.measure(M.softmax(4096, 1024), lambda: torch.softmax(X, dim=1)),
        *[R.measure(M.matmul(s, s, s), lambda s=s: torch.mm(*mats[s]), min_time_s=0.01) for s in mats],
    ]
NEW_PEAK, NEW_BW = M.raise_roof(PEAK, BW, [(m.intensity, m.flops_per_s) for m in measured])
if (NEW_PEAK, NEW_BW) != (PEAK, BW):
    over = max(m.flops_per_s / M.attainable_flops(m.intensity, PEAK, BW) for m in measured)
    print(f"a point ran at {100 * over:.1f} % of the measured roof: raising the roof to {NEW_PEAK / 1e9:.2f} "
          f"GFLOP/s, {NEW_BW / 1e9:.2f} GB/s")
    PEAK, BW = NEW_PEAK, NEW_BW
print(f"{'op':26} {'I (FLOP/B)':>10} {'GFLOP/s':>9} {'GB/s':>7} {'roof GFLOP/s':>13} {'% of roof':>9}")
for m in measured:
    roof = M.attainable_flops(m.intensity, PEAK, BW)
    print(f"{m.name:26} {m.intensity:10.3f} {m.flops_per_s / 1e9:9.2f} {m.bytes_per_s / 1e9:7.2f} {roof / 1e9:13.2f} "
          f"{100 * m.flops_per_s / roof:8.0f}%")
m_add, m_sm, m_small, m_big = measured[0], measured[1], measured[2], measured[-1]
ridge = M.ridge_intensity(PEAK, BW)
claim("the add and the softmax lie left of the ridge: memory-bound",
      max(m_add.intensity, m_sm.intensity) < ridge, f"I = {m_add.intensity:.3f}, {m_sm.intensity:.3f} "
      f"< {ridge:.2f} FLOP/B")
# the comparisons below re-time the ops side by side (interleaved rounds, best of each)
with R.threads(THREADS):
    s_add, s_copy, s_32, s_512 = best_seconds([lambda: torch.add(a, b, out=out), lambda: out.copy_(a),
                                               lambda: torch.mm(*mats[32]), lambda: torch.mm(*mats[512])], 7)
add_vs_copy = (12 * n / s_add) / (8 * n / s_copy)
claim("the add gets under 1/5 of the peak's FLOP/s but moves bytes like a copy",
      m_add.flops_per_s < PEAK / 5 and add_vs_copy >= 0.5,
      f"{100 * m_add.flops_per_s / PEAK:.1f} %; {add_vs_copy:.2f}x its GB/s")
claim("the 512^3 matmul runs more FLOP/s than the 32^3 one", 512**3 / s_512 > 32**3 / s_32,
      f"{2 * 512**3 / s_512 / 1e9:.1f} vs {2 * 32**3 / s_32 / 1e9:.1f} GFLOP/s")

# %%
fig = V.roofline_figure(PEAK, BW, points=[(m.name, m.intensity, m.flops_per_s) for m in measured],
                        title=f"measured roofline ({DEVICE.type}, {THREADS or 'all'} thread(s))")

# %% [markdown]
# What to see (each checked by a `✓` line above): the add and the softmax sit far left (intensity below 1 FLOP/B)
# and reach only a small fraction of the peak, while the add moves its bytes about as fast as a plain copy — they
# are memory-bound; the roof there is the slanted line. Softmax lands further below its roof: torch's kernel may read
# the input more than once, so its real traffic exceeds the 2-array model. Small matmuls have low intensity *and*
# overheads; larger ones climb towards the flat part.
#
# **A claim you will often meet: "a point above the roof means the code beat the hardware's peak".** Points do
# sometimes land at 101–104 % of a measured roof, but the roof is itself a measurement: the peak is the best
# median of a few matmul sizes, the bandwidth the median of one STREAM run, each taken at another moment on a
# machine that other programs share — and a 512×512 matmul whose operands fit in cache is not limited by memory
# bandwidth at all. How far apart do honest repeats of the *same* peak test land?
#
# **Predict first:** time one 1024×1024 matmul 7 times (each a median of 3 calls). How far apart are the fastest
# and the slowest round — under 1 %, a few %, or more than 10 %?

# %% tags=["nbval-ignore-output"]
with R.threads(THREADS):
    print(lab.peak_spread(1024, rounds=7, device=DEVICE))

# %% [markdown]
# Identical rounds do not agree (the title gives max/min): a percent or so on a quiet machine, more on a shared
# one, where a slow round is another program taking the core for a while. So a point measured at another moment
# can sit a few percent above a roof measured once. The measuring cell above therefore takes the roof as the best of everything
# measured (`M.raise_roof`: a compute-bound point above it raises the peak, a memory-bound one the bandwidth) and
# says when it did, rather than print more than 100 %:

# %%
show(M.raise_roof)

# %% [markdown]
# ## 4. Fusion, for real
#
# The chain `e = d + (a + b) * c` has the same FLOPs fused or not; fusing only removes traffic (9 → 5 arrays). Both
# versions are memory-bound, so the roofline predicts their times from the bytes alone. We fuse with `torch.compile` (Inductor generates one C++/OpenMP loop on CPU, one Triton kernel on GPU).
# The first call compiles (several seconds); we time later calls. The unfused chain is the three kernels below:

# %%
show(R.chain_unfused)

# %% [markdown]
# **Predict first:** the fused chain moves 5 arrays, the unfused one 9. What speed-up do you expect, and will the
# GB/s of the two differ?

# %% tags=["nbval-ignore-output"]
import time

t0 = time.perf_counter()
fused, arrays, how = R.make_fused_chain()
fused(a, b, c, d, out)
print(f"fused with: {how}")
print(f"first call (compiles): {time.perf_counter() - t0:.1f} s")
want = d + (a + b) * c
claim("the fused chain equals eager up to FMA rounding", torch.allclose(out, want, rtol=1e-6, atol=1e-6),
      f"max |diff| {(out - want).abs().max().item():.1e}")
with R.threads(THREADS):
    # other programs share this machine: take the best of 3 interleaved rounds (each a median of 5 calls)
    rounds = [(R.measure(M.elementwise_chain(n, fused=False), lambda: R.chain_unfused(a, b, c, d, out, tmp)),
               R.measure(M.OpCost("chain fused", 3 * n, arrays * n * 4), lambda: fused(a, b, c, d, out)))
              for _ in range(3)]
    t_unf = min((r[0] for r in rounds), key=lambda m: m.seconds)
    t_fus = min((r[1] for r in rounds), key=lambda m: m.seconds)
    t_alloc = R.measure(M.elementwise_chain(n, fused=False), lambda: d + (a + b) * c)
for m in (t_unf, t_fus):
    print(f"{m.name:24} {m.seconds * 1e3:7.2f} ms  {m.bytes / 2**20:5.0f} MiB moved  {m.bytes_per_s / 1e9:6.2f} GB/s  "
          f"{m.flops_per_s / 1e9:5.2f} GFLOP/s")
print(f"unfused, allocating temporaries (d + (a + b) * c): {t_alloc.seconds * 1e3:.2f} ms")
print(f"speed-up unfused/fused: measured {t_unf.seconds / t_fus.seconds:.2f}x, roofline predicts {9 / arrays:.2f}x "
      f"(traffic ratio 9/{arrays})")
claim("fusion speeds the chain up", t_unf.seconds / t_fus.seconds > 1.15,
      f"{t_unf.seconds / t_fus.seconds:.2f}x; the bytes predict {9 / arrays:.2f}x")
if DEVICE.type == "cpu":
    claim("on a CPU, allocating the temporaries is slower",
          t_alloc.seconds > t_unf.seconds, f"{t_alloc.seconds * 1e3:.2f} vs {t_unf.seconds * 1e3:.2f} ms")

# %%
fig = V.roofline_figure(PEAK, BW, points=[(t_unf.name, t_unf.intensity, t_unf.flops_per_s),
                                          (t_fus.name, t_fus.intensity, t_fus.flops_per_s)],
                        title="fusion moves the op right along the slanted roof", i_range=(2 ** -6, 2 ** 6))

# %% [markdown]
# Fusion raises the intensity from 3/36 to 3/20 FLOP/B; on the slanted part of the roof attainable FLOP/s is
# proportional to intensity, so the same bandwidth finishes the work 9/5 times sooner. The measured ratio is rarely
# exactly 9/5 (and on a busy machine it wanders; the check above only asks that fusion pays), and two effects pull
# in opposite directions. A CPU cache usually *reads* a line before
# writing it (write-allocate), so each written array costs two transfers — 12 vs 6 transfers, a ratio of 2 — which
# pushes the ratio up; a single loop that streams four inputs at once may move fewer GB/s than three simple kernels
# (compare the GB/s column), which pulls it down. On a CPU the eager version that allocates its temporaries is
# slower still: fresh large buffers cost page faults on first touch. (On a GPU PyTorch's caching allocator hands
# back memory it already holds, and the gap disappears.)
#
# ## 5. MFU and HFU
#
# **Model FLOPs utilization** = (FLOPs the model needs ÷ time) ÷ peak. For a dense model with N parameters, a
# forward costs 2N FLOPs per token and a backward twice that, so training needs **6·N·tokens** FLOPs.
# **Hardware FLOPs utilization** counts what the hardware actually executed. With activation checkpointing the
# forward is recomputed during backward: **8·N·tokens** executed, still 6·N·tokens useful, so
# **MFU = 6/8 · HFU = ¾·HFU**.
#
# **A common mistake: losing an exponent.** A job does 10¹² FLOPs in 10 s on a machine of peak 10¹³ FLOP/s. Copied
# as plain text, the peak easily becomes "1013" (the superscript flattened), and `(10^12 / 10) / 1013` gives about
# 10⁸ — a "utilization" of ten million percent. Any utilization above 1 means a unit or an exponent went wrong.
# Correctly: 10¹² FLOPs / 10 s = 10¹¹ FLOP/s, and 10¹¹ / 10¹³ = 1 %.

# %%
u_right, u_flat = M.utilization(1e12, 10, 1e13), M.utilization(1e12, 10, 1013)
print(f"peak 1e13: (1e12 / 10) / 1e13 = {u_right}; with the exponent lost: (1e12 / 10) / 1013 = {u_flat:.4g}")
claim_close("10^12 FLOPs in 10 s on a 10^13 FLOP/s peak is 1 % utilization", u_right, 0.01, abs_=1e-15)
claim("the flattened peak gives a utilization above 1: impossible", u_flat > 1, f"{u_flat:.3g}")
N, tokens, secs, peak_hw = 7e9, 2 ** 20, 100.0, 989e12  # a 7B model, 1M tokens in 100 s on a ~1 PFLOP/s accelerator
mfu = M.mfu(N, tokens, secs, peak_hw)
hfu = M.hfu(N, tokens, secs, peak_hw, recompute_forward=True)
print(f"7B model, 2^20 tokens in 100 s, peak 989 TFLOP/s: MFU = {mfu:.4f}, HFU with checkpointing = {hfu:.4f}")
claim_close("with activation checkpointing MFU = 3/4 HFU", mfu / hfu, 3 / 4, abs_=1e-15)

# %% [markdown]
# **Measured on this machine.** A small two-layer MLP (no biases, so N counts exactly the matmul weights) trained for
# a few steps, with and without `torch.utils.checkpoint`. The input requires grad, as it would deep inside a network,
# so the backward really is two matmuls per layer (4N FLOPs per token). Checkpointing adds one forward per step, so
# the extra time should be about one forward's time, and the step about 8/6 = 1.33× slower if backward runs at the
# same FLOP rate as forward.
#
# A real-system detail: torch's default (non-reentrant) checkpoint **stops recomputing early**, once it has rebuilt
# every tensor the backward needs. A Linear layer saves its *input*, not its output, so the last matmul of the block is
# never redone and the hardware executes only 6N + 2·N₁ per token (N₁ = first layer's weights). We time it both ways:
# with early stopping switched off (the textbook 8N) and with torch's default.
#
# **Predict first:** a matmul-heavy MLP on one core, measured against the matmul peak of section 2 — is its plain
# step's MFU closer to 0.1, 0.5 or 0.9? And how much slower is a step with full recompute?

# %% tags=["nbval-ignore-output"]
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048, bias=False), torch.nn.ReLU(),
                          torch.nn.Linear(2048, 512, bias=False)).to(DEVICE)
n_params = sum(p.numel() for p in mlp.parameters())
n_first = mlp[0].weight.numel()
x = torch.randn(1024, 512, device=DEVICE, requires_grad=True)


def step(recompute, early_stop=True):
    with set_checkpoint_early_stop(early_stop):
        y = checkpoint(mlp, x, use_reentrant=False) if recompute else mlp(x)
    y.square().mean().backward()


def forward():
    with torch.no_grad():
        mlp(x)


with R.threads(THREADS):
    t_plain, t_full, t_early, t_fwd = best_seconds(
        [lambda: step(False), lambda: step(True, early_stop=False), lambda: step(True), forward])
tok = 1024
for name, t, hw_flops in (("plain", t_plain, 6 * n_params * tok),
                          ("ckpt, full recompute", t_full, 8 * n_params * tok),
                          ("ckpt, torch default", t_early, (6 * n_params + 2 * n_first) * tok)):
    print(f"{name:21} {t * 1e3:7.1f} ms/step  MFU {M.mfu(n_params, tok, t, PEAK):.3f}  "
          f"HFU {M.utilization(hw_flops, t, PEAK):.3f}  (of the measured matmul peak)")
print(f"N = {n_params:,} params, {tok} tokens/step, one forward {t_fwd * 1e3:.1f} ms")
print(f"full recompute: +{(t_full - t_plain) * 1e3:.1f} ms per step (one forward: {t_fwd * 1e3:.1f} ms), "
      f"ratio {t_full / t_plain:.2f} (model 8/6 = {8 / 6:.2f})")
print(f"torch default : +{(t_early - t_plain) * 1e3:.1f} ms per step (first layer only: "
      f"{t_fwd * n_first / n_params * 1e3:.1f} ms), ratio {t_early / t_plain:.2f} "
      f"(model {(6 * n_params + 2 * n_first) / (6 * n_params):.2f})")

# %% [markdown]
# Compare the time ratios with the models. On a quiet machine they land close; on a CPU shared with other programs a
# difference of a few milliseconds can drown in noise (rerun the cell to see the spread). What the hardware executed
# does not depend on the noise: PyTorch's `FlopCounterMode` counts every matmul FLOP of a step, recomputed ones
# included, so the HFU numerators above can be checked exactly:

# %%
from torch.utils.flop_counter import FlopCounterMode


def counted_flops(fn):
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


f_plain, f_full, f_early = (counted_flops(f) for f in (lambda: step(False), lambda: step(True, early_stop=False),
                                                        lambda: step(True)))
print(f"counted GFLOP per step: plain {f_plain / 1e9:.3f}, full recompute {f_full / 1e9:.3f}, "
      f"torch default {f_early / 1e9:.3f}")
claim("a plain step executes 6N FLOPs per token", f_plain == 6 * n_params * tok, f"{f_plain:,}")
claim("full recompute executes 8N per token", f_full == 8 * n_params * tok, f"{f_full / f_plain:.4f} x plain")
claim("torch's default executes 6N + 2 N_1 per token: no last matmul redone",
      f_early == (6 * n_params + 2 * n_first) * tok, f"{f_early / f_plain:.4f} x plain")

# %% [markdown]
# ### Exercise: `mfu_hfu`

# %%
check_your_work("lab01_roofline", "mfu_hfu", picture=lab.picture("mfu_hfu"))

# %% [markdown]
# ## 6. When does a layer become compute-bound? The batch size
#
# A linear layer y = x @ W with W of d×d and a batch of B tokens does 2·B·d² FLOPs and moves
# (2·B·d + d²)·b bytes (b bytes per element: x read, y written, W read): the weights are read once **whatever B
# is**, and every token reuses them. Its intensity
#
# I(B) = 2·B·d² / (b·(d² + 2·B·d)) = 2B / (b·(1 + 2B/d)) ≈ **2B / b** for B ≪ d
#
# grows linearly with the batch. The layer is compute-bound once I(B) reaches the ridge R = peak / bandwidth.
# Solving I(B) ≥ R for B:
#
# 2·B·d² ≥ R·b·d² + 2·R·b·B·d  ⇔  **B ≥ B* = (R·b / 2) / (1 − R·b / d)** ≈ R·b / 2 when d ≫ R·b.
#
# And when d ≤ R·b there is no such batch: as B → ∞ the intensity only tends to d / b, the weights' reuse is
# capped by the layer's width. `compute_bound_batch` solves the same inequality for a d_in×d_out layer, in whole
# tokens:

# %%
show(M.compute_bound_batch)

# %% [markdown]
# For the GPUs' datasheet numbers (bf16 uses b = 2 bytes, fp32 b = 4), the exact B* next to R·b/2:

# %%
print(lab.datasheet_table(d=8192))
r, rb = M.ridge_intensity(*lab.H100), M.ridge_intensity(*lab.H100) * 2
print(f"H100 bf16, d = 8192: (R*b/2) / (1 - R*b/d) = {rb / 2 / (1 - rb / 8192):.2f} -> B* = "
      f"{M.compute_bound_batch(*lab.H100, 8192, 8192, 2)} tokens")
b_star = M.compute_bound_batch(*lab.H100, 8192, 8192, 2)
claim("H100 bf16, d = 8192: compute-bound from B* = 319, not 318",
      b_star == 319 and M.linear_intensity(319, 8192, 8192, 2) >= r > M.linear_intensity(318, 8192, 8192, 2),
      f"I = {M.linear_intensity(319, 8192, 8192, 2):.2f} >= R = {r:.2f} > "
      f"{M.linear_intensity(318, 8192, 8192, 2):.2f}")

# %% [markdown]
# So an H100 needs about 300 tokens in every bf16 matmul before its tensor cores, not its memory, set the pace.
# This is why decoding one token at a time is hopelessly memory-bound on a GPU, and why training and batched
# serving put hundreds of tokens through each matmul.
#
# **Predict first:** on *this* machine (its measured ridge is printed in section 2), from which batch size does a
# 4096×4096 float32 layer stop being memory-bound? And from which batch does it actually run at 80 % of the peak?
# Then measure it. (Its weights take 64 MiB, more than a CPU's last-level cache, so each call really streams them
# from memory; with a 16 MiB layer the small batches would read W from cache and beat the memory roof.)

# %% tags=["nbval-ignore-output"]
with R.threads(THREADS):
    sweep = R.linear_sweep(d=4096, device=DEVICE)
NEW_PEAK, NEW_BW = M.raise_roof(PEAK, BW, [(m.intensity, m.flops_per_s) for m in sweep])
if (NEW_PEAK, NEW_BW) != (PEAK, BW):   # as in section 3: the roof is the best seen so far
    print(f"a point beat the roof: raising it to {NEW_PEAK / 1e9:.2f} GFLOP/s, {NEW_BW / 1e9:.2f} GB/s")
    PEAK, BW = NEW_PEAK, NEW_BW
B_STAR = M.compute_bound_batch(PEAK, BW, 4096, 4096, 4)
print(f"this machine: ridge R = {M.ridge_intensity(PEAK, BW):.2f} FLOP/B -> B* = {B_STAR} tokens (formula; "
      f"R*b/2 = {M.ridge_intensity(PEAK, BW) * 2:.1f})")
table = lab.sweep_table(sweep, PEAK, BW, dtype_bytes=4)
print(table)
near = lab.first_batch_near_peak(sweep, PEAK, 0.8)
print("first measured batch at >= 80 % of the peak:", near)
i_exact, i_approx = table.column("I (FLOP/B)"), table.column("2B/b")
claim("I and 2B/b agree for B << d, part as B nears d",
      i_exact[0] / i_approx[0] > 0.99 and i_exact[-1] / i_approx[-1] < 0.7,
      f"B = 1: {i_exact[0]:.3f} vs {i_approx[0]:.1f}; B = 1024: {i_exact[-1]:.1f} vs {i_approx[-1]:.1f}")
claim("the batch that runs at 80 % of the peak is larger than B*", near is None or near > B_STAR,
      f"{near} vs {B_STAR} tokens" if near else f"none up to 1024; B* = {B_STAR}")

# %%
fig = V.roofline_figure(PEAK, BW, points=[(m.name, m.intensity, m.flops_per_s) for m in sweep],
                        title="one 4096x4096 layer, batch 1 ... 1024", i_range=(2 ** -2, 2 ** 10))

# %% [markdown]
# The columns `I` and `2B/b` agree while B ≪ d and part as B approaches d. Left of B* the roof doubles with every
# doubling of the batch; right of it, it is flat. The measured points stay below it, and the gap is widest just
# right of B*: the roofline is a *bound*, and the BLAS reaches it only for shapes its kernels are built for. A
# skinny matmul (a few rows times a 4096×4096 matrix) runs well below both roofs, so the batch where this machine
# really runs near its peak is larger than B* (on one CPU core, tens of times larger). On a GPU the same holds for
# the batch at which its tensor cores are busy: B* is the smallest batch that *can* be compute-bound.
#
# ## 7. Common mistakes about the roofline
#
# Each of these is said often; each is checked here with the numbers measured above or computed from datasheets.
#
# 1. **A claim you will often meet: "an add does one operation for three reads/writes, so its intensity is
#    1/3".** That counts elements. The roof's slanted part is *bytes* per second × intensity, so the intensity must
#    be FLOP per *byte*: 1/12 for float32. Used on this machine's measured bandwidth, 1/3 predicts an add at least
#    four times faster than it runs:

# %% tags=["nbval-ignore-output"]
add = measured[0]
print(f"{add.name}: measured {add.flops_per_s / 1e9:.2f} GFLOP/s; roof at I = 1/12: {BW / 12 / 1e9:.2f}, "
      f"at I = 1/3: {BW / 3 / 1e9:.2f} GFLOP/s")
print(f"measured / roof: {add.flops_per_s / (BW / 12):.2f} with 1/12, {add.flops_per_s / (BW / 3):.2f} with 1/3")
claim("the 1/3 roof is at least 4x faster than the add runs", 4 * add.flops_per_s <= BW / 3 * (1 + 1e-9),
      f"{add.flops_per_s / (BW / 3):.2f} of it; {add.flops_per_s / (BW / 12):.2f} of the 1/12 roof")

# %% [markdown]
# 2. **Another: "fusion is faster because the fused kernel does less arithmetic".** The FLOPs are identical; only
#    the bytes change (9 → 5 arrays), and the time follows the bytes (section 4):

# %% tags=["nbval-ignore-output"]
print(f"FLOPs unfused {t_unf.flops:,}, fused {t_fus.flops:,}: equal = {t_unf.flops == t_fus.flops}")
print(f"bytes unfused/fused = {t_unf.bytes / t_fus.bytes:.2f}, time unfused/fused = "
      f"{t_unf.seconds / t_fus.seconds:.2f} (measured in section 4)")
claim("same FLOPs, fewer bytes, less time", t_unf.flops == t_fus.flops and t_unf.bytes > t_fus.bytes
      and t_unf.seconds > t_fus.seconds, f"{t_unf.flops:,} FLOPs each")

# %% [markdown]
# 3. **Another: "a GPU's ridge point is a few tens of FLOP/B".** That is the ridge of its plain fp32 units. The
#    tensor cores that run bf16 matmuls are about 15× faster on the same memory, so their ridge is about 15× further
#    right — the number that matters for training and serving (Lab 04 uses the same 295):

# %%
for name, (peak_hw, bw_hw) in M.DATASHEETS.items():
    print(f"{name:45} ridge = {peak_hw / 1e12:5.1f} TFLOP/s / {bw_hw / 1e12:.3f} TB/s = "
          f"{M.ridge_intensity(peak_hw, bw_hw):5.1f} FLOP/B")
r_tc, r_fp32 = (M.ridge_intensity(*M.DATASHEETS[f"NVIDIA H100 SXM ({k})"])
                for k in ("bf16 tensor cores", "fp32, no tensor cores"))
claim_close("an H100's tensor-core ridge is about 15x its fp32 ridge", r_tc / r_fp32, 15, rel=0.05)

# %% [markdown]
# 4. **Another: "GPT-3 was trained with a batch size of 3.2M"**, read as 3.2 million *sequences* (or as a sequence
#    length of 1). The 3.2M counts **tokens**: with 2048-token sequences it is about 1,560 sequences. The B of the
#    compute-bound batch is tokens per matmul too, so in training even a single sequence per GPU puts 2048 tokens
#    through each matmul — far past B* — while decoding adds one token per sequence per step and needs hundreds of
#    sequences served together to get there (H100, bf16, d = 8192):

# %%
tpm = lab.tokens_per_matmul(*lab.H100, d=8192, dtype_bytes=2, seq_len=2048, batch_tokens=3.2e6)
print(tpm)
claim("a 2048-token sequence is compute-bound; decoding 1 or 64 memory-bound",
      tpm.column("bound")[:3] == ["compute", "memory", "memory"], "; ".join(tpm.column("bound")[:3]))

# %% [markdown]
# ## 8. Explore the roofline
#
# Pick an op and its size (or any intensity) and see where it lands on the measured roof (run the cell, then use
# the controls).

# %%
print("matmul n=64 :", {k: (round(v, 4) if isinstance(v, float) else v)
                         for k, v in V.explorer_state("matmul", 6, 0.0, 100e9, 10e9).items()
                         if k in ("intensity", "bound")}, "(on a 100 GFLOP/s, 10 GB/s machine)")
V.explorer(PEAK, BW)

# %% [markdown]
# ## 9. On a GPU
#
# The same cells run on CUDA: the peak is torch's float32 matmul (TF32 may be used if enabled), bandwidth is HBM
# copy/triad, and the fused chain is one Triton kernel generated by Inductor. The ridge point of a modern GPU is far
# right of a CPU core's, and depends on the precision: the cell computes it from the datasheets of section 6
# (Lab 04 uses the same numbers) — so even more operations are memory-bound there.

# %%
ridges = {name: M.ridge_intensity(*hw) for name, hw in M.DATASHEETS.items()}
if torch.cuda.is_available():
    print("GPU found:", torch.cuda.get_device_name(), "- the measurements above ran on it.")
else:
    print("No GPU here: on one, the cells above would measure HBM bandwidth (TB/s) and matmul TFLOP/s.")
print(f"datasheet ridge points: {min(ridges.values()):.1f} to {max(ridges.values()):.1f} FLOP/B; "
      f"H100: fp32 {ridges['NVIDIA H100 SXM (fp32, no tensor cores)']:.1f}, "
      f"bf16 {ridges['NVIDIA H100 SXM (bf16 tensor cores)']:.1f}")
if DEVICE.type == "cpu":   # this core's ridge from section 3's side-by-side timings: 512^3 matmul and copy
    here = (2 * 512**3 / s_512) / (8 * n / s_copy)
    claim("an H100's bf16 ridge lies over 5x right of this CPU core's", max(ridges.values()) > 5 * here)

# %% [markdown]
# ## 10. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A machine has a peak of 200 GFLOP/s and 25 GB/s. What is its ridge point? Is a float32 add
# memory- or compute-bound there, and what GFLOP/s can it reach at best?
#
# <details><summary>Answer</summary>
#
# Ridge = 200 / 25 = **8 FLOP/B**. The add has I = 1/12 < 8: memory-bound, at most 25e9 / 12 ≈ **2.08 GFLOP/s**
# (about 1 % of the peak).
#
# </details>
#
# **Problem 2.** Fusing a chain of k = 4 element-wise ops: what are the intensities unfused and fused (float32), and
# the expected speed-up on a memory-bound machine?
#
# <details><summary>Answer</summary>
#
# Unfused: 4 FLOPs over 3·4 = 12 arrays → 4 / 48 = **1/12**. Fused: 4 FLOPs over 5 + 1 = 6 arrays → 4 / 24 =
# **1/6**. Speed-up = traffic ratio 12/6 = **2×**.
#
# </details>
#
# **Problem 3.** A 13B-parameter model trains on 2 M tokens per step; a step takes 20 s on 64 GPUs of 989 TFLOP/s.
# What are MFU and, with activation checkpointing, HFU?
#
# <details><summary>Answer</summary>
#
# Model FLOPs 6·13e9·2e6 = 1.56e17 per step; over 20 s on 64·989e12 FLOP/s: MFU = 1.56e17 / 20 / 6.33e16 ≈
# **12.3 %**; HFU = 8/6 of that ≈ **16.4 %**.
#
# </details>
#
# **Problem 4.** An H100 (bf16: 989 TFLOP/s, 3.35 TB/s) serves a model whose layers are 8192×8192. How many
# tokens must each matmul process before it is compute-bound? And with fp32 without tensor cores (67 TFLOP/s)?
#
# <details><summary>Answer</summary>
#
# bf16: ridge R = 989/3.35 ≈ 295.2 FLOP/B, R·b = 590.4, B* = (R·b/2)/(1 − R·b/d) = 295.2/(1 − 0.072) ≈ 318.1,
# so **319 tokens** (≈ R·b/2 = 295). fp32: ridge 20 FLOP/B, b = 4: B* = 40/(1 − 80/8192) ≈ 40.4 → **41 tokens**.
# (The datasheet's 67 TFLOP/s over 3.35 TB/s.)
#
# </details>
#
# **Problem 5.** On the same H100 in bf16, what is B* for a layer of width d = 4096? Can a 512×512 bf16 layer ever
# be compute-bound there, at any batch size?
#
# <details><summary>Answer</summary>
#
# d = 4096: B* = 295.2/(1 − 590.4/4096) = 295.2/0.856 ≈ 344.9 → **345 tokens** — narrower layers need a bigger
# batch. d = 512: **never**. As B → ∞ the intensity 2B/(b·(1 + 2B/d)) only tends to d/b = 512/2 = 256 FLOP/B,
# below the ridge of 295; `compute_bound_batch` returns `inf`. The weights are too small to be reused enough.
#
# </details>

# %%
# The answers above, computed with labkit.roofline.model.
h100_bf16, h100_fp32 = M.DATASHEETS["NVIDIA H100 SXM (bf16 tensor cores)"], M.DATASHEETS["NVIDIA H100 SXM (fp32, no tensor cores)"]
claim("P1: ridge 8 FLOP/B; an add is memory-bound at about 2.08 GFLOP/s",
      M.ridge_intensity(200e9, 25e9) == 8 and M.bound(1 / 12, 200e9, 25e9) == "memory"
      and round(M.attainable_flops(1 / 12, 200e9, 25e9) / 1e9, 2) == 2.08)
mfu13 = M.mfu(13e9, 2e6, 20, 64 * 989e12)
claim("P3: MFU 12.3 %, HFU 16.4 %", round(100 * mfu13, 1) == 12.3
      and round(100 * M.hfu(13e9, 2e6, 20, 64 * 989e12, recompute_forward=True), 1) == 16.4)
claim("P4: B* = 319 tokens in bf16, 41 in fp32", M.compute_bound_batch(*h100_bf16, 8192, 8192, 2) == 319
      and M.compute_bound_batch(*h100_fp32, 8192, 8192, 4) == 41)
claim("P5: B* = 345 for d = 4096; never for d = 512", M.compute_bound_batch(*h100_bf16, 4096, 4096, 2) == 345
      and M.compute_bound_batch(*h100_bf16, 512, 512, 2) == float("inf"))

# %% [markdown]
# ## Further reading
#
# * S. Williams, A. Waterman, D. Patterson, *Roofline: an insightful visual performance model for multicore
#   architectures*, Communications of the ACM 52(4), 2009.
# * J. D. McCalpin, *STREAM: Sustainable Memory Bandwidth in High Performance Computers* — the copy and triad
#   kernels: <https://www.cs.virginia.edu/stream/>.
# * A. Chowdhery et al., *PaLM: Scaling Language Modeling with Pathways*, 2022 — appendix B defines MFU and HFU.
# * V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022.
# * NVIDIA, *H100 Tensor Core GPU datasheet* — the peak and bandwidth numbers used above.
# * NVIDIA, *Matrix Multiplication Background User's Guide* (Deep Learning Performance documentation) —
#   arithmetic intensity of GEMMs and why small batches are memory-bound on GPUs.
# * T. Brown et al., *Language Models are Few-Shot Learners*, 2020 — table 2.1 gives GPT-3's batch sizes in
#   tokens (3.2M for the 175B model).

# %% [markdown]
# ## Summary
#
# - Arithmetic intensity = FLOPs ÷ bytes moved (state the convention: we count compulsory bytes per kernel).
#   Element-wise ops: ~0.1 FLOP/B; square matmul: n/6 FLOP/B.
# - Roofline: attainable = min(peak, I × bandwidth); the ridge point peak/bandwidth splits memory- from compute-bound.
# - Fusion keeps FLOPs and cuts bytes (9 → 5 arrays for the chain), so memory-bound code speeds up by the traffic
#   ratio.
# - MFU counts model FLOPs (6N per token), HFU counts executed FLOPs (8N with recompute): MFU = ¾·HFU under
#   checkpointing.
# - A measured roof is itself a measurement: repeats differ by a few percent, so take the best of all you measured.
# - A d×d layer's matmul becomes compute-bound from B* = (R·b/2)/(1 − R·b/d) ≈ R·b/2 tokens per matmul (319 for
#   d = 8192 in bf16 on an H100), and never when d ≤ R·b; a batch size counts tokens, not sequences.
#
# **Exercises** (`exercises/lab01_roofline.py`): `matmul_intensity`, `chain_intensity`, `attainable_flops`,
# `mfu_hfu`; each has a "check your work" cell above. Grade all four with `python -m labkit.grade --lab 01` (or
# `make grade LAB=01`).
