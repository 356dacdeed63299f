# Source of notebooks/02_strides.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 02 — Tensors in memory: strides, views, contiguity
#
# **Learning objectives.** After this lab you can
# 1. say where element `[i, j, ...]` of a tensor lives in its flat storage (offset + strides);
# 2. predict the offset and strides after slicing (with steps), transposing, permuting and broadcasting, all without copying;
# 3. state torch's contiguity rule (size-1 dimensions do not count) and predict when `view` works, when it refuses, and when `reshape` copies;
# 4. check all of this against torch itself, with `labkit.strides`, a small pure-Python model of a strided tensor.
#
# Everything here is counted in **elements**, like `Tensor.stride()` (multiply by `element_size()` for bytes).
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import torch

import labkit
from labkit.claims import claim
from labkit.grading.check import check_your_work
from labkit.show import show
from labkit.strides import lab
from labkit.strides import StridedView, ViewError, contiguous_strides, is_contiguous
from labkit.table import Table


def meta(t):
    """(shape, strides, offset) of a torch tensor or a StridedView."""
    if isinstance(t, StridedView):
        return t.shape, t.strides, t.offset
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def agree(model, t):
    """Does the model match torch in metadata AND element values?"""
    return meta(model) == meta(t) and model.values() == t.flatten().tolist()

# %% [markdown]
# ## 1. A tensor = flat storage + (offset, shape, strides)
#
# A freshly made tensor of shape `(3, 4)` stores its 12 elements row after row. Its strides say how far to move in
# the storage for one step along each dimension: `(4, 1)`. Element `[i, j]` is at `offset + i*4 + j*1`.
# The model below uses the numbers 0..11 as storage, so **an element's value is its storage position**.
# The row-major strides of any shape come from one backwards product:

# %%
show(contiguous_strides)

# %%
x = torch.arange(12).reshape(3, 4)
m = StridedView.arange(3, 4)
print("torch :", meta(x))
print("model :", meta(m))
print("row-major strides of (3, 4):", contiguous_strides((3, 4)))
ok = all(x[i, j].item() == x.storage_offset() + i * x.stride(0) + j * x.stride(1) for i in range(3) for j in range(4))
claim("x[i, j] == storage[offset + i*stride0 + j*stride1] for all 12 elements", ok)
claim("the model's (shape, strides, offset) and row-major strides are torch's",
      meta(m) == meta(x) and contiguous_strides((3, 4)) == x.stride() == (4, 1), f"{meta(x)}")

# %% [markdown]
# ## 2. Slicing moves the offset and multiplies strides — no copy
#
# Slicing `start:stop:step` on a dimension with stride `s` adds `start*s` to the offset, makes the stride `step*s`,
# and leaves `ceil((stop - start) / step)` elements (after clamping `start`/`stop` to the size).
# (`labkit.strides`' own version is the answer to the first exercise, so it is not shown here; once yours
# passes, compare it with `show(StridedView.slice)`.)

# %% [markdown]
# **Worked example.** `A` is a 4×5 matrix, strides `(5, 1)`. `A[1:, 2:4]` starts at row 1, column 2,
# so its offset is `1·5 + 2·1 = 7`; 3 rows and 2 columns are left, and one step down a row or along
# a column still moves 5 or 1 storage elements, so the strides stay `(5, 1)`. The first line below
# computes it, in the model and in torch, and checks that torch did not copy (`shared`).
#
# **Predict first:** offset, shape and strides of `A[:, ::2]` and of `A[0:4:3, 1:5:3]`.

# %%
A = torch.arange(20).reshape(4, 5)
mA = StridedView.arange(4, 5)
results = []
keys = {"1:, 2:4": (slice(1, None), slice(2, 4)), ":, ::2": (slice(None), slice(None, None, 2)),
        "0:4:3, 1:5:3": (slice(0, 4, 3), slice(1, 5, 3)), "1:2, :": (slice(1, 2), slice(None)),
        ":, 3": (slice(None), 3)}
for shown, key in keys.items():
    t, v = A[key], mA[key]
    same = t.untyped_storage().data_ptr() == A.untyped_storage().data_ptr()
    print(f"A[{shown:>12}] model {str(meta(v)):22} torch {str(meta(t)):22} agree={agree(v, t)} "
          f"shared={same}")
    results.append(agree(v, t) and same)
claim("A[1:, 2:4] starts at offset 7 with strides (5, 1)", meta(A[1:, 2:4]) == ((3, 2), (5, 1), 7),
      f"{meta(A[1:, 2:4])}")
claim("every slice agrees with torch and shares A's storage (no copy)", all(results), f"{len(results)} slices")

# %% [markdown]
# The length uses a *ceiling*: `0:9:2` keeps 0, 2, 4, 6, 8 — five elements, not `9 // 2 = 4`.

# %%
r = StridedView.arange(10)
lengths = []
for start, stop, step in [(0, 9, 2), (1, 10, 3), (0, 10, 3), (7, 100, 1), (12, 20, 1)]:
    v, t = r.slice(0, start, stop, step), torch.arange(10)[start:stop:step]
    print(f"[{start}:{stop}:{step}] -> length {v.shape[0]} (torch {t.shape[0]}), offset {v.offset} "
          f"(torch {t.storage_offset()}), values {v.values()}")
    lengths.append((v.shape[0], t.shape[0]))
claim("0:9:2 keeps five elements, the ceiling of 9/2, in the model and in torch", lengths[0] == (5, 5))
claim("the model's lengths are torch's, clamped stops and empty slices included",
      all(a == b for a, b in lengths), f"{[a for a, _ in lengths]}")

# %% [markdown]
# ### Exercise: `slice_view`
#
# Write `slice_view(shape, strides, offset, dim, start, stop, step)` in `exercises/lab02_strides.py`.
# The next cell compares yours with torch on six cases (an empty slice and a clamped stop among
# them), draws your answer on its storage (the first case you get wrong, if any), then grades it.

# %%
check_your_work("lab02_strides", "slice_view")

# %% [markdown]
# ## 3. Transpose and permute swap strides
#
# `t.transpose(0, 1)` swaps the sizes and the strides; the storage and the offset do not change. `permute(dims)`
# puts old dimension `dims[i]` at position `i`. The result reads the same storage in a different order, so it is
# no longer contiguous.

# %% [markdown]
# **Predict first:** the strides of `A.t()` (A is 4×5, strides `(5, 1)`), and of
# `B.permute(2, 0, 1)` for a contiguous `B` of shape `(2, 3, 4)`.

# %%
T, mT = A.t(), mA.transpose(0, 1)
print("A.t()           model", meta(mT), " torch", meta(T), " agree", agree(mT, T))
print("contiguous?     model", mT.is_contiguous(), " torch", T.is_contiguous())
B = torch.arange(24).reshape(2, 3, 4)
mB = StridedView.arange(2, 3, 4)
for dims in [(1, 2, 0), (2, 0, 1), (2, 1, 0)]:
    print(f"permute{dims}: model {meta(mB.permute(*dims))} torch {meta(B.permute(dims))} "
          f"agree={agree(mB.permute(*dims), B.permute(dims))}")
claim("A.t() swaps the strides to (1, 5) and is not contiguous, in the model and in torch",
      T.stride() == (1, 5) and agree(mT, T) and not T.is_contiguous() and not mT.is_contiguous())
claim("permute(2, 0, 1) of a contiguous (2, 3, 4) has strides (1, 12, 4); the model agrees on all three",
      B.permute(2, 0, 1).stride() == (1, 12, 4)
      and all(agree(mB.permute(*d), B.permute(d)) for d in [(1, 2, 0), (2, 0, 1), (2, 1, 0)]))

# %% [markdown]
# ### Exercise: `permute_view`
#
# Write `permute_view(shape, strides, offset, dims)`. The cell compares yours with torch on four
# permutations (one of them not its own inverse, so mixing up `dims` and its inverse shows), draws your
# answer on its storage (the first case you get wrong, if any), then grades the exercise.

# %%
check_your_work("lab02_strides", "permute_view")

# %% [markdown]
# ## 4. Broadcasting is stride 0
#
# Adding a `(1, 3)` row to a `(4, 3)` matrix does not copy the row four times: `expand` gives the size-1 dimension
# stride 0, so all four rows read the same three storage elements. New leading dimensions get stride 0 too:

# %%
show(StridedView.expand)

# %% [markdown]
# **Predict first:** how many bytes of storage lie behind `torch.arange(3).reshape(1, 3).expand(4, 3)`
# (int64: 8 bytes per element)?

# %%
b = torch.arange(3).reshape(1, 3)
bb, mbb = b.expand(4, 3), StridedView.arange(1, 3).expand(4, 3)
print("expand(4, 3): model", meta(mbb), " torch", meta(bb), " agree", agree(mbb, bb))
print("bytes of storage behind the (4, 3) view:", bb.untyped_storage().nbytes(), "=", 3, "elements x",
      bb.element_size(), "bytes")
claim("a (1, 3) int64 row expanded to (4, 3) keeps 24 bytes; the new rows have stride 0",
      bb.untyped_storage().nbytes() == 24 and bb.stride() == (0, 1) and agree(mbb, bb), f"strides {bb.stride()}")
print("a new leading dim is stride 0 too:", meta(StridedView.arange(3).expand(2, 4, 3)),
      "torch", meta(torch.arange(3).expand(2, 4, 3)))

# %% [markdown]
# ## 5. What "contiguous" means to torch
#
# A tensor is contiguous when walking its elements in row-major order walks the storage 0, 1, 2, … from the
# offset. Torch checks this from the last dimension: each stride must equal the product of the sizes after it —
# **except that dimensions of size 1 are skipped** (you never step along them, so their stride is irrelevant), and a
# tensor with no elements is always contiguous.

# %% [markdown]
# **Predict first:** which of these are contiguous — shape `(1, 5)` with strides `(99, 1)`? `(5, 1)` with
# `(1, 7)`? `(3, 4)` with `(8, 1)`?

# %%
cases = [((2, 3), (3, 1)), ((2, 3), (1, 2)), ((1, 5), (99, 1)), ((5, 1), (1, 7)), ((3, 1, 4), (4, 50, 1)),
         ((3, 4), (8, 1)), ((3, 4), (0, 1)), ((2, 0, 3), (7, 7, 7))]
verdicts = {}
for shape, strides in cases:
    t = torch.empty(64).as_strided(shape, strides)
    print(f"shape {str(shape):10} strides {str(strides):12} model {is_contiguous(shape, strides)!s:5} "
          f"torch {t.is_contiguous()}")
    verdicts[shape, strides] = (is_contiguous(shape, strides), t.is_contiguous())
claim("the model's rule gives torch's verdict in all 8 cases", all(a == b for a, b in verdicts.values()))
claim("size-1 dimensions do not count: (1, 5) with strides (99, 1) and (5, 1) with (1, 7) are contiguous",
      verdicts[(1, 5), (99, 1)][1] and verdicts[(5, 1), (1, 7)][1] and not verdicts[(3, 4), (8, 1)][1])

# %% [markdown]
# ### Exercise: `is_contiguous`
#
# Write `is_contiguous(shape, strides)` with torch's rule. The cell compares yours with torch on the
# seven cases above and draws one of them on its storage (the first you get wrong, if any).

# %%
check_your_work("lab02_strides", "is_contiguous")

# %% [markdown]
# ## 6. `view` vs `reshape`
#
# `view` must reuse the storage, so it needs strides for the new shape that visit the same elements in the same
# order. Torch's algorithm (ATen `computeStride`, ported in `labkit.strides.view_strides`) groups the old dimensions,
# from the last, into *runs* that are contiguous among themselves (`stride[d-1] == stride[d] * size[d]`). A new
# dimension may split or merge dimensions *inside* a run but may not span two runs. When no view exists, `view`
# raises and `reshape` makes a contiguous copy first — in the model, `reshape` is just that rule (the
# run-matching itself, `view_strides`, is this section's exercise):

# %%
show(StridedView.reshape)

# %% [markdown]
# **Predict first:** a transposed 4×3 view (strides `(1, 4)`): can it be `.view(12)`? `.view(2, 2, 3)`?

# %%
tests = [((3, 4), "contiguous", (12,)), ((4, 3), "transposed", (12,)), ((4, 3), "transposed", (2, 2, 3)),
         ((3, 4), "every other row", (12,)), ((3, 4), "every other row", (3, 2, 2)), ((2, 3), "broadcast rows", (6,))]


def build(shape, how):
    if how == "contiguous":
        return torch.arange(12).reshape(shape), StridedView.arange(*shape)
    if how == "transposed":
        return torch.arange(12).reshape(shape[::-1]).t(), StridedView.arange(*shape[::-1]).transpose(0, 1)
    if how == "every other row":
        return torch.arange(24).reshape(6, 4)[::2], StridedView.arange(6, 4)[::2]
    return torch.arange(3).expand(*shape), StridedView.arange(3).expand(*shape)


rows = []
for shape, how, new in tests:
    t, v = build(shape, how)
    try:
        tv = t.view(new).stride()
    except RuntimeError:
        tv = "refused"
    try:
        mv = v.view(*new).strides
    except ViewError:
        mv = "refused"
    copied = t.reshape(new).untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    rows.append((how, meta(t)[1], f"view{new}", tv, mv, copied,
                 not v.reshape(*new).shares_storage_with(v)))
print(Table(["tensor", "strides", "asked", "torch strides", "model strides", "reshape copies",
             "(model)"], rows))
claim("the model's view strides are torch's in every case, refusals included",
      all(tuple(r[3]) == tuple(r[4]) if r[3] != "refused" else r[4] == "refused" for r in rows))
claim("reshape copies exactly where view refuses, in torch and in the model",
      all(r[5] == r[6] == (r[3] == "refused") for r in rows),
      f"{sum(r[5] for r in rows)} of {len(rows)} copied")

# %% [markdown]
# The model's error says what went wrong and what to do, like torch's:

# %%
import textwrap

try:
    StridedView.arange(3, 4).transpose(0, 1).view(12)
except ViewError as e:
    print(textwrap.fill(f"ViewError: {e}", 100, subsequent_indent="  "))
try:
    torch.arange(12).reshape(3, 4).t().view(12)
except RuntimeError as e:
    print(textwrap.fill(f"torch: {str(e).splitlines()[0]}", 100, subsequent_indent="  "))

# %% [markdown]
# New dimensions of size 1 need a stride too, although nobody ever steps along them. Torch gives each
# the stride it would have if its run were contiguous — the product of the new sizes to its right in
# that run times the run's innermost stride — and a size-1 dimension between two runs goes with the run
# on its right.
#
# **Predict first:** the transposed 4×3 view has two runs, `(size 4, stride 1)` and `(size 3, stride 4)`.
# What strides does torch give `.view(4, 3, 1)`, `.view(4, 1, 3)` and `.view(1, 4, 3)`?

# %%
s = torch.arange(12).reshape(3, 4).t()
same = []
for new in [(4, 3, 1), (4, 1, 3), (1, 4, 3)]:
    model_strides = StridedView.arange(3, 4).transpose(0, 1).view(*new).strides
    print(f"transposed (4, 3) strides {s.stride()} .view{new}: torch {s.view(new).stride()}, "
          f"model {model_strides}")
    same.append(s.view(new).stride() == model_strides)
claim("the model gives new size-1 dimensions torch's strides", all(same), f"{len(same)} views")

# %% [markdown]
# ### Exercise: `view_strides`
#
# The last and hardest exercise: the strides of `t.view(new_shape)`, or `None` where torch refuses (its
# docstring spells out the size-1 rule above). The cell compares yours with torch on eight cases, then
# draws the tensor and your view of it on the storage: a right view reads the same storage positions in
# the same order.

# %%
check_your_work("lab02_strides", "view_strides")

# %% [markdown] slide="slide"
# ## 7. Common mistakes
#
# Three statements you will often meet about strides, each checked here.
#
# 1. **"`len(strides)` equals `A.shape`."** A tensor has one stride per *dimension*: `len(strides)` is
#    `A.ndim` (= `len(A.shape)`), while the entries of `A.shape` are sizes. For a `(2, 3, 4)` tensor:
#    3 strides, not 2·3·4 = 24 of them.
# 2. **"Transposing a row-major `[m, n]` array turns its strides `[n, 1]` into `[1, m]`."** Transpose
#    *swaps* the strides: `[1, n]`. A stride belongs to the data along that dimension, not to the size
#    that ends up next to it. Strides `(1, m)` read different elements (below, m = 3, n = 5).
# 3. **"A slice is never contiguous."** Slicing whole rows of a row-major tensor (`A[1:3]`, `A[2]`)
#    keeps it contiguous — only the offset moves. Cutting inside rows (`A[:, 1:3]`), taking a column, or
#    a step (`A[::2]`) leaves gaps.
#
# **Predict first:** for a contiguous 3×5 `A`, which of `A[1:3]`, `A[2]`, `A[:, 1:3]`, `A[:, 0]`,
# `A[::2]` are contiguous?

# %% slide="subslide"
B3 = torch.zeros(2, 3, 4)
print(f"(2, 3, 4): strides {B3.stride()}, len(strides) = {len(B3.stride())} = ndim = {B3.ndim}, "
      f"numel = {B3.numel()}")
m, n = 3, 5
A35 = torch.arange(m * n).reshape(m, n)
wrong = A35.as_strided((n, m), (1, m))
print(f"A ({m}x{n}) strides {A35.stride()}; A.t() strides {A35.t().stride()} = (1, n), not (1, m)")
print(f"A.t()[1]            = {A35.t()[1].tolist()}  (column 1 of A)")
print(f"strides (1, m): [1] = {wrong[1].tolist()}  (not a column of A)")
contig = {}
for name, sl in [("A[1:3]", A35[1:3]), ("A[2]", A35[2]), ("A[:, 1:3]", A35[:, 1:3]),
                 ("A[:, 0]", A35[:, 0]), ("A[::2]", A35[::2])]:
    print(f"{name:10} offset {sl.storage_offset():2} strides {str(sl.stride()):8} "
          f"contiguous {sl.is_contiguous()!s:5} (model: {is_contiguous(sl.shape, sl.stride())})")
    contig[name] = sl.is_contiguous()
claim("a (2, 3, 4) tensor has ndim = 3 strides, not numel = 24", len(B3.stride()) == B3.ndim == 3 != B3.numel())
claim("transposing a row-major [m, n] gives strides (1, n); (1, m) reads something else",
      A35.t().stride() == (1, n) and wrong[1].tolist() != A35.t()[1].tolist(), f"{A35.t().stride()}")
claim("whole-row slices stay contiguous; column cuts, a column and a step do not",
      [contig[k] for k in contig] == [True, True, False, False, False],
      ", ".join(k for k in contig if contig[k]) + " only")

# %% [markdown]
# ## 8. How we know the model is right
#
# Every rule above is checked against torch in `tests/test_strides.py`, on hundreds of random strided
# tensors (made with `torch.as_strided`) sent through random chains of slices, transposes, unsqueezes,
# expands, views, reshapes and copies — metadata and element values after every step. One such chain:

# %%
t, v = torch.arange(24).as_strided((4, 3), (6, 2), 1), StridedView(range(24), 1, (4, 3), (6, 2))
steps = [("[1:, ::2]", lambda a: a[1:, ::2]), ("transpose(0, 1)", lambda a: a.transpose(0, 1)),
         ("unsqueeze(1)", lambda a: a.unsqueeze(1)), ("reshape(-1)", lambda a: a.reshape(-1))]
chain_ok = []
for name, op in steps:
    t, v = op(t), op(v)
    print(f"{name:16} torch {str(meta(t)):26} model {str(meta(v)):26} agree: {agree(v, t)}")
    chain_ok.append(agree(v, t))
claim("the model agrees with torch after every step of the chain", all(chain_ok), f"{len(chain_ok)} steps")

# %% [markdown] slide="slide"
# ## 9. Zero-copy is not free: access order matters
#
# A transposed view costs nothing to make, but reading it walks the storage with a large stride, which the caches
# dislike. Below, a running sum (`cumsum`) along each row of a big matrix vs along each row of its
# transpose — the same arithmetic, a different walk through memory (timings vary, so this cell's
# output is not compared).
#
# **Predict first:** how much slower is the transposed walk?

# %% tags=["nbval-ignore-output"] slide="subslide"
from labkit.bench import median_time

big = torch.randn(2048, 2048)
t_view, t_copy = median_time(lambda: big.t(), repeat=5), median_time(lambda: big.t().contiguous(), repeat=5)
t_rows, t_cols = median_time(lambda: big.cumsum(1), repeat=5), median_time(lambda: big.t().cumsum(1), repeat=5)
print(f"view (transpose) : {t_view * 1e6:8.1f} us (metadata only)")
print(f"contiguous()     : {t_copy * 1e3:8.2f} ms (copies 16 MiB)")
print(f"cumsum rows, contiguous : {t_rows * 1e3:8.2f} ms")
print(f"cumsum rows, transposed : {t_cols * 1e3:8.2f} ms")
claim("making the transposed view costs over 100x less than copying it", 100 * t_view < t_copy,
      f"{t_view * 1e6:.1f} us vs {t_copy * 1e3:.2f} ms")
claim("the same cumsum walking the transposed view is slower", t_cols > 1.5 * t_rows,
      f"{t_cols / t_rows:.1f}x")

# %% [markdown]
# ## 10. Explore: a view on its storage
#
# Cells in orange are the storage elements the view reads (`x4` when stride 0 makes several elements read the same
# cell). Below the storage, the view itself: each cell shows which storage position it reads. First two fixed
# examples, then a widget whose sliders change offset, shape and strides (run the cell to use them).

# %%
from IPython.display import HTML, display

from labkit.strides import draw as vs

display(HTML(vs.storage_html(StridedView.arange(4, 6)[1:, ::2], title="A[1:, ::2] of a 4x6 storage")))
display(HTML(vs.storage_html(StridedView.arange(1, 3).expand(4, 3), title="a (1, 3) row expanded to (4, 3)")))
lab.explorer(24)

# %% [markdown]
# ## 11. Worked problems
#
# Try each before opening the answer.
#
# **Problem 1.** A float32 tensor of shape `(8, 16, 32)` is contiguous. What are its strides in elements and
# in bytes? At which byte offset does element `[2, 3, 4]` start?
#
# <details><summary>Answer</summary>
#
# Strides `(512, 32, 1)` elements = `(2048, 128, 4)` bytes. Element `[2, 3, 4]` is at
# `2·512 + 3·32 + 4 = 1124` elements, byte **4496**.
#
# </details>
#
# **Problem 2.** Same tensor; `y = x[1:, ::4, 8:]`. Give `y`'s shape, strides and storage offset.
#
# <details><summary>Answer</summary>
#
# Shape `(7, 4, 24)`, strides `(512, 128, 1)`, offset `1·512 + 0 + 8 = 520`. No copy.
#
# </details>
#
# **Problem 3.** `z = x.permute(2, 0, 1)`. Is it contiguous? Does `z.view(32, 128)` work, and
# `z.view(32 * 8, 16)`?
#
# <details><summary>Answer</summary>
#
# `z` has shape `(32, 8, 16)`, strides `(1, 512, 32)`: not contiguous. Its last two dimensions form one
# run (512 = 32·16), the first is a run of its own. `view(32, 128)` merges inside that run:
# **works**, strides `(1, 32)`. `view(256, 16)` would merge dims 0 and 1, which lie in different runs:
# **refused** (`reshape` copies).
#
# </details>
#
# **Problem 4.** A bias of shape `(1024,)` is added to activations of shape `(64, 128, 1024)`. How many bytes
# does the broadcast bias occupy (float32), and what are its strides as a `(64, 128, 1024)` view?
#
# <details><summary>Answer</summary>
#
# 4096 bytes, the 1024 elements once; strides `(0, 0, 1)`.
#
# </details>
#
# **Problem 5.** `q` is a contiguous `(6, 8)` tensor. Does `q[:, ::2].view(24)` work? And
# `q[:, :4].view(24)`? What are the strides of `q[:, :4].view(6, 1, 4)` and of `q[:, :4].view(6, 4, 1)`?
#
# <details><summary>Answer</summary>
#
# `q[:, ::2]` has shape `(6, 4)`, strides `(8, 2)`: 8 = 2·4, so its two dimensions form **one run**
# (every other element of the whole storage) and `view(24)` **works**, stride `(2,)`. `q[:, :4]` has
# strides `(8, 1)`: 8 ≠ 1·4, two runs, so `view(24)` is **refused**. A size-1 dimension between the two
# runs joins the inner one and gets 1·4: `view(6, 1, 4)` has strides **`(8, 4, 1)`**; a trailing one
# gets the inner run's stride: `view(6, 4, 1)` has **`(8, 1, 1)`**.
#
# </details>

# %%
# The answers above, asked of torch.
x = torch.empty(8, 16, 32)
y, z, q = x[1:, ::4, 8:], x.permute(2, 0, 1), torch.empty(6, 8)
claim("P1: strides (512, 32, 1) elements; [2, 3, 4] starts at byte 4496",
      x.stride() == (512, 32, 1) and x[2, 3, 4].data_ptr() - x.data_ptr() == 4496)
claim("P2: shape (7, 4, 24), strides (512, 128, 1), offset 520",
      meta(y) == ((7, 4, 24), (512, 128, 1), 520))
try:
    z.view(256, 16)
    refused = False
except RuntimeError:
    refused = True
claim("P3: z is not contiguous; view(32, 128) has strides (1, 32); view(256, 16) is refused",
      not z.is_contiguous() and z.view(32, 128).stride() == (1, 32) and refused)
bias = torch.empty(1024).expand(64, 128, 1024)
claim("P4: the broadcast bias keeps 4096 bytes, strides (0, 0, 1)",
      bias.untyped_storage().nbytes() == 4096 and bias.stride() == (0, 0, 1))
claim("P5: q[:, ::2].view(24) has stride (2,); q[:, :4].view(6, 1, 4) and view(6, 4, 1) as stated",
      q[:, ::2].view(24).stride() == (2,) and q[:, :4].view(6, 1, 4).stride() == (8, 4, 1)
      and q[:, :4].view(6, 4, 1).stride() == (8, 1, 1))

# %% [markdown]
# ## Summary
#
# - A tensor is storage + `(offset, shape, strides)`; element `[i0, i1, …]` is at `offset + Σ i_d·stride_d`.
# - Slice: offset `+= start·stride`, stride `*= step`, length `ceil((stop−start)/step)`. Transpose/permute: reorder
#   sizes and strides. Broadcast: stride 0. None of these copy.
# - Contiguous (torch's rule): row-major strides once size-1 dimensions are ignored.
# - `view` works when each new dimension stays inside one run of mutually contiguous old dimensions; otherwise it
#   raises, and `reshape` copies (`contiguous()` then view). New size-1 dimensions get the stride they would
#   have if their run were contiguous.
#
# ## Further reading
#
# * PyTorch documentation, *Tensor Views* — which operations return views:
#   <https://pytorch.org/docs/stable/tensor_view.html>; `torch.as_strided`:
#   <https://pytorch.org/docs/stable/generated/torch.as_strided.html>; `torch.Tensor.stride`:
#   <https://pytorch.org/docs/stable/generated/torch.Tensor.stride.html>.
# * NumPy documentation, *The N-dimensional array (ndarray)*, section "Internal memory layout of an
#   ndarray" — strides in bytes, C and Fortran order:
#   <https://numpy.org/doc/stable/reference/arrays.ndarray.html>.
# * E. Z. Yang, *PyTorch internals* (blog post, 2019) — tensors as storage + sizes/strides/offset, and
#   how views share storage: <http://blog.ezyang.com/2019/05/pytorch-internals/>.
#
# ## Exercises
#
# Open `exercises/lab02_strides.py` and implement `slice_view`, `permute_view`, `is_contiguous` and
# `view_strides`; the docstrings are the spec. Each section's "check your work" cell above runs yours
# against torch, draws it on its storage and grades it; grade all four with
#
#     python -m labkit.grade --lab 02        # or: make grade LAB=02
