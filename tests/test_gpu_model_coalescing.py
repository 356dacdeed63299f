"""labkit.gpu_model.coalescing: segment counts vs closed forms, and per-warp counts of real Triton programs."""
import math

import numpy as np
import pytest
import torch

from labkit.gpu_model import coalescing as C
from labkit.kernels import add


def test_unit_stride_is_one_transaction_four_sectors():
    addr = C.strided_addresses(1)                     # 32 consecutive floats from byte 0
    assert addr == [4 * i for i in range(32)]
    assert C.transactions(addr) == 1 and C.sectors(addr) == 4
    acc = C.analyze_warp(addr)
    assert (acc.active, acc.bytes_requested, acc.bytes_moved, acc.efficiency) == (32, 128, 128, 1.0)
    assert C.transactions(C.strided_addresses(1, base=64)) == 2    # misaligned start: two segments


@pytest.mark.parametrize("e", [1, 2, 4, 8, 16])
def test_stride_closed_form_against_counting(e):
    for s in range(0, 70):
        addr = C.strided_addresses(s, e)
        assert C.transactions(addr) == C.strided_transactions(s, e)
        assert C.sectors(addr) == C.strided_transactions(s, e, segment_bytes=32)
        for lanes in (1, 7, 16):
            assert C.transactions(addr[:lanes]) == C.strided_transactions(s, e, lanes=lanes)
        if e == 4 and s >= 1:
            assert C.strided_transactions(s) == min(32, math.ceil(32 * 4 * s / 128)) == min(32, s)


def test_efficiency_falls_with_stride():
    assert C.analyze_warp(C.strided_addresses(2)).efficiency == 0.5          # half of each sector used
    wide = C.analyze_warp(C.strided_addresses(32))
    assert (wide.transactions, wide.sectors, wide.bytes_moved, wide.efficiency) == (32, 32, 1024, 0.125)


def test_random_addresses_need_about_32():
    rng = np.random.default_rng(0)
    n_seg = (64 << 20) // 128                                                    # a 64 MiB array
    counts = [C.transactions([int(a) for a in rng.integers(0, 16 << 20, 32) * 4]) for _ in range(200)]
    assert np.mean(counts) == pytest.approx(C.expected_random_transactions(n_seg), abs=0.1)
    assert C.expected_random_transactions(n_seg) > 31.9
    assert C.expected_random_transactions(1) == 1.0
    assert C.expected_random_transactions(4) == pytest.approx(4 * (1 - 0.75 ** 32))


def test_transactions_contract():
    assert C.transactions([]) == 0 and C.transactions([None] * 32) == 0
    assert C.transactions([0, None, 127, 128, None]) == 2                         # inactive lanes ignored
    assert C.transactions(np.array([0, 256, 512], dtype=np.int64)) == 3           # numpy ints are ints
    assert C.transactions((0, 100, 1000), segment_bytes=1024) == 1
    assert C.transactions([0, 1, 2, 3], segment_bytes=1) == 4
    with pytest.raises(ValueError, match="at most 32 lanes"):
        C.transactions(list(range(33)))
    with pytest.raises(ValueError, match="addresses\\[1\\]"):
        C.transactions([0, -4])
    with pytest.raises(TypeError, match="addresses\\[0\\]"):
        C.transactions([True])
    with pytest.raises(TypeError, match="addresses\\[0\\]"):
        C.transactions([4.0])
    with pytest.raises(TypeError, match="list of ints or None"):
        C.transactions(7)
    with pytest.raises(ValueError, match="power of two"):
        C.transactions([0], segment_bytes=96)
    with pytest.raises(ValueError, match="not a multiple of element_bytes"):
        C.analyze_warp([2], element_bytes=4)


# ---------------------------------------------------------------- real Triton programs (interpreted)
def test_add_kernel_is_coalesced_one_transaction_per_warp():
    n, block = 1000, 256
    x, y = torch.randn(n), torch.randn(n)
    with C.record_warps() as rec:
        out = add(x, y, block_size=block)
    assert torch.equal(out, x + y)
    for tensor, kind in (("x_ptr", "load"), ("y_ptr", "load"), ("out_ptr", "store")):
        ws = rec.select(kind, tensor)
        assert len(ws) == math.ceil(n / block) * block // 32                     # 4 programs x 8 warps
        for w in ws:   # the model: block element k is lane k % 32 of warp k // 32
            first = w.pid[0] * block + 32 * w.warp
            assert w.addresses == tuple(4 * (first + i) if first + i < n else None for i in range(32))
            assert w.access.transactions == 1
        assert sum(w.access.sectors for w in ws) == math.ceil(4 * n / 32)
    assert rec.select("load", "x_ptr")[-1].access.active == n % 32              # the tail warp: 8 lanes
    table = C.coalescing_table(rec)
    assert table.column("transactions") == [32, 32, 32] and table.column("efficiency") == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("stride", [2, 5, 32])
def test_strided_kernel_matches_closed_form(stride):
    x = torch.arange(2048, dtype=torch.float32)
    with C.record_warps() as rec:
        out = C.strided_read(x, stride, block_size=64)
    assert torch.equal(out, x[::stride])
    for w in rec.select("load", "x_ptr"):
        assert w.access.transactions == C.transactions(w.addresses)
        if w.access.active == 32:                                                # full warps
            assert w.access.transactions == C.strided_transactions(stride)
    for w in rec.select("store", "out_ptr"):       # contiguous; a warp whose lanes are all masked moves nothing
        assert w.access.transactions == (1 if w.access.active else 0)
    assert sum(w.access.active for w in rec.select("store")) == out.numel()


def test_naive_transpose_reads_coalesced_writes_strided():
    x = torch.arange(64 * 96, dtype=torch.float32).reshape(64, 96)
    with C.record_warps() as rec:
        out = C.transpose(x, 32, 32)
    assert torch.equal(out, x.T)
    assert set(rec.transactions_per_warp("load", "x_ptr")) == {1}               # a row of a tile
    assert set(rec.transactions_per_warp("store", "out_ptr")) == {32}           # 32 rows of out, M floats apart
    assert len(rec.select("store")) == 64 * 96 // 32
    assert C.coalescing_table(rec).column("efficiency") == [1.0, 0.125]
