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
#    issues, transactions per warp access, shared-memory bank conflicts, a stencil's global loads
#    with and without tiles — and tell host/device asynchrony and memory spaces apart.
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
# ## 9. The GPU execution model: warps, coalescing, banks
#
# Section 6 counted *elements* per thread. The hardware does not run threads one by one: it runs
# them in **warps** of 32 lanes that share one instruction stream, it moves global memory in
# aligned **segments**, and it splits shared memory into **banks**. Each of these turns the same
# element count into more or fewer hardware operations. `labkit.gpu_model` counts them (plain
# Python, no GPU needed) and every count below is printed next to its closed form; the last part
# times the CPU's counterparts on this machine.

# %%
from IPython.display import HTML, display

from labkit.gpu_model import coalescing as Co
from labkit.gpu_model import lab as gm
from labkit.gpu_model import warps as W
from labkit.viz.gpu_model import segments_html, side_by_side, warp_slots_html

# %% [markdown]
# ### 9.1 Warps and SIMT divergence
#
# The 32 lanes of a warp move through the code together: the warp issues one instruction per
# **slot**, and every lane that is *active* executes it (GPUs since Volta keep a program counter
# per lane, but still issue for the lanes that are at the same instruction together). When the
# lanes disagree at a branch, the warp issues the `then` side with the lanes that took it (the
# others masked off), then the `else` side with the rest, and they continue together after the
# branch. Hence:
#
# - a two-way branch whose sides cost a and b slots costs **a + b** as soon as each side has at
#   least one lane — one lane is enough — and a (or b) only when the whole warp agrees;
# - a loop runs until its *last* lane is done: **c · max tᵢ** slots for a body of c slots, lane i
#   running it tᵢ times;
# - active-lane efficiency = lane-instructions done / (32 · slots issued).
#
# `simulate_warp` runs kernels written as small trees of `Op`, `If` and `Loop` on one warp, lane by
# lane; the lane value v is the lane id. The kernel of the third row below:

# %%
show(W.pseudocode(W.divergent_branch(3, 5, 4)))

# %% [markdown]
# **Predict first:** with a = 3 and b = 5, how many slots does the warp issue when a single lane
# takes A (`if v == 0`)? And for 64 threads split by warp (`if t // 32 == 0`: the first warp
# takes A, the second B)?

# %%
print(gm.divergence_table())

# %% [markdown]
# One lane taking A costs the warp as much as sixteen: 8 slots either way; only the efficiency
# moves. The `t // 32` row splits its 64 threads in half like `v % 2`, but along warp boundaries:
# each warp agrees with itself, so the two warps issue 3 + 5 = 8 slots between them at full
# efficiency, instead of 8 each. And one slow lane holds up its warp: with a single lane looping 32
# times, 31 lanes idle through 62 of the 64 slots (efficiency 0.062). Each picture below is one
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
# ### 9.2 Memory coalescing
#
# A warp's load is one instruction carrying 32 addresses. The memory system merges them: each
# aligned 128-byte **segment** that some active lane touches is one **transaction**, and DRAM
# delivers aligned 32-byte **sectors**. Thirty-two consecutive float32 are exactly one segment.
# Lane i reading element i·s spans 31·s·4 bytes, so a warp at stride s needs **min(32, s)**
# transactions of 4-byte elements, and from stride 8 on every lane drags a whole sector of its own
# (32 bytes moved for 4 used). The count itself is one line; you write it yourself as the
# `transactions` exercise of Lab 13 (`exercises/lab13_compilers.py`):

# %%
show("""
def transactions(addresses, segment_bytes=128):
    # one warp: a byte address per lane (None: inactive lane) -> distinct segments touched
    return len({a // segment_bytes for a in addresses if a is not None})
""")

# %% [markdown]
# **Predict first:** a warp reads float32 at a stride of 8 elements. How many transactions, and
# which fraction of the bytes moved does it use?

# %%
print(gm.stride_table())

# %% [markdown]
# Random addresses behave like a large stride: in a big array almost every lane has a segment of
# its own (≈ 32); only a small array, where lanes collide, does better. Each picture shows the
# segments one warp touches, a row (32 words) per segment: rows = transactions, dark = words
# read, pale = the rest of the sectors that move anyway:

# %%
pics = []
for s in (1, 2, 8, 32):
    addresses = Co.strided_addresses(s)          # lane i: byte 4·i·s
    pics.append(segments_html(addresses, f"stride {s}: {Co.transactions(addresses)} transactions"))
display(HTML(side_by_side(*pics)))

# %% [markdown]
# **Counted from real Triton programs.** Lab 04's recorder sees every lane's address when a
# Triton kernel runs under the interpreter; `record_warps` cuts each block into warps of 32
# consecutive block elements. That mapping is a model: compiled Triton usually gives each thread
# a few neighbouring elements (one 16-byte vector load), so a real warp covers more elements per
# instruction — but for contiguous data the total of segments is the same. Three kernels: Lab
# 04's `add`, a strided read `x[::8]`, and a transpose that copies tiles without shared memory.
# The transpose's two memory lines (from `transpose_kernel` in `labkit/gpu_model/coalescing.py`):

# %%
show("""
tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)   # a row of x: contiguous
tl.store(out_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)  # out[rn, rm]: M floats apart
""")

# %% [markdown]
# **Predict first:** x is 64 × 96 (M = 64 rows). How many transactions does each warp of the
# transpose's stores need?

# %%
print(gm.recorded_table())

# %% [markdown]
# `add` needs one transaction per warp (efficiency 1); the strided read needs 8 per warp for its
# loads, as in the table above; the transpose reads coalesced but each warp of
# its stores writes 32 floats that are 64·4 = 256 bytes apart: 32 transactions, 8× the bytes. The
# usual fix stages the tile through shared memory: read rows of x into it, write rows of the
# output from its columns — which runs into the next effect.
#
# ### 9.3 Shared-memory bank conflicts
#
# Shared memory is split into 32 **banks** of 4-byte words; word w lives in bank w mod 32, and a
# bank delivers one word per cycle. Lanes asking one bank for *different* words are served one
# after the other: the access takes as many passes as the busiest bank has distinct words (lanes
# reading the *same* word share it: a broadcast). Lane i reading word i·s hits only 32/gcd(s, 32)
# different banks, so the degree is **gcd(s, 32)**. A column of `float tile[32][32]` is stride 32:
# every lane hits the same bank. Padding each row to 33 words shifts row r by r banks.
#
# **Predict first:** the degree of reading a column of `tile[32][32]`? Of `tile[32][33]`? Of
# lanes reading every third word?

# %%
print(gm.bank_table())

# %% [markdown]
# 32 passes become one for 32 unused words (3% more shared memory); this is why the classic
# shared-memory transpose declares its tile `[32][33]`. Any odd stride is conflict-free.
#
# ### 9.4 The shared-memory stencil
#
# A 1-D stencil of radius r reads each output's 2r + 1 neighbours. Untiled, every read goes to
# global memory: **n(2r + 1)**. Tiled, a block first copies its T inputs plus 2r halo points
# into shared memory, once, and every output then reads its neighbours from there:
# **n + 2r·cdiv(n, T)** global loads (the n(2r + 1) reads now hit shared memory). The 2-D star
# (5-point for r = 1) reads 4r + 1 points untiled; a T × T tile loads its T² points and four
# r-wide halo strips (the star never needs the corners): RC + 2r(C·cdiv(R, T) + R·cdiv(C, T)).
# It is the matmul's reuse argument again, with 2r + 1 (or 4r + 1) uses per loaded element.
#
# **Predict first:** n = 1024, r = 4, T = 64: how many times fewer global loads with tiles?

# %%
print(gm.stencil_table())

# %% [markdown]
# The gain approaches 2r + 1 (4r + 1 in 2-D) as the tile grows and the halo becomes a smaller
# share of it; the counts come from running the stencils on counting arrays, and the outputs
# equal numpy's.
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
# ### 9.6 Two common mistakes
#
# **"Private (local) memory is the fastest memory a thread has."** A common mistake: the fastest
# are its **registers**. CUDA's *local* memory is private only in scope: it lives in device DRAM,
# like global memory, and is merely cached in L1/L2. The compiler puts a thread's array there when
# it is indexed with run-time values or when registers run out (spills). Orders of magnitude on
# recent data-center GPUs (rough classes, not specifications):
#
# | memory | visible to | lives in | size | latency |
# |---|---|---|---|---|
# | registers | one thread | the SM's register file | 256 KB per SM | none beyond the instruction |
# | shared memory / L1 | one block / the SM | on the SM | ~100–250 KB per SM | tens of cycles |
# | L2 | the whole GPU | on the chip | tens of MB | a few hundred cycles |
# | local and global memory | one thread / all | device DRAM | tens of GB | several hundred cycles |
#
# How much it matters, counted: kernel v2 of section 6 keeps a V×V tile of C per thread. In
# registers its accumulators cost no memory access; in local memory every multiply-add would read
# and write one:

# %%
print(gm.local_memory_table(N=1024, V=8))

# %% [markdown]
# V = 8 times the operand traffic, all of it to DRAM-backed memory. Keeping the tile in registers
# (fixed sizes, loops the compiler can unroll) is what makes register tiling work.
#
# **"Launching far more blocks than the GPU can run at once (oversubscribing it) is a problem."**
# A common mistake: it is how a GPU hides latency. An SM holds many warps at once and in each
# cycle issues from one that is ready; while one waits several hundred cycles for DRAM, the others
# compute. Blocks that do not fit yet simply start when others finish. The arithmetic (Little's
# law: data in flight = bandwidth × latency): to draw 2 TB/s with ~500 ns of latency, about 1 MB
# must be in flight, i.e. ~8 KB per SM on a 132-SM GPU — some 60 coalesced 128-byte warp loads
# outstanding per SM at every moment: dozens of warps' worth if each waits on one load at a time.
# Too *few* blocks is the problem; the mild cost of many is a partly idle last wave.
#
# ### 9.7 The CPU's side, measured on this machine
#
# A CPU core has no warps, but the same rule holds: memory moves in 64-byte cache lines, SIMD
# instructions load neighbouring elements together, and a prefetcher streams sequential
# addresses ahead of use. First a copy of n/8 float32 out of n = 2²² (one thread): contiguous,
# through an index that happens to be sequential, every 8th element, and through random indices.
#
# **Predict first:** how many times slower than the contiguous copy is the random gather?

# %% tags=["nbval-ignore-output"]
print(gm.simd_table(n=1 << 22))

# %% [markdown]
# Then the same instructions in a different order: summing all n elements through an index, in
# order and as a random permutation (`x.sum()`, with no index, for scale). Only the order of the
# addresses differs, so the gap is what caches and the prefetcher give sequential access:

# %% tags=["nbval-ignore-output"]
print(gm.order_table(n=1 << 22))

# %% [markdown]
# Compare with your prediction. The sequential-index gather loads one element at a time where the
# contiguous copy moves vectors; the random gather also misses the cache on almost every element,
# each miss bringing a 64-byte line for 4 useful bytes — the CPU's version of 32 transactions
# instead of one. The timings vary between runs on a shared machine; the order of the rows does not.

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
#
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
# - A warp's access costs one 128-byte transaction per segment touched: 1 for 32 consecutive
#   floats, min(32, s) at stride s, ≈ 32 at random — counted on real Triton programs too (a naive
#   transpose stores 32 per warp). Shared memory conflicts gcd(s, 32)-way; a `[32][33]` tile
#   removes the 32-way column conflict. A tiled stencil loads n + 2r·cdiv(n, T) instead of n(2r+1).
# - Registers, not local memory, are a thread's fastest storage (local memory lives in DRAM);
#   many more blocks than fit at once is how a GPU hides memory latency; kernel launches are
#   asynchronous and `.item()`-like calls synchronise.
#
# **Exercises** (`exercises/lab03_matmul.py`): `cache_tiled`, `register_tiled` and `tiled` — each has
# a "check your work" cell above. Grade all three with `python -m labkit.grade --lab 03` (or
# `make grade LAB=03`). Section 9's `transactions` is an exercise of Lab 13
# (`exercises/lab13_compilers.py`), graded with `--lab 13`.
