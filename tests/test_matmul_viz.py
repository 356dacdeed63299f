"""labkit.matmul.draw and lab: the frames of the tiled-loop animation (pure functions; the widget is not tested)."""
import re

import pytest

from labkit.matmul import traffic as T
from labkit.matmul import draw as V
from labkit.matmul import lab as L


def fills(html):
    return re.findall(r'fill="(#[0-9a-f]{6})"', html)


@pytest.mark.parametrize("kind,tiles,shape", [("cache", {"b1": 2, "b2": 3}, (5, 4, 7)),
                                              ("register", {"v1": 2, "v2": 3, "v3": 2}, (5, 3, 4))])
def test_frames_show_resident_tiles_and_counts(kind, tiles, shape):
    M, K, N = shape
    render, n, formula = L.tiled_frames(kind, M, K, N, **tiles)
    steps = T.trace(kind, M, K, N, **tiles)
    assert n == len(steps)
    for i in (0, n // 2, n - 1):
        html = render(i)
        f = fills(html)
        assert len(f) == M * K + K * N + M * N                       # one cell per matrix element
        s = steps[i]
        area = lambda rc: (rc[1] - rc[0]) * (rc[3] - rc[2])          # noqa: E731
        assert f.count(V.COLORS["A"]) == area(s.a)
        assert f.count(V.COLORS["B"]) == area(s.b)
        assert f.count(V.COLORS["C"]) == area(s.c)
        assert f"<td>A reads</td><td>{s.traffic.a_reads}</td><td>{formula.a_reads}</td>" in html
        assert f"step {i + 1} / {n}" in html
    last = render(n - 1)
    # the last frame's running counters reach the closed form
    assert f"<td>total</td><td>{formula.total}</td><td>{formula.total}</td>" in last
    # every C cell is either finished or in the current tile at the end
    f = fills(last)[M * K + K * N:]
    assert f.count("#ffffff") == 0


def test_cache_first_frame_loads_a_and_b():
    render, n, _ = L.tiled_frames("cache", 4, 3, 4, b1=2, b2=2)
    assert "loaded A tile and B tile" in render(0)
    assert "A block still resident" in render(1)


def test_bad_step_and_kind():
    render, n, _ = L.tiled_frames("cache", 2, 2, 2, b1=1, b2=1)
    with pytest.raises(ValueError, match="out of range"):
        render(n)
    with pytest.raises(ValueError, match="unknown loop"):
        T.trace("diagonal", 2, 2, 2)


@pytest.mark.parametrize("kind,tiles", [("cache", {"b1": 3, "b2": 3}), ("register", {"v1": 2, "v2": 3, "v3": 2})])
def test_learner_frame_shows_their_counts_and_wrong_cells(kind, tiles):
    M, K, N = 5, 4, 6
    _, n, formula = L.tiled_frames(kind, M, K, N, **tiles)
    yours = T.Traffic(formula.a_reads, formula.b_reads + 1, formula.c_writes)
    html = L.learner_html(kind, M, K, N, yours, [(0, 0), (4, 5)], **tiles)
    f = fills(html)
    assert len(f) == M * K + K * N + M * N
    c = f[M * K + K * N:]                                   # C's cells, row by row
    assert c[0] == c[-1] == V.COLORS["wrong"] and c.count(V.COLORS["wrong"]) == 2
    assert f"step {n} / {n}" in html and "2 wrong C cells" in html
    assert (f"<td>B reads</td><td>{formula.b_reads}</td><td>{formula.b_reads}</td>"
            f"<td><b>{formula.b_reads + 1}</b></td>") in html
    assert "<td>total</td>" in html and "<th>yours</th>" in html
    # not a Traffic: question marks; the lab's own frames have no "yours" column
    assert html.count("<td><b>?</b></td>") == 0
    assert L.learner_html(kind, M, K, N, None, **tiles).count("<td><b>?</b></td>") == 4
    render, _, _ = L.tiled_frames(kind, M, K, N, **tiles)
    assert "yours" not in render(n - 1) and V.COLORS["wrong"] not in render(n - 1)
