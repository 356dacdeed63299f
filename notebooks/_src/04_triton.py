# Source of notebooks/04_triton.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 04 — Triton kernels: programs, blocks, masks, fusion
#
# **Learning objectives.** After this lab you can
# 1. read and write a Triton kernel: program ids, blocks of lanes, masks, pointer arithmetic;
# 2. explain, with byte counts, why a fused kernel beats a chain of PyTorch ops on a memory-bound
#    problem (Lab 01's roofline: intensity = FLOPs / bytes);
# 3. write a numerically stable fused softmax, including rows longer than one block (online softmax);
# 4. tile a matmul with a k-loop and predict its memory traffic with Lab 03's formulas;
# 5. follow layer norm and fused (Flash) attention, and check each kernel against PyTorch;
# 6. *see* what every program instance loads and stores with the access recorder.
#
# **How this runs.** On a machine without a GPU, `import labkit` sets `TRITON_INTERPRET=1`: the very
# same `@triton.jit` kernels run in Triton's interpreter on CPU tensors (numpy under the hood), one
# program instance after another. That is slow, so problems here are small, but it lets us record
# every memory access. On a GPU box the kernels compile; the access recorder still runs them through
# the interpreter, on small CPU tensors, inside its `with record():` block, and the timing cells at
# the end use the compiled kernels on the GPU.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import numpy as np
import torch
from IPython.display import HTML, display

import labkit
from labkit.claims import claim
from labkit.grading.check import check_your_work
from labkit.kernels import (add, attention, attention_reference, layernorm, layernorm_reference, matmul,
                            record, softmax)
from labkit.kernels import add_kernel, lab
from labkit.kernels.checks import interpreting
from labkit.kernels.matmul import program_tile, tiled_traffic_elements
from labkit.show import show
from labkit.viz import kernels as V
from labkit.viz.player import figure_to_html, player

GPU = torch.cuda.is_available() and not interpreting()   # compiled kernels, for the timing cells
print("Triton interpreter mode:", interpreting(), "| compiled kernels on a GPU:", GPU)


def rnd(*shape, seed=0, dtype=torch.float32):
    """Seeded normal samples on the CPU: recorded kernels run in the interpreter, on CPU tensors."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)

# %% [markdown]
# ## 1. The programming model, from vector add
#
# A Triton kernel is written for **one program instance**. We launch a *grid* of them; each asks
# `tl.program_id(0)` which one it is and works on a **block** of `BLOCK` elements at once (a vector
# of lanes, not a loop). Here program `p` owns elements `p*BLOCK … p*BLOCK+BLOCK-1` of a kernel
# that scales a vector, `out = α·x` (the exercise below adds two vectors the same way):

# %%
from labkit.kernels.add import scale_kernel

show(scale_kernel)

# %% [markdown]
# Three ideas in five lines:
# - **Pointer arithmetic.** `x_ptr` is the address of `x[0]`; `x_ptr + offs` is a whole block of
#   addresses (element size is applied for us: `+1` means the next float, 4 bytes on).
# - **Grid.** For `n` elements we launch `ceil(n / BLOCK)` programs.
# - **Masks.** When `n` is not a multiple of `BLOCK`, the last program's block runs past the end;
#   `mask = offs < n` switches those lanes off for the loads *and* the store.
#
# The **access recorder** (`labkit.kernels.record`) hooks the interpreter's load and store and
# notes, for every program, which elements each lane touched, which lanes the mask switched off,
# and any lane that would have gone out of bounds.
#
# **Predict first:** n = 37, BLOCK = 16. How many programs, and how many lanes does the mask switch
# off?

# %%
n, BLOCK = 37, 16
x, y = rnd(n), rnd(n, seed=1)
with record() as rec:
    out = add(x, y, block_size=BLOCK)
grid = -(-n // BLOCK)
print(f"grid = ceil({n}/{BLOCK}) = {grid} programs; recorded grid {rec.launches[0].grid}")
print(f"idle lanes: formula {grid}*{BLOCK} - {n} = {grid * BLOCK - n}; recorded masked store lanes = "
      f"{rec.n_masked('store', 'out_ptr')}; out-of-bounds accesses: {len(rec.out_of_bounds)}")
print(rec.summary())
claim("the kernel matches torch exactly", torch.equal(out, x + y))
claim("3 programs; the mask switches off ceil(n/BLOCK)·BLOCK − n = 11 lanes, nothing out of bounds",
      rec.launches[0].grid[0] == grid == 3 and rec.n_masked("store", "out_ptr") == grid * BLOCK - n == 11
      and not rec.out_of_bounds)
print("program that wrote each element of out:", "".join(map(str, rec.owner("out_ptr"))))

# %% [markdown]
# The mask switches off the lanes of the last block past n: `ceil(n/BLOCK)·BLOCK − n` of them.
#
# Pointer arithmetic, concretely: program 2's lanes hold the addresses `x_ptr + offs`, i.e.
# `x.data_ptr() + 4·offs` bytes for float32. The recorder maps each address back to an element:

# %%
a2 = rec.select("load", "x_ptr", pid=2)[0]
print("program 2, active lanes -> elements", a2.offsets.tolist(), "-> byte offsets", (4 * a2.offsets).tolist())
print("program 2, masked lanes -> would-be elements", a2.masked_offsets.tolist())
claim("program 2 owns elements 32..47: 5 in range, 11 masked", a2.offsets.tolist() == list(range(32, 37))
      and a2.masked_offsets.tolist() == list(range(37, 48)))

# %% [markdown]
# The picture: left, the output coloured by the program that wrote it (rows of 16 = one block);
# right, the chosen program's loads from `x` — dark blue — with the masked-off lanes past the end
# in orange. Play steps through the programs (run the cell first).

# %%
player(lambda i: V.kernel_frame(rec, i, "out_ptr", ("x_ptr", "y_ptr"), width=BLOCK), V.n_programs(rec),
       description="program")

# %% [markdown]
# Try other sizes: pick `n` and `BLOCK`; the figure shows the last program (the one that needs the mask).

# %%
import ipywidgets as W
from labkit.viz.player import controlled


def add_view(n, block):
    with record() as r_:
        add(rnd(n), rnd(n, seed=1), block_size=block)
    return V.kernel_frame(r_, V.n_programs(r_) - 1, "out_ptr", ("x_ptr",), width=block)


controlled(add_view, n=W.IntSlider(value=37, min=1, max=100, description="n"),
           block=W.Dropdown(options=[4, 8, 16, 32], value=16, description="BLOCK"))

# %% [markdown]
# **What if we forget the mask?** On a GPU the last program would read garbage past the end of
# `x` and `y` and write past the end of `out` (possibly over another tensor) — often silently. The
# recorder catches it: it flags the lanes and drops them, so even a buggy kernel cannot damage memory
# here. The graded exercises use exactly this check.

# %%
import triton
import triton.language as tl


@triton.jit
def add_no_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


with record() as bad:
    add_no_mask[(grid,)](x, y, torch.empty_like(x), n, BLOCK=BLOCK)
for a in bad.out_of_bounds:
    print(f"program {a.pid[0]} {a.kind}s {a.tensor} at element offsets "
          f"{a.oob_offsets.min()}..{a.oob_offsets.max()} (the tensor has {n})")
claim("without the mask, program 2's two loads and its store each run 11 lanes past the end",
      len(bad.out_of_bounds) == 3 and all(a.pid[0] == 2 and a.oob_offsets.size == 11 for a in bad.out_of_bounds))
display(HTML(figure_to_html(V.kernel_frame(bad, 2, "out_ptr", ("x_ptr",), width=BLOCK))))

# %% [markdown]
# **Two common mistakes about blocks.**
#
# 1. **"Triton pads a block to the next power of two, so the edge takes care of itself."** It does
#    not pad anything. A block's length must *be* a power of two (`tl.arange(0, 37)` is refused),
#    and the lanes of the last block that fall past `n` are real lanes with real addresses: the
#    recorder above caught them. Only the mask keeps them off memory.
# 2. **"The offsets act as shared memory."** `offs` is a vector of integers — addresses — held in
#    each thread's *registers*, a few per thread; nothing about it touches shared memory. Triton
#    compiles for an NVIDIA GPU on any Linux machine (its wheel carries the CUDA back end), so we
#    can ask what the compiled `add` kernel allocates:

# %%
@triton.jit
def add_block_37(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


try:
    with record():
        add_block_37[(1,)](x, torch.empty_like(x), BLOCK=37)
    refused = ""
except Exception as e:                # the interpreter wraps the compiler's ValueError
    refused = str(e)
print("BLOCK = 37:", refused or "accepted")
claim("a block of 37 lanes is refused, not padded", "power of 2" in refused)

from labkit.gpu_model.compiled import compile_for_gpu

k_add = compile_for_gpu(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                     "BLOCK": "constexpr"}, {"BLOCK": 1024})
lay = k_add.accesses[0][1]
print(f"add_kernel for {k_add.target}, BLOCK = 1024, {k_add.num_warps} warps: each thread holds "
      f"{1024 // (32 * k_add.num_warps)} offsets, in {lay.size_per_thread[0]}-element vectors")
print("PTX memory instructions:", k_add.ptx_ops)
claim("the compiled add allocates no shared memory and never touches it",
      k_add.shared_bytes == 0 and k_add.ptx_ops["ld.shared"] == k_add.ptx_ops["st.shared"] == 0,
      f"{k_add.shared_bytes} bytes")

# %% [markdown]
# ### Exercise: `add_kernel`
#
# Write the body of `add_kernel` in `exercises/lab04_triton.py`. The next cell launches *your* kernel
# under the recorder on 37 elements with 16-lane blocks, compares the result with PyTorch, counts
# out-of-bounds and masked lanes, draws the last program's accesses, then grades the exercise.

# %%
check_your_work("lab04_triton", "add_kernel", picture=lab.picture("add_kernel"))

# %% [markdown]
# labkit's kernel, to compare with yours:

# %%
show(add_kernel)

# %% [markdown]
# ## 2. Why fusion wins: count the bytes
#
# Lab 01's roofline: a kernel needs at least `max(FLOPs / peak FLOP/s, bytes / bandwidth)`.
# Its **arithmetic intensity** `I = FLOPs / bytes` says which term wins; below the ridge point
# (peak FLOP/s ÷ bandwidth, ≈ 295 FLOP/byte for an H100's bf16 tensor cores, ≈ 20 for its fp32 cores)
# the kernel is memory-bound and its time is proportional to the bytes it moves.
#
# Softmax of an M×N fp32 matrix does about 5 FLOPs per element (max, subtract, exp, sum, divide).
# - **Fused** (one kernel, row held on chip): read x once, write y once: `2·M·N·4` bytes.
# - **Unfused** in PyTorch ops (`m = x.max(1)`; `z = x − m`; `e = z.exp()`; `s = e.sum(1)`; `y = e / s`):
#   every op reads its inputs from memory and writes its result back: `x` read twice (max, subtract),
#   `z` written and read, `e` written and read twice (sum, divide), `y` written: **8 passes**,
#   `8·M·N·4` bytes (ignoring the M-element row vectors).
#
# **Predict first:** how much faster should the fused kernel be on a memory-bound machine?
#
# Rather than trust that count, we count it: `count_passes` runs the unfused chain op by op and
# tallies the full-size tensors each ATen op reads and writes.

# %%
from labkit.roofline.measure import count_passes


def unfused(x):
    m = x.max(dim=1, keepdim=True).values
    e = (x - m).exp()
    return e / e.sum(dim=1, keepdim=True)


xc = rnd(6, 40)
passes = count_passes(unfused, xc, numel=xc.numel())
print("unfused:", ", ".join(f"{op.split('.')[0]} {r}r/{w}w" for op, r, w in passes["ops"]),
      f"-> {passes['reads']} reads + {passes['writes']} writes = {passes['reads'] + passes['writes']} passes")
fused = count_passes(lambda t: torch.softmax(t, 1), xc, numel=xc.numel())
print(f"torch.softmax (one fused kernel): {fused['reads'] + fused['writes']} passes")
claim("the op-by-op chain makes 8 full passes over memory, torch.softmax 2",
      (passes["reads"] + passes["writes"], fused["reads"] + fused["writes"]) == (8, 2))

# %% [markdown]
# Both are far below any ridge point (I = 5/8 and 5/32 FLOP/byte), so fusion should be worth about
# 8/2 = 4× in time. (Lab 01's cost model, `labkit.roofline.model.softmax`, uses the same counts.)
# The recorder counts our fused Triton kernel's bytes exactly:

# %%
M, N = 6, 40
xs = rnd(M, N)
with record() as rec_sm:
    softmax(xs, block_size=64)                      # the whole row fits one block
moved = 4 * (sum(a.offsets.size for a in rec_sm.accesses))
print(f"fused softmax {M}x{N}: recorded bytes moved = {moved}; formula 2*M*N*4 = {2 * M * N * 4}")
print(f"unfused formula 8*M*N*4 = {8 * M * N * 4}  -> expected memory-bound speedup {8 * M * N * 4 / moved:.1f}x")
print(f"intensity fused = 5*M*N / bytes = {5 * M * N / moved:.3f} FLOP/byte; unfused = {5 / 32:.3f} FLOP/byte")
claim("the recorder counts our fused kernel's bytes: exactly 2·M·N·4", moved == 2 * M * N * 4, f"{moved} bytes")

# %% [markdown]
# Measured on this machine (CPU, PyTorch's own kernels): the fused `torch.softmax` against the
# op-by-op chain. **Predict first:** more or less than the byte ratio of 4×?

# %% tags=["nbval-ignore-output"]
from labkit.bench import median_time

xb = torch.randn(2048, 2048)
torch.testing.assert_close(unfused(xb), torch.softmax(xb, 1))
t_unf, t_fused = median_time(lambda: unfused(xb), repeat=5), median_time(lambda: torch.softmax(xb, 1), repeat=5)
print(f"2048x2048 fp32 on CPU: unfused {t_unf * 1e3:.1f} ms, fused {t_fused * 1e3:.1f} ms")
print(f"speedup {t_unf / t_fused:.1f}x (byte ratio 8/2 = 4x)")
claim("fusion pays: the fused softmax is at least twice as fast", t_unf > 2 * t_fused, f"{t_unf / t_fused:.1f}x")

# %% [markdown]
# A clear speedup, but on a CPU the ratio is not the byte ratio, and it is often well *above* 4×:
# each op of the chain allocates a fresh 16 MB result, and a fresh large buffer costs page faults
# on first touch (Lab 01 measured the same for an element-wise chain); the ops are also not equally
# well vectorised. A CPU core is not a purely memory-bound machine here. On a GPU, where the
# caching allocator reuses memory, the memory-bound picture holds much better; the last section
# measures our Triton kernel there.

# %% [markdown]
# ## 3. Fused softmax, for rows of any length
#
# One program per row. If the row fits in one block (`BLOCK ≥ N`, rounded up to a power of two) the
# kernel loads it once with `other=-inf` in the masked lanes (so they never win the max and add
# `exp(-inf) = 0` to the sum), subtracts the row max (so `exp` never overflows), and divides.
#
# Longer rows are walked in blocks. Pass 1 keeps a running max `m` and a running sum `s` of
# `exp(x − m)`; when a block raises the max from `m` to `m'`, the old sum is rescaled by
# `exp(m − m')`. Pass 2 writes `exp(x − m) / s`. That costs one extra read of the row: 3·M·N
# elements instead of 2·M·N. The recorder confirms both counts, and the two paths agree (labkit's
# kernel, which has both paths, is printed after the exercise, once you have written the one-block path):

# %%
from labkit.kernels.softmax import softmax_kernel  # noqa: F401  (the kernel the cells below run)

# %%
x2 = rnd(3, 50) * 4
with record() as r1:
    y1 = softmax(x2, block_size=64)   # one block per row
with record() as r2:
    y2 = softmax(x2, block_size=16)   # 4 blocks per row: online softmax
b1_, b2_ = (4 * sum(a.offsets.size for a in r.accesses) for r in (r1, r2))
print("one block : loads per element", np.unique(r1.counts("x_ptr", "load")).tolist(), "| bytes", b1_)
print("4 blocks  : loads per element", np.unique(r2.counts("x_ptr", "load")).tolist(), "| bytes", b2_)
claim("one block reads each element once (2·M·N·4 bytes); 4 blocks twice (3·M·N·4)",
      np.unique(r1.counts("x_ptr", "load")).tolist() == [1] and np.unique(r2.counts("x_ptr", "load")).tolist() == [2]
      and (b1_, b2_) == (2 * 3 * 50 * 4, 3 * 3 * 50 * 4), f"{b1_} and {b2_} bytes")
# fp32, same operations as torch up to summation order: agreement to ~1e-6 relative
claim("the two paths agree and match torch.softmax (rtol 1e-6: fp32, another summation order)",
      torch.allclose(y1, y2, rtol=1e-6, atol=1e-7) and torch.allclose(y2, torch.softmax(x2, 1), rtol=1e-6, atol=1e-7))
big = rnd(2, 30) * 1000                 # exp(1000) = inf in fp32; the max subtraction avoids it
with record():                          # CPU tensors: through the interpreter, on a GPU box too
    y_big = softmax(big, block_size=16)
claim("huge inputs stay finite, where a naive exp overflows",
      bool(torch.isfinite(y_big).all()) and bool(torch.isinf(big.exp()).any()))

# %% [markdown]
# Pass 1 step by step for row 0 (`online_softmax_trace` replays it in float64): whenever a block
# raises the running max, the sum so far is multiplied by `exp(m_old − m_new) < 1`; at the end
# `m` is the row max and `s = Σ exp(x − m)`, and `exp(x − m)/s` is exactly what the kernel wrote.

# %%
from labkit.kernels.softmax import online_softmax_trace

row0 = x2[0].cpu().numpy()
trace = online_softmax_trace(row0, 16)
for t_ in trace:
    print(f"block {t_['block']} cols {t_['cols']}: block max {t_['block_max']:7.3f} -> m {t_['m']:7.3f}, "
          f"old sum scaled by {t_['scale']:.4f}, s = {t_['s']:.4f}")
claim("at the end m is the row max and the kernel wrote exp(x - m)/s",
      trace[-1]["m"] == float(row0.astype(np.float64).max())
      and np.allclose(y2[0].cpu().numpy(), np.exp(row0.astype(np.float64) - trace[-1]["m"]) / trace[-1]["s"], rtol=1e-6))
claim("a block that raises the max scales the old sum by exp(m_old - m_new) < 1",
      all((t_["scale"] < 1) == (t_["block_max"] > prev["m"]) for prev, t_ in zip(trace, trace[1:])))
player(lambda i: V.online_softmax_frame(row0, trace, i), len(trace), description="block")

# %% [markdown]
# Each program owns one row (left) and reads only that row (right), in four 16-column blocks, twice.
# (The last block's 14 masked lanes would lie past the row's end; in a 2-D picture they would land
# on the next row, so they are not drawn.)

# %%
player(lambda i: V.kernel_frame(r2, i, "out_ptr", ("x_ptr",)), V.n_programs(r2), description="row")

# %% [markdown]
# ### Exercise: `softmax_kernel`
#
# The one-block version (`BLOCK ≥ n_cols`). The picture runs yours on 3 rows of 50 with 64 lanes.

# %%
check_your_work("lab04_triton", "softmax_kernel", picture=lab.picture("softmax_kernel"))

# %% [markdown]
# labkit's kernel, with the one-block path and the two-pass online path for longer rows:

# %%
show(softmax_kernel)

# %% [markdown]
# ## 4. Tiled matmul: a k-loop over tiles, and its traffic
#
# Program `(pid_m, pid_n)` owns a `BLOCK_M × BLOCK_N` tile of C. It loops over K in steps of
# `BLOCK_K`, loading an A tile and a B tile each step and accumulating `tl.dot` into an **fp32**
# accumulator (also for fp16/bf16 inputs), masking the edges so M, N, K can be anything.
# `input_precision="ieee"` is set explicitly: for fp32 inputs a GPU would otherwise use TF32 and
# disagree with the interpreter. (labkit's kernel is printed after the exercise.)

# %%
from labkit.kernels.matmul import matmul_kernel  # noqa: F401

# %% [markdown]
# **Predict first:** 64×64×64 with 16×16 tiles: how many elements do all programs load and store?

# %%
ok, moved_mm = [], {}
for (Mm, Kk, Nn, bm, bn) in [(32, 32, 32, 16, 16), (64, 64, 64, 16, 16), (64, 64, 64, 32, 32), (37, 29, 45, 16, 32)]:
    a, b = rnd(Mm, Kk), rnd(Kk, Nn, seed=1)
    with record() as rm:
        c = matmul(a, b, config={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 16, "GROUP_M": 2})
    got = sum(x_.offsets.size for x_ in rm.accesses)
    f = tiled_traffic_elements(Mm, Kk, Nn, bm, bn)
    sq = f"; 2n^3/b+n^2 = {2 * Mm**3 // bm + Mm**2}" if Mm == Kk == Nn and bm == bn else ""
    close = torch.allclose(c, a @ b, rtol=1e-5, atol=1e-5)   # fp32, differs from torch only in summation order
    ok.append(close and got == f["total"] and not rm.out_of_bounds and (not sq or got == 2 * Mm**3 // bm + Mm**2))
    moved_mm[Mm, bm] = got
    print(f"M,K,N={Mm},{Kk},{Nn} tiles {bm}x{bn}: recorded {got:6d} elements, formula {f['total']:6d}{sq}")
    print(f"    matches torch: {close}, out of bounds: {len(rm.out_of_bounds)}")
claim("recorded traffic equals the formula in all 4 cases, C matches torch, nothing out of bounds", all(ok))
claim("bigger tiles, less traffic: 32x32 moves less than 16x16 at n = 64", moved_mm[64, 32] < moved_mm[64, 16],
      f"{moved_mm[64, 32]} vs {moved_mm[64, 16]}")

# %% [markdown]
# **Traffic.** Each program reads `BLOCK_M·K` elements of A and `K·BLOCK_N` of B; nothing is
# reused between programs (ignoring the **L2** cache: the on-chip cache that all of a GPU's
# streaming multiprocessors share, between them and DRAM; more on it below). So A is read
# `ceil(N/BN)` times and B `ceil(M/BM)` times: for square n and b×b tiles, `2n³/b + n²` elements in
# all — Lab 03's register-tiling count `n³/v2 + n³/v1 + n²`, with the Triton tile playing the
# register tile. Bigger tiles, less traffic.

# %% [markdown]
# **Grouped program order.** A GPU has far more programs to run than it can hold at once: it runs
# them in **waves**, as many as its streaming multiprocessors fit (an H100 has 132 SMs), the next
# wave starting as programs finish. The L2 cache all SMs share is 50 MB on an H100: data that one
# program of a wave brought in from DRAM (HBM) is read from L2, not DRAM, by the others. So tiles that run at the same time should share A rows and B columns. Row-major
# order (`GROUP_M = 1`) walks along
# one row of tiles; grouped order walks down `GROUP_M` rows before moving right. For an 8×8 grid of
# tiles and a wave of 8 programs, count the distinct A row-strips + B column-strips the wave reads
# (fewest when the wave covers a square-ish block of tiles):

# %%
strips = {}
for g in (1, 2, 4, 8):
    wave = [program_tile(p, 8 * 16, 8 * 16, 16, 16, g) for p in range(8)]
    strips[g] = len({m for m, _ in wave}) + len({n_ for _, n_ in wave})
    print(f"GROUP_M={g}: first wave computes tiles {wave[:4]}...; distinct strips loaded = {strips[g]}")
claim("the square-ish waves (GROUP_M = 2, 4) load fewest strips: 6, against 9 in a row or a column",
      strips == {1: 9, 2: 6, 4: 6, 8: 9})

# %% [markdown]
# The visualiser for one program of a 40×24 = (40×18)·(18×24) matmul with 16×16 tiles: its C tile,
# the A rows and B columns it loads, and the masked-off lanes of the edge tiles.

# %%
with record() as rmv:
    matmul(rnd(40, 18), rnd(18, 24, seed=1), config={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2})
player(lambda i: V.kernel_frame(rmv, i, "c_ptr", ("a_ptr", "b_ptr")), V.n_programs(rmv), description="program")

# %% [markdown]
# ### Exercise: `matmul_kernel`
#
# The k-loop. The picture runs yours on (37×29)·(29×45) with 16×16×16 tiles — every edge uneven.

# %%
check_your_work("lab04_triton", "matmul_kernel", picture=lab.picture("matmul_kernel"))

# %% [markdown]
# labkit's kernel, to compare with yours:

# %%
show(matmul_kernel)

# %% [markdown]
# ### Autotuning: `num_warps`, `num_stages` and `triton.autotune`
#
# Block sizes are not the only knobs. When a kernel compiles for a GPU, two launch options matter:
#
# * **`num_warps`** — how many warps (groups of 32 threads) run one program instance; a 128×128 tile
#   wants more threads (8) than a 16×16 one (1–2).
# * **`num_stages`** — how many iterations of a loop (our k-loop) the compiler keeps in flight with
#   asynchronous copies, so the loads of step k+1 overlap the `tl.dot` of step k (software
#   pipelining). More stages hide more memory latency and use more shared memory.
#
# The best values depend on the GPU and the problem size, so Triton can try several and keep the
# fastest per shape: `triton.autotune(configs=[...], key=["M", "N", "K"])` wraps a `@triton.jit`
# kernel, each `triton.Config({...block sizes...}, num_warps=..., num_stages=...)` a candidate; the
# first launch for each new (M, N, K) times them all and remembers the winner. Autotuning is
# opt-in: a plain `@triton.jit` kernel is launched with exactly the options you pass.
#
# Our `matmul` does this on a GPU when called without `config` (the timing cell at the end); with
# `config={...}` it uses the tiles you give, which is how this lab keeps its pictures small. Its
# candidates and the wrapping:

# %%
from labkit.kernels.matmul import GPU_CONFIGS, _tuned_kernel

for c in GPU_CONFIGS:
    print(c.kwargs, f"num_warps={c.num_warps} num_stages={c.num_stages}")
show(_tuned_kernel)
from triton.runtime import Autotuner

tuned = _tuned_kernel()
claim("matmul_kernel times nothing; _tuned_kernel() times its configs per new (M, N, K)",
      not isinstance(matmul_kernel, Autotuner) and isinstance(tuned, Autotuner) and tuple(tuned.keys) == ("M", "N", "K"),
      f"{len(tuned.configs)} configs")

# %% [markdown]
# A claim you will often meet: *"Triton profiles your system automatically and picks the best
# settings."* It does not: without `triton.autotune` nothing is timed, and heuristics (or your
# arguments) decide; the cell above shows which of our two kernels times anything. And on a CPU
# the interpreter ignores `num_warps` and `num_stages` altogether: it runs one program at a time,
# with no warps and no pipelining. The same recorded matmul under three settings — same bits out,
# same loads and stores — so only a GPU (`make bench` there) can show their effect:

# %%
opts = lab.launch_options_table()
print(opts)
claim("in the interpreter num_warps, num_stages change neither bits nor accesses",
      all(opts.column("same C bits")) and all(opts.column("same accesses")), f"{len(opts.rows)} settings")

# %% [markdown]
# ## 5. Layer norm
#
# One program per row: pass 1 sums x for the mean, pass 2 sums `(x − mean)²` (masked lanes set to 0
# first, or they would add `mean²` each), pass 3 writes `(x − mean)·rstd·w + b`; the per-row `mean`
# and `rstd` are saved for a backward pass. (labkit's kernel is printed after the exercise.)

# %%
from labkit.kernels.layernorm import layernorm_kernel  # noqa: F401

# %% [markdown]
# **Predict first:** 4 rows of 50 columns, 16-lane blocks. How many times does the kernel load each
# element of x?

# %%
xl, wl, bl = rnd(4, 50) * 2 + 1, rnd(50, seed=1), rnd(50, seed=2)
with record() as rl:
    yl, mean, rstd = layernorm(xl, wl, bl, eps=1e-5, block_size=16, return_stats=True)
claim("matches F.layer_norm, loads each x three times, and saves the row means",
      torch.allclose(yl, layernorm_reference(xl, wl, bl), rtol=1e-5, atol=1e-5)
      and np.unique(rl.counts("x_ptr", "load")).tolist() == [3] and torch.allclose(mean, xl.mean(1), rtol=1e-6, atol=1e-6),
      "rtol 1e-5")

# %% [markdown]
# With a block shorter than the row, each pass walks the row again: x is read three times.
#
# The backward pass (`layernorm_backward`, also wired into autograd as `LayerNormFunction`) uses
# `dx = rstd·(g − mean(g) − x̂·mean(g·x̂))` with `g = dy·w`, `x̂ = (x − mean)·rstd`, and sums the
# per-row `dy·x̂` and `dy` down the rows in a second kernel for `dw` and `db`. It agrees with autograd:

# %%
from labkit.kernels import LayerNormFunction

xg_, wg_, bg_ = (t.clone().requires_grad_() for t in (xl, wl, bl))
with record():                          # CPU tensors: through the interpreter, on a GPU box too
    LayerNormFunction.apply(xg_, wg_, bg_, 1e-5).sum().backward()
xr_, wr_, br_ = (t.clone().requires_grad_() for t in (xl, wl, bl))
torch.nn.functional.layer_norm(xr_, (50,), wr_, br_, 1e-5).sum().backward()
claim("dx, dw and db match autograd", all(torch.allclose(a_.grad, b_.grad, rtol=1e-5, atol=1e-5)
                                          for a_, b_ in ((xg_, xr_), (wg_, wr_), (bg_, br_))), "rtol 1e-5")

# %% [markdown]
# ### Exercise: `layernorm_kernel`
#
# The one-block forward (`BLOCK ≥ n_cols`), 4 rows of 50 with 64 lanes.

# %%
check_your_work("lab04_triton", "layernorm_kernel", picture=lab.picture("layernorm_kernel"))

# %% [markdown]
# labkit's kernel, to compare with yours:

# %%
show(layernorm_kernel)

# %% [markdown]
# ## 6. Fused attention (FlashAttention forward)
#
# `softmax(Q Kᵀ/√d) V` materialises an S×S score matrix if done op by op. The fused kernel keeps a
# tile of Q rows on chip and streams K and V in blocks, keeping per row a running max `m`, a running
# denominator `l` and an output accumulator — the online softmax of section 3, with `exp(m − m')`
# rescaling the accumulator as well. Memory: no S×S matrix at all; with causal masking, Q tile `i`
# only needs keys up to the end of its own rows. The kernel:

# %%
from labkit.kernels.attention import attention_kernel

show(attention_kernel)

# %% [markdown]
# **Predict first:** S = 40, D = 16, 16-row Q tiles, one batch and two heads. How many elements of K
# and V does the non-causal kernel load?

# %%
B, H, S, D, BM = 1, 2, 40, 16, 16
q, k, v = rnd(B, H, S, D), rnd(B, H, S, D, seed=1), rnd(B, H, S, D, seed=2)
for causal in (False, True):
    with record() as ra:
        o = attention(q, k, v, causal=causal, block_m=BM, block_n=BM)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    kv = sum(a.offsets.size for a in ra.select("load", "k_ptr")) + sum(a.offsets.size for a in ra.select("load", "v_ptr"))
    total = sum(a.offsets.size for a in ra.accesses)
    tiles = -(-S // BM)
    want = 2 * B * H * D * (sum(min(S, (i + 1) * BM) for i in range(tiles)) if causal else S * tiles)
    print(f"causal={causal!s:5}: matches SDPA: {torch.allclose(o, sdpa, rtol=1e-5, atol=1e-5)}; "
          f"K+V elements loaded {kv} (formula {want})")
    print(f"    all traffic {total} (formula {want + 2 * B * H * S * D}); "
          f"op by op: {B * H * (4 * S * S + 4 * S * D)}")
    claim(f"causal={causal}: matches SDPA; K+V loads and all traffic equal the formulas, below op by op",
          torch.allclose(o, sdpa, rtol=1e-5, atol=1e-5) and kv == want and total == want + 2 * B * H * S * D
          < B * H * (4 * S * S + 4 * S * D))
keys = {i: ra.elements("load", "k_ptr", pid=(i, 0)) // D for i in range(tiles)}
claim("causal: Q tile 0 loads only keys 0-15, tile 2 loads all 40",
      (keys[0].min(), keys[0].max(), keys[2].min(), keys[2].max()) == (0, 15, 0, S - 1))

# %% [markdown]
# Traffic per (batch, head): Q read and O written once, K and V read once per Q tile:
# `2·S·D + 2·S·D·ceil(S/BLOCK_M)` elements. Op by op, the S×S scores are written and read back, and
# so are the S×S probabilities: `4·S² + 4·S·D` elements. The fused kernel's traffic grows like
# `2·S²·D/BLOCK_M`, so it wins once `BLOCK_M > D/2`, and always wins on memory footprint (O(S·D)
# instead of O(S²)).
#
# The last (causal) run, drawn: grid axis 0 is the Q tile, axis 1 the (batch, head); rows of the
# pictures are the B·H·S positions, columns the head dimension. Q tile 0 loads only keys 0–15,
# tile 2 loads them all.

# %%
player(lambda i: V.kernel_frame(ra, i, "o_ptr", ("q_ptr", "k_ptr", "v_ptr")), V.n_programs(ra), description="program")

# %% [markdown]
# ## 7. On a GPU: real timings
#
# `benchmarks/kernels.py` measures softmax (GB/s vs `torch.softmax`), matmul (TFLOP/s vs cuBLAS,
# fp16 and bf16) and attention (vs `F.scaled_dot_product_attention`), as ratios and as % of the
# device's peak; run `make bench` on a GPU to produce its table. This cell runs a short version
# when a GPU is present (compiled kernels, CUDA tensors — outside any `record()` block), timed with
# `labkit.bench.median_time` (CUDA synchronised): softmax in GB/s (`2·M·N·4` bytes per call), matmul in TFLOP/s (`2n³`
# FLOPs), and the ratio torch time / our time (above 1: ours is faster).

# %%
show(lab.gpu_timings)

# %% tags=["nbval-ignore-output"]
if GPU:
    print(lab.gpu_timings())
else:
    print("No GPU here, so no timings: on a GPU this cell compares our kernels with torch's.")

# %% [markdown]
# ## 8. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A vector add over n = 1,000,000 float32 with BLOCK = 1024: how many programs, how
# many masked lanes, and how many bytes move?
#
# <details><summary>Answer</summary>
#
# ceil(10⁶/1024) = **977** programs; 977·1024 − 10⁶ = **448** masked lanes; 3·10⁶·4 = **12 MB**.
#
# </details>
#
# **Problem 2.** Softmax of a 4096×4096 fp32 matrix on a GPU with 3.35 TB/s: best-case time fused
# and unfused?
#
# <details><summary>Answer</summary>
#
# Fused: 2·4096²·4 B = 134 MB → **40 µs**. Unfused (8 passes): 537 MB → **160 µs**.
#
# </details>
#
# **Problem 3.** A 4096³ matmul with 128×128 tiles: elements moved, by the formula 2n³/b + n²?
# With 64×64 tiles?
#
# <details><summary>Answer</summary>
#
# 2·4096³/128 + 4096² = **1.09·10⁹** elements; with 64×64, **2.16·10⁹** — halving the tile doubles
# the traffic.
#
# </details>
#
# **Problem 4.** Attention with S = 8192, D = 128, fp16, one head: memory for the S×S score
# matrix op by op, and for the fused kernel's extra state?
#
# <details><summary>Answer</summary>
#
# Scores: 8192²·2 B = **134 MB** per head (and as much again for the probabilities). Fused: a
# running max and sum per row, 2·8192 fp32 = **64 KB**, besides Q, K, V and O themselves.
#
# </details>
#
# **Problem 5.** The online softmax walks a row in three blocks whose maxima are 1, 5 and 3. By what
# factor is the running sum `s` multiplied when block 2 arrives, and when block 3 arrives? What is
# `m` at the end?
#
# <details><summary>Answer</summary>
#
# Block 2 raises `m` from 1 to 5: `s` is multiplied by exp(1 − 5) = e⁻⁴ ≈ **0.018**. Block 3 does not
# raise it: factor exp(5 − 5) = **1**. At the end `m` = **5**, the row's maximum.
#
# </details>

# %%
# Two of the answers above, computed with the lab's own functions.
claim("P3: 1.09e9 elements with 128x128 tiles, 2.16e9 with 64x64",
      [f"{tiled_traffic_elements(4096, 4096, 4096, b, b)['total']:.3g}" for b in (128, 64)] == ["1.09e+09", "2.16e+09"])
t5 = online_softmax_trace(np.array([1.0, 0.0, 5.0, 0.0, 3.0, 0.0]), 2)
claim("P5: s is scaled by e^-4 = 0.018, then by 1; m ends at 5",
      [round(t_["scale"], 3) for t_ in t5[1:]] == [0.018, 1.0] and t5[-1]["m"] == 5.0)

# %% [markdown]
# ## 9. What Triton does for you: the same matmul in CUDA and in Triton
#
# Lab 03 (section 11) wrote the tiled matmul in CUDA's own terms: one thread per element of C,
# two shared-memory tiles declared by hand, every thread copying one element of each, two
# `syncthreads()` per k step, a bounds check on every element. Section 4's Triton kernel computes
# the same tiles with none of that in its source: a *program* loads whole tiles with one masked
# `tl.load` each and multiplies them with `tl.dot`. The compiler decides how the tile is spread
# over threads (`num_warps`), stages it through shared memory, inserts the barriers, vectorises
# and coalesces the loads, and overlaps the next tile's loads with this tile's math
# (`num_stages`). The algorithm, and so the traffic, stays ours.
#
# **Predict first:** for (37 × 29) @ (29 × 45), how many threads does the CUDA version launch with
# 8 × 8 tiles, how many programs the Triton one with 16 × 16 tiles — and do their global loads
# follow the same formula?

# %%
from labkit.claims import claim
from labkit.gpu_model.cuda_lab import cuda_vs_triton

cvt = cuda_vs_triton(37, 29, 45)
print(cvt)
col = {r[0]: r[1:] for r in cvt.rows}
claim("both kernels give exactly A @ B", all(col["C == A @ B"]))
claim("the CUDA source writes 2 barriers and 2 shared arrays, the Triton source none",
      col["barriers in the source"] == [2, 0] and col["shared arrays in the source"] == [2, 0])
claim("both load M*K*cdiv(N,T) + K*N*cdiv(M,T) elements of A and B (each its own T)",
      col["global loads of A and B, counted"] == col["M*K*cdiv(N,T) + K*N*cdiv(M,T)"],
      f"{col['global loads of A and B, counted']}")

# %% [markdown]
# So a program of Triton is a CUDA *block*, not a thread, and a Triton tile is what a CUDA block
# stages in shared memory. What Triton leaves to you is what sets the traffic: the tile sizes and
# the loop order. What it takes away are the bugs of section 11.4 of Lab 03 — a missing barrier,
# a barrier in a branch, an off-by-one thread index — and the per-architecture work of mapping
# tiles to tensor-core instructions. The price: less control over what each thread does (warp
# specialisation, hand-placed shared-memory layouts), which is why the fastest GEMM and attention
# kernels are still written in CUDA (CUTLASS, FlashAttention-3) or its newer tile languages.

# %% [markdown]
# ## Further reading
#
# * P. Tillet, H. T. Kung, D. Cox, *Triton: an intermediate language and compiler for tiled neural
#   network computations*, MAPL 2019.
# * The Triton tutorials — vector add, fused softmax, matrix multiplication, layer norm, fused
#   attention: <https://triton-lang.org/main/getting-started/tutorials/index.html>.
# * M. Milakov, N. Gimelshein, *Online normalizer calculation for softmax*, 2018.
# * T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré, *FlashAttention: Fast and Memory-Efficient Exact
#   Attention with IO-Awareness*, NeurIPS 2022.
#
# ## Summary
#
# - A Triton program works on a block of lanes; `program_id`, `tl.arange` and pointer arithmetic
#   give each lane its address, and a mask guards every lane that may fall off the end.
# - Memory-bound kernels are timed by bytes moved: fusing softmax moves 2·M·N elements instead of
#   ~8·M·N; rows longer than a block cost one extra read with the online softmax.
# - A tiled matmul moves `2n³/b + n²` elements (Lab 03's formula), which the recorder counts exactly;
#   grouped ordering makes concurrent programs share strips in L2.
# - FlashAttention is the online softmax applied to attention: no S×S matrix, K/V streamed per Q tile.
# - A Triton program is a CUDA block: the same tiles and traffic as Lab 03's CUDA matmul, with the
#   shared-memory staging, barriers and per-thread indexing left to the compiler.
#
# **Exercises** (`exercises/lab04_triton.py`): write the bodies of `add_kernel`, `softmax_kernel`,
# `matmul_kernel` (the k-loop) and `layernorm_kernel` — each has a "check your work" cell above. The
# wrappers are given. Grade all four with
# `python -m labkit.grade --lab 04` (or `make grade LAB=04`): tests use sizes that are not block
# multiples and fail any out-of-bounds access the recorder sees.
