# Source of notebooks/03_matmul.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 03 — Tiled matrix multiplication
#
# **Learning objectives.** After this lab you can
# 1. count, element by element, how much data a matmul loop moves between two memory levels;
# 2. derive and check the traffic of cache-aware tiling (`n² + n³/b1`) and register-aware
#    tiling (`n³/v2 + n³/v1`), including the ceil-generalised forms when tiles do not divide n;
# 3. follow the GPU kernels v1 → v3 (one output per thread, V×V per thread, outer products,
#    shared-memory tiles) and predict their global- and shared-memory traffic;
# 4. say what a Python-level blocked matmul against the BLAS `torch.matmul` does and does not measure.
#
# Conventions: `A` is M×K, `B` is K×N, `C = A @ B` is M×N. Traffic is counted in **elements**
# moved from the slower level (multiply by 4 for float32 bytes). `cdiv(x, b)` = ⌈x / b⌉.
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import numpy as np

import labkit  # noqa: F401  (sets up the environment)
from labkit.grading.check import check_your_work
from labkit.matmul import gpu_model as G
from labkit.matmul import lab
from labkit.matmul import traffic as T
from labkit.show import show

rng = np.random.default_rng(0)


def ints(M, K):
    """Integer-valued float64 matrices: every partial sum is exact, so C == A @ B holds bit for bit."""
    return rng.integers(-4, 5, size=(M, K)).astype(np.float64)


def row(*cells, w=6, wide=()):
    """One table row: right-aligned cells, width w (or 13 for the column indices in ``wide``)."""
    return " ".join(f"{c!s:>{13 if i in wide else w}}" for i, c in enumerate(cells))

# %% [markdown]
# ## 1. The untiled loop: 2n³ loads
#
# Computing `C[i, j]` needs row i of A and column j of B. With no cache to keep them, every one
# of the M·N outputs loads K elements of each: `M·N·K` of A and `M·N·K` of B, i.e. `2n³` for square
# matrices, while the matmul only *needs* to read `2n²` distinct elements. Tiling is about closing
# that gap through reuse. The counted loop (every count in this lab comes from a loop like it):

# %%
show(T.naive)

# %% [markdown]
# **Predict first:** for n = 8, how many elements of A does the loop load?

# %%
for n in (4, 8, 12):
    A, B = ints(n, n), ints(n, n)
    C, t = T.naive(A, B)
    assert (C == A @ B).all()
    print(f"n={n:2d}: counted A={t.a_reads:5d} B={t.b_reads:5d} C={t.c_writes:4d}   formula n^3={n**3:5d}, n^2={n*n}")

# %% [markdown]
# ## 2. Cache-aware tiling (DRAM → L1)
#
# Keep a **row block of A** (b1 rows × all K columns) resident in L1, and stream **column blocks of B**
# (all K rows × b2 columns) past it:
#
# ```
# for i in row blocks of A (b1 rows):        load A[i-block, :]          -> L1   (once)
#     for j in column blocks of B (b2 cols): load B[:, j-block]          -> L1   (once per i)
#         C[i-block, j-block] = a @ b
# ```
#
# Every element of A is loaded once: **M·K** (`n²`). All of B is loaded once per row block of A:
# **cdiv(M, b1)·K·N** (`n³/b1` when b1 divides n). b2 does not appear — it only sets how much L1
# the B block needs (`b1·K + b2·K` elements must fit). When b1 does not divide M the last row block
# is shorter; it still costs one full pass over B, hence the ceiling.
#
# **Predict first:** M = 10, K = 7, N = 9 with b1 = 4: how many elements of B are loaded?

# %%
print(row("M", "K", "N", "b1", "b2", "A counted", "A formula", "B counted", "B formula", wide=(5, 6, 7, 8)))
for (M, K, N, b1, b2) in [(16, 16, 16, 4, 4), (16, 16, 16, 8, 2), (16, 16, 16, 16, 16),
                          (10, 7, 9, 4, 3), (1, 12, 9, 4, 4), (9, 12, 1, 4, 4)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.cache_tiled(A, B, b1, b2)
    f = T.cache_tiled_formula(M, K, N, b1, b2)
    assert (C == A @ B).all() and t == f
    print(row(M, K, N, b1, b2, t.a_reads, f"{M}*{K}={M * K}", t.b_reads, f"{-(-M // b1)}*{K}*{N}={f.b_reads}",
              wide=(5, 6, 7, 8)))

# %% [markdown]
# (Answer: cdiv(10, 4) = 3 row blocks, each streaming all 7·9 = 63 elements of B: 189.)
#
# The total `n² + n³/b1` falls as b1 grows, until the A block no longer fits in L1:

# %%
n = 32
A, B = ints(n, n), ints(n, n)
naive_total = T.naive(A, B)[1].total
for b1 in (1, 2, 4, 8, 16, 32):
    t = T.cache_tiled(A, B, b1, 4)[1]
    print(f"b1={b1:2d}: A+B reads = {t.a_reads + t.b_reads:6d} = n^2 + n^3/b1 = {n*n + n**3 // b1:6d}"
          f"  L1 needed (b2=4): {b1 * n + 4 * n:5d} elements (naive: {2 * n**3})")

# %% [markdown]
# ### Exercise: `cache_tiled`
#
# Write the counted loop in `exercises/lab03_matmul.py`. The next cell runs yours on four cases
# (three uneven) and compares C and the counts with the closed form. It then draws the last step of
# this lab's animation (section 5) for the first case with **your** counts in a "yours" column next
# to the lab's, and the cells of C your function got wrong in red; then it grades the exercise.

# %%
check_your_work("lab03_matmul", "cache_tiled", picture=lab.picture("cache_tiled"))

# %% [markdown]
# ## 3. Register-aware tiling (L1 → registers)
#
# Now keep a **v1 × v2 tile of C** in registers and walk k in steps of v3:
#
# ```
# for i in v1-row blocks, j in v2-column blocks:
#     c = 0                                            (v1·v2 registers)
#     for k in v3-blocks:  load a = A[i, k] (v1×v3), b = B[k, j] (v3×v2);  c += a @ b
#     C[i, j] = c
# ```
#
# Each A tile is loaded once for every **column** tile of C: **M·K·cdiv(N, v2)** (`n³/v2`).
# Each B tile once for every **row** tile: **cdiv(M, v1)·K·N** (`n³/v1`). So v1 (rows of the C tile)
# divides the traffic of B and v2 (columns) that of A. v3 changes the register footprint
# `v1·v3 + v2·v3 + v1·v2` but not the traffic.
#
# **Predict first:** 16×16×16 with v1 = 4, v2 = 2: which operand is loaded more, and how many times
# more?

# %%
print(row("M", "K", "N", "v1", "v2", "v3", "A counted", "A formula", "B counted", "B formula", wide=(6, 7, 8, 9)))
for (M, K, N, v1, v2, v3) in [(16, 16, 16, 2, 4, 1), (16, 16, 16, 4, 2, 8), (16, 16, 16, 4, 4, 16),
                              (10, 7, 9, 3, 4, 2), (1, 12, 9, 2, 2, 5), (9, 12, 1, 2, 2, 5)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.register_tiled(A, B, v1, v2, v3)
    f = T.register_tiled_formula(M, K, N, v1, v2, v3)
    assert (C == A @ B).all() and t == f
    print(row(M, K, N, v1, v2, v3, t.a_reads, f"{M}*{K}*{-(-N // v2)}={f.a_reads}",
              t.b_reads, f"{-(-M // v1)}*{K}*{N}={f.b_reads}", wide=(6, 7, 8, 9)))

# %% [markdown]
# ### Exercise: `register_tiled`

# %%
check_your_work("lab03_matmul", "register_tiled", picture=lab.picture("register_tiled"))

# %% [markdown]
# ## 4. Both together
#
# Inside each cache block (b1×b2 of C) run register tiles (v1×v2). DRAM → L1 traffic is that of
# cache tiling; L1 → register traffic is that of register tiling (`n³/v2 + n³/v1` when everything
# divides). **A common slip** writes the DRAM traffic of B in this combined scheme as `n²/b1`; the
# count below shows it is `n³/b1` (16³/8 = 512, not 16²/8 = 32), as in the cache-tiling section —
# adding register tiles inside a cache block does not change what crosses DRAM. When a register
# tile would straddle a cache block edge it is cut in two, so the general count is
# `M·K·J(N, b2, v2)` and `J(M, b1, v1)·K·N`, with J the number of register tiles along that
# dimension:

# %%
show(T.register_tiles_per_dim, T.tiled_formula)

# %% [markdown]
# **Predict first:** 16×16×16 with b1 = 8: how many elements of B cross DRAM?

# %%
for (M, K, N, b1, b2, v1, v2) in [(16, 16, 16, 8, 8, 4, 2), (10, 7, 9, 5, 4, 2, 3)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.tiled(A, B, b1, b2, v1, v2)
    f = T.tiled_formula(M, K, N, b1, b2, v1, v2)
    assert (C == A @ B).all() and t == f
    print(f"M,K,N={M},{K},{N} b=({b1},{b2}) v=({v1},{v2})")
    print(f"  DRAM->L1: A {t.dram.a_reads:5d}  B {t.dram.b_reads:5d}   (formula {f.dram.a_reads}, {f.dram.b_reads})")
    print(f"  L1->reg:  A {t.l1.a_reads:5d}  B {t.l1.b_reads:5d}   (formula {f.l1.a_reads}, {f.l1.b_reads})")
    if M == K == N:
        print(f"  DRAM reads of B: {t.dram.b_reads} = n^3/b1 = {N**3 // b1}, not n^2/b1 = {N**2 // b1}")

# %% [markdown]
# ### Exercise: `tiled`
#
# The picture below draws the DRAM level of your loop (it is the cache loop's); the table checks
# both levels.

# %%
check_your_work("lab03_matmul", "tiled", picture=lab.picture("tiled"))

# %% [markdown]
# ## 5. Watch the loop
#
# Each frame is one step of the counted loop itself: the resident tile of A (blue), of B (orange),
# the C tile being computed (green, finished tiles pale green), and the running counters next to
# the closed-form totals. Shapes are deliberately uneven (7 rows, b1 = 3), so the last row block is
# shorter. The Play button and the slider step through the loop (run the cell first).

# %%
from labkit.viz.matmul import tiled_frames, tiled_player

render, n_frames, formula = tiled_frames("cache", 7, 5, 8, b1=3, b2=3)
print(f"{n_frames} steps; final counts {formula}")
tiled_player("cache", 7, 5, 8, b1=3, b2=3)

# %% [markdown]
# The same for register tiling (v1 = 2, v2 = 3, v3 = 2): note how B is re-read for every row tile
# of C and A for every column tile.

# %%
tiled_player("register", 5, 4, 6, v1=2, v2=3, v3=2)

# %% [markdown]
# ## 6. GPU kernels v1 → v3: a thread-level model
#
# On a GPU each thread computes part of C. `labkit.matmul.gpu_model` runs four kernels thread by
# thread (pure numpy, small N) and counts every load a thread issues. Here they are as CUDA-like
# pseudo-code — each `A[..]`/`B[..]` is a global-memory load, each `sA[..]`/`sB[..]` a shared-memory
# load:

# %%
for k in ("v1", "v1.5", "v2"):
    show(G.PSEUDOCODE[k])

# %%
show(G.PSEUDOCODE["v3"])

# %% [markdown]
# Counting what each thread loads:
#
# | kernel | each thread | global reads | shared reads |
# |---|---|---|---|
# | v1 | one C element: a row of A + a column of B (2N) | N²·2N = **2N³** | – |
# | v1.5 | a V×V tile: its V rows of A (NV) + one column of B per output (NV²) | (N²/V²)(NV + NV²) = **N³/V + N³** | – |
# | v2 | a V×V tile as outer products: per k, V of A + V of B (2NV) | (N²/V²)·2NV = **2N³/V** | – |
# | v3 | blocks of (L/V)² threads share L×S and S×L slabs in shared memory | per block 2NL, (N/L)² blocks: **2N³/L** | each thread 2NV: **2N³/V** |
#
# v1.5 barely helps: each thread still reloads a whole column of B for every output. v2 reorders
# the loop so both operands are reused V times from registers. v3 adds a second level of reuse:
# a block loads its slab of A and B once into shared memory, and all its threads read from there.
# S (the k-width of a slab) appears in no count: it trades shared-memory size against the number of
# `__syncthreads` steps.
#
# **Predict first:** N = 16, V = 2, L = 8. How many global reads does v2 make, and v3?

# %%
N, V, L, S = 16, 2, 8, 4
A, B = ints(N, N), ints(N, N)
forms = {"v1": "2N^3", "v1.5": "N^3/V+N^3", "v2": "2N^3/V", "v3": "2N^3/L"}
print(f"N={N}, V={V}, L={L}, S={S}")
print(row("kernel", "threads", "global rd", "formula", "expression", "shared rd", "2N^3/V", "C ok", w=10, wide=(4,)))
for k in G.KERNELS:
    C, t = G.simulate(k, A, B, V=V, L=L, S=S)
    f = G.gpu_formula(k, N, V, L, S)
    assert t.counts() == f
    print(row(k, t.threads, t.global_reads, f["global_reads"], forms[k], t.shared_reads,
              f["shared_reads"] if k == "v3" else "-", bool((C == A @ B).all()), w=10, wide=(4,)))

# %% [markdown]
# ## 7. Common mistakes
#
# 1. **A version of v3 you may meet loads `b` from `sA`:** `b[:] = sA[ki, tx*V : tx*V+V]`. It must
#    read `sB`. A traffic model cannot see this bug — the same number of elements is read from the
#    same memory — only checking the result does:

# %%
C_slip, t_slip = G.simulate_v3(A, B, V, L, S, b_from_sA=True)
C_ok, t_ok = G.simulate_v3(A, B, V, L, S)
print("same traffic:", t_slip.counts() == t_ok.counts())
print("C == A @ B with sB:", bool((C_ok == A @ B).all()), "| with sA:", bool((C_slip == A @ B).all()))

# %% [markdown]
# 2. **"A wider shared-memory slab S cuts v3's global traffic."** A claim you will often meet; but
#    every element of the block's L×N strip of A and N×L strip of B is fetched exactly once
#    whatever S is. S sets the size of sA and sB (2·L·S elements) and the number of slab steps
#    N/S, each with two `__syncthreads()` — not the bytes:

# %%
print(row("S", "slab steps", "global rd", "2N^3/L", "shared rd", "smem elems", w=10))
for S_ in (1, 2, 4, 8, 16):
    _, t = G.simulate_v3(A, B, V, L, S_)
    assert t.global_reads == 2 * N**3 // L and t.shared_reads == 2 * N**3 // V
    print(row(S_, N // S_, t.global_reads, 2 * N**3 // L, t.shared_reads, 2 * L * S_, w=10))

# %% [markdown]
# 3. **Writing the DRAM traffic of B in the combined scheme as `n²/b1`** — section 4 counted
#    `n³/b1`: register tiles inside a cache block do not change what crosses DRAM.
# 4. **"A blocked loop of library calls shows the cache reuse of tiling."** The next section
#    measures what it does show.
#
# ## 8. Real speed: what a blocked loop in Python measures
#
# Counting elements is a model; time is what we pay. `labkit.matmul.blocked.blocked_matmul` computes
# C one tile × tile block at a time, each block product being one call into the BLAS library
# (`addmm_`), and we time it against one `torch.matmul` call in the same run (single thread,
# fastest of interleaved rounds):

# %%
import torch

from labkit.matmul.blocked import blocked_matmul

show(blocked_matmul)
g = torch.Generator().manual_seed(0)
X = torch.randint(-4, 5, (200, 150), generator=g).double()   # integer-valued: exact in any order
Y = torch.randint(-4, 5, (150, 170), generator=g).double()
for tile in (16, 64, 256):
    same = torch.equal(blocked_matmul(X, Y, tile), X @ Y)
    print(f"tile {tile:3d}: blocked_matmul == torch.matmul exactly: {same}")

# %% [markdown]
# What this measures, precisely: each of the cdiv(n, tile)³ block products is itself a BLAS kernel
# that tiles for the caches and registers internally, so this is **not** the reuse of sections
# 2–4. The blocked time is `calls × (cost of one call + its tile³ block product)`. The column
# `extra us/call` = (blocked time − one-call time) / calls is what each call costs beyond doing
# the same FLOPs in one call: for small tiles, where the block product is tiny, it is the price of
# a call into the library from Python (interpreter, torch's dispatcher, argument checks) —
# microseconds, millions of times a matmul's per-element work. For large tiles there are few calls
# and the two times differ only by which kernel the library picks for each shape, and by the
# noise of a shared machine — in either direction, so read your own numbers rather than
# expecting "at best a match". The cache effects themselves are inside the library, and in Lab
# 04's Triton kernels, where the tile sizes are ours.
#
# **Predict first:** how many calls does tile 16 make for n = 512? If each costs 5 µs, how long do
# the calls alone take?

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

from labkit.matmul.blocked import measure

res = measure(512, [16, 32, 64, 128, 256, 512], repeat=3, rounds=2)
print(lab.speed(res))
fig, ax = plt.subplots(figsize=(5, 3))
ax.semilogx([r[0] for r in res["rows"]], [r[2] for r in res["rows"]], "o-", base=2, label="blocked")
ax.axhline(res["blas_gflops"], color="k", ls="--", label="one torch.matmul (BLAS)")
ax.set_xlabel("tile size"), ax.set_ylabel("GFLOP/s"), ax.legend()
plt.show()

# %% [markdown]
# (Answer: (512/16)³ = 32,768 calls; at 5 µs each, 0.16 s — against a few milliseconds for the
# whole matmul in one call on a modern core.)

# %% tags=["nbval-ignore-output"]
if torch.cuda.is_available():
    from labkit.bench import median_time

    n = 8192
    for dtype in (torch.float32, torch.bfloat16):
        Ag, Bg = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
        s = median_time(lambda: Ag @ Bg, repeat=10, warmup=3)
        print(f"cuBLAS {dtype}: {2 * n**3 / s / 1e12:.1f} TFLOP/s")
else:
    print("No GPU here. On a GPU this cell times torch.matmul (cuBLAS) at n=8192 in fp32 and bf16")
    print("and prints TFLOP/s; compare with the peak measured in Lab 01. Full table: benchmarks/matmul.py.")

# %% [markdown]
# ## 9. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** n = 1024, float32, cache tiling with b1 = 64. How many bytes cross DRAM → L1 for A
# and B, against the untiled 2n³ elements?
#
# <details><summary>Answer</summary>
#
# n² + n³/b1 = 1,048,576 + 16,777,216 = 17,825,792 elements = **71.3 MB**, against 2n³ = 2.15·10⁹
# elements = 8.6 GB: 120× less.
#
# </details>
#
# **Problem 2.** The L1 holds 32 KiB and must keep the A row block (b1 × K) and a B column block
# (K × b2) of float32 with K = 256. What is the largest b1 with b2 = 8?
#
# <details><summary>Answer</summary>
#
# 4·256·(b1 + 8) ≤ 32768 ⇔ b1 + 8 ≤ 32 ⇔ **b1 = 24**.
#
# </details>
#
# **Problem 3.** A register tile of v1 = 8 by v2 = 4 on n = 512: the L1 → register traffic of A and
# of B? Which would you enlarge to cut A's traffic?
#
# <details><summary>Answer</summary>
#
# A: n³/v2 = 2²⁷/4 = **33.6 M** elements; B: n³/v1 = **16.8 M**. A's traffic falls with **v2** (more
# columns of C per loaded row of A).
#
# </details>
#
# **Problem 4.** v3 with N = 4096, L = 128, V = 8: global and shared reads, in elements?
#
# <details><summary>Answer</summary>
#
# Global 2N³/L = 2·2³⁶/128 = **1.07·10⁹**; shared 2N³/V = **1.72·10¹⁰** — 16× more shared than
# global reads, which is the point: shared memory is ~10× faster and sits next to the cores.
#
# </details>
#
# **Problem 5.** N = 1024, V = 4: global reads of v1, v1.5 and v2? Why does v1.5 help so little?
#
# <details><summary>Answer</summary>
#
# v1: 2N³ = **2.15·10⁹**; v1.5: N³/V + N³ = **1.34·10⁹**; v2: 2N³/V = **5.37·10⁸**. v1.5 reuses
# only the rows of A (N³/V); it still loads a whole column of B for each output (N³). v2's outer
# products reuse both operands V times.
#
# </details>
#
# ## Further reading
#
# * K. Goto, R. van de Geijn, *Anatomy of High-Performance Matrix Multiplication*, ACM TOMS 34(3), 2008.
# * NVIDIA, *CUTLASS* documentation — the hierarchy of tiles (thread block, warp, thread) of GPU GEMMs:
#   <https://github.com/NVIDIA/cutlass>.
# * S. Boehm, *How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog* (2022).
# * M. S. Lam, E. E. Rothberg, M. E. Wolf, *The Cache Performance and Optimizations of Blocked
#   Algorithms*, ASPLOS 1991.
#
# ## Summary
#
# - Untiled matmul loads `2n³` elements; **cache tiling** brings DRAM traffic to `n² + n³/b1`
#   (A once, B once per row block of A), **register tiling** brings L1 traffic to `n³/v2 + n³/v1`
#   (v1, v2 = rows, columns of the register tile; v3 is free). When tiles do not divide, replace
#   `n/b` by `cdiv(n, b)` — every count above was checked against the closed form.
# - GPU v1 → v3 walk the same path: `2N³` → `N³/V + N³` → `2N³/V` (register reuse) → `2N³/L`
#   global plus `2N³/V` shared (shared-memory reuse). A v3 that reads `b` from `sA` moves the same
#   bytes and computes the wrong C: traffic models need correctness checks next to them.
# - v3's slab width S appears in no count: it sets the shared-memory size (2·L·S elements) and the
#   number of synchronised steps (N/S), not the bytes moved.
# - A blocked loop of BLAS calls measures the cost of calls, not cache reuse: the library's kernel
#   already tiles internally.
#
# **Exercises** (`exercises/lab03_matmul.py`): `cache_tiled`, `register_tiled` and `tiled` — each has
# a "check your work" cell above. Grade all three with `python -m labkit.grade --lab 03` (or
# `make grade LAB=03`).
