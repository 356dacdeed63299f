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

# %%
import torch

import labkit
from labkit.strides import StridedView, ViewError, contiguous_strides, is_contiguous


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

# %%
x = torch.arange(12).reshape(3, 4)
m = StridedView.arange(3, 4)
print("torch :", meta(x))
print("model :", meta(m))
print("row-major strides of (3, 4):", contiguous_strides((3, 4)))
ok = all(x[i, j].item() == x.storage_offset() + i * x.stride(0) + j * x.stride(1) for i in range(3) for j in range(4))
print("x[i, j] == storage[offset + i*stride0 + j*stride1] for all 12 elements:", ok)

# %% [markdown]
# ## 2. Slicing moves the offset and multiplies strides — no copy
#
# Slicing `start:stop:step` on a dimension with stride `s` adds `start*s` to the offset, makes the stride `step*s`,
# and leaves `ceil((stop - start) / step)` elements (after clamping `start`/`stop` to the size).
# The seed notes' example: rows `1:`, columns `2:4` of a 4×5 matrix → offset `1*5 + 2 = 7`, strides stay `(5, 1)`.

# %%
A = torch.arange(20).reshape(4, 5)
mA = StridedView.arange(4, 5)
for key in [(slice(1, None), slice(2, 4)), (slice(None), slice(None, None, 2)), (slice(0, 4, 3), slice(1, 5, 3)),
            (slice(1, 2), slice(None)), (slice(None), 3)]:
    t, v = A[key], mA[key]
    shown = ", ".join(f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}{':' + str(k.step) if k.step else ''}" if isinstance(k, slice)
                      else str(k) for k in key)
    print(f"A[{shown:>10}]  model {meta(v)}  torch {meta(t)}  agree={agree(v, t)}  "
          f"shares storage={t.untyped_storage().data_ptr() == A.untyped_storage().data_ptr()}")

# %% [markdown]
# The length uses a *ceiling*: `0:9:2` keeps 0, 2, 4, 6, 8 — five elements, not `9 // 2 = 4`.

# %%
r = StridedView.arange(10)
for start, stop, step in [(0, 9, 2), (1, 10, 3), (0, 10, 3), (7, 100, 1), (12, 20, 1)]:
    v, t = r.slice(0, start, stop, step), torch.arange(10)[start:stop:step]
    print(f"[{start}:{stop}:{step}] -> length {v.shape[0]} (torch {t.shape[0]}), offset {v.offset} "
          f"(torch {t.storage_offset()}), values {v.values()}")

# %% [markdown]
# ## 3. Transpose and permute swap strides
#
# `t.transpose(0, 1)` swaps the sizes and the strides; the storage and the offset do not change. `permute(dims)`
# puts old dimension `dims[i]` at position `i`. The result reads the same storage in a different order, so it is
# no longer contiguous.

# %%
T, mT = A.t(), mA.transpose(0, 1)
print("A.t()           model", meta(mT), " torch", meta(T), " agree", agree(mT, T))
print("contiguous?     model", mT.is_contiguous(), " torch", T.is_contiguous())
B = torch.arange(24).reshape(2, 3, 4)
mB = StridedView.arange(2, 3, 4)
for dims in [(1, 2, 0), (2, 0, 1), (2, 1, 0)]:
    print(f"permute{dims}: model {meta(mB.permute(*dims))} torch {meta(B.permute(dims))} "
          f"agree={agree(mB.permute(*dims), B.permute(dims))}")

# %% [markdown]
# ## 4. Broadcasting is stride 0
#
# Adding a `(1, 3)` row to a `(4, 3)` matrix does not copy the row four times: `expand` gives the size-1 dimension
# stride 0, so all four rows read the same three storage elements.

# %%
b = torch.arange(3).reshape(1, 3)
bb, mbb = b.expand(4, 3), StridedView.arange(1, 3).expand(4, 3)
print("expand(4, 3): model", meta(mbb), " torch", meta(bb), " agree", agree(mbb, bb))
print("bytes of storage behind the (4, 3) view:", bb.untyped_storage().nbytes(), "=", 3, "elements x",
      bb.element_size(), "bytes")
print("a new leading dim is stride 0 too:", meta(StridedView.arange(3).expand(2, 4, 3)),
      "torch", meta(torch.arange(3).expand(2, 4, 3)))

# %% [markdown]
# ## 5. What "contiguous" means to torch
#
# A tensor is contiguous when walking its elements in row-major order walks the storage 0, 1, 2, … from the
# offset. Torch checks this from the last dimension: each stride must equal the product of the sizes after it —
# **except that dimensions of size 1 are skipped** (you never step along them, so their stride is irrelevant), and a
# tensor with no elements is always contiguous.

# %%
cases = [((2, 3), (3, 1)), ((2, 3), (1, 2)), ((1, 5), (99, 1)), ((5, 1), (1, 7)), ((3, 1, 4), (4, 50, 1)),
         ((3, 4), (8, 1)), ((3, 4), (0, 1)), ((2, 0, 3), (7, 7, 7))]
for shape, strides in cases:
    t = torch.empty(64).as_strided(shape, strides)
    print(f"shape {str(shape):10} strides {str(strides):12} model {is_contiguous(shape, strides)!s:5} "
          f"torch {t.is_contiguous()}")

# %% [markdown]
# ## 6. `view` vs `reshape`
#
# `view` must reuse the storage, so it needs strides for the new shape that visit the same elements in the same
# order. Torch's algorithm (ATen `computeStride`, ported in `labkit.strides.view_strides`) groups the old dimensions,
# from the last, into *runs* that are contiguous among themselves (`stride[d-1] == stride[d] * size[d]`). A new
# dimension may split or merge dimensions *inside* a run but may not span two runs. When no view exists, `view`
# raises and `reshape` makes a contiguous copy first.

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


for shape, how, new in tests:
    t, v = build(shape, how)
    try:
        tv = meta(t.view(new))
    except RuntimeError:
        tv = "refused"
    try:
        mv = meta(v.view(*new))
    except ViewError:
        mv = "refused"
    copied = t.reshape(new).untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    print(f"{how:16} {str(meta(t)[:2]):18} .view{str(new):10} torch {str(tv):32} model {str(mv):32} "
          f"reshape copies: {copied} (model: {not v.reshape(*new).shares_storage_with(v)})")

# %% [markdown]
# The model's error says what went wrong and what to do, like torch's:

# %%
try:
    StridedView.arange(3, 4).transpose(0, 1).view(12)
except ViewError as e:
    print("ViewError:", e)
try:
    torch.arange(12).reshape(3, 4).t().view(12)
except RuntimeError as e:
    print("torch    :", str(e).splitlines()[0])

# %% [markdown]
# ## 7. Checking the model against torch on many random cases
#
# The unit tests (`tests/test_strides.py`) do this with hypothesis; here is a seeded sample: random strided tensors
# (via `torch.as_strided`) go through random chains of operations in both torch and the model.

# %%
import random

rng = random.Random(0)
checked = mismatches = refused = 0
for trial in range(300):
    shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
    strides = tuple(rng.randint(0, 6) for _ in shape)
    offset = rng.randint(0, 3)
    need = offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    t = torch.as_strided(torch.arange(need), shape, strides, offset)
    v = StridedView(range(need), offset, shape, strides)
    for _ in range(4):
        op = rng.choice(["slice", "transpose", "view", "reshape", "contiguous", "unsqueeze"])
        d = rng.randrange(t.dim())
        if op == "slice":
            a, s = rng.randint(0, t.shape[d]), rng.randint(1, 3)
            key = (slice(None),) * d + (slice(a, None, s),)
            t, v = t[key], v[key]
        elif op == "transpose":
            e = rng.randrange(t.dim())
            t, v = t.transpose(d, e), v.transpose(d, e)
        elif op == "unsqueeze":
            t, v = t.unsqueeze(d), v.unsqueeze(d)
        elif op == "contiguous":
            t, v = t.contiguous(), v.contiguous()
        else:
            new = (-1,) if t.dim() > 1 else (1, -1)
            if op == "view":
                try:
                    tv = t.view(new)
                except RuntimeError:
                    refused += 1
                    try:
                        v.view(*new)
                        mismatches += 1
                    except ViewError:
                        pass
                    continue
                t, v = tv, v.view(*new)
            else:
                t, v = t.reshape(new), v.reshape(*new)
        checked += 1
        mismatches += not agree(v, t)
print(f"{checked} results compared (metadata and values), {refused} views refused by torch, mismatches: {mismatches}")

# %% [markdown]
# ## 8. Zero-copy is not free: access order matters
#
# A transposed view costs nothing to make, but reading it walks the storage with a large stride, which the caches
# dislike. Summing along each row of a big matrix vs of its transpose (timings vary, so this cell's output is not
# compared):

# %% tags=["nbval-ignore-output"]
from labkit.bench import median_time

big = torch.randn(2048, 2048)
print(f"view (transpose) : {median_time(lambda: big.t(), repeat=5) * 1e6:8.1f} us (metadata only)")
print(f"contiguous()     : {median_time(lambda: big.t().contiguous(), repeat=5) * 1e3:8.2f} ms (copies 16 MiB)")
print(f"cumsum rows, contiguous : {median_time(lambda: big.cumsum(1), repeat=5) * 1e3:8.2f} ms")
print(f"cumsum rows, transposed : {median_time(lambda: big.t().cumsum(1), repeat=5) * 1e3:8.2f} ms")

# %% [markdown]
# ## 9. Explore: a view on its storage
#
# Cells in orange are the storage elements the view reads (`x4` when stride 0 makes several elements read the same
# cell). Below the storage, the view itself: each cell shows which storage position it reads. Frame 0 is shown
# statically; in JupyterLab the sliders change offset, shape and strides.

# %%
from IPython.display import HTML, display

from labkit.viz import strides as vs

display(HTML(vs.storage_html(StridedView.arange(4, 6)[1:, ::2], title="A[1:, ::2] of a 4x6 storage")))
display(HTML(vs.storage_html(StridedView.arange(1, 3).expand(4, 3), title="a (1, 3) row expanded to (4, 3)")))
vs.explorer(24)

# %% [markdown]
# ## Summary
#
# - A tensor is storage + `(offset, shape, strides)`; element `[i0, i1, …]` is at `offset + Σ i_d·stride_d`.
# - Slice: offset `+= start·stride`, stride `*= step`, length `ceil((stop−start)/step)`. Transpose/permute: reorder
#   sizes and strides. Broadcast: stride 0. None of these copy.
# - Contiguous (torch's rule): row-major strides once size-1 dimensions are ignored.
# - `view` works when each new dimension stays inside one run of mutually contiguous old dimensions; otherwise it
#   raises, and `reshape` copies (`contiguous()` then view).
#
# **Exercises** (`exercises/lab02_strides.py`): `slice_view`, `permute_view`, `is_contiguous`, `view_strides`.
# Grade your work with `python -m labkit.grade --lab 02` (or `make grade LAB=02`).
