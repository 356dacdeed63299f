"""The access visualiser's pure functions (labkit.kernels.draw) on recorded interpreter runs."""
import labkit  # noqa: F401

import numpy as np
import pytest
import torch

from labkit.kernels import add, matmul, record
from labkit.kernels.checks import interpreting
from labkit.kernels import draw as V

pytestmark = pytest.mark.skipif(not interpreting(), reason="the access recorder needs TRITON_INTERPRET=1")


@pytest.fixture(scope="module")
def add_rec():
    with record() as rec:
        add(torch.ones(21), torch.ones(21), block_size=8)
    return rec


def test_access_map_add(add_rec):
    m = V.access_map(add_rec, "x_ptr", 2, "load", width=8, pad_rows=1)
    assert m.shape == (4, 8)
    assert (m[:2] == V.OTHER).all()                       # rows 0, 1 belong to programs 0, 1
    assert (m[2, :5] == V.THIS).all()                     # program 2: elements 16..20
    assert (m[2, 5:] == V.MASKED).all()                   # lanes 21..23 masked off
    assert (m[3] == V.UNTOUCHED).all() and not (m == V.OOB).any()
    m0 = V.access_map(add_rec, "x_ptr", 0, "load", width=8)
    assert (m0[0] == V.THIS).all() and (m0[2, :5] == V.OTHER).all()


def test_owner_map_and_pid_tuple(add_rec):
    own = V.owner_map(add_rec, "out_ptr", width=8)
    assert np.array_equal(own.ravel()[:21], np.arange(21) // 8)
    assert (own.ravel()[21:] == -1).all()
    assert V.pid_tuple(add_rec, 0, 2) == (2, 0, 0) and V.n_programs(add_rec) == 3


def test_matmul_frame_shows_one_tile_and_its_panels():
    M, K, N, bs = 20, 18, 24, 16
    with record() as rec:
        matmul(torch.ones(M, K), torch.ones(K, N), config={"BLOCK_M": bs, "BLOCK_N": bs, "BLOCK_K": bs, "GROUP_M": 2})
    a = V.access_map(rec, "a_ptr", 1, "load")
    # program 1 (grouped order) computes tile row 1: it reads A rows 16..19, all K columns
    assert (a[16:] == V.THIS).all() and not (a[:16] == V.THIS).any()
    fig = V.kernel_frame(rec, 1, "c_ptr", ("a_ptr", "b_ptr"))
    assert len(fig.axes) == 3
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_frame_marks_out_of_bounds():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_no_mask(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))

    x, out = torch.ones(10), torch.zeros(10)
    with record() as rec:
        copy_no_mask[(2,)](x, out, BLOCK=8)
    m = V.access_map(rec, "x_ptr", 1, "load", width=8, pad_rows=0)
    assert (m.ravel()[10:16] == V.OOB).all() and (m.ravel()[8:10] == V.THIS).all()
    html = __import__("labkit.viz.player", fromlist=["as_html"]).as_html(V.kernel_frame(rec, 1, "out_ptr", ("x_ptr",), width=8))
    assert html.startswith("<img")


def test_frames_fit_an_output_and_labels_never_overlap():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labkit.kernels import attention, softmax

    q = torch.randn(1, 2, 40, 16)
    with record() as ra:
        attention(q, q, q, block_m=16, block_n=16)
    fig = V.kernel_frame(ra, 0, "o_ptr", ("q_ptr", "k_ptr", "v_ptr"))       # 4 panels
    w, h = fig.get_size_inches() * 90                                        # the players' dpi
    assert w <= 940 and h <= 450
    plt.close(fig)
    with record() as rs:
        softmax(torch.randn(3, 50), block_size=16)
    wide = V.kernel_frame(rs, 0, "out_ptr", ("x_ptr",))                      # 50 cells per row
    assert not wide.axes[0].texts                                            # too small to label
    for ax in wide.axes[:2]:      # a 3 x 50 tensor is drawn as a band 0.3 as high as wide, not a strip
        bb = ax.get_window_extent()
        assert bb.height / bb.width == pytest.approx(V.MIN_RATIO, rel=0.05)
    plt.close(wide)
    with record() as r8:
        add(torch.ones(21), torch.ones(21), block_size=8)
    small = V.kernel_frame(r8, 0, "out_ptr", ("x_ptr",), width=8)            # 8 cells per row
    assert len(small.axes[0].texts) == 21 and min(t.get_fontsize() for t in small.axes[0].texts) >= 4.9
    plt.close(small)


def test_panel_ratio_and_label_size():
    assert V.panel_ratio(3, 50) == V.MIN_RATIO and V.panel_ratio(80, 16) == V.MAX_RATIO
    assert V.panel_ratio(18, 24) == 0.75
    # 16 cells across a 3.47-inch panel: 15.6 pt cells, labels at 7 pt; 50 across: 5 pt, none
    assert V.label_size((3, 16), 3.47, V.panel_ratio(3, 16)) == 7.0
    assert V.label_size((3, 50), 3.6, V.panel_ratio(3, 50)) is None
    # labels never exceed 0.55 of a cell's side, so neighbouring numbers cannot overlap
    for rows, cols in [(3, 8), (3, 16), (4, 32), (40, 24), (12, 12)]:
        size = V.label_size((rows, cols), 3.47, V.panel_ratio(rows, cols))
        cell = min(3.47 * 72 / cols, 3.47 * V.panel_ratio(rows, cols) * 72 / rows)
        assert size is None and cell < V.MIN_LABEL_CELL_PT or size <= 0.55 * cell
