"""A small model of a strided tensor: flat storage + (offset, shape, strides).

Element ``[i0, i1, ...]`` of a view lives at storage position
``offset + i0*strides[0] + i1*strides[1] + ...`` (all in ELEMENTS, not bytes).
Slicing, transposing, permuting, broadcasting and (when possible) viewing
change only the metadata; ``contiguous()`` and a ``reshape`` that cannot be a
view copy the elements into a new storage.

The rules mirror PyTorch's (checked against ``Tensor.stride()``,
``Tensor.storage_offset()`` and element values in tests/test_strides.py):

- slices clamp like Python's (``start``/``stop`` beyond the size clamp to it,
  negatives count from the end) and need ``step > 0`` (torch refuses negative
  steps); the new length is ``ceil((stop - start) / step)``.
- ``is_contiguous`` ignores dimensions of size 1 (their stride can be anything)
  and every tensor with zero elements is contiguous.
- ``view`` follows ATen's ``computeStride``: the old dimensions are grouped
  into chunks that are contiguous among themselves; each chunk must be split
  or merged by the new shape exactly, otherwise no view exists and
  ``view`` raises ``ViewError`` (``reshape`` copies instead).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

__all__ = [
    "StridedView", "ViewError", "contiguous_strides", "is_contiguous", "view_strides", "slice_view",
    "permute_view",
    "infer_shape", "broadcast_shapes",
]


class ViewError(RuntimeError):
    """The requested shape cannot be a view of the tensor's storage (torch says: use .reshape)."""


def _check_shape(shape: Sequence[int], what: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"{what} must be a sequence of ints, got {type(shape).__name__}")
    out = []
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"{what} entries must be ints, got {s!r} in {tuple(shape)!r}")
        if s < 0:
            raise ValueError(f"{what} entries must be >= 0, got {tuple(shape)!r}")
        out.append(s)
    return tuple(out)


def _check_strides(strides: Sequence[int], ndim: int) -> tuple[int, ...]:
    if isinstance(strides, (str, bytes)) or not isinstance(strides, Sequence):
        raise TypeError(f"strides must be a sequence of ints, got {type(strides).__name__}")
    if len(strides) != ndim:
        raise ValueError(f"strides {tuple(strides)!r} must have one entry per dimension ({ndim})")
    for s in strides:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"strides entries must be ints, got {s!r}")
        if s < 0:
            raise ValueError(f"strides must be >= 0 (torch has no negative strides), got {tuple(strides)!r}")
    return tuple(strides)


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (elements) of a freshly allocated tensor of ``shape``.

    Like torch, a size-0 or size-1 dimension contributes a factor of 1, so
    ``contiguous_strides((2, 0, 3)) == (3, 3, 1)``.
    """
    shape = _check_shape(shape)
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * max(shape[d + 1], 1)
    return tuple(strides)


def slice_view(shape, strides, offset, dim, start, stop, step):
    """(shape, strides, offset) of ``t[..., start:stop:step, ...]`` on dimension ``dim``.

    ``start``, ``stop`` >= 0 and ``step`` >= 1; like Python, ``start`` and ``stop``
    larger than the size are clamped to it, and a stop before start gives length 0.
    """
    # BEGIN SOLUTION
    # HINT: clamp start and stop to the size as Python's slices do; the length is a
    # HINT: ceiling division by step; only this dimension's size, its stride and the offset change.
    size = shape[dim]
    start = min(start, size)
    stop = min(max(stop, start), size)
    length = (stop - start + step - 1) // step
    new_shape = list(shape)
    new_strides = list(strides)
    new_shape[dim] = length
    new_strides[dim] = strides[dim] * step
    return tuple(new_shape), tuple(new_strides), offset + start * strides[dim]
    # END SOLUTION


def permute_view(shape, strides, offset, dims):
    """(shape, strides, offset) of ``t.permute(dims)``: new dimension i is old dimension dims[i]."""
    # BEGIN SOLUTION
    # HINT: a permutation only reorders the (size, stride) pairs; the storage and the offset stay.
    return tuple(shape[d] for d in dims), tuple(strides[d] for d in dims), offset
    # END SOLUTION


def _is_contiguous(shape, strides):
    """True when torch's ``is_contiguous()`` would be: row-major order after ignoring
    size-1 dimensions (their stride does not matter); a tensor with no elements is contiguous."""
    # BEGIN SOLUTION
    # HINT: walk the dimensions from the last, skipping size-1 ones: each stride must be the
    # HINT: product of the sizes to its right.
    if 0 in shape:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True
    # END SOLUTION


def _view_strides(shape, strides, new_shape):
    """Strides of ``t.view(new_shape)``, or None where torch's view would raise.

    ``new_shape`` has the same number of elements (>= 1) and no -1. Torch's rule:
    walk the old dimensions from the last and group them into runs that are
    contiguous with each other. Dimension d-1 continues the run of d when it has
    size 1, or when stride[d-1] == b * n, with b the run's innermost stride (the
    stride of its last dimension) and n the run's element count so far (for two
    neighbours without size-1 dimensions: stride[d-1] == stride[d] * shape[d]).
    A view exists when every new dimension lies inside one run.

    Strides: the runs take the new dimensions from the right, each run as many as
    multiply to its element count plus the size-1 ones just left of them; a new
    dimension's stride is its run's b times the product of the new sizes to its
    right in that run. So a new size-1 dimension between two runs belongs to the
    run on its right (b times that run's element count), a trailing one gets the
    innermost run's b, a leading one the outermost run's b times its element
    count; a 0-d tensor gives all 1. E.g. shape (2, 3, 4), strides (12, 4, 1) viewed as
    (2, 1, 3, 4) gives (12, 12, 4, 1); shape (4, 3), strides (1, 4) (a transpose)
    viewed as (4, 3, 1) gives (1, 4, 4), as (4, 1, 3) gives (1, 12, 4) and as
    (1, 4, 3) gives (4, 1, 4).
    """
    # BEGIN SOLUTION
    # HINT: group the old dimensions into contiguous runs from the right (a run's base stride
    # HINT: times its element count so far); hand each run the new dimensions whose sizes multiply to
    # HINT: its count; return None when a new dimension would straddle two runs.
    if len(shape) == 0:
        return tuple(1 for _ in new_shape)
    out = [0] * len(new_shape)
    v = len(new_shape) - 1
    base = strides[-1]  # stride of the innermost dim of the current run
    run_numel = 1
    view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        run_numel *= shape[d]
        run_ends = d == 0 or (shape[d - 1] != 1 and strides[d - 1] != run_numel * base)
        if not run_ends:
            continue
        while v >= 0 and (view_numel < run_numel or new_shape[v] == 1):
            out[v] = view_numel * base
            view_numel *= new_shape[v]
            v -= 1
        if view_numel != run_numel:
            return None
        if d > 0:
            base = strides[d - 1]
            run_numel = 1
            view_numel = 1
    return tuple(out) if v == -1 else None
    # END SOLUTION


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Torch's rule: row-major order once size-1 dims are ignored; empty tensors are contiguous
    (Lab 02's `_is_contiguous`, arguments checked)."""
    shape = _check_shape(shape)
    return _is_contiguous(shape, _check_strides(strides, len(shape)))


def infer_shape(new_shape: Sequence[int], numel: int) -> tuple[int, ...]:
    """Replace one ``-1`` in ``new_shape`` so the element count is ``numel``; check the count."""
    if isinstance(new_shape, (str, bytes)) or not isinstance(new_shape, Sequence):
        raise TypeError(f"shape must be a sequence of ints, got {type(new_shape).__name__}")
    shape = list(new_shape)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in shape):
        raise TypeError(f"shape entries must be ints, got {tuple(new_shape)!r}")
    holes = [i for i, s in enumerate(shape) if s == -1]
    if len(holes) > 1:
        raise ValueError(f"only one dimension can be -1, got {tuple(new_shape)!r}")
    if any(s < -1 for s in shape):
        raise ValueError(f"invalid shape {tuple(new_shape)!r}: sizes must be >= 0 or a single -1")
    known = math.prod(s for s in shape if s != -1)
    if holes:
        if known == 0 or numel % known:
            raise ValueError(f"shape {tuple(new_shape)!r} is invalid for input of size {numel}")
        shape[holes[0]] = numel // known
    elif known != numel:
        raise ValueError(f"shape {tuple(new_shape)!r} is invalid for input of size {numel}")
    return tuple(shape)


def view_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> tuple[int, ...] | None:
    """Strides of ``new_shape`` viewing the same elements, or None when no view exists.

    A port of ATen's ``computeStride`` (used by ``Tensor.view``). Walking the old
    dimensions from the last, consecutive dimensions form one *chunk* while
    ``stride[d-1] == stride[d] * size[d]`` (size-1 dims never break a chunk).
    Each chunk is a plain 1-D run of its base stride, so new dimensions may
    split or merge it freely, but a new dimension may not span two chunks.
    ``new_shape`` must already have the same element count (see ``infer_shape``). Lab 02's
    `_view_strides` with its arguments checked and tensors with no elements handled.
    """
    shape = _check_shape(shape)
    strides = _check_strides(strides, len(shape))
    new_shape = _check_shape(new_shape, "new shape")
    numel = math.prod(shape)
    if math.prod(new_shape) != numel:
        raise ValueError(f"new shape {new_shape} has {math.prod(new_shape)} elements, the tensor has {numel}")
    if numel == 0 and shape:
        return strides if shape == new_shape else contiguous_strides(new_shape)
    return _view_strides(shape, strides, new_shape)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy/torch broadcasting: align on the right; sizes must match or be 1."""
    shapes = [_check_shape(s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, size in enumerate(s):
            j = ndim - len(s) + i
            if size == 1:
                continue
            if out[j] not in (1, size):
                raise ValueError(f"shapes {tuple(map(tuple, shapes))} cannot be broadcast: "
                                 f"size {size} vs {out[j]} at dimension {j}")
            out[j] = size
    return tuple(out)


def _norm_dim(dim: int, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dimension must be an int, got {dim!r}")
    lo, hi = (-ndim, ndim - 1) if ndim else (-1, 0)
    if not lo <= dim <= hi:
        raise IndexError(f"dimension {dim} out of range for a {ndim}-d tensor (expected {lo}..{hi})")
    return dim % max(ndim, 1)


@dataclass(frozen=True)
class StridedView:
    """A view of a flat ``storage`` (any sequence of values).

    ``offset``: storage index of element [0, 0, ...] (elements).
    ``shape``: sizes per dimension. ``strides``: storage step per dimension (elements).
    Every operation returns a new StridedView; only ``contiguous()`` and a
    copying ``reshape`` make a new storage.
    """

    storage: tuple
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "storage", tuple(self.storage))
        shape = _check_shape(self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", _check_strides(self.strides, len(shape)))
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {self.offset!r}")
        if math.prod(shape) > 0:
            last = self.offset + sum((n - 1) * s for n, s in zip(shape, self.strides))
            if last >= len(self.storage):
                raise ValueError(
                    f"view out of bounds: offset {self.offset}, shape {shape}, strides {self.strides} "
                    f"reach storage index {last}, but the storage has {len(self.storage)} elements")

    # ----- construction -------------------------------------------------
    @classmethod
    def from_storage(cls, storage: Sequence, shape: Sequence[int] | None = None) -> "StridedView":
        """A contiguous view of all of ``storage`` with ``shape`` (default: 1-D)."""
        storage = tuple(storage)
        shape = (len(storage),) if shape is None else infer_shape(shape, len(storage))
        return cls(storage, 0, shape, contiguous_strides(shape))

    @classmethod
    def arange(cls, *shape: int) -> "StridedView":
        """Storage 0, 1, ..., n-1 viewed contiguously as ``shape`` (values = storage positions)."""
        return cls.from_storage(range(math.prod(shape)), shape)

    # ----- reading ------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def storage_index(self, index: Sequence[int]) -> int:
        """Storage position of element ``index`` (one int per dimension, no negatives)."""
        if len(index) != self.ndim:
            raise IndexError(f"need {self.ndim} indices, got {tuple(index)!r}")
        for i, n in zip(index, self.shape):
            if not 0 <= i < n:
                raise IndexError(f"index {tuple(index)!r} out of range for shape {self.shape}")
        return self.offset + sum(i * s for i, s in zip(index, self.strides))

    def indices(self) -> Iterator[tuple[int, ...]]:
        """All logical indices in row-major order."""
        def rec(prefix, d):
            if d == self.ndim:
                yield prefix
                return
            for i in range(self.shape[d]):
                yield from rec(prefix + (i,), d + 1)
        return rec((), 0)

    def storage_indices(self) -> list[int]:
        """Storage position of every element, in row-major (logical) order."""
        return [self.storage_index(ix) for ix in self.indices()]

    def values(self) -> list:
        """Element values in row-major (logical) order (what ``t.flatten().tolist()`` gives)."""
        return [self.storage[k] for k in self.storage_indices()]

    def tolist(self):
        """Nested lists like ``Tensor.tolist()``."""
        flat = iter(self.values())

        def rec(d):
            if d == self.ndim:
                return next(flat)
            return [rec(d + 1) for _ in range(self.shape[d])]
        return rec(0)

    def is_contiguous(self) -> bool:
        return is_contiguous(self.shape, self.strides)

    def _meta(self, offset, shape, strides) -> "StridedView":
        return StridedView(self.storage, offset, tuple(shape), tuple(strides))

    # ----- zero-copy views ---------------------------------------------
    def slice(self, dim: int, start: int | None = None, stop: int | None = None,
              step: int = 1) -> "StridedView":
        """``t[..., start:stop:step, ...]`` on dimension ``dim`` (step > 0, Python clamping)."""
        d = _norm_dim(dim, self.ndim)
        if self.ndim == 0:
            raise IndexError("cannot slice a 0-d tensor")
        if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
            raise ValueError(f"slice step must be a positive int (torch has no negative steps), "
                             f"got {step!r}")
        size = self.shape[d]
        start = 0 if start is None else start
        stop = size if stop is None else stop
        if start < 0:
            start += size
        if stop < 0:
            stop += size
        start, stop = max(start, 0), max(stop, 0)
        shape, strides, offset = slice_view(self.shape, self.strides, self.offset, d, start, stop, step)
        return self._meta(offset, shape, strides)

    def select(self, dim: int, index: int) -> "StridedView":
        """``t[..., index, ...]``: drop dimension ``dim`` (negative index counts from the end)."""
        d = _norm_dim(dim, self.ndim)
        if self.ndim == 0:
            raise IndexError("cannot index a 0-d tensor")
        size = self.shape[d]
        if not -size <= index < size:
            raise IndexError(f"index {index} out of range for dimension {d} of size {size}")
        index %= size
        shape = self.shape[:d] + self.shape[d + 1:]
        strides = self.strides[:d] + self.strides[d + 1:]
        return self._meta(self.offset + index * self.strides[d], shape, strides)

    def __getitem__(self, key) -> "StridedView":
        """Basic indexing with ints and slices (no Ellipsis/None/tensors), like torch."""
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > self.ndim:
            raise IndexError(f"too many indices ({len(key)}) for a {self.ndim}-d tensor")
        out, d = self, 0
        for k in key:
            if isinstance(k, slice):
                out = out.slice(d, k.start, k.stop, 1 if k.step is None else k.step)
                d += 1
            elif isinstance(k, int) and not isinstance(k, bool):
                out = out.select(d, k)
            else:
                raise TypeError(f"only ints and slices are supported as indices, got {k!r}")
        return out

    def transpose(self, dim0: int, dim1: int) -> "StridedView":
        """Swap two dimensions: sizes and strides swap, offset and storage stay."""
        a, b = _norm_dim(dim0, self.ndim), _norm_dim(dim1, self.ndim)
        if self.ndim == 0:
            return self
        shape, strides = list(self.shape), list(self.strides)
        shape[a], shape[b] = shape[b], shape[a]
        strides[a], strides[b] = strides[b], strides[a]
        return self._meta(self.offset, shape, strides)

    def permute(self, *dims: int) -> "StridedView":
        """New dimension i is old dimension ``dims[i]``."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        if len(dims) != self.ndim:
            raise ValueError(f"permute needs {self.ndim} dims, got {dims!r}")
        norm = [_norm_dim(d, self.ndim) for d in dims]
        if sorted(norm) != list(range(self.ndim)):
            raise ValueError(f"permute dims {dims!r} must be a permutation of 0..{self.ndim - 1}")
        shape, strides, offset = permute_view(self.shape, self.strides, self.offset, norm)
        return self._meta(offset, shape, strides)

    def unsqueeze(self, dim: int) -> "StridedView":
        """Insert a size-1 dim; its stride is what torch gives (size*stride of the next dim, or 1)."""
        d = _norm_dim(dim, self.ndim + 1)
        stride = self.shape[d] * self.strides[d] if d < self.ndim else 1
        return self._meta(self.offset, self.shape[:d] + (1,) + self.shape[d:],
                          self.strides[:d] + (stride,) + self.strides[d:])

    def expand(self, *sizes: int) -> "StridedView":
        """Broadcast to ``sizes`` without copying: new or size-1 dims get stride 0.

        ``-1`` keeps a size. Only size-1 dims may grow; new dims are added on the left.
        """
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise ValueError(f"expand: target {sizes!r} has fewer dims than the tensor's shape "
                             f"{self.shape}")
        lead = len(sizes) - self.ndim
        n_out = len(sizes)
        shape, strides = [0] * n_out, [0] * n_out
        for i in range(n_out - 1, -1, -1):  # right to left, like ATen's inferExpandGeometry
            want = sizes[i]
            if isinstance(want, bool) or not isinstance(want, int):
                raise TypeError(f"expand sizes must be ints, got {sizes!r}")
            if i < lead:
                if want < 0:
                    raise ValueError(f"expand: -1 is not allowed for a new leading dimension, "
                                     f"got {sizes!r}")
                # a new size-1 dim gets the stride torch gives it (next size * next stride); others 0
                nxt = shape[i + 1] * strides[i + 1] if i + 1 < n_out else 0
                shape[i], strides[i] = want, (nxt if want == 1 else 0)
                continue
            have, stride = self.shape[i - lead], self.strides[i - lead]
            if want == -1 or want == have:
                shape[i], strides[i] = have, stride
            elif have == 1 and want >= 0:
                shape[i], strides[i] = want, 0
            else:
                raise ValueError(f"expand: size {have} at dimension {i - lead} of shape {self.shape} "
                                 f"cannot become {want} (only size-1 dims can be expanded)")
        return self._meta(self.offset, shape, strides)

    def broadcast_to(self, shape: Sequence[int]) -> "StridedView":
        """Same as ``expand(shape)``, but ``shape`` must be a full target shape (no -1)."""
        shape = _check_shape(shape, "broadcast shape")
        if broadcast_shapes(self.shape, shape) != shape:
            raise ValueError(f"cannot broadcast shape {self.shape} to {shape}")
        return self.expand(*shape)

    def view(self, *shape: int) -> "StridedView":
        """Same elements seen with a new shape, without copying; ``ViewError`` when impossible."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = infer_shape(shape, self.numel())
        strides = view_strides(self.shape, self.strides, new_shape)
        if strides is None:
            raise ViewError(
                f"view{new_shape} is impossible for shape {self.shape} with strides {self.strides}: a new "
                f"dimension would span two non-contiguous chunks; use reshape (copies) or contiguous() first")
        return self._meta(self.offset, new_shape, strides)

    # ----- copies -------------------------------------------------------
    def contiguous(self) -> "StridedView":
        """Self if already contiguous, else a copy laid out row-major in a new storage (offset 0)."""
        if self.is_contiguous():
            return self
        return StridedView(tuple(self.values()), 0, self.shape, contiguous_strides(self.shape))

    def reshape(self, *shape: int) -> "StridedView":
        """``view`` when possible, else a contiguous copy then a view (torch's rule)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        new_shape = infer_shape(shape, self.numel())
        strides = view_strides(self.shape, self.strides, new_shape)
        if strides is not None:
            return self._meta(self.offset, new_shape, strides)
        copy = StridedView(tuple(self.values()), 0, self.shape, contiguous_strides(self.shape))
        return copy._meta(0, new_shape, contiguous_strides(new_shape))

    def shares_storage_with(self, other: "StridedView") -> bool:
        """True when both are views of the same storage object (no copy happened)."""
        return self.storage is other.storage
