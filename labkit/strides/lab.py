"""Lab 02's "check your work" pictures: a learner's stride function next to torch, case by case.

    picture("slice_view")(fn)    runs fn on the lab's cases, prints a Table (yours | torch | equal)
                                 and draws the learner's answer on its storage, as section 9 does

Each case is a strided tensor made with ``torch.as_strided`` over ``arange``; torch's own answer is
read back from ``Tensor.stride()``, ``storage_offset()``, ``is_contiguous()`` and ``view``.
"""
from __future__ import annotations

import html

import torch

from labkit.strides.draw import storage_html
from labkit.strides.view import StridedView
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


def _storage_size(shape, strides, offset) -> int:
    return _tensor(shape, strides, offset).untyped_storage().nbytes() // 8


def _shown_case(exercise: str, table: Table, default: int) -> int:
    """The case to draw: the first one where the learner and torch differ, else ``default``."""
    return next((i for i, row in enumerate(table.rows) if not row[3]), default)


def _drawable(storage_len, offset, shape, strides, title):
    """``storage_html`` of the view, or one line saying why the learner's answer cannot be drawn."""
    try:
        return storage_html(StridedView(range(storage_len), offset, shape, strides), title=title)
    except (TypeError, ValueError) as e:
        return f"<div><b>{html.escape(title)}</b>: cannot be drawn: {html.escape(str(e))}</div>"


def drawings(exercise: str, table: Table) -> list[str]:
    """HTML pictures (``labkit.strides.draw.storage_html``, as in section 9) of the learner's answers
    in ``table`` (from :func:`compare`): the case drawn is the first one that differs from torch.

    slice_view / permute_view: the learner's (shape, strides, offset) on the base's storage.
    is_contiguous: the case's view on its storage, titled with the learner's and torch's verdicts.
    view_strides: the tensor, then the learner's view of it; a right answer reads the same storage
    positions in the same order (the view grid lists them).
    """
    if exercise in ("slice_view", "permute_view"):
        i = _shown_case(exercise, table, 0)
        base = CASES[exercise][i][0]
        shape, strides, offset = table.rows[i][1]
        return [_drawable(_storage_size(*base), offset, shape, strides,
                          f"your {exercise}: {table.rows[i][0]}")]
    if exercise == "is_contiguous":
        i = _shown_case(exercise, table, 4)
        shape, strides = CASES[exercise][i]
        _, yours, want, _ = table.rows[i]
        return [_drawable(_storage_size(shape, strides, 0), 0, shape, strides,
                          f"{table.rows[i][0]}: your is_contiguous says {yours}, torch says {want}")]
    i = _shown_case(exercise, table, 4)
    (shape, strides, offset), new_shape = CASES[exercise][i]
    size = _storage_size(shape, strides, offset)
    base = StridedView(range(size), offset, shape, strides)
    out = [_drawable(size, offset, shape, strides, f"the tensor: {table.rows[i][0].split(' view')[0]}")]
    yours, want = table.rows[i][1], table.rows[i][2]
    if yours is None:
        out.append(f"<div>your view_strides says no view of shape {new_shape} exists; "
                   f"torch says {'none' if want is None else 'strides ' + str(want)}</div>")
        return out
    try:
        mine = StridedView(range(size), offset, new_shape, yours)
        same = mine.storage_indices() == base.storage_indices()
    except (TypeError, ValueError):
        same = False
    out.append(_drawable(size, offset, new_shape, yours,
                         f"your view{new_shape}, strides {yours}: same storage positions in the "
                         f"same order as the tensor: {same} (torch: {want})"))
    return out


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work`: the comparison table with torch, then the learner's
    answer drawn on its storage (:func:`drawings`, as in section 9); returns the table."""
    def draw(fn):
        table = compare(exercise, fn)
        print(table)
        from IPython.display import HTML, display

        display(HTML("".join(drawings(exercise, table))))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases equal torch's answer")
        return table
    return draw


def explorer_frame(storage_len: int, offset: int, rows: int, cols: int, stride0: int, stride1: int) -> str:
    """The widget's frame for a 2-D view of ``range(storage_len)``; a one-line error when out of bounds."""
    try:
        view = StridedView(range(storage_len), offset, (rows, cols), (stride0, stride1))
    except ValueError as exc:
        return f'<div class="strided-view error" style="color:#b00"><b>not a valid view:</b> {html.escape(str(exc))}</div>'
    return storage_html(view)


def explorer(storage_len: int = 24):
    """Widget: sliders for offset, shape (rows, cols) and strides over ``range(storage_len)``."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    def render(offset, rows, cols, stride0, stride1):
        return explorer_frame(storage_len, offset, rows, cols, stride0, stride1)

    return controlled(render,
                      offset=W.IntSlider(value=1, min=0, max=storage_len - 1, description="offset"),
                      rows=W.IntSlider(value=3, min=1, max=6, description="rows"),
                      cols=W.IntSlider(value=2, min=1, max=8, description="cols"),
                      stride0=W.IntSlider(value=6, min=0, max=12, description="stride 0"),
                      stride1=W.IntSlider(value=2, min=0, max=12, description="stride 1"))
