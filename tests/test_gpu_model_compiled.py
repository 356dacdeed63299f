"""labkit.gpu_model.compiled: layouts parsed from Triton's TTGIR, the elements a warp instruction
reaches, their sectors, and the naive transpose compiled for sm_90 on this CPU (no GPU): both
its load and its store coalesced, the tile staged through shared memory."""
import pytest

from labkit.gpu_model import coalescing as Co
from labkit.gpu_model import lab
from labkit.gpu_model.compiled import BlockedLayout, compile_for_gpu, warp_cost

ROW = "#ttg.blocked<{sizePerThread = [1, 4], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>"


def test_parse_and_lane_coordinates():
    lay = BlockedLayout.parse(ROW)
    assert lay == BlockedLayout((1, 4), (4, 8), (4, 1), (1, 0))
    lanes = lay.warp_elements()
    assert len(lanes) == 32 and all(len(v) == 4 for v in lanes)
    assert lanes[0] == [(0, 0), (0, 1), (0, 2), (0, 3)] and lanes[1][0] == (0, 4) and lanes[8][0] == (1, 0)
    assert sorted(c for v in lanes for c in v) == [(i, j) for i in range(4) for j in range(32)]
    col = BlockedLayout((1, 1), (32, 1), (1, 4), (0, 1)).warp_elements()
    assert [v[0] for v in col] == [(i, 0) for i in range(32)]
    with pytest.raises(ValueError, match="threadsPerWarp"):
        BlockedLayout.parse(ROW.replace("[4, 8]", "[4, 4]"))
    with pytest.raises(ValueError, match="no order"):
        BlockedLayout.parse(ROW.replace("order", "odr"))


def test_warp_cost_equals_the_thread_model_counts():
    one_per_lane = BlockedLayout((1, 1), (1, 32), (1, 1), (1, 0)).warp_elements()
    for stride in (1, 2, 8, 33):
        got = warp_cost(one_per_lane, lambda i, j, s=stride: j * s)
        acc = Co.analyze_warp(Co.strided_addresses(stride))
        assert (got.sectors, got.segments, got.bytes_used) == (acc.sectors, acc.transactions, 128)
        assert got.efficiency == acc.efficiency
    vec = warp_cost(BlockedLayout.parse(ROW).warp_elements(), lambda i, j: i * 96 + j)
    assert (vec.bytes_used, vec.sectors, vec.segments, vec.efficiency) == (512, 16, 4, 1.0)


def test_the_naive_transpose_compiled_for_sm90_coalesces_both_sides():
    k, rows = lab.compiled_transpose()
    assert k.target == "cuda sm_90" and [kind for kind, _ in k.accesses] == ["load", "store"]
    (_, load), (_, store) = k.accesses
    assert load.order[0] == 1 and store.order[0] == 0       # fastest along x's rows, then along out's rows
    assert k.conversions == 1 and k.shared_bytes == 32 * 32 * 4
    assert k.ptx_ops["st.shared"] > 0 and k.ptx_ops["ld.shared"] > 0
    by = {(r[0], r[1].split()[0]): r for r in rows}
    assert by[("store", "thread")][4:] == [32, 0.125] and by[("load", "thread")][4:] == [4, 1.0]
    assert by[("load", "compiled")][5] == by[("store", "compiled")][5] == 1.0
    assert all(len(line) <= 100 for line in str(lab.compiled_table()).splitlines())


def test_bad_arguments():
    with pytest.raises(TypeError, match="@triton.jit"):
        compile_for_gpu(len, {}, {})
    with pytest.raises(ValueError, match="arch"):
        compile_for_gpu(Co.transpose_kernel, {}, {}, arch=5)
