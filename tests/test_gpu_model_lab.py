"""labkit.gpu_model.lab (notebook 03's GPU-execution-model tables) and labkit.viz.gpu_model:
every table builds, its numbers equal the labkit.gpu_model functions it reports, lines fit."""
import math
import re

import numpy as np
import pytest
import torch

from labkit.gpu_model import banks as Bk
from labkit.gpu_model import coalescing as Co
from labkit.gpu_model import host_device as Hd
from labkit.gpu_model import lab
from labkit.gpu_model import stencil as St
from labkit.gpu_model import warps as W
from labkit.matmul.thread_model import gpu_formula
from labkit.viz import gpu_model as V


def fits(table) -> bool:
    return all(len(line) <= 100 for line in str(table).splitlines())


def rows(table) -> list[dict]:
    return [dict(zip(table.columns, r)) for r in table.rows]


# ---------------------------------------------------------------------------- divergence
@pytest.mark.parametrize("a,b,c", [(3, 5, 2), (2, 7, 1)])
def test_divergence_table_equals_simulator_and_closed_forms(a, b, c):
    table = lab.divergence_table(a, b, c)
    assert fits(table)
    kernels = lab.divergence_kernels(a, b, c)
    assert len(table.rows) == len(kernels)
    for row, (text, program, threads) in zip(rows(table), kernels):
        run = W.simulate_threads(program, list(range(threads)))
        assert row["kernel (v = lane id, t = thread id)"] == text
        assert (row["warps"], row["slots"], row["efficiency"]) == (len(run.warps), run.issued, run.cost().efficiency)
        assert row["formula"] == row["slots"] and row["formula eff."] == pytest.approx(row["efficiency"])
    by = {r["kernel (v = lane id, t = thread id)"]: r for r in rows(table)}
    assert by["if v < 32: A else: B"]["slots"] == W.branch_formula(a, b, 32).issued == a
    for text, lanes in (("if v % 2 == 0: A else: B", 16), ("if v % 4 == 0: A else: B", 8), ("if v == 0: A else: B", 1)):
        f = W.branch_formula(a, b, lanes)
        assert by[text]["slots"] == f.issued == a + b and by[text]["efficiency"] == pytest.approx(f.efficiency)
    split = by["if t // 32 == 0: A else: B"]             # uniform in each warp: a + b over two warps
    assert split["slots"] == a + b and split["efficiency"] == 1.0
    assert by["for _ in range(v): body"]["slots"] == W.loop_formula(list(range(32)), c).issued == 31 * c
    straggler = W.loop_formula([32] + [1] * 31, c)
    assert by["for _ in range(32 if v == 0 else 1)"]["efficiency"] == pytest.approx(straggler.efficiency)


def test_lane_masks_replay_the_simulator_lane_by_lane():
    for _, program, threads in lab.divergence_kernels():
        if threads != 32:
            continue
        labels, masks = lab.lane_masks(program)
        run = W.simulate_warp(program)
        assert labels == run.labels and masks.shape == (run.issued, 32)
        assert tuple(masks.sum(1)) == run.active_per_slot and tuple(masks.sum(0)) == run.per_lane
    labels, masks = lab.lane_masks(W.divergent_branch(3, 5, 4))
    assert labels == ("A",) * 3 + ("B",) * 5
    assert (masks[:3] == (np.arange(32) % 4 == 0)).all() and (masks[3:] == (np.arange(32) % 4 != 0)).all()
    # nested control flow, a zero-cost Op and an Op run in consecutive loop iterations
    program = [W.Loop(lambda v: v % 3, [W.If(lambda v: v % 2 == 0, [W.Op("A", 1)], [W.Op("B", 2)]), W.Op("Z", 0)]),
               W.Loop(lambda v: v % 5, [W.Op("C", 1)]), W.Op("D", 1)]
    values = [7 * i % 11 for i in range(32)]
    labels, masks = lab.lane_masks(program, values)
    run = W.simulate_warp(program, values)
    assert labels == run.labels and tuple(masks.sum(1)) == run.active_per_slot and tuple(masks.sum(0)) == run.per_lane
    assert masks[labels.index("D")].all()


# ---------------------------------------------------------------------------- coalescing
def test_stride_table_counts_equal_the_closed_form():
    table = lab.stride_table()
    assert fits(table)
    strided = [r for r in rows(table) if r["32 lanes read"].startswith("stride ")]
    assert [r["32 lanes read"] for r in strided] == [f"stride {s}" for s in (1, 2, 4, 8, 16, 32, 64)]
    for r in strided:
        s = int(r["32 lanes read"].split()[1])
        acc = Co.analyze_warp(Co.strided_addresses(s))
        assert r["sectors"] == Co.sectors(Co.strided_addresses(s)) == r["formula"] == min(32, 4 * s)
        assert r["formula"] == Co.strided_transactions(s, 4, Co.SECTOR_BYTES)
        assert r["segments"] == Co.transactions(Co.strided_addresses(s)) == r["seg. formula"] == min(32, s)
        assert (r["sectors"], r["efficiency"]) == (acc.sectors, acc.efficiency)
    rnd = [r for r in rows(table) if r["32 lanes read"].startswith("random")]
    assert len(rnd) == 2
    for r, kib in zip(rnd, (4, 65536)):
        assert r["formula"] == Co.expected_random_transactions((kib << 10) // 32)
        assert r["seg. formula"] == Co.expected_random_transactions((kib << 10) // 128)
        assert r["sectors"] == pytest.approx(r["formula"], abs=0.5)            # mean of 200 seeded warps
        assert r["segments"] == pytest.approx(r["seg. formula"], abs=0.5)
    assert str(lab.stride_table()) == str(table)                                  # seeded: same every run
    e8 = lab.stride_table((1, 3), element_bytes=8, random_kib=(1,))
    assert e8.column("sectors")[:2] == [Co.strided_transactions(1, 8, 32), Co.strided_transactions(3, 8, 32)]
    assert e8.column("segments")[:2] == [Co.strided_transactions(1, 8), Co.strided_transactions(3, 8)]


def test_recorded_table_is_coalescing_table_of_real_triton_runs():
    runs = lab.recorded_runs()
    assert [name for name, _, _ in runs] == ["add", "strided s=8", "transpose"]
    assert all(same for _, same, _ in runs)
    table = lab.recorded_table(runs)
    assert fits(table) and table.title.endswith("outputs equal torch's: True") and "thread model" in table.title
    got = {(r["kernel"], r["tensor"], r["kind"]): r for r in rows(table)}
    for name, _, rec in runs:
        ref = Co.coalescing_table(rec)
        for r in ref.rows:
            want = dict(zip(ref.columns, r))
            row = got[(name, want["tensor"], want["kind"])]
            assert (row["warps"], row["sectors"], row["segments"], row["bytes moved"], row["efficiency"]) == (
                want["warps"], want["sectors"], want["transactions"], want["bytes moved"], want["efficiency"])
            assert row["per warp"] == want["sectors"] / want["warps"]
        assert sum(w.access.sectors for w in rec.warps) == sum(
            row["sectors"] for (k, _, _), row in got.items() if k == name)
    assert got[("strided s=8", "x_ptr", "load")]["per warp"] == Co.strided_transactions(8, 4, 32)
    assert got[("transpose", "x_ptr", "load")]["per warp"] == 4.0
    assert got[("transpose", "out_ptr", "store")]["per warp"] == 32.0
    assert got[("transpose", "out_ptr", "store")]["efficiency"] == 0.125


def test_occupancy_table_equals_occupancy():
    from labkit.gpu_model.occupancy import occupancy

    table = lab.occupancy_table()
    assert fits(table)
    for r in rows(table):
        o = occupancy(r["threads"], r["regs"], r["smem KiB"] * 1024)
        assert (r["blocks"], r["warps"], r["occ."], r["limit"]) == (o.blocks, o.warps, o.fraction, o.limiter)


# ---------------------------------------------------------------------------- banks, stencil
def test_bank_table_degrees_equal_gcd():
    table = lab.bank_table()
    assert fits(table)
    for r in rows(table):
        s = r["stride (words)"]
        assert r["degree"] == r["formula"] == Bk.strided_conflict_degree(s) == (math.gcd(s, 32) if s else 1)
    by = {r["lane i reads"]: r["degree"] for r in rows(table)}
    assert by["column of tile[32][32]"] == Bk.conflict_degree(Bk.tile_column_words(0)) == 32
    assert by["column of tile[32][33]"] == Bk.conflict_degree(Bk.tile_column_words(0, row_words=33)) == 1
    assert by["row of tile[32][32]"] == 1


def test_stencil_table_counts_equal_formulas():
    table = lab.stencil_table()
    assert fits(table) and table.title.endswith("outputs equal numpy's: True")
    assert len(table.rows) == len(lab.STENCIL_1D) + len(lab.STENCIL_2D)
    for r, (n, rad, T) in zip(rows(table), lab.STENCIL_1D):
        assert r["untiled"] == r["untiled formula"] == St.stencil1d_formula(n, rad).global_loads == n * (2 * rad + 1)
        assert r["tiled"] == r["tiled formula"] == St.stencil1d_formula(n, rad, T).global_loads
        assert r["tiled"] == n + 2 * rad * -(-n // T)
        assert r["x fewer"] == r["untiled"] / r["tiled"]
    for r, (R, C, rad, T) in zip(rows(table)[len(lab.STENCIL_1D):], lab.STENCIL_2D):
        assert r["untiled"] == r["untiled formula"] == (4 * rad + 1) * R * C
        assert r["tiled"] == r["tiled formula"] == St.stencil2d_formula(R, C, rad, T).global_loads
    x, w = np.arange(20.0), [1.0, 2.0, 1.0]                    # the table's counts are the runs' counts
    small = lab.stencil_table(((18, 1, 4),), ())
    assert small.rows[0][4] == St.stencil1d_naive(x, w).counts.global_loads
    assert small.rows[0][6] == St.stencil1d_tiled(x, w, 4).counts.global_loads


def test_local_memory_table_counts():
    table = lab.local_memory_table(N=64, V=4)
    assert fits(table)
    glob = gpu_formula("v2", 64, 4)["global_reads"]
    assert table.column("total") == [glob, 0, 2 * 64 ** 3]
    assert table.column("per thread per k") == [2 * 4, 0, 2 * 4 * 4]
    assert table.column("x operand loads")[2] == 2 * 64 ** 3 / glob == 4


# ---------------------------------------------------------------------------- host and device
class FakeGpu:
    """A stream with a virtual clock (as in tests/test_gpu_model_host_device.py)."""

    def __init__(self):
        self.now, self.busy = 0.0, 0.0

    def available(self):
        return True

    def clock(self):
        return self.now

    def synchronize(self):
        self.now = max(self.now, self.busy)

    def spin(self, seconds):
        self.now += 1e-5
        self.busy = max(self.busy, self.now) + seconds

    def probes(self):
        def item():
            self.synchronize()
            self.now += 1e-5
        return {"t.sum().item()": item, "t + 1 (another kernel)": lambda: self.spin(1e-4)}

    def copy_h2d(self, nbytes, pinned):
        gpu_s = nbytes / ((25.0 if pinned else 10.0) * 1e9)
        return (2e-5 if pinned else gpu_s + 1e-4), gpu_s


class NoGpu(FakeGpu):
    def available(self):
        return False


def test_host_device_without_cuda_is_one_short_line():
    for backend in ([None] if not torch.cuda.is_available() else []) + [NoGpu()]:
        res = lab.host_device(backend=backend)
        assert isinstance(res, Hd.NeedsCuda)
        assert str(res) == f"needs a CUDA GPU; on one this measures {lab.HOST_DEVICE_MEASURES}"
        assert "\n" not in str(res) and len(str(res)) <= 100


def test_host_device_table_on_a_fake_gpu_equals_the_measurements():
    table = lab.host_device(kernel_s=0.05, nbytes=1 << 26, backend=FakeGpu())
    assert fits(table)
    launch = Hd.launch_vs_completion(0.05, backend=FakeGpu())
    syncs = Hd.find_implicit_syncs(0.05, backend=FakeGpu())
    copy = Hd.h2d_bandwidth(1 << 26, backend=FakeGpu())
    ms = table.column("ms")
    assert ms[0] == pytest.approx(launch.launch_s * 1e3) and ms[1] == pytest.approx(launch.complete_s * 1e3)
    assert ms[2:4] == pytest.approx([p.call_s * 1e3 for p in syncs])
    assert table.column("note")[2:4] == ["waited" if p.waits else "returned at once" for p in syncs]
    assert ms[4:] == pytest.approx([copy.pinned_gpu_s * 1e3, copy.pageable_gpu_s * 1e3])
    assert f"{copy.pinned_gbps:.1f} GB/s" in table.rows[4][2] and f"{copy.ratio:.1f}x" in table.title


# ---------------------------------------------------------------------------- this CPU (timed, tiny)
def test_cpu_tables_build():
    simd = lab.simd_table(n=1 << 14, repeat=1)
    order = lab.order_table(n=1 << 14, repeat=1)
    assert fits(simd) and fits(order)
    assert simd.column("pattern")[0] == "contiguous" and len(simd.rows) == 4
    assert simd.column("× contiguous time")[0] == 1.0
    assert order.column("traversal") == ["x.sum()", "in order", "random permutation"]
    assert all(v > 0 for v in simd.column("GB/s") + order.column("GB/s"))


# ---------------------------------------------------------------------------- drawings
def _rect_fills(svg: str) -> list[str]:
    return re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"', svg)


def test_warp_slots_picture_colours_active_lanes():
    labels, masks = lab.lane_masks(W.divergent_branch(3, 5, 4))
    svg = V.warp_slots_html(labels, masks, "if v % 4 == 0")
    fills = _rect_fills(svg)[3:]                                      # after the legend's three boxes
    assert len(fills) == masks.size
    assert fills.count(V.IDLE) == masks.size - masks.sum()
    assert fills.count(V.PALETTE[0]) == masks[:3].sum() and fills.count(V.PALETTE[1]) == masks[3:].sum()
    assert "max-width:100%" in svg and "if v % 4 == 0" in svg
    with pytest.raises(ValueError, match="masks must have shape"):
        V.warp_slots_html(labels[:2], masks)


@pytest.mark.parametrize("stride", [1, 2, 8, 32])
def test_segments_picture_has_a_row_per_transaction(stride):
    addr = Co.strided_addresses(stride)
    svg = V.segments_html(addr, f"stride {stride}")
    fills = _rect_fills(svg)[2:]                                      # after the legend's two boxes
    assert len(fills) == 32 * Co.transactions(addr)                   # 32 words per segment row
    assert fills.count(V.READ) == 32
    assert fills.count(V.READ) + fills.count(V.PALE) == 8 * Co.sectors(addr)   # 8 words per sector
    assert V.side_by_side(svg, svg).count(svg) == 2
