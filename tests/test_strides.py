"""labkit.strides against torch: strides, storage offsets and element values must match exactly.

Property-based (hypothesis, bounded examples so the file runs in ~10 s): random
strided tensors (torch.as_strided over an arange storage, so element value ==
storage position) go through random chains of operations in both torch and the
model, and every intermediate is compared.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.strides import (StridedView, ViewError, broadcast_shapes, contiguous_strides, infer_shape,
                            is_contiguous, view_strides)

SETTINGS = dict(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(model: StridedView, t: torch.Tensor):
    assert model.shape == tuple(t.shape)
    assert model.strides == tuple(t.stride())
    assert model.offset == t.storage_offset()
    assert model.values() == t.flatten().tolist()


def pair_from(shape, strides, offset):
    """The same strided view in the model and in torch (values = storage positions)."""
    numel = math.prod(shape)
    need = offset + (sum((n - 1) * s for n, s in zip(shape, strides)) + 1 if numel else 0)
    storage = list(range(max(need, 1)))
    t = torch.as_strided(torch.tensor(storage), shape, strides, offset)
    return StridedView(storage, offset, shape, strides), t


@st.composite
def strided(draw, min_ndim=0, max_ndim=4, allow_zero=True):
    ndim = draw(st.integers(min_ndim, max_ndim))
    sizes = st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4, 4] if allow_zero else [1, 1, 2, 3, 4])
    shape = tuple(draw(st.lists(sizes, min_size=ndim, max_size=ndim)))
    kind = draw(st.sampled_from(["contiguous", "permuted", "random"]))
    if kind == "contiguous":
        strides = contiguous_strides(shape)
    elif kind == "permuted":  # a contiguous block seen through a permutation (transposes)
        perm = draw(st.permutations(range(ndim)))
        base = contiguous_strides([shape[p] for p in perm])
        strides = [0] * ndim
        for i, p in enumerate(perm):
            strides[p] = base[i]
        strides = tuple(strides)
    else:
        strides = tuple(draw(st.lists(st.integers(0, 12), min_size=ndim, max_size=ndim)))
    offset = draw(st.integers(0, 5))
    return shape, strides, offset


def test_contiguous_strides_and_flags_match_torch():
    for shape in [(), (0,), (3,), (2, 3), (1, 4), (4, 1), (2, 0, 3), (2, 1, 3, 1)]:
        t = torch.empty(shape)
        assert contiguous_strides(shape) == tuple(t.stride()), shape
        assert is_contiguous(shape, contiguous_strides(shape))
    # size-1 dims do not count: a [2, 1, 3] with an odd stride on the 1 is contiguous
    assert is_contiguous((2, 1, 3), (3, 99, 1))
    assert torch.as_strided(torch.arange(6), (2, 1, 3), (3, 99, 1)).is_contiguous()
    assert not is_contiguous((2, 3), (1, 2))


@settings(**SETTINGS)
@given(strided())
def test_is_contiguous_matches_torch(spec):
    model, t = pair_from(*spec)
    same(model, t)
    assert model.is_contiguous() == t.is_contiguous()


@st.composite
def slice_args(draw, shape):
    dim = draw(st.integers(0, len(shape) - 1))
    size = shape[dim]
    start = draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
    stop = draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
    step = draw(st.integers(1, 4))
    return dim, start, stop, step


@settings(**SETTINGS)
@given(st.data())
def test_slice_matches_torch(data):
    shape, strides, offset = data.draw(strided(min_ndim=1))
    model, t = pair_from(shape, strides, offset)
    dim, start, stop, step = data.draw(slice_args(shape))
    key = (slice(None),) * dim + (slice(start, stop, step),)
    same(model.slice(dim, start, stop, step), t[key])
    same(model[key], t[key])


@settings(**SETTINGS)
@given(st.data())
def test_select_and_getitem_match_torch(data):
    shape, strides, offset = data.draw(strided(min_ndim=1, allow_zero=False))
    model, t = pair_from(shape, strides, offset)
    dim = data.draw(st.integers(0, len(shape) - 1))
    index = data.draw(st.integers(-shape[dim], shape[dim] - 1))
    same(model.select(dim, index), t.select(dim, index))
    key = tuple(data.draw(st.one_of(st.integers(0, n - 1), st.builds(slice, st.none() | st.integers(0, n),
                                                                       st.none() | st.integers(0, n),
                                                                       st.integers(1, 3))))
                for n in shape[:data.draw(st.integers(1, len(shape)))])
    same(model[key], t[key])


@settings(**SETTINGS)
@given(st.data())
def test_transpose_permute_unsqueeze_match_torch(data):
    shape, strides, offset = data.draw(strided(min_ndim=1))
    model, t = pair_from(shape, strides, offset)
    nd = len(shape)
    a, b = data.draw(st.integers(-nd, nd - 1)), data.draw(st.integers(-nd, nd - 1))
    same(model.transpose(a, b), t.transpose(a, b))
    perm = data.draw(st.permutations(range(nd)))
    same(model.permute(*perm), t.permute(*perm))
    u = data.draw(st.integers(-nd - 1, nd))
    same(model.unsqueeze(u), t.unsqueeze(u))


@settings(**SETTINGS)
@given(st.data())
def test_expand_gives_stride_zero_like_torch(data):
    shape, strides, offset = data.draw(strided(max_ndim=3))
    model, t = pair_from(shape, strides, offset)
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2))
    target = list(lead)
    for n in shape:
        target.append(data.draw(st.sampled_from([-1, n] + ([0, 1, 2, 3] if n == 1 else []))))
    if not target:
        target = [data.draw(st.integers(0, 3))]
    same(model.expand(*target), t.expand(*target))
    e = model.expand(*target)
    assert all(s == 0 for s, n, want in zip(e.strides[len(lead):], shape, target[len(lead):])
               if n == 1 and want not in (-1, 1))
    assert e.shares_storage_with(model)


def test_broadcast_like_torch():
    b = StridedView.arange(1, 3)  # a [1, 3] row broadcast against [4, 3]
    e = b.broadcast_to((4, 3))
    same(e, torch.arange(3).reshape(1, 3).broadcast_to((4, 3)))
    assert e.strides == (0, 1)
    assert broadcast_shapes((4, 1), (3,)) == tuple(torch.broadcast_shapes((4, 1), (3,)))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        broadcast_shapes((2, 3), (4,))
    with pytest.raises(ValueError, match="only size-1 dims"):
        StridedView.arange(2, 3).expand(4, 3)


def factorizations(n, max_dims=3):
    """Some shapes with n elements (including size-1 dims)."""
    out = {(n,)}
    for a in range(1, n + 1):
        if n % a == 0:
            out.add((a, n // a))
            out.add((a, 1, n // a))
            for b in range(1, n // a + 1):
                if (n // a) % b == 0:
                    out.add((a, b, n // a // b))
    return sorted(s for s in out if len(s) <= max_dims + 1)


@settings(**SETTINGS)
@given(st.data())
def test_view_and_reshape_follow_torch_rules(data):
    shape, strides, offset = data.draw(strided(min_ndim=1, allow_zero=False))
    model, t = pair_from(shape, strides, offset)
    new_shape = data.draw(st.sampled_from(factorizations(math.prod(shape))))
    try:
        expected = t.view(new_shape)
    except RuntimeError:
        expected = None
    if expected is None:
        with pytest.raises(ViewError, match="reshape"):
            model.view(*new_shape)
        assert view_strides(shape, strides, new_shape) is None
    else:
        same(model.view(*new_shape), expected)
    r, tr = model.reshape(new_shape), t.reshape(new_shape)
    same(r, tr)
    torch_copied = tr.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert (not r.shares_storage_with(model)) == torch_copied == (expected is None)


@settings(**SETTINGS)
@given(st.data())
def test_random_chains_of_ops_match_torch(data):
    shape, strides, offset = data.draw(strided(allow_zero=False))
    model, t = pair_from(shape, strides, offset)
    for _ in range(data.draw(st.integers(1, 5))):
        op = data.draw(st.sampled_from(["slice", "transpose", "unsqueeze", "expand", "view", "reshape",
                                        "contiguous"]))
        if op in ("slice", "transpose", "expand") and t.dim() == 0:
            op = "unsqueeze"
        if op == "slice":
            dim, start, stop, step = data.draw(slice_args(tuple(t.shape)))
            model, t = model.slice(dim, start, stop, step), t[(slice(None),) * dim + (slice(start, stop, step),)]
        elif op == "transpose":
            a, b = data.draw(st.integers(0, t.dim() - 1)), data.draw(st.integers(0, t.dim() - 1))
            model, t = model.transpose(a, b), t.transpose(a, b)
        elif op == "unsqueeze":
            u = data.draw(st.integers(0, t.dim()))
            model, t = model.unsqueeze(u), t.unsqueeze(u)
        elif op == "expand":
            target = [data.draw(st.sampled_from([1, 2, 3])) if n == 1 else -1 for n in t.shape]
            model, t = model.expand(*target), t.expand(*target)
        elif op == "contiguous":
            model, t = model.contiguous(), t.contiguous()
        else:
            n = t.numel()
            new_shape = data.draw(st.sampled_from(factorizations(n) if n else [(0,)]))
            if op == "view":
                try:
                    tv = t.view(new_shape)
                except RuntimeError:
                    with pytest.raises(ViewError):
                        model.view(new_shape)
                    continue
                model, t = model.view(new_shape), tv
            else:
                model, t = model.reshape(new_shape), t.reshape(new_shape)
        same(model, t)
        assert model.is_contiguous() == t.is_contiguous()


def test_view_special_cases():
    # transposed [3, 4] -> can split a dim but cannot flatten
    x = StridedView.arange(3, 4).transpose(0, 1)
    assert x.view(2, 2, 3).strides == tuple(torch.arange(12).reshape(3, 4).t().view(2, 2, 3).stride())
    with pytest.raises(ViewError, match="use reshape"):
        x.view(12)
    # size-1 dims with any stride never break a chunk
    assert view_strides((1, 4), (7, 1), (4,)) == (1,)
    assert view_strides((4, 1), (1, 1), (2, 2)) == (2, 1)
    # empty tensors: same shape keeps strides, else contiguous
    assert view_strides((0, 3), (5, 2), (0, 3)) == (5, 2)
    assert view_strides((0, 3), (5, 2), (3, 0)) == tuple(torch.empty(0, 3).view(3, 0).stride())


def test_values_and_tolist():
    x = StridedView.arange(2, 3)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert x.transpose(0, 1).values() == [0, 3, 1, 4, 2, 5]
    c = x.transpose(0, 1).contiguous()
    assert c.storage == (0, 3, 1, 4, 2, 5) and c.strides == (2, 1) and c.offset == 0
    assert x.contiguous() is x  # no copy when already contiguous
    # section 2's example: rows 1.., cols 2..4 of a 4x5 -> offset 7, strides (5, 1)
    s = StridedView.arange(4, 5)[1:, 2:4]
    assert (s.offset, s.shape, s.strides) == (7, (3, 2), (5, 1))


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="out of bounds"):
        StridedView(range(6), 1, (2, 3), (3, 1))
    with pytest.raises(ValueError, match="positive"):
        StridedView.arange(5).slice(0, None, None, -1)
    with pytest.raises(ValueError, match="negative"):
        StridedView(range(6), 0, (2, 3), (-3, 1))
    with pytest.raises(TypeError, match="ints"):
        StridedView(range(6), 0, (2, 3.0), (3, 1))
    with pytest.raises(ValueError, match="invalid for input of size 6"):
        StridedView.arange(2, 3).view(4, 2)
    with pytest.raises(ValueError, match="only one dimension can be -1"):
        infer_shape((-1, -1), 6)
    with pytest.raises(ValueError, match="permutation"):
        StridedView.arange(2, 3).permute(0, 0)
    with pytest.raises(IndexError, match="out of range"):
        StridedView.arange(2, 3).transpose(0, 2)


def test_storage_html_highlights_exactly_the_views_elements():
    import re

    from labkit.strides import draw as VS
    from labkit.strides import lab as strides_lab

    v = StridedView.arange(4, 6)[1:, ::2]  # offset 6, strides (6, 2)
    text = VS.storage_html(v)
    hit = {int(p): int(n) for p, n in re.findall(r'class="hit" data-pos="(\d+)" data-count="(\d+)"', text)}
    assert hit == {k: 1 for k in v.storage_indices()}
    assert len(re.findall(r'class="miss"', text)) == 24 - v.numel()
    # stride 0: one storage cell read by several elements
    e = StridedView.arange(1, 3).expand(4, 3)
    text = VS.storage_html(e)
    hit = {int(p): int(n) for p, n in re.findall(r'class="hit" data-pos="(\d+)" data-count="(\d+)"', text)}
    assert hit == {0: 4, 1: 4, 2: 4}
    assert "x4" in text
    # the widget frame: valid view vs one clear error line
    assert strides_lab.explorer_frame(24, 1, 3, 2, 6, 2).count('class="hit"') == 6
    bad = strides_lab.explorer_frame(10, 5, 3, 2, 6, 2)
    assert "not a valid view" in bad and "out of bounds" in bad


# ---- Lab 02's check-your-work pictures and worked problems

def test_strides_lab_pictures_compare_with_torch(capsys):
    import exercises.lab02_strides as stubs
    import solutions.lab02_strides as answers
    from labkit.strides import lab as strides_lab

    for name in strides_lab.CASES:
        table = strides_lab.compare(name, getattr(answers, name))
        assert all(table.column("equal")), name
        with pytest.raises(NotImplementedError):
            strides_lab.picture(name)(getattr(stubs, name))
    # a classic slip: forgetting to move the offset; lists instead of tuples are fine
    wrong = strides_lab.compare("slice_view", lambda sh, st, off, d, a, b, s: answers.slice_view(sh, st, 0, d, 0, b - a, s))
    assert not all(wrong.column("equal"))
    lists = strides_lab.compare("permute_view", lambda *a: [list(x) if isinstance(x, tuple) else x
                                                           for x in answers.permute_view(*a)])
    assert all(lists.column("equal"))
    assert all(len(line) <= 100 for name in strides_lab.CASES
               for line in str(strides_lab.compare(name, getattr(answers, name))).splitlines())


def hits_of(text):
    import re

    return {int(p): int(n) for p, n in re.findall(r'class="hit" data-pos="(\d+)" data-count="(\d+)"', text)}


def test_strides_lab_drawings_show_the_learners_answer(capsys):
    import solutions.lab02_strides as answers
    from labkit.strides import lab as strides_lab

    # slice_view: the first case (rows 1:4 of a 4x5) reads storage 5..19, each once
    d = strides_lab.drawings("slice_view", strides_lab.compare("slice_view", answers.slice_view))
    assert len(d) == 1 and hits_of(d[0]) == {k: 1 for k in range(5, 20)}
    # the first wrong answer is the case drawn: forgetting to move the offset reads storage 0..14
    def no_offset(sh, st, off, d, a, b, s):
        shape, strides, _ = answers.slice_view(sh, st, off, d, a, b, s)
        return shape, strides, off

    d = strides_lab.drawings("slice_view", strides_lab.compare("slice_view", no_offset))
    assert "dim 0 [1:4:1]" in d[0] and hits_of(d[0]) == {k: 1 for k in range(15)}
    d = strides_lab.drawings("permute_view", strides_lab.compare("permute_view", answers.permute_view))
    assert hits_of(d[0]) == {k: 1 for k in range(20)} and "strides=(1, 5)" in d[0]
    d = strides_lab.drawings("is_contiguous", strides_lab.compare("is_contiguous", answers.is_contiguous))
    assert "strides (8, 1): your is_contiguous says False, torch says False" in d[0]
    assert hits_of(d[0]) == {r * 8 + c: 1 for r in range(3) for c in range(4)}
    d = strides_lab.drawings("is_contiguous", strides_lab.compare("is_contiguous", lambda sh, st: True))
    assert "shape (2, 3) strides (1, 2): your is_contiguous says True, torch says False" in d[0]
    # view_strides: the tensor, then the learner's view; right = same storage order
    d = strides_lab.drawings("view_strides", strides_lab.compare("view_strides", answers.view_strides))
    assert len(d) == 2 and "4x3 transposed" in d[0]
    assert "view(4, 1, 3), strides (1, 12, 4): same storage positions in the same order as the tensor: True" in d[1]
    flattened = lambda sh, st, new: (1,) if len(new) == 1 else answers.view_strides(sh, st, new)  # noqa: E731
    d = strides_lab.drawings("view_strides", strides_lab.compare("view_strides", flattened))
    assert "view(12,), strides (1,)" in d[1] and "same order as the tensor: False (torch: None)" in d[1]
    d = strides_lab.drawings("view_strides", strides_lab.compare("view_strides", lambda sh, st, new: None))
    assert "your view_strides says no view of shape (24,) exists; torch says strides (1,)" in d[1]
    d = strides_lab.drawings("view_strides", strides_lab.compare("view_strides", lambda sh, st, new: (-1,) * len(new)))
    assert "cannot be drawn" in d[1]
    # picture(): the table, the drawing, one summary line; returns the table
    table = strides_lab.picture("view_strides")(answers.view_strides)
    out = capsys.readouterr().out
    assert all(table.column("equal")) and "view_strides: 8/8 cases equal torch's answer" in out
    assert all(len(line) <= 100 for line in out.splitlines() if not line.startswith("<IPython"))


def test_lab02_worked_problems():
    x = torch.zeros(8, 16, 32)
    assert x.stride() == (512, 32, 1) and 2 * 512 + 3 * 32 + 4 == 1124 and 1124 * 4 == 4496
    y = x[1:, ::4, 8:]
    assert (tuple(y.shape), y.stride(), y.storage_offset()) == ((7, 4, 24), (512, 128, 1), 520)
    z = x.permute(2, 0, 1)
    assert z.stride() == (1, 512, 32) and not z.is_contiguous() and z.view(32, 128).stride() == (1, 32)
    assert view_strides(z.shape, z.stride(), (256, 16)) is None
    assert torch.zeros(1024).expand(64, 128, 1024).stride() == (0, 0, 1)


def test_view_strides_docstring_examples_are_torchs():
    """Every "shape S, strides T ... viewed as N gives R" in the exercise's docstring is torch's answer."""
    import ast
    import re

    import exercises.lab02_strides as stubs
    import solutions.lab02_strides as answers

    doc = " ".join(stubs.view_strides.__doc__.split())
    assert doc == " ".join(answers.view_strides.__doc__.split())
    tup = r"(\([\d, ]*\))"
    checked = 0
    for part in re.split(r"; shape ", doc.split("E.g. ")[1]):
        shape, strides = map(ast.literal_eval, re.search(rf"{tup}, strides {tup}", part).groups())
        for new, want in re.findall(rf"as {tup} gives {tup}", part):
            new, want = ast.literal_eval(new), ast.literal_eval(want)
            t = torch.arange(12 if len(shape) == 2 else 24).as_strided(shape, strides)
            assert tuple(t.view(new).stride()) == want == answers.view_strides(shape, strides, new)
            checked += 1
    assert checked == 4
    # the stated cases: between two runs -> the run on its right; trailing -> innermost b;
    # leading -> outermost b times its count; a size-1 innermost old dim with an odd stride is a run
    x = torch.arange(24).as_strided((3, 4), (8, 1))          # runs: (b=8, n=3), (b=1, n=4)
    assert x.view(1, 3, 1, 4, 1).stride() == (24, 8, 4, 1, 1)
    y = torch.arange(6).as_strided((6, 1), (1, 7))            # runs: (b=1, n=6), (b=7, n=1)
    assert y.view(6, 1).stride() == (1, 7) == answers.view_strides((6, 1), (1, 7), (6, 1))
    assert y.view(1, 6).stride() == (6, 1) == answers.view_strides((6, 1), (1, 7), (1, 6))
    assert torch.tensor(5).view(1, 1).stride() == (1, 1) == answers.view_strides((), (), (1, 1))
    assert answers.view_strides((3, 4), (8, 1), (1, 3, 1, 4, 1)) == (24, 8, 4, 1, 1)


def test_lab02_problem5_and_common_mistakes():
    q = torch.zeros(6, 8)
    assert q[:, ::2].stride() == (8, 2) and q[:, ::2].view(24).stride() == (2,)
    assert view_strides((6, 4), (8, 2), (24,)) == (2,) and view_strides((6, 4), (8, 1), (24,)) is None
    with pytest.raises(RuntimeError):
        q[:, :4].view(24)
    assert q[:, :4].view(6, 1, 4).stride() == (8, 4, 1) == view_strides((6, 4), (8, 1), (6, 1, 4))
    assert q[:, :4].view(6, 4, 1).stride() == (8, 1, 1) == view_strides((6, 4), (8, 1), (6, 4, 1))
    # common mistakes: len(strides) is ndim; a transpose swaps strides to (1, n); row slices stay contiguous
    assert len(torch.zeros(2, 3, 4).stride()) == 3
    m, n = 3, 5
    a = torch.arange(m * n).reshape(m, n)
    assert a.t().stride() == (1, n) and StridedView.arange(m, n).transpose(0, 1).strides == (1, n)
    assert a.as_strided((n, m), (1, m))[1].tolist() != a[:, 1].tolist() == a.t()[1].tolist()
    assert [s.is_contiguous() for s in (a[1:3], a[2], a[:, 1:3], a[:, 0], a[::2])] == [True, True, False,
                                                                                       False, False]


def test_code_shown_in_lab02_fits_100_columns():
    from labkit.show import source

    for obj in (contiguous_strides, is_contiguous, StridedView.slice, StridedView.permute,
                StridedView.expand, StridedView.reshape):
        assert all(len(line) <= 100 for line in str(source(obj)).splitlines()), obj
