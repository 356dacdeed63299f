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
print("matmul n=1024: n/6 =", round(1024 / 6, 4), "| fused/unfused chain intensity =",
      M.elementwise_chain(8, True).intensity / M.elementwise_chain(8, False).intensity, "= 9/5")

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

# %%
fig = V.roofline_figure(PEAK, BW, points=[(m.name, m.intensity, m.flops_per_s) for m in measured],
                        title=f"measured roofline ({DEVICE.type}, {THREADS or 'all'} thread(s))")

# %% [markdown]
# What to see: the element-wise ops and softmax sit far left (intensity well below 1 FLOP/B) and reach only a few
# GFLOP/s even though their GB/s is close to the measured bandwidth — they are memory-bound; the roof there is the
# slanted line. Small matmuls have low intensity *and* overheads; large ones climb to the flat part.
# (Softmax in torch may read the input more than once, so its real traffic can exceed the 2-array model.)
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
# Identical rounds differ by several percent on a shared machine (the title gives max/min; a slow round is
# another program taking the core for a while), so a point measured at another moment can sit a few percent
# above a roof measured once. The measuring cell above therefore takes the roof as the best of everything
# measured (`M.raise_roof`: a compute-bound point above it raises the peak, a memory-bound one the bandwidth) and
# says when it did, rather than print more than 100 %:

# %%
show(M.raise_roof)

# %% [markdown]
# ## 4. Fusion, for real
#
# The chain `e = d + (a + b) * c` has the same FLOPs fused or not; fusing only removes traffic (9 → 5 arrays). Both
# versions are memory-bound, so the roofline predicts the time ratio **unfused / fused ≈ 9/5 = 1.8** (same bandwidth,
# less data). We fuse with `torch.compile` (Inductor generates one C++/OpenMP loop on CPU, one Triton kernel on GPU).
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
print("fused result equals eager (up to FMA rounding):", torch.allclose(out, want, rtol=1e-6, atol=1e-6))
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

# %%
fig = V.roofline_figure(PEAK, BW, points=[(t_unf.name, t_unf.intensity, t_unf.flops_per_s),
                                          (t_fus.name, t_fus.intensity, t_fus.flops_per_s)],
                        title="fusion moves the op right along the slanted roof", i_range=(2 ** -6, 2 ** 6))

# %% [markdown]
# Fusion raises the intensity from 3/36 to 3/20 FLOP/B; on the slanted part of the roof attainable FLOP/s is
# proportional to intensity, so the same bandwidth finishes the work 9/5 times sooner. The measured ratio lands near
# 9/5 rather than on it, and two effects pull in opposite directions. A CPU cache usually *reads* a line before
# writing it (write-allocate), so each written array costs two transfers — 12 vs 6 transfers, a ratio of 2 — which
# pushes the ratio up; a single loop that streams four inputs at once may move fewer GB/s than three simple kernels
# (compare the GB/s column), which pulls it down. The eager version that allocates its temporaries is slower still:
# fresh large buffers cost page faults on first touch.
#
# ## 5. MFU and HFU
#
# **Model FLOPs utilization** = (FLOPs the model needs ÷ time) ÷ peak. For a dense model with N parameters, a
# forward costs 2N FLOPs per token and a backward twice that, so training needs **6·N·tokens** FLOPs.
# **Hardware FLOPs utilization** counts what the hardware actually executed. With activation checkpointing the
# forward is recomputed during backward: **8·N·tokens** executed, still 6·N·tokens useful, so
# **MFU = 6/8 · HFU = ¾·HFU**.
#
# **A common slip when copying such numbers:** a worked example that reads `MFU = (10^12/10) / 1013 = 0.01`. The
# "1013" is the peak 10¹³ FLOP/s with its exponent lost in typesetting (10<sup>13</sup> pasted as text). Taken
# literally the result would be ≈ 10⁸, not 0.01. Correctly: 10¹² FLOPs / 10 s = 10¹¹ FLOP/s; 10¹¹ / 10¹³ = 1 %.

# %%
print("example, corrected: (1e12 / 10) / 1e13 =", M.utilization(1e12, 10, 1e13))
print("taken literally   : (1e12 / 10) / 1013 =", f"{1e12 / 10 / 1013:.4g}")
N, tokens, secs, peak_hw = 7e9, 2 ** 20, 100.0, 989e12  # a 7B model, 1M tokens in 100 s on a ~1 PFLOP/s accelerator
mfu = M.mfu(N, tokens, secs, peak_hw)
hfu = M.hfu(N, tokens, secs, peak_hw, recompute_forward=True)
print(f"7B model, 2^20 tokens in 100 s, peak 989 TFLOP/s: MFU = {mfu:.4f}")
print(f"  HFU with checkpointing = {hfu:.4f}, MFU/HFU = {mfu / hfu:.4f} (= 3/4)")

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


def best_seconds(fns, rounds=4):
    """Min over interleaved rounds of each fn's median time: other programs on the machine only ever add time."""
    runs = [[R.measure(M.OpCost("t", 1, 1), fn, repeat=3).seconds for fn in fns] for _ in range(rounds)]
    return [min(r[i] for r in runs) for i in range(len(fns))]


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
# On a CPU shared with other programs, differences of a few tens of milliseconds can drown in noise (rerun the cell to
# see the spread); the formulas themselves are exact and are what the tests check.
#
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
print(f"check: I(319) = {M.linear_intensity(319, 8192, 8192, 2):.2f} >= R = {r:.2f} > I(318) = "
      f"{M.linear_intensity(318, 8192, 8192, 2):.2f} FLOP/B")

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
print(lab.sweep_table(sweep, PEAK, BW, dtype_bytes=4))
print("first measured batch at >= 80 % of the peak:", lab.first_batch_near_peak(sweep, PEAK, 0.8))

# %%
fig = V.roofline_figure(PEAK, BW, points=[(m.name, m.intensity, m.flops_per_s) for m in sweep],
                        title="one 4096x4096 layer, batch 1 ... 1024", i_range=(2 ** -2, 2 ** 10))

# %% [markdown]
# The columns `I` and `2B/b` agree while B ≪ d and part as B approaches d. Left of B* the roof doubles with every
# doubling of the batch; right of it, it is flat. The measured points stay below it, and the gap is widest just
# right of B*: the roofline is a *bound*, and the BLAS reaches it only for shapes its kernels are built for. A
# skinny matmul (a few rows times a 4096×4096 matrix) on one core runs well below both roofs, so the batch where
# this machine really runs near its peak is larger than B* — often tens of times larger. On a GPU the same holds
# for the batch at which its tensor cores are busy: B* is the smallest batch that *can* be compute-bound.
#
# ## 7. Common mistakes about the roofline
#
# Each of these is said often; each is checked here with the numbers measured above or computed from datasheets.
#
# 1. **A claim you will often meet: "an add does one operation for three reads/writes, so its intensity is
#    1/3".** That counts elements. The roof's slanted part is *bytes* per second × intensity, so the intensity must
#    be FLOP per *byte*: 1/12 for float32. Used on this machine's measured bandwidth, 1/3 predicts an add four times
#    faster than it runs:

# %% tags=["nbval-ignore-output"]
add = measured[0]
print(f"{add.name}: measured {add.flops_per_s / 1e9:.2f} GFLOP/s; roof at I = 1/12: {BW / 12 / 1e9:.2f}, "
      f"at I = 1/3: {BW / 3 / 1e9:.2f} GFLOP/s")
print(f"measured / roof: {add.flops_per_s / (BW / 12):.2f} with 1/12, {add.flops_per_s / (BW / 3):.2f} with 1/3")

# %% [markdown]
# 2. **Another: "fusion is faster because the fused kernel does less arithmetic".** The FLOPs are identical; only
#    the bytes change (9 → 5 arrays), and the time follows the bytes (section 4):

# %% tags=["nbval-ignore-output"]
print(f"FLOPs unfused {t_unf.flops:,}, fused {t_fus.flops:,}: equal = {t_unf.flops == t_fus.flops}")
print(f"bytes unfused/fused = {t_unf.bytes / t_fus.bytes:.2f}, time unfused/fused = "
      f"{t_unf.seconds / t_fus.seconds:.2f} (measured in section 4)")

# %% [markdown]
# 3. **Another: "a GPU's ridge point is a few tens of FLOP/B".** That is the ridge of its plain fp32 units. The
#    tensor cores that run bf16 matmuls are about 15× faster on the same memory, so their ridge is about 15× further
#    right — the number that matters for training and serving (Lab 04 uses the same 295):

# %%
for name, (peak_hw, bw_hw) in M.DATASHEETS.items():
    print(f"{name:45} ridge = {peak_hw / 1e12:5.1f} TFLOP/s / {bw_hw / 1e12:.3f} TB/s = "
          f"{M.ridge_intensity(peak_hw, bw_hw):5.1f} FLOP/B")

# %% [markdown]
# 4. **Another: "GPT-3 was trained with a batch size of 3.2M"**, read as 3.2 million *sequences* (or as a sequence
#    length of 1). The 3.2M counts **tokens**: with 2048-token sequences it is about 1,560 sequences. The B of the
#    compute-bound batch is tokens per matmul too, so in training even a single sequence per GPU puts 2048 tokens
#    through each matmul — far past B* — while decoding adds one token per sequence per step and needs hundreds of
#    sequences served together to get there (H100, bf16, d = 8192):

# %%
print(lab.tokens_per_matmul(*lab.H100, d=8192, dtype_bytes=2, seq_len=2048, batch_tokens=3.2e6))

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
#
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
