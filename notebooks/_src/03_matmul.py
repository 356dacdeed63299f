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
# 4. say what a Python-level blocked matmul against the BLAS `torch.matmul` does and does not measure;
# 5. count what the GPU's execution model adds to those element counts — slots a divergent warp
#    issues, sectors per warp request, shared-memory bank conflicts, a stencil's global loads
#    with and without tiles, resident warps per SM (occupancy) — and tell host/device asynchrony
#    and memory spaces apart;
# 6. write CUDA kernels with threadIdx, blockIdx, shared memory and barriers (a tiled matmul, a
#    reduction), see the races a missing barrier causes, and work out blocks per SM and waves.
#
# Conventions: `A` is M×K, `B` is K×N, `C = A @ B` is M×N. Traffic is counted in **elements**
# moved from the slower level (multiply by 4 for float32 bytes). `cdiv(x, b)` = ⌈x / b⌉.
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import numpy as np

import labkit  # noqa: F401  (sets up the environment)
from labkit.claims import claim
from labkit.grading.check import check_your_work
from labkit.matmul import thread_model as G
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
# ## 1. The untiled loop
#
# Computing `C[i, j]` needs row i of A and column j of B. With no cache to keep them, every output
# loads them from memory again. The counted loop (every count in this lab comes from a loop like it):

# %%
show(T.naive)

# %% [markdown]
# **Predict first:** for n = 8, how many elements of A does the loop load — against the 64 that A
# holds?

# %%
ok = []
for n in (4, 8, 12):
    A, B = ints(n, n), ints(n, n)
    C, t = T.naive(A, B)
    ok.append((C == A @ B).all() and t.a_reads == t.b_reads == n**3 and t.c_writes == n * n)
    print(f"n={n:2d}: counted A={t.a_reads:5d} B={t.b_reads:5d} C={t.c_writes:4d}   formula n^3={n**3:5d}, n^2={n*n}")
claim("the untiled loop loads n^3 elements of A and of B, writes n^2, and C == A @ B", all(ok), "n = 4, 8, 12")

# %% [markdown]
# Every one of the M·N outputs loads K elements of each operand: `M·N·K` of A and `M·N·K` of B,
# i.e. **2n³** for square matrices, while the matmul only *needs* to read `2n²` distinct elements.
# Tiling is about closing that gap through reuse.

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
# **Predict first:** M = 10, K = 7, N = 9 with b1 = 4 (so the last row block has only 2 rows):
# how many elements of A does this loop load, and how many of B?

# %%
print(row("M", "K", "N", "b1", "b2", "A counted", "A formula", "B counted", "B formula", wide=(5, 6, 7, 8)))
ok = []
for (M, K, N, b1, b2) in [(16, 16, 16, 4, 4), (16, 16, 16, 8, 2), (16, 16, 16, 16, 16),
                          (10, 7, 9, 4, 3), (1, 12, 9, 4, 4), (9, 12, 1, 4, 4)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.cache_tiled(A, B, b1, b2)
    f = T.cache_tiled_formula(M, K, N, b1, b2)
    ok.append((C == A @ B).all() and t == f)
    print(row(M, K, N, b1, b2, t.a_reads, f"{M}*{K}={M * K}", t.b_reads, f"{-(-M // b1)}*{K}*{N}={f.b_reads}",
              wide=(5, 6, 7, 8)))
claim("counted loads equal M·K and cdiv(M, b1)·K·N in all 6 cases, and C == A @ B", all(ok))

# %% [markdown]
# Every element of A is loaded once: **M·K** (`n²`). All of B is loaded once per row block of A:
# **cdiv(M, b1)·K·N** (`n³/b1` when b1 divides n). b2 does not appear — it only sets how much L1
# the B block needs (`b1·K + b2·K` elements must fit). When b1 does not divide M the last row block
# is shorter; it still costs one full pass over B, hence the ceiling. (Answer: 70 of A; cdiv(10, 4)
# = 3 row blocks, each streaming all 7·9 = 63 elements of B: 189.)
#
# The total `n² + n³/b1` falls as b1 grows, until the A block no longer fits in L1:

# %%
n = 32
A, B = ints(n, n), ints(n, n)
naive_total = T.naive(A, B)[1].total
totals = []
for b1 in (1, 2, 4, 8, 16, 32):
    t = T.cache_tiled(A, B, b1, 4)[1]
    totals.append(t.a_reads + t.b_reads)
    print(f"b1={b1:2d}: A+B reads = {t.a_reads + t.b_reads:6d} = n^2 + n^3/b1 = {n*n + n**3 // b1:6d}"
          f"  L1 needed (b2=4): {b1 * n + 4 * n:5d} elements (naive: {2 * n**3})")
claim("n^2 + n^3/b1 falls with every doubling of b1", all(a > b for a, b in zip(totals, totals[1:]))
      and totals == [n * n + n**3 // b1 for b1 in (1, 2, 4, 8, 16, 32)], f"{totals[0]} -> {totals[-1]}")

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
# **Predict first:** 16×16×16 with v1 = 4, v2 = 2: which operand is loaded more, and how many times
# more? Does v3 change either count?

# %%
print(row("M", "K", "N", "v1", "v2", "v3", "A counted", "A formula", "B counted", "B formula", wide=(6, 7, 8, 9)))
ok, counts = [], {}
for (M, K, N, v1, v2, v3) in [(16, 16, 16, 2, 4, 1), (16, 16, 16, 4, 2, 8), (16, 16, 16, 4, 4, 16),
                              (10, 7, 9, 3, 4, 2), (1, 12, 9, 2, 2, 5), (9, 12, 1, 2, 2, 5)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.register_tiled(A, B, v1, v2, v3)
    f = T.register_tiled_formula(M, K, N, v1, v2, v3)
    ok.append((C == A @ B).all() and t == f)
    counts[M, K, N, v1, v2, v3] = t
    print(row(M, K, N, v1, v2, v3, t.a_reads, f"{M}*{K}*{-(-N // v2)}={f.a_reads}",
              t.b_reads, f"{-(-M // v1)}*{K}*{N}={f.b_reads}", wide=(6, 7, 8, 9)))
claim("counted loads equal M·K·cdiv(N, v2) and cdiv(M, v1)·K·N in all 6 cases, and C == A @ B", all(ok))
t42 = counts[16, 16, 16, 4, 2, 8]
claim("with v1 = 4, v2 = 2, A is loaded twice as often as B", t42.a_reads == 2 * t42.b_reads,
      f"{t42.a_reads} vs {t42.b_reads}")

# %% [markdown]
# Each A tile is loaded once for every **column** tile of C: **M·K·cdiv(N, v2)** (`n³/v2`).
# Each B tile once for every **row** tile: **cdiv(M, v1)·K·N** (`n³/v1`). So v1 (rows of the C tile)
# divides the traffic of B and v2 (columns) that of A. v3 changes the register footprint
# `v1·v3 + v2·v3 + v1·v2` but not the traffic.

# %% [markdown]
# ### Exercise: `register_tiled`

# %%
check_your_work("lab03_matmul", "register_tiled", picture=lab.picture("register_tiled"))

# %% [markdown]
# ## 4. Both together
#
# Inside each cache block (b1×b2 of C) run register tiles (v1×v2): two levels, DRAM → L1 and
# L1 → registers, each counted by the same loop.
#
# **Predict first:** 16×16×16 with b1 = 8 and 4×2 register tiles: how many elements of B cross
# DRAM, and how many go from L1 to the registers?

# %%
ok = []
for (M, K, N, b1, b2, v1, v2) in [(16, 16, 16, 8, 8, 4, 2), (10, 7, 9, 5, 4, 2, 3)]:
    A, B = ints(M, K), ints(K, N)
    C, t = T.tiled(A, B, b1, b2, v1, v2)
    f = T.tiled_formula(M, K, N, b1, b2, v1, v2)
    ok.append((C == A @ B).all() and t == f)
    print(f"M,K,N={M},{K},{N} b=({b1},{b2}) v=({v1},{v2})")
    print(f"  DRAM->L1: A {t.dram.a_reads:5d}  B {t.dram.b_reads:5d}   (formula {f.dram.a_reads}, {f.dram.b_reads})")
    print(f"  L1->reg:  A {t.l1.a_reads:5d}  B {t.l1.b_reads:5d}   (formula {f.l1.a_reads}, {f.l1.b_reads})")
    if M == K == N:
        sq = t
        print(f"  DRAM reads of B: {t.dram.b_reads} = n^3/b1 = {N**3 // b1}, not n^2/b1 = {N**2 // b1}")
claim("both levels' counts equal tiled_formula, and C == A @ B", all(ok), "2 cases")
claim("B's DRAM traffic is n^3/b1 = 512, not n^2/b1 = 32", sq.dram.b_reads == 16**3 // 8 != 16**2 // 8)

# %% [markdown]
# DRAM → L1 traffic is that of cache tiling; L1 → register traffic is that of register tiling
# (`n³/v2 + n³/v1` when everything divides). **A common slip** writes the DRAM traffic of B in this
# combined scheme as `n²/b1`; the count shows it is `n³/b1` (16³/8 = 512, not 16²/8 = 32), as in
# the cache-tiling section — adding register tiles inside a cache block does not change what
# crosses DRAM. When a register tile would straddle a cache block edge it is cut in two, so the
# general count is `M·K·J(N, b2, v2)` and `J(M, b1, v1)·K·N`, with J the number of register tiles
# along that dimension:

# %%
show(T.register_tiles_per_dim, T.tiled_formula)

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
# On a GPU each thread computes part of C. `labkit.matmul.thread_model` runs four kernels thread by
# thread (pure numpy, small N) and counts every load a thread issues. Here they are as CUDA-like
# pseudo-code — each `A[..]`/`B[..]` is a global-memory load, each `sA[..]`/`sB[..]` a shared-memory
# load:

# %%
for k in ("v1", "v1.5", "v2"):
    show(G.PSEUDOCODE[k])

# %%
show(G.PSEUDOCODE["v3"])

# %% [markdown]
# **Predict first:** N = 16, V = 2, L = 8 (a block of (L/V)² threads shares L-wide slabs). Counting
# the loads in the pseudo-code above, how many global reads does v2 make, and v3?

# %%
N, V, L, S = 16, 2, 8, 4
A, B = ints(N, N), ints(N, N)
forms = {"v1": "2N^3", "v1.5": "N^3/V+N^3", "v2": "2N^3/V", "v3": "2N^3/L"}
print(f"N={N}, V={V}, L={L}, S={S}")
print(row("kernel", "threads", "global rd", "formula", "expression", "shared rd", "2N^3/V", "C ok", w=10, wide=(4,)))
ok, reads = [], {}
for k in G.KERNELS:
    C, t = G.run_thread_model(k, A, B, V=V, L=L, S=S)
    f = G.gpu_formula(k, N, V, L, S)
    ok.append(t.counts() == f and (C == A @ B).all())
    reads[k] = t.global_reads
    print(row(k, t.threads, t.global_reads, f["global_reads"], forms[k], t.shared_reads,
              f["shared_reads"] if k == "v3" else "-", bool((C == A @ B).all()), w=10, wide=(4,)))
claim("every kernel's counted reads equal its closed form, and every C == A @ B", all(ok), f"{len(ok)} kernels")
claim("global reads fall v1 > v1.5 > v2 > v3",
      reads["v1"] > reads["v1.5"] > reads["v2"] > reads["v3"], " > ".join(str(reads[k]) for k in G.KERNELS))

# %% [markdown]
# Counting what each thread loads, in general:
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

# %% [markdown]
# ## 7. Common mistakes
#
# 1. **A version of v3 you may meet loads `b` from `sA`:** `b[:] = sA[ki, tx*V : tx*V+V]`. It must
#    read `sB`. A traffic model cannot see this bug — the same number of elements is read from the
#    same memory — only checking the result does:

# %%
C_slip, t_slip = G.simulate_v3(A, B, V, L, S, b_from_sA=True)
C_ok, t_ok = G.simulate_v3(A, B, V, L, S)
claim("the slip moves exactly the same elements", t_slip.counts() == t_ok.counts(),
      ", ".join(f"{v}" for v in t_ok.counts().values()))
claim("only the result shows it: C == A @ B with sB, not with sA",
      bool((C_ok == A @ B).all()) and not bool((C_slip == A @ B).all()),
      f"{int((C_slip != A @ B).sum())} of {C_slip.size} entries wrong")

# %% [markdown]
# 2. **"A wider shared-memory slab S cuts v3's global traffic."** A claim you will often meet; but
#    every element of the block's L×N strip of A and N×L strip of B is fetched exactly once
#    whatever S is. S sets the size of sA and sB (2·L·S elements) and the number of slab steps
#    N/S, each with two `__syncthreads()` — not the bytes:

# %%
print(row("S", "slab steps", "global rd", "2N^3/L", "shared rd", "smem elems", w=10))
same = []
for S_ in (1, 2, 4, 8, 16):
    _, t = G.simulate_v3(A, B, V, L, S_)
    same.append(t.global_reads == 2 * N**3 // L and t.shared_reads == 2 * N**3 // V)
    print(row(S_, N // S_, t.global_reads, 2 * N**3 // L, t.shared_reads, 2 * L * S_, w=10))
claim("for every S the global reads stay 2N^3/L and the shared reads 2N^3/V", all(same), "S = 1 ... 16")

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
exact = [torch.equal(blocked_matmul(X, Y, tile), X @ Y) for tile in (16, 64, 256)]
claim("blocked_matmul equals torch.matmul exactly for tiles 16, 64 and 256", all(exact),
      "integer-valued float64")

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
sp = lab.speed(res)
print(sp)
extra16 = sp.column("extra us/call")[0]
claim("tile 16's 32,768 calls cost microseconds each: slower than one matmul",
      sp.column("x BLAS")[0] < 0.5 and extra16 > 0.3, f"{sp.column('x BLAS')[0]:.2f}x BLAS, {extra16:.1f} us/call")
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
# ## 9. The GPU execution model: warps, coalescing, banks
#
# Section 6 counted *elements* per thread. The hardware does not run threads one by one: it runs
# them in **warps** of 32 lanes that share one instruction stream, it moves global memory in
# aligned 32-byte **sectors**, and it splits shared memory into **banks**. Each of these turns the
# same element count into more or fewer hardware operations. `labkit.gpu_model` counts them (plain
# Python, no GPU needed) and every count below is checked against its closed form; the last part
# times the CPU's counterparts on this machine.

# %%
from IPython.display import HTML, display

from labkit.gpu_model import banks as Bk
from labkit.gpu_model import coalescing as Co
from labkit.gpu_model import lab as gm
from labkit.gpu_model import occupancy as Oc
from labkit.gpu_model import warps as W
from labkit.viz.gpu_model import segments_html, side_by_side, warp_slots_html


def rows_of(table):
    """A labkit Table's rows as dicts keyed by column name."""
    return [dict(zip(table.columns, r)) for r in table.rows]

# %% [markdown]
# ### 9.1 Warps and SIMT divergence
#
# The 32 lanes of a warp move through the code together: the warp issues one instruction per
# **slot**, and every lane that is *active* executes it (GPUs since Volta keep a program counter
# per lane, but still issue for the lanes that are at the same instruction together). Lanes can
# disagree, though: at a branch, or on how many times to run a loop.
#
# `simulate_warp` runs kernels written as small trees of `Op`, `If` and `Loop` on one warp, lane by
# lane; the lane value v is the lane id. The kernel of the third row below:

# %%
show(W.pseudocode(W.divergent_branch(3, 5, 4)))

# %% [markdown]
# **Predict first:** the two sides cost a = 3 and b = 5 slots. How many slots does the warp issue
# when a single lane takes A (`if v == 0`)? When half the lanes do (`v % 2 == 0`)? And for 64
# threads split by warp (`if t // 32 == 0`: the first warp takes A, the second B)?

# %%
div = gm.divergence_table()
print(div)
d = {r["kernel (v = lane id, t = thread id)"]: r for r in rows_of(div)}
claim("every simulated warp issues the slots and efficiency of the closed form",
      all(r["slots"] == r["formula"] and abs(r["efficiency"] - r["formula eff."]) < 1e-12 for r in d.values()),
      f"{len(d)} kernels")
claim("one lane taking A costs the warp as much as sixteen: a + b = 8 slots",
      d["if v == 0: A else: B"]["slots"] == d["if v % 2 == 0: A else: B"]["slots"] == 3 + 5)
claim("branching along warp boundaries: 8 slots over two warps, at full efficiency",
      (d["if t // 32 == 0: A else: B"]["slots"], d["if t // 32 == 0: A else: B"]["efficiency"]) == (8, 1.0))
straggler = d["for _ in range(32 if v == 0 else 1)"]
claim("one lane looping 32 times holds its warp: 64 slots at efficiency 0.062",
      straggler["slots"] == 64 and round(straggler["efficiency"], 3) == 0.062, f"{straggler['efficiency']:.4f}")

# %% [markdown]
# When the lanes disagree at a branch, the warp issues the `then` side with the lanes that took
# it (the others masked off), then the `else` side with the rest, and they continue together
# after the branch; a loop keeps the warp busy while any lane still runs it. The closed forms
# behind the table:
#
# - a two-way branch whose sides cost a and b slots costs **a + b** as soon as each side has at
#   least one lane — one lane is enough — and a (or b) only when the whole warp agrees;
# - a loop runs until its *last* lane is done: **c · max tᵢ** slots for a body of c slots, lane i
#   running it tᵢ times;
# - active-lane efficiency = lane-instructions done / (32 · slots issued).
#
# So only the efficiency moves when fewer lanes take a side. The `t // 32` row splits its 64
# threads in half like `v % 2`, but along warp boundaries: each warp agrees with itself. And one
# slow lane holds up its warp: 31 lanes idle through 62 of the 64 slots. Each picture below is one
# warp's run, a column per slot and a row per lane; grey cells are masked-off lanes, so the
# coloured share is the efficiency:

# %%
pics = []
for text, program, threads in gm.divergence_kernels():
    if text in ("if v % 4 == 0: A else: B", "for _ in range(v): body"):
        labels, masks = gm.lane_masks(program)
        pics.append(warp_slots_html(labels, masks, f"{text}: {masks.mean():.3f} active"))
display(HTML(side_by_side(*pics)))

# %% [markdown]
# ### 9.2 Memory coalescing: sectors per request
#
# A warp's load is one instruction — one *request* — carrying 32 addresses. The memory system
# serves it in aligned 32-byte **sectors**: L2 and DRAM move whole sectors, and a profiler on a
# current GPU (Nsight Compute) reports *sectors per request*. Before Pascal, the unit people counted was the aligned 128-byte *segment*
# ("transaction", four sectors); the tables keep it as a second column, because older guides and
# many textbooks still count in it.
#
# **Predict first:** 32 lanes read float32 at a stride of 8 elements (lane i reads element 8i).
# How many sectors does the request touch, and which fraction of the bytes moved does it use? And at
# stride 1?

# %%
st = gm.stride_table()
print(st)
sr = {r["32 lanes read"]: r for r in rows_of(st)}
claim("counted sectors and segments equal their closed forms at every stride",
      all(r["sectors"] == r["formula"] and r["segments"] == r["seg. formula"] for k, r in sr.items()
          if k.startswith("stride")), "min(32, 4s) and min(32, s)")
claim("stride 1: 4 sectors, every byte used; stride 8: 32 sectors, 1/8 used",
      (sr["stride 1"]["sectors"], sr["stride 1"]["efficiency"], sr["stride 8"]["sectors"],
       sr["stride 8"]["efficiency"]) == (4, 1.0, 32, 0.125))
claim("random lanes: the mean of 200 warps is within 0.5 of M(1-(1-1/M)^32)",
      all(abs(r["sectors"] - r["formula"]) < 0.5 for k, r in sr.items() if k.startswith("random")))

# %% [markdown]
# A sector that any active lane touches moves entirely, however few of its bytes are read.
# Thirty-two consecutive float32 are 128 bytes: four sectors, all used. Lane i reading element
# i·s spans 31·s·4 bytes, so a request at stride s touches **min(32, 4s)** sectors of 4-byte
# elements (min(32, s) segments), and from stride 8 on every lane drags a whole sector of its own
# (32 bytes moved for 4 used). (You will write the count, for any segment size, as the
# `transactions` exercise of Lab 13.) Random addresses behave like a large stride: in a big array almost every lane has a
# sector of its own (≈ 32); only a small array, where lanes collide, does better. Each picture shows
# the 128-byte rows one request touches: dark = words read, pale = the rest of the sectors that
# move anyway:

# %%
pics = []
for s in (1, 2, 8, 32):
    addresses = Co.strided_addresses(s)          # lane i: byte 4·i·s
    pics.append(segments_html(addresses, f"stride {s}: {Co.sectors(addresses)} sectors"))
display(HTML(side_by_side(*pics)))

# %% [markdown]
# **The thread model, on real Triton programs.** Lab 04's recorder sees every lane's address when
# a Triton kernel runs under the interpreter; `record_warps` cuts each block into warps of 32
# consecutive block elements, one element per lane. That is a *thread model* of the interpreter's
# accesses — what a CUDA kernel with one thread per element, threads numbered along rows, would
# issue — not what compiled Triton does (below). Three kernels: Lab 04's `add`, a strided read
# `x[::8]`, and a transpose that copies tiles without shared memory. The transpose's two memory
# lines (from `transpose_kernel` in `labkit/gpu_model/coalescing.py`):

# %%
show("""
tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)   # a row of x: contiguous
tl.store(out_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)  # out[rn, rm]: M floats apart
""")

# %% [markdown]
# **Predict first:** x is 64 × 96 (M = 64 rows). Under the thread model, how many sectors does
# each warp of the transpose's stores touch, and each warp of its loads?

# %%
rec = gm.recorded_table()
print(rec)
rr = {(r["kernel"], r["tensor"], r["kind"]): r for r in rows_of(rec)}
claim("the three kernels' outputs equal torch's", rec.title.endswith("True"))
claim("add and the transpose's loads use every byte they move",
      all(rr[k]["efficiency"] == 1.0 for k in rr if k[0] == "add") and rr["transpose", "x_ptr", "load"]["per warp"] == 4)
claim("the strided read: 32 sectors per warp, as at stride 8 above",
      rr["strided s=8", "x_ptr", "load"]["per warp"] == sr["stride 8"]["sectors"] == 32)
claim("the transpose's stores: 32 sectors per warp, 1/8 of the bytes used",
      (rr["transpose", "out_ptr", "store"]["per warp"], rr["transpose", "out_ptr", "store"]["efficiency"]) == (32, 0.125))

# %% [markdown]
# Under the thread model the transpose reads coalesced, but each warp of its stores writes 32
# floats that are 64·4 = 256 bytes apart: 32 sectors for 128 useful bytes, 8× the traffic. The
# usual CUDA fix stages the tile through shared memory: read rows of x into it, write rows of the
# output from its columns.
#
# **Compiled Triton does that by itself.** Its coalescing pass gives each `tl.load` and `tl.store`
# a *layout* (which lanes hold which elements, and how many each) chosen from the contiguity of
# that operation's own pointers, and converts the tile between the two layouts through shared
# memory. Triton compiles for an NVIDIA GPU on any Linux machine — its wheel carries the CUDA
# back end — so we can read its decision here: the naive transpose compiled for an H100 (sm_90),
# with the pointers 16-byte aligned and the sizes multiples of 16, as a real launch specialises it:

# %%
from labkit.gpu_model import compiled as Cp

show(Cp.compile_for_gpu)
ctab = gm.compiled_table()
print(ctab)
kc, crows = gm.compiled_transpose()
cr = {(r[0], r[1].split()[0]): r for r in crows}
claim("compiled for sm_90, the load and the store use every byte they move",
      cr["load", "compiled"][5] == cr["store", "compiled"][5] == 1.0,
      f"{cr['store', 'compiled'][4]} sectors for {cr['store', 'compiled'][3]} bytes")
claim("the tile changes layout once, through 32x32 floats in shared memory",
      kc.conversions == 1 and kc.shared_bytes == 32 * 32 * 4 and kc.ptx_ops["st.shared"] > 0
      and kc.ptx_ops["ld.shared"] > 0, f"{kc.shared_bytes} B; {kc.ptx_ops['st.shared']} st, "
      f"{kc.ptx_ops['ld.shared']} ld")

# %% [markdown]
# The load's lanes run along rows of x (4 × 8 lanes, 4 floats each: one 16-byte vector per lane),
# the store's along rows of the output (8 × 4 lanes of 4 floats down a column of x), and a
# `ttg.convert_layout` in between — which the PTX implements with `st.shared`/`ld.shared`. So the
# recorded 32 sectors per store describe the thread model (and a hand-written CUDA kernel with one
# thread per element), not the compiled Triton kernel: for compiled Triton, the naive transpose is
# already a shared-memory transpose. Its remaining cost is the shared-memory traffic, which runs
# into the next effect.
#
# ### 9.3 Shared-memory bank conflicts
#
# Shared memory is split into 32 **banks** of 4-byte words; word w lives in bank w mod 32, and a
# bank delivers one word per cycle.
#
# **Predict first:** the degree (passes) of reading a column of `float tile[32][32]`? Of a column
# of `tile[32][33]`? Of lanes reading every third word?

# %%
bt = gm.bank_table()
print(bt)
br = {r["lane i reads"]: r for r in rows_of(bt)}
claim("every counted degree equals gcd(s, 32)", all(r["degree"] == r["formula"] for r in br.values()),
      f"{len(br)} patterns")
claim("a column of tile[32][32] takes 32 passes; of tile[32][33], one",
      (br["column of tile[32][32]"]["degree"], br["column of tile[32][33]"]["degree"]) == (32, 1))
odd = [Bk.conflict_degree([i * s for i in range(32)]) for s in range(1, 64, 2)]
claim("any odd stride is conflict-free", set(odd) == {1}, "strides 1, 3, ..., 63")

# %% [markdown]
# Lanes asking one bank for *different* words are served one after the other: the access takes
# as many passes as the busiest bank has distinct words (lanes reading the *same* word share it: a
# broadcast). Lane i reading word i·s hits only 32/gcd(s, 32) different banks, so the degree is
# **gcd(s, 32)**. A column of `tile[32][32]` is stride 32: every lane hits the same bank. Padding
# each row to 33 words shifts row r by r banks: 32 passes become one for 32 unused words (3% more
# shared memory). This is why the classic shared-memory transpose declares its tile `[32][33]`
# (compilers reach the same end by *swizzling* the addresses instead of padding).
#
# ### 9.4 The shared-memory stencil
#
# A 1-D stencil of radius r reads each output's 2r + 1 neighbours. Untiled, every read goes to
# global memory. Tiled, a block first copies its T inputs plus the r-wide halos on both sides into
# shared memory, once, and every output then reads its neighbours from there. The 2-D star
# (5-point for r = 1) reads 4r + 1 points; its T × T tile needs four r-wide halo strips (the star
# never needs the corners).
#
# **Predict first:** n = 1024, r = 4, T = 64: how many times fewer global loads with tiles?

# %%
stn = gm.stencil_table()
print(stn)
sn = rows_of(stn)
claim("counted loads equal the closed forms, untiled and tiled, and outputs equal numpy's",
      all(r["untiled"] == r["untiled formula"] and r["tiled"] == r["tiled formula"] for r in sn)
      and stn.title.endswith("True"), f"{len(sn)} stencils")
claim("n = 1024, r = 4, T = 64: tiles load 8x fewer", sn[1]["x fewer"] == 8, f"{sn[1]['x fewer']:.2f}x")
claim("a bigger tile brings the gain closer to 2r + 1 = 3", 3 > sn[3]["x fewer"] > sn[0]["x fewer"],
      f"T = 64: {sn[0]['x fewer']:.3f}, T = 1024: {sn[3]['x fewer']:.3f}")

# %% [markdown]
# Untiled, the 1-D stencil loads **n(2r + 1)**; tiled, **n + 2r·cdiv(n, T)** (the n(2r + 1) reads
# now hit shared memory). The 2-D star: (4r + 1)·R·C untiled, RC + 2r(C·cdiv(R, T) + R·cdiv(C, T))
# tiled. The gain approaches 2r + 1 (4r + 1 in 2-D) as the tile grows and the halo becomes a
# smaller share of it. It is the matmul's reuse argument again, with 2r + 1 uses per loaded element.
#
# ### 9.5 Host and device: asynchronous launches and pinned memory
#
# The host queues a kernel on a CUDA stream and returns at once; the GPU runs it later. So a
# timer around a kernel launch measures the launch, not the kernel. Calls that need a GPU value on
# the host — `.item()`, `.cpu()`, printing a CUDA tensor, `torch.nonzero` (its output size
# depends on the data) — wait for everything queued before them: implicit synchronisations,
# often the hidden stalls of a training loop. A host-to-device copy from **pinned**
# (page-locked) memory is a direct DMA and, with `non_blocking=True`, returns before it is done;
# from ordinary **pageable** memory the driver first copies through a pinned buffer of its own.
# On a GPU the next cell measures the three; here it says what it would measure.

# %% tags=["nbval-ignore-output"]
print(gm.host_device())

# %% [markdown]
# ### 9.6 Occupancy: how many warps an SM keeps, and why that hides latency
#
# An SM (streaming multiprocessor) holds many warps at once and, every cycle, issues from one
# that is ready; while one waits several hundred cycles for DRAM, the others compute. How many
# it holds — its **occupancy** — is set by what each block asks for. A block is resident only if
# all of it fits: its warps (an H100 SM has 64 warp slots), its registers (65,536 per SM, given
# out per warp in units of 256) and its shared memory (up to 228 KiB per SM, plus 1 KiB reserved
# per block); and at most 32 blocks. `labkit.gpu_model.occupancy` does the arithmetic of CUDA's
# occupancy calculator (you will write it yourself as the `blocks_per_sm` exercise of section 11).
#
# **Predict first:** blocks of 256 threads, each thread using 64 registers, no shared memory. How
# many warps can one H100 SM keep resident? And with 128 registers per thread?

# %%
occ = gm.occupancy_table()
print(occ)
oc = rows_of(occ)
claim("64 registers per thread halve the resident warps; 128 quarter them",
      [(r["warps"], r["limit"]) for r in oc[:3]] == [(64, "warps+regs"), (32, "regs"), (16, "regs")])
claim("48 KiB of shared memory per block leaves room for 4 blocks: 16 warps",
      (oc[3]["blocks"], oc[3]["warps"], oc[3]["limit"]) == (4, 16, "smem"))

# %% [markdown]
# Why warps must be resident, counted with Little's law (data in flight = bandwidth × latency): to
# draw 2 TB/s from memory with ~500 ns of latency, about 1 MB must be on its way at every moment —
# some 7.6 KB per SM on a 132-SM GPU, about 60 fully used 128-byte warp loads outstanding per SM.
# At 64 resident warps that is about one load in flight per warp; at 16 (the register-hungry rows
# above), each warp must keep four in flight — independent loads the compiler can issue before
# the first returns — or the memory sits idle.

# %%
inflight = Oc.bytes_in_flight(2e12, 500e-9)
per_sm = inflight / Oc.H100.sms
print(f"in flight: {inflight / 1e6:.2f} MB in all, {per_sm / 1e3:.2f} KB per SM = {per_sm / 128:.1f} "
      f"warp loads of 128 B")
print(f"per resident warp: {per_sm / 128 / 64:.2f} at 64 warps, {per_sm / 128 / 16:.2f} at 16")
claim("2 TB/s with 500 ns of latency needs about 60 warp loads in flight per SM", 55 < per_sm / 128 < 65,
      f"{per_sm / 128:.1f}")

# %% [markdown]
# **"Launching far more blocks than the GPU can run at once (oversubscribing it) is a problem."**
# A common mistake: it is how a GPU stays busy. Blocks that do not fit yet simply start when others
# finish, in *waves*. Too *few* blocks is the problem — SMs sit idle — and the mild cost of many is
# a partly idle last wave.
#
# **Predict first:** an H100 with 8 resident blocks per SM has 132 · 8 = 1056 block slots. What
# share of the slots does work for a grid of 100 blocks? Of 1057? Of 100,000?

# %%
grids = (100, 1056, 1057, 10_000, 100_000)
wv = {g: Oc.waves(g, 8, Oc.H100.sms) for g in grids}
for g, w in wv.items():
    print(f"{g:7,d} blocks: {w.waves:3d} wave(s) of {w.slots} slots, {100 * w.busy:5.1f} % of slot time busy")
claim("too few blocks idle most of the GPU: 100 blocks use under 10 % of the slots", wv[100].busy < 0.1,
      f"{100 * wv[100].busy:.1f} %")
claim("oversubscribing is cheap: 100,000 blocks keep over 99 % of the slots busy", wv[100_000].busy > 0.99,
      f"{100 * wv[100_000].busy:.2f} %")
claim("the worst tail is one block past a full wave", wv[1057].busy < 0.51 < wv[1056].busy,
      f"{100 * wv[1057].busy:.1f} %")

# %% [markdown]
# ### 9.7 A common mistake about local memory
#
# **"Private (local) memory is the fastest memory a thread has."** A common mistake: the fastest
# are its **registers**. CUDA's *local* memory is private only in scope: it lives in device DRAM,
# like global memory, and is cached in L1 and L2 like it. The compiler puts a thread's array
# there when it is indexed with run-time values or when registers run out (spills). Orders of
# magnitude on recent data-center GPUs (rough classes, not specifications):
#
# | memory | visible to | lives in | size | latency |
# |---|---|---|---|---|
# | registers | one thread | the SM's register file | 256 KB per SM | none beyond the instruction |
# | shared memory / L1 | one block / the SM | on the SM | ~100–250 KB per SM | tens of cycles |
# | L2 | the whole GPU | on the chip | tens of MB | a few hundred cycles |
# | local and global memory | one thread / all | device DRAM, cached in L1/L2 | tens of GB | several hundred cycles (a cache hit: less) |
#
# How much it matters, counted: kernel v2 of section 6 keeps a V×V tile of C per thread. In
# registers its accumulators cost no memory access; in local memory every multiply-add would read
# and write one.
#
# **Predict first:** N = 1024, V = 8: how many times the operand traffic would the accumulators
# cost in local memory?

# %%
lm = gm.local_memory_table(N=1024, V=8)
print(lm)
lr = rows_of(lm)
claim("accumulators in local memory cost V = 8x the operand loads; in registers 0",
      lr[1]["total"] == 0 and lr[2]["total"] == 8 * lr[0]["total"], f"{lr[2]['total']:.3g} vs {lr[0]['total']:.3g}")

# %% [markdown]
# V = 8 times the operand traffic, all of it to DRAM-backed memory (the caches absorb some of it,
# but they are shared with everything else). Keeping the tile in registers (fixed sizes, loops
# the compiler can unroll) is what makes register tiling work — and, as 9.6 showed, it has a price
# in occupancy: a thread that keeps more registers leaves room for fewer warps.
#
# ### 9.8 The CPU's side, measured on this machine
#
# A CPU core has no warps, but the same rule holds: memory moves in 64-byte cache lines, SIMD
# instructions load neighbouring elements together, and a prefetcher streams sequential
# addresses ahead of use. First a copy of n/8 float32 out of n = 2²² (one thread): contiguous,
# through an index that happens to be sequential, every 8th element, and through random indices.
#
# **Predict first:** how many times slower than the contiguous copy is the random gather?

# %% tags=["nbval-ignore-output"]
simd = gm.simd_table(n=1 << 22)
print(simd)
times = dict(zip(simd.column("pattern"), simd.column("ms")))
claim("the random gather is the slowest, over 3x the contiguous copy",
      max(times, key=times.get) == "gather, random indices" and times["gather, random indices"] > 3 * times["contiguous"],
      f"{times['gather, random indices'] / times['contiguous']:.1f}x")

# %% [markdown]
# Then the same instructions in a different order: summing all n elements through an index, in
# order and as a random permutation (`x.sum()`, with no index, for scale). Only the order of the
# addresses differs, so the gap is what caches and the prefetcher give sequential access:

# %% tags=["nbval-ignore-output"]
order = gm.order_table(n=1 << 22)
print(order)
om = dict(zip(order.column("traversal"), order.column("ms")))
claim("the random order is slower than the same sum in order", om["random permutation"] > 1.5 * om["in order"],
      f"{om['random permutation'] / om['in order']:.1f}x")

# %% [markdown]
# Compare with your prediction. The sequential-index gather loads one element at a time where the
# contiguous copy moves vectors; the random gather also misses the cache on almost every element,
# each miss bringing a 64-byte line for 4 useful bytes — the CPU's version of 32 sectors instead
# of 4. The timings vary between runs on a shared machine; the checks above ask only for the
# large gaps, which do not.

# %% [markdown]
# ## 10. Worked problems
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

# %%
# The answers above, from the closed forms the counted loops were checked against.
p1 = T.cache_tiled_formula(1024, 1024, 1024, 64, 64)
claim("P1: 17,825,792 elements = 71.3 MB, 120x less than 2n^3",
      p1.a_reads + p1.b_reads == 17_825_792 and round(4 * 17_825_792 / 1e6, 1) == 71.3
      and round(2 * 1024**3 / 17_825_792) == 120)
claim("P2: b1 = 24 is the largest that fits 32 KiB", max(b for b in range(1, 64) if 4 * 256 * (b + 8) <= 32768) == 24)
p3 = T.register_tiled_formula(512, 512, 512, 8, 4, 1)
claim("P3: A 33.6 M, B 16.8 M elements", (round(p3.a_reads / 1e6, 1), round(p3.b_reads / 1e6, 1)) == (33.6, 16.8))
p4 = G.gpu_formula("v3", 4096, 8, 128, 8)
claim("P4: global 1.07e9, shared 1.72e10", (f"{p4['global_reads']:.3g}", f"{p4['shared_reads']:.3g}") == ("1.07e+09", "1.72e+10"))
p5 = [G.gpu_formula(k, 1024, 4)["global_reads"] for k in ("v1", "v1.5", "v2")]
claim("P5: v1 2.15e9, v1.5 1.34e9, v2 5.37e8", [f"{v:.3g}" for v in p5] == ["2.15e+09", "1.34e+09", "5.37e+08"])

# %% [markdown]
# ## 11. CUDA's programming model, in CUDA's own terms
#
# Sections 6 and 9 described threads in pseudo-code. Here are real kernels, written the way CUDA
# writes them: a **kernel** is a function that every thread of a **grid** runs; the grid is made
# of **blocks** (`blockIdx`, `gridDim`), each block of **threads** (`threadIdx`, `blockDim`);
# threads of one block share a small, fast **shared memory** and can wait for one another at a
# **barrier** (`__syncthreads()`); threads of different blocks cannot. The host (CPU) chooses the
# launch configuration, `kernel<<<grid, block>>>(args)` in CUDA C, and the device runs it.
#
# The kernels below are Python in numba's CUDA dialect (`cuda.threadIdx.x`, `cuda.shared.array`,
# `cuda.syncthreads()`, `kernel[grid, block](args)`), with the CUDA C each one stands for next to
# it. On this machine `labkit.gpu_model.cuda_sim` runs them: it executes **every thread**, one
# after another in a fixed order, switching at each barrier, and it checks every memory access.
# On a GPU, `numba.cuda.jit` compiles the very same functions (section 11.6).

# %%
import re
import textwrap

from labkit.claims import claim, claim_close
from labkit.gpu_model import cuda_kernels as CK
from labkit.gpu_model import cuda_lab as cl
from labkit.gpu_model import occupancy as Oc
from labkit.gpu_model.cuda_sim import KernelError

# %% [markdown]
# ### 11.1 Threads, blocks and a grid: vector add
#
# One thread per element. A thread finds its element from its block's position and its own:
# `i = blockIdx.x · blockDim.x + threadIdx.x`. The host launches ⌈n / blockDim.x⌉ blocks, so the
# last block may stick out past the end, and the kernel must check `i < n`:

# %%
show(CK.vector_add)
show(CK.CUDA_C["vector_add"])

# %% [markdown]
# **Predict first:** n = 10 with 4 threads per block. How many blocks are launched, how many
# threads do nothing, and which (block, thread) adds element 9?

# %%
who = cl.who_runs_what(10, 4)
print(who)
claim("10 elements at 4 threads per block: 3 blocks, 2 threads idle", "3 blocks, 12 threads, 2 idle" in who.title)
claim("element 9 is added by thread 1 of block 2", who.rows[9][1:3] == [2, 1], f"row 9: {who.rows[9]}")

# %% [markdown]
# ### 11.2 Shared memory and a barrier
#
# A block's threads can exchange data through shared memory, but only across a barrier: after
# `cuda.syncthreads()` every thread of the block has finished everything before it. The smallest
# example reverses each block of a vector: each thread writes one element into shared memory,
# waits, then reads the element its mirror thread wrote.

# %%
show(cl.reverse_block)

# %% [markdown]
# **Predict first:** delete the barrier. On a GPU this kernel would usually still print the right
# answer (the 32 threads of a warp run in step). What happens in the simulator?

# %%
x64 = np.arange(64, dtype=np.float32)
out, run = cl.launch_reverse(x64, 32)
claim("with the barrier, every block of 32 comes out reversed",
      np.array_equal(out, np.concatenate([x64[31::-1], x64[:31:-1]])), f"{run.phases} phases per block")
try:
    cl.launch_reverse(x64, 32, cl.reverse_block_no_barrier)
    race = ""
except KernelError as e:
    race = f"{type(e).__name__}: {e}"
print(textwrap.fill(race, 100))
claim("without it, the simulator reports a race between two threads of a block", race.startswith("RaceError"))

# %% [markdown]
# The simulator runs thread 0 until its first barrier (or its end), then thread 1, and so on; it
# remembers which thread last wrote and read each element, and since when. Two threads touching
# one element, one of them writing, with no barrier between: that is a **race** (what NVIDIA's
# `compute-sanitizer --tool racecheck` reports on a GPU). A barrier that some threads of a block
# never reach is **barrier divergence** (CUDA allows `__syncthreads()` in a branch only if the
# whole block takes it the same way); an index outside an array is an illegal address. Each is
# an error naming the threads, so a bug that a GPU hides most of the time shows up every time.
#
# ### 11.3 The tiled matmul with shared memory
#
# Kernel v3 of section 6, with V = 1: a TILE × TILE block of threads computes a TILE × TILE tile
# of C, one element per thread. For each TILE-wide step of k, the block copies one tile of A and
# one of B into two `cuda.shared.array((TILE, TILE), np.float32)` tiles — each thread one element
# of each, zeros where a tile sticks out of the matrix — waits, adds its TILE products from
# shared memory, and waits again before the next copy overwrites the tiles. Every element of A
# is then loaded from global memory once per block *column* and every element of B once per block
# *row*: **M·K·⌈N/T⌉ + K·N·⌈M/T⌉**, which is section 6's 2N³/L when T = L divides everything.
#
# **Predict first:** M, K, N = 24, 20, 16 with TILE = 8. How many global loads, and how many
# barriers does each block pass?

# %% [markdown]
# ### Exercise: `tiled_matmul`
#
# Write the kernel in `exercises/lab03_matmul.py` (its docstring is the specification; the file imports
# `TILE = 8` from labkit). The cell below runs your kernel in the simulator on a 13 × 10 by 10 × 19
# product, with your global loads next to the formula, then grades it. A missing barrier is a
# race here even when C comes out right.

# %%
check_your_work("lab03_matmul", "tiled_matmul", picture=cl.picture("tiled_matmul"))

# %% [markdown]
# The lab's version and the CUDA C it stands for (`__shared__`, `__syncthreads()`), then all
# kernels of this section with their counted accesses next to the closed forms:

# %%
show(CK.matmul_tiled)
show(CK.CUDA_C["matmul_tiled"])

# %%
kt = cl.kernels_table()
print(kt)
rows = {r[0]: r for r in kt.rows}
claim("every kernel's output equals numpy's", all(r[2] for r in kt.rows))
mm = rows["matmul_tiled"]
claim("the tiled matmul's global loads are M*K*ceil(N/T) + K*N*ceil(M/T)",
      mm[3] == mm[4] == 24 * 20 * 2 + 20 * 16 * 3, f"{mm[3]} = {mm[4]}")
claim("and reads shared memory 2*T times per thread and k step", mm[5] == mm[6], f"{mm[5]} = {mm[6]}")
claim("each block passes 2 barriers per k step: 6 for K = 20, T = 8", mm[7] == 2 * CK.cdiv(20, 8), f"{mm[7]}")

# %% [markdown]
# ### 11.4 A reduction: a tree in each block, then atomics or a second launch
#
# To sum n numbers, each block first loads its blockDim.x elements into shared memory. Then a
# **tree**: with stride = blockDim.x / 2, threads t < stride add element t + stride to element t;
# everyone waits; the stride halves; and so on until element 0 holds the block's sum — log₂ of the
# block size steps, each followed by a barrier that *every* thread reaches (also those with
# nothing to add). Blocks cannot wait for each other, so the block sums are combined either by one
# **atomic** add per block (`cuda.atomic.add`: read, add and write as one indivisible step) or by
# writing them to an array and launching the kernel again on it.
#
# The animation runs the lab's reduction on one block of 16 threads: each step is one thread
# running to its next barrier (outlined), colours count the barriers a thread has passed, and the
# shared array below fills in as the tree folds it.

# %%
cl.block_player(16)

# %% [markdown]
# **Predict first:** for blocks of 64 threads, how many barriers does a block pass, and how many
# atomic adds does the sum of 1000 numbers need?

# %% [markdown]
# ### Exercise: `block_sum`
#
# The cell below runs your kernel through the same animation (on the same 16 numbers), then grades it.

# %%
check_your_work("lab03_matmul", "block_sum", picture=cl.picture("block_sum"))

# %%
bs, bp = rows["block_sum"], rows["block_partials"]
claim("a 64-thread block passes log2(64) + 1 = 7 barriers", bs[7] == 7, f"{bs[7]}")
claim("one atomic add per block: 16 for 1000 numbers", bs[8] == CK.cdiv(1000, 64), f"{bs[8]} atomics")
claim("the two-launch version needs no atomics and gives the same sum", bp[8] == 0 and bp[2], f"launches {bp[1]}")

# %% [markdown]
# Both give the exact sum here (integers). On a GPU, blocks finish in an order that changes from
# run to run, so float atomics add in a different order each time and the last bits of a float
# sum can change; the two-launch version adds in the same order every run. The second launch's
# kernel is the first one, writing to `partial[blockIdx.x]` instead of adding atomically:

# %%
show(CK.block_partials)

# %% [markdown]
# **Common mistakes**, each caught by the simulator: the tiled matmul without its second barrier,
# the reduction's barrier inside `if t < stride`, one thread too many in the tree (`t <= stride`),
# and a vector add without `if i < n`:

# %%
bugs = cl.bug_table()
for name, kind, message in bugs.rows:
    message = re.sub(r"\.py:\d+", ".py", message)          # the file, without its line number
    print(textwrap.fill(f"{name}: {message}", 100, subsequent_indent="    ", break_on_hyphens=False))
got = {r[0]: r[1] for r in bugs.rows}
claim("the missing second barrier of the matmul is a race", got["matmul_one_barrier"] == "RaceError")
claim("a barrier inside the branch is barrier divergence", got["sum_barrier_in_branch"] == "BarrierDivergence")
claim("the off-by-one stride is a race, the missing guard an out-of-bounds access",
      got["sum_stride_off_by_one"] == "RaceError" and got["add_unguarded"] == "OutOfBounds")

# %% [markdown]
# ### 11.5 Launch configuration: blocks per SM and waves
#
# A block runs on one streaming multiprocessor (SM) from start to end, and an SM holds as many
# blocks at once as its warp slots, register file, shared memory and block limit allow — section
# 9.6's `occupancy`. What section 9.6 took as given comes from the kernel: the launch configuration
# sets the threads per block, the kernel's shared arrays set its shared memory, and the compiler
# chooses the registers per thread (`nvcc --resource-usage`, or numba's `get_regs_per_thread()`), so
# a kernel that keeps a large tile in registers (kernel v2 of section 6) runs fewer blocks at once.
#
# **Predict first:** 256-thread blocks using 32 registers per thread fill an SM (8 blocks, 100%).
# What happens at 64 registers per thread? At 128? And with 48 KiB of shared memory per 128-thread
# block?

# %%
ot = Oc.occupancy
o32, o64, o128 = (ot(256, r, 0) for r in (32, 64, 128))
claim("32 -> 64 registers per thread halves the resident blocks",
      (o32.blocks, o64.blocks, o64.limiter) == (8, 4, "regs"), f"8 -> {o64.blocks}, {o64.fraction:.0%}")
claim("at 128 registers only 2 blocks (25% occupancy) fit", (o128.blocks, o128.fraction) == (2, 0.25))
o_sm = ot(128, 32, 48 * 1024)
claim("48 KiB of shared memory per block allows 4 blocks, whatever the registers",
      (o_sm.blocks, o_sm.limiter) == (4, "smem"), f"{o_sm.blocks_by['regs']} by registers")

# %% [markdown]
# ### Exercise: `blocks_per_sm`
#
# Section 9.6's rules as a function of the SM's limits (given as a dict). The cell compares yours with
# the lab's on five launch configurations, then grades it.

# %%
check_your_work("lab03_matmul", "blocks_per_sm", picture=cl.picture("blocks_per_sm"))

# %% [markdown]
# Ours, for comparison once yours passes (it also names the limit that binds):

# %%
show(Oc.occupancy)

# %% [markdown]
# **Waves.** A grid of G blocks on S SMs with b resident blocks each runs in ⌈G / (S·b)⌉ rounds
# (waves); when G is not a multiple of S·b, the last wave runs with SMs idle. The animation deals
# 40 blocks to 8 SMs with 2 slots each, wave by wave (a real GPU starts a new block wherever a
# slot frees, so with equal blocks it fills the device the same way).
#
# **Predict first:** how many waves, and how full is the last?

# %%
sched = Oc.schedule(40, 2, 8)
claim("40 blocks on 8 SMs x 2 slots take 3 waves, the last half full",
      (sched.waves, sched.last_wave_fill) == (3, 0.5), f"{sched.waves} waves, last {sched.last_wave_fill:.0%}")
h100 = Oc.waves(4 * 132 * 8 + 1, 8, 132)
claim("on an H100 with 8 blocks per SM, one block past 4 full waves costs a 5th wave", h100.waves == 5)
cl.waves_player(40, 8, 2)

# %% [markdown]
# ### 11.6 The same kernels under numba, and on a GPU
#
# numba ships its own CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`, a Python thread per CUDA thread).
# The next cell runs our three kernels under it, in a child process, and compares the outputs with
# this simulator's. numba's runs real threads concurrently, so a racy kernel's result there may
# change from run to run; ours runs them in one order and checks every access.

# %%
from labkit.gpu_model.cuda_gpu import gpu_run, numba_simulator_outputs
from labkit.gpu_model.host_device import NeedsCuda

agree = numba_simulator_outputs()
for name, (theirs, ours) in agree.items():
    print(f"{name:13s} numba simulator == labkit simulator: {np.array_equal(theirs, ours)}  (shape {ours.shape})")
claim("numba's CUDA simulator gives exactly our simulator's outputs for all three kernels",
      all(np.array_equal(t, o) for t, o in agree.values()))

# %% [markdown]
# On a CUDA GPU the next cell compiles the three kernels with `numba.cuda.jit`, checks them against
# torch, times them, and measures waves: a kernel whose blocks each sleep for a fixed time,
# launched with S·b/2, S·b, S·b + 1, 2S·b, 2S·b + 1 and 3S·b blocks (b from the occupancy rules
# with the compiled kernel's registers): the time steps up by one block's duration each time a
# wave is added, however few blocks the new wave holds. Here it says what it would measure.

# %% tags=["nbval-ignore-output"]
g = gpu_run()
print(g)
if not isinstance(g, NeedsCuda):
    for name, r in g.kernels.items():
        print(f"{name:13s} equal to torch: {r['equal']}  {r['ms']:.3f} ms")
    print(f"{g.sms} SMs, {g.regs_per_thread} registers/thread -> {g.predicted_blocks_per_sm} blocks per SM")
    for blocks, ms in g.wave_points:
        print(f"  {blocks:6d} blocks: {ms:8.3f} ms")
    claim("every compiled kernel equals torch", all(r["equal"] for r in g.kernels.values()))
    t = dict(g.wave_points)
    w = g.sms * g.predicted_blocks_per_sm
    claim("one block past a full wave costs about a whole extra wave", t[w + 1] > 1.5 * t[w],
          f"{t[w]:.3f} -> {t[w + 1]:.3f} ms")

# %% [markdown]
# ### 11.7 Worked problems
#
# **Problem 1.** A vector of 1,000,000 floats, 256 threads per block. How many blocks, how many
# idle threads?
#
# <details><summary>Answer</summary>
#
# ⌈10⁶ / 256⌉ = **3907** blocks = 1,000,192 threads, **192** idle (they fail `i < n`).
#
# </details>
#
# **Problem 2.** The tiled matmul with TILE = 16 on M = N = K = 4096: global loads, and the ratio
# to the untiled 2N³?
#
# <details><summary>Answer</summary>
#
# 2N³/T = 2·4096³/16 = **8.6·10⁹** elements (34 GB of float32) against 1.37·10¹¹: **16×** fewer —
# each loaded element is used T times from shared memory.
#
# </details>
#
# **Problem 3.** A 512-thread block uses 40 registers per thread and 20 KiB of shared memory on an
# H100. Blocks per SM, the limit, and the occupancy?
#
# <details><summary>Answer</summary>
#
# w = 16 warps. Warps: ⌊64/16⌋ = 4; registers: 40·32 = 1280 per warp, each of the 4 partitions of
# 16,384 holds ⌊16384/1280⌋ = 12 warps, 48 in all, ⌊48/16⌋ = **3**;
# shared: ⌊228/21⌋ = 10. **3 blocks** (registers), 48 warps: **75%**. At 32 registers it would be 4
# (100%).
#
# </details>
#
# **Problem 4.** A reduction over 2²⁰ floats with 256-thread blocks and a second launch for the
# partial sums. How many launches and barriers per block?
#
# <details><summary>Answer</summary>
#
# First launch: 4096 blocks → 4096 partial sums; second: 16 blocks → 16; third: 1 block → the sum.
# **3 launches**; each block passes log₂256 + 1 = **9** barriers. With atomics, one launch and
# 4096 atomic adds.
#
# </details>
#
# **Problem 5.** 132 SMs, 2 blocks per SM, 265 blocks. How many waves, and what share of the
# device does the last one use? What grid size would you pick instead?
#
# <details><summary>Answer</summary>
#
# ⌈265/264⌉ = **2 waves**, the second with 1 of 264 slots busy (**0.4%**) — nearly a whole wave of
# time for one block. 264 blocks (or many more, so the tail is a small share) would be better.
#
# </details>

# %%
claim("Problem 3: 3 blocks per SM, limited by registers, 75% occupancy",
      (ot(512, 40, 20 * 1024).blocks, ot(512, 40, 20 * 1024).limiter, ot(512, 40, 20 * 1024).fraction)
      == (3, "regs", 0.75))
claim("Problem 5: 265 blocks on 132 SMs x 2 take 2 waves, the last 1/264 full",
      Oc.schedule(265, 2, 132).last_wave_fill == 1 / 264 and Oc.waves(265, 2, 132).waves == 2)

# %% [markdown]
# ## Further reading
#
# * K. Goto, R. van de Geijn, *Anatomy of High-Performance Matrix Multiplication*, ACM TOMS 34(3), 2008.
# * NVIDIA, *CUTLASS* documentation — the hierarchy of tiles (thread block, warp, thread) of GPU GEMMs:
#   <https://github.com/NVIDIA/cutlass>.
# * S. Boehm, *How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog* (2022).
# * M. S. Lam, E. E. Rothberg, M. E. Wolf, *The Cache Performance and Optimizations of Blocked
#   Algorithms*, ASPLOS 1991.
# * NVIDIA, *CUDA C++ Programming Guide* (SIMT architecture, memory hierarchy) and *CUDA C++ Best
#   Practices Guide* (coalesced access, shared-memory bank conflicts, pinned memory):
#   <https://docs.nvidia.com/cuda/>.
# * M. Harris, *An Efficient Matrix Transpose in CUDA C/C++*, NVIDIA Technical Blog (2013) — the
#   coalesced, padded-tile transpose.
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
# - A warp issues a + b slots for a two-way branch as soon as each side has one lane, and
#   c·max tᵢ for a loop; divergence is per warp, so branching along warp boundaries costs nothing.
# - A warp's request moves the 32-byte sectors its lanes touch: 4 for 32 consecutive floats,
#   min(32, 4s) at stride s, ≈ 32 at random (older GPUs counted 128-byte segments: 1, min(32, s)).
#   Under the thread model of the interpreter's accesses a naive transpose stores 32 sectors per
#   warp; compiled Triton coalesces both sides itself and stages the tile through shared memory.
#   Shared memory conflicts gcd(s, 32)-way; a `[32][33]` tile removes the 32-way column conflict.
#   A tiled stencil loads n + 2r·cdiv(n, T) instead of n(2r+1).
# - Occupancy — resident warps per SM — follows from registers and shared memory per block; the
#   warps in flight are what hide memory latency (Little's law). Many more blocks than fit at once
#   cost only a partly idle last wave; too few leave SMs idle.
# - Registers, not local memory, are a thread's fastest storage (local memory lives in DRAM,
#   cached in L1/L2); kernel launches are asynchronous and `.item()`-like calls synchronise.
# - A CUDA kernel is run by every thread of a grid of blocks; threads of a block share memory and
#   meet at `__syncthreads()`. The tiled matmul loads M·K·⌈N/T⌉ + K·N·⌈M/T⌉ elements and needs two
#   barriers per k step; a reduction is a tree in each block, then atomics or a second launch.
#
# **Exercises** (`exercises/lab03_matmul.py`): `cache_tiled`, `register_tiled` and `tiled` — each has
# a "check your work" cell above. Grade all three with `python -m labkit.grade --lab 03` (or
# `make grade LAB=03`). Section 9's `transactions` is an exercise of Lab 13
# (`exercises/lab13_compilers.py`), graded with `--lab 13`. Section 11: the kernels `tiled_matmul` and
# `block_sum`, and `blocks_per_sm`, in the same file and graded with `--lab 03`.
