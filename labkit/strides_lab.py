"""Lab 02's "check your work" pictures: a learner's stride function next to torch, case by case.

    picture("slice_view")(fn)    runs fn on the lab's cases, prints a Table (yours | torch | equal)
                                 and draws the first case's view on its storage, as section 9 does

Each case is a strided tensor made with ``torch.as_strided`` over ``arange``; torch's own answer is
read back from ``Tensor.stride()``, ``storage_offset()``, ``is_contiguous()`` and ``view``.
"""
from __future__ import annotations

import torch

from labkit.strides import StridedView
from labkit.table import Table

# (shape, strides, offset) of the tensors the cases start from; the tables name them "4x5", ...
MATRIX = ((4, 5), (5, 1), 0)
CUBE = ((2, 3, 4), (12, 4, 1), 0)
TRANSPOSED = ((4, 3), (1, 4), 0)
EVERY_OTHER_ROW = ((3, 4), (8, 1), 0)

CASES = {
    "slice_view": [(MATRIX, 0, 1, 4, 1), (MATRIX, 1, 2, 4, 1), (MATRIX, 1, 0, 9, 2), (MATRIX, 0, 3, 99, 1),
                   (CUBE, 2, 1, 4, 2), (MATRIX, 1, 4, 2, 1)],
    "permute_view": [(MATRIX, (1, 0)), (CUBE, (2, 0, 1)), (CUBE, (1, 2, 0)), (((2, 3), (3, 1), 5), (1, 0))],
    "is_contiguous": [((2, 3), (3, 1)), ((2, 3), (1, 2)), ((1, 5), (99, 1)), ((5, 1), (1, 7)),
                      ((3, 4), (8, 1)), ((3, 4), (0, 1)), ((2, 0, 3), (7, 7, 7))],
    "view_strides": [(CUBE, (24,)), (CUBE, (2, 1, 3, 4)), (CUBE, (6, 4, 1)), (TRANSPOSED, (12,)),
                     (TRANSPOSED, (4, 1, 3)), (TRANSPOSED, (1, 4, 3)), (EVERY_OTHER_ROW, (3, 2, 2)),
                     (EVERY_OTHER_ROW, (12,))],
}


def _tensor(shape, strides, offset) -> torch.Tensor:
    need = offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1 if all(shape) else offset + 1
    return torch.arange(need).as_strided(shape, strides, offset)


def _meta(t: torch.Tensor):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def torch_answer(exercise: str, case):
    """What torch says for one case of ``exercise`` (same form as the exercise's return value)."""
    if exercise == "slice_view":
        (shape, strides, offset), dim, start, stop, step = case
        key = (slice(None),) * dim + (slice(start, stop, step),)
        return _meta(_tensor(shape, strides, offset)[key])
    if exercise == "permute_view":
        (shape, strides, offset), dims = case
        return _meta(_tensor(shape, strides, offset).permute(dims))
    if exercise == "is_contiguous":
        shape, strides = case
        return torch.empty(64).as_strided(shape, strides).is_contiguous()
    (shape, strides, offset), new_shape = case
    try:
        return tuple(_tensor(shape, strides, offset).view(new_shape).stride())
    except RuntimeError:
        return None


def _call(exercise: str, fn, case):
    if exercise == "slice_view":
        (shape, strides, offset), dim, start, stop, step = case
        return fn(shape, strides, offset, dim, start, stop, step)
    if exercise == "permute_view":
        (shape, strides, offset), dims = case
        return fn(shape, strides, offset, dims)
    if exercise == "is_contiguous":
        return fn(*case)
    (shape, strides, _), new_shape = case
    return fn(shape, strides, new_shape)


def _normal(value):
    """Tuples all the way down (a learner may return lists), so equal answers compare equal."""
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    return value


def _label(exercise: str, case) -> str:
    if exercise == "is_contiguous":
        return f"shape {case[0]} strides {case[1]}"
    base, *rest = case
    name = {MATRIX: "4x5", CUBE: "2x3x4", TRANSPOSED: "4x3 transposed", EVERY_OTHER_ROW: "rows ::2 of 6x4"}
    start = name.get(base) or f"{base[0]}/{base[1]}+{base[2]}"
    what = {"slice_view": lambda d, a, b, s: f"dim {d} [{a}:{b}:{s}]", "permute_view": lambda d: f"permute{d}",
            "view_strides": lambda n: f"view{n}"}[exercise](*rest)
    return f"{start} {what}"


def compare(exercise: str, fn) -> Table:
    """Table of the learner's ``fn`` against torch on every case of ``exercise``."""
    rows = []
    for case in CASES[exercise]:
        yours, want = _normal(_call(exercise, fn, case)), torch_answer(exercise, case)
        rows.append((_label(exercise, case), yours, want, yours == want))
    return Table(["case", "yours", "torch", "equal"], rows)


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work`: the comparison table, and for slice_view and
    permute_view the learner's first result drawn on its storage (as in section 9)."""
    def draw(fn):
        table = compare(exercise, fn)
        print(table)
        if exercise in ("slice_view", "permute_view"):
            from IPython.display import HTML, display

            from labkit.viz.strides import storage_html

            shape, strides, offset = table.rows[0][1]
            base = CASES[exercise][0][0]
            size = _tensor(*base).untyped_storage().nbytes() // 8
            try:
                view = StridedView(range(size), offset, shape, strides)
            except (TypeError, ValueError) as e:
                print(f"your first result cannot be drawn: {e}"[:100])
            else:
                display(HTML(storage_html(view, title=f"your {exercise}: {table.rows[0][0]}")))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases equal torch's answer")
        return table
    return draw
