"""Unit tests of labkit.kernels under Triton's interpreter (CPU) or compiled (GPU).

Tolerances: add and softmax/layernorm in fp32 are compared with tight bounds:
the kernel does the same fp32 operations as torch, up to summation order
(a row sum of N terms may differ by ~N ulp). Matmul/attention fp32 results
differ from torch only by summation order (K products), so rtol=atol=1e-5.
16-bit outputs are the fp32 result rounded once, so they may differ from the
rounded reference by one unit in the last place: rtol 2^-10 (fp16) / 2^-7
(bf16) relative plus a small absolute term.
"""
import labkit  # noqa: F401  (TRITON_INTERPRET=1 before any kernel is defined)


import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from labkit.kernels import (add, add_reference, attention, attention_reference, layernorm,
                            layernorm_reference, matmul, matmul_reference, record, softmax,
                            softmax_reference)
from labkit.kernels.checks import interpreting
from labkit.kernels.matmul import program_tile, tiled_traffic_elements

needs_interp = pytest.mark.skipif(not interpreting(), reason="the access recorder needs TRITON_INTERPRET=1")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton)")
DEV = "cpu" if interpreting() else "cuda"
TOL16 = {torch.float16: dict(rtol=2**-10, atol=1e-3), torch.bfloat16: dict(rtol=2**-7, atol=1e-2)}


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


# ---------------------------------------------------------------- add
@pytest.mark.parametrize("n,block", [(1, 16), (37, 16), (64, 16), (1000, 128)])
def test_add_exact(n, block):
    x, y = rnd(n), rnd(n, seed=1)
    assert torch.equal(add(x, y, block_size=block), add_reference(x, y))  # same fp32 op: bit-exact


def test_add_int_and_2d():
    x = torch.arange(35, dtype=torch.int32, device=DEV).reshape(5, 7)
    assert torch.equal(add(x, x, block_size=8), 2 * x)


@needs_interp
def test_recorder_add_masks_and_ownership():
    n, block = 37, 16
    x, y = rnd(n), rnd(n, seed=1)
    with record() as rec:
        out = add(x, y, block_size=block)
    assert torch.equal(out, x + y)
    assert len(rec.launches) == 1 and rec.launches[0].grid == (3, 1, 1)
    assert rec.out_of_bounds == []
    # every element read once from each input and written once
    for name, kind in (("x_ptr", "load"), ("y_ptr", "load"), ("out_ptr", "store")):
        assert (rec.counts(name, kind) == 1).all()
        assert rec.n_masked(kind, name) == 3 * block - n           # 11 idle lanes, all in the last program
    assert np.array_equal(rec.owner("out_ptr"), np.arange(n) // block)  # program p owns [p*B, p*B+B)
    last = rec.select("load", "x_ptr", pid=2)[0]
    assert np.array_equal(last.masked_offsets, np.arange(n, 3 * block))
    assert np.array_equal(last.offsets, np.arange(2 * block, n))


@triton.jit
def _add_no_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


@needs_interp
def test_recorder_flags_missing_mask_without_touching_memory():
    n, block = 21, 16
    buf = torch.full((40,), 7.0)
    x, y, out = buf[:n], torch.ones(n), torch.zeros(n)
    spare = buf[n:].clone()
    with record() as rec:
        _add_no_mask[(2,)](x, y, out, n, BLOCK=block)
    bad = rec.out_of_bounds
    assert {a.kind for a in bad} == {"load", "store"}
    # x's lanes 21..31 land inside buf but outside x: still out of bounds for argument x
    assert np.array_equal(rec.select("store", "out_ptr", pid=1)[0].oob_offsets, np.arange(n, 2 * block))
    assert torch.equal(buf[n:], spare)                      # the recorder dropped the stray lanes
    assert torch.equal(out, x + y)
    with pytest.raises(Exception, match="outside the tensor"):
        with record(on_oob="raise"):
            _add_no_mask[(2,)](x, y, out, n, BLOCK=block)


# ---------------------------------------------------------------- softmax
@pytest.mark.parametrize("shape,block", [((1, 1), None), ((5, 37), None), ((3, 300), None),
                                         ((4, 37), 16), ((2, 33), 32)])
def test_softmax_fp32(shape, block):
    x = rnd(*shape) * 3
    y = softmax(x, block_size=block)
    torch.testing.assert_close(y, softmax_reference(x), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(y.sum(-1), torch.ones(shape[0], device=DEV), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_16bit(dtype):
    x = rnd(3, 45, dtype=dtype)
    torch.testing.assert_close(softmax(x, block_size=16), softmax_reference(x), **TOL16[dtype])


def test_softmax_stable_on_huge_values():
    x = rnd(3, 50) * 1e4            # exp(x) alone would overflow fp32
    y = softmax(x, block_size=16)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-6, atol=1e-7)


def test_softmax_strided_rows():
    big = rnd(4, 64)
    x = big[:, 3:40]                # row stride 64, columns contiguous
    torch.testing.assert_close(softmax(x, block_size=16), torch.softmax(x, -1), rtol=1e-6, atol=1e-7)


@needs_interp
@pytest.mark.parametrize("block,reads", [(64, 1), (16, 2)])
def test_softmax_reads_once_or_twice(block, reads):
    M, N = 3, 37
    with record() as rec:
        softmax(rnd(M, N), block_size=block)
    assert rec.out_of_bounds == []
    assert (rec.counts("x_ptr", "load") == reads).all()   # one pass if a block holds the row, else two
    assert (rec.counts("out_ptr", "store") == 1).all()
    assert np.array_equal(rec.owner("out_ptr"), np.repeat(np.arange(M), N))  # program r owns row r


# ---------------------------------------------------------------- matmul
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (37, 29, 45), (1, 50, 17), (50, 17, 1), (16, 16, 16)])
def test_matmul_fp32(M, K, N):
    a, b = rnd(M, K), rnd(K, N, seed=1)
    torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_16bit_accumulates_in_fp32(dtype):
    a, b = rnd(33, 70, dtype=dtype), rnd(70, 19, dtype=dtype, seed=1)
    torch.testing.assert_close(matmul(a, b), matmul_reference(a, b), **TOL16[dtype])


def test_matmul_strided_inputs():
    a, b = rnd(29, 37).t(), rnd(21, 29, seed=1).t()      # transposed views, no copy
    torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


@needs_interp
def test_matmul_traffic_formula_and_grouping():
    n, bs = 32, 16
    cfg = {"BLOCK_M": bs, "BLOCK_N": bs, "BLOCK_K": bs, "GROUP_M": 2}
    with record() as rec:
        matmul(rnd(n, n), rnd(n, n, seed=1), config=cfg)
    loaded = sum(a.offsets.size for a in rec.select("load"))
    stored = sum(a.offsets.size for a in rec.select("store"))
    assert loaded + stored == 2 * n**3 // bs + n**2 == tiled_traffic_elements(n, n, n, bs, bs)["total"]
    # the store owner map follows program_tile's grouped order
    own = rec.owner("c_ptr").reshape(n, n)
    for pid in range(4):
        pm, pn = program_tile(pid, n, n, bs, bs, 2)
        assert (own[pm * bs:(pm + 1) * bs, pn * bs:(pn + 1) * bs] == pid).all()


@needs_interp
def test_matmul_traffic_uneven_shapes():
    M, K, N = 37, 29, 45
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2}
    with record() as rec:
        matmul(rnd(M, K), rnd(K, N, seed=1), config=cfg)
    want = tiled_traffic_elements(M, K, N, 16, 32)
    assert rec.out_of_bounds == []
    assert (rec.counts("a_ptr", "load") == triton.cdiv(N, 32)).all()   # A once per tile column
    assert (rec.counts("b_ptr", "load") == triton.cdiv(M, 16)).all()   # B once per tile row
    got = {"A": rec.counts("a_ptr", "load").sum(), "B": rec.counts("b_ptr", "load").sum(),
           "C": rec.counts("c_ptr", "store").sum()}
    assert got == {k: want[k] for k in "ABC"}


def test_program_tile_grouped_order():
    # 4 tile rows x 3 tile cols, GROUP_M=2: ids run down 2 rows, then right
    tiles = [program_tile(p, 64, 48, 16, 16, 2) for p in range(12)]
    assert tiles[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert sorted(tiles) == [(m, n) for m in range(4) for n in range(3)]
    assert tiles == [program_tile(p, 64, 48, 16, 16, 2) for p in range(12)]
    # odd tile-row count: last group is 1 row tall
    assert sorted(program_tile(p, 48, 32, 16, 16, 2) for p in range(6)) == [(m, n) for m in range(3) for n in range(2)]


# ---------------------------------------------------------------- layernorm
@pytest.mark.parametrize("shape,block", [((3, 37), None), ((2, 5, 37), 16), ((1, 1), None)])
def test_layernorm_fp32(shape, block):
    N = shape[-1]
    x, w, b = rnd(*shape) * 2 + 1, rnd(N, seed=1), rnd(N, seed=2)
    y, mean, rstd = layernorm(x, w, b, eps=1e-5, block_size=block, return_stats=True)
    torch.testing.assert_close(y, layernorm_reference(x, w, b, 1e-5), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, x.mean(-1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(x.var(-1, unbiased=False) + 1e-5), rtol=1e-5, atol=1e-5)


def test_layernorm_fp16():
    x, w, b = rnd(4, 50, dtype=torch.float16), rnd(50, dtype=torch.float16, seed=1), rnd(50, dtype=torch.float16, seed=2)
    torch.testing.assert_close(layernorm(x, w, b, block_size=16), layernorm_reference(x, w, b), **TOL16[torch.float16])


# ---------------------------------------------------------------- attention
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Sq,Sk,D", [(37, 37, 24), (20, 45, 16), (1, 5, 8)])
def test_attention_matches_sdpa(causal, Sq, Sk, D):
    q, k, v = rnd(2, 2, Sq, D), rnd(2, 2, Sk, D, seed=1), rnd(2, 2, Sk, D, seed=2)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(attention(q, k, v, causal=causal), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_16bit(dtype):
    q, k, v = (rnd(1, 2, 33, 16, dtype=dtype, seed=s) for s in range(3))
    # p is rounded to the input dtype before p @ V (as on the GPU): a few ulps from the fp32 reference
    tol = {torch.float16: dict(rtol=4e-3, atol=4e-3), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}[dtype]
    torch.testing.assert_close(attention(q, k, v, causal=True), attention_reference(q, k, v, causal=True), **tol)


@needs_interp
def test_attention_causal_skips_future_blocks():
    S, D, bm = 40, 16, 16
    q, k, v = rnd(1, 1, S, D), rnd(1, 1, S, D, seed=1), rnd(1, 1, S, D, seed=2)
    loaded = {}
    for causal in (False, True):
        with record() as rec:
            attention(q, k, v, causal=causal, block_m=bm, block_n=bm)
        assert rec.out_of_bounds == []
        loaded[causal] = [rec.elements("load", "k_ptr", pid=(p, 0)).size // D for p in range(3)]
    assert loaded[False] == [S, S, S]                                   # every key row, every tile
    assert loaded[True] == [min(S, (p + 1) * bm) for p in range(3)]     # keys 0..end of own tile only


# ---------------------------------------------------------------- bad input
def test_bad_inputs_raise_before_launch():
    x = rnd(8)
    with pytest.raises(ValueError, match="shapes must match"):
        add(x, rnd(9))
    with pytest.raises(TypeError, match="torch.Tensor"):
        add([1.0], x)
    with pytest.raises(TypeError, match="float64"):
        softmax(rnd(2, 3).double())
    with pytest.raises(ValueError, match="2 dimension"):
        softmax(rnd(2, 3, 4))
    with pytest.raises(ValueError, match="contiguous"):
        softmax(rnd(5, 4).t())
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(rnd(3, 4), rnd(5, 6))
    with pytest.raises(TypeError, match="one dtype"):
        matmul(rnd(3, 4), rnd(4, 6).half())
    with pytest.raises(ValueError, match="expected a"):
        matmul(torch.empty(3, 4, device="meta"), torch.empty(4, 5, device="meta"))
    with pytest.raises(ValueError, match="contiguous"):
        layernorm(rnd(5, 4).t(), rnd(5), rnd(5))
    with pytest.raises(ValueError, match="shape \\(4,\\)"):
        layernorm(rnd(3, 4), rnd(5), rnd(4))
    with pytest.raises(ValueError, match="same shape"):
        attention(rnd(1, 1, 4, 8), rnd(1, 1, 4, 8), rnd(1, 1, 5, 8))
    with pytest.raises(ValueError, match="batch, heads"):
        attention(rnd(1, 1, 4, 8), rnd(1, 2, 4, 8), rnd(1, 2, 4, 8))
    with pytest.raises(ValueError, match="power of two"):
        add(x, x, block_size=10)
    with pytest.raises(ValueError, match="empty"):
        add(rnd(0), rnd(0))


@needs_gpu
def test_gpu_autotuned_matmul_bf16():
    a, b = rnd(1000, 700, dtype=torch.bfloat16), rnd(700, 900, dtype=torch.bfloat16, seed=1)
    torch.testing.assert_close(matmul(a, b), matmul_reference(a, b), rtol=2**-7, atol=5e-2)


@needs_interp
def test_recorder_overrun_into_neighbour_argument_is_out_of_bounds():
    n, block = 21, 16
    buf = torch.arange(64, dtype=torch.float32)
    x, y, out = buf[:n], buf[n:2 * n], torch.zeros(n)       # x's overrun lands inside y's memory
    with record() as rec:
        _add_no_mask[(2,)](x, y, out, n, BLOCK=block)
    oob = {(a.kind, a.tensor): a.oob_offsets.tolist() for a in rec.out_of_bounds}
    assert oob[("load", "x_ptr")] == list(range(n, 2 * block))
    assert oob[("load", "y_ptr")] == list(range(n, 2 * block))
    assert torch.equal(out, x + y)


# ---------------------------------------------------------------- layernorm backward
@pytest.mark.parametrize("shape,block", [((5, 37), None), ((2, 3, 40), 16), ((19, 1), None)])
def test_layernorm_backward_matches_autograd(shape, block):
    from labkit.kernels.layernorm import LayerNormFunction, layernorm_backward

    N = shape[-1]
    x, w, b, dy = rnd(*shape) * 2 + 1, rnd(N, seed=1), rnd(N, seed=2), rnd(*shape, seed=3)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(xr, (N,), wr, br, 1e-5).backward(dy)
    _, mean, rstd = layernorm(x, w, b, 1e-5, return_stats=True)
    dx, dw, db = layernorm_backward(dy, x, w, mean, rstd, block_size=block)
    if N == 1:  # y = bias whatever x or w are: dx = dw = 0 exactly (torch's rounding, times rstd = 1/sqrt(eps), is not)
        assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))
        torch.testing.assert_close(db, br.grad, rtol=1e-5, atol=1e-5)
        return
    # fp32; sums over N (dx) or over rows (dw, db) in a different order than torch: 1e-5
    torch.testing.assert_close(dx, xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dw, wr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(db, br.grad, rtol=1e-5, atol=1e-5)
    xa, wa, ba = (t.clone().requires_grad_() for t in (x, w, b))
    LayerNormFunction.apply(xa, wa, ba, 1e-5).backward(dy)
    torch.testing.assert_close(xa.grad, dx, rtol=1e-5, atol=1e-6)   # default block size: other sum order
    torch.testing.assert_close(wa.grad, dw, rtol=1e-5, atol=1e-6)


def test_layernorm_backward_bad_input():
    from labkit.kernels.layernorm import layernorm_backward

    x = rnd(3, 8)
    with pytest.raises(ValueError, match="one value per row"):
        layernorm_backward(x, x, rnd(8), torch.zeros(2, device=DEV), torch.ones(3, device=DEV))
    with pytest.raises(ValueError, match="same shape"):
        layernorm_backward(rnd(3, 7), x, rnd(8), torch.zeros(3, device=DEV), torch.ones(3, device=DEV))


# ---------------------------------------------------------------- properties
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=12, deadline=None, derandomize=True)
@given(n=st.integers(1, 200), log_block=st.integers(0, 6))
def test_add_any_length_property(n, log_block):
    x, y = rnd(n, seed=n), rnd(n, seed=n + 1)
    assert torch.equal(add(x, y, block_size=2**log_block), x + y)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(m=st.integers(1, 4), n=st.integers(1, 90), log_block=st.integers(0, 7), scale=st.sampled_from([1.0, 50.0]))
def test_softmax_any_shape_property(m, n, log_block, scale):
    x = rnd(m, n, seed=n) * scale
    # fp32 vs torch: same ops up to summation order over <= 90 terms
    torch.testing.assert_close(softmax(x, block_size=2**log_block), torch.softmax(x, -1), rtol=1e-5, atol=1e-7)


@needs_gpu
def test_gpu_softmax_long_rows_and_attention():
    x = rnd(64, 20000)                                    # longer than the 16384 block cap: two-pass path
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-7)
    q, k, v = (rnd(2, 4, 300, 64, dtype=torch.float16, seed=s) for s in range(3))
    for causal in (False, True):
        torch.testing.assert_close(attention(q, k, v, causal=causal),
                                   torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                   rtol=1e-2, atol=1e-2)


def test_grouped_order_wave_footprint():
    # 8x8 tiles, a wave of 8 concurrent programs: distinct A row-strips + B column-strips it reads
    def strips(g):
        wave = [program_tile(p, 128, 128, 16, 16, g) for p in range(8)]
        return len({m for m, _ in wave}) + len({n for _, n in wave})
    assert [strips(g) for g in (1, 2, 4, 8)] == [1 + 8, 2 + 4, 4 + 2, 8 + 1]


@needs_interp
def test_record_refuses_nesting_and_bad_options():
    with record():
        with pytest.raises(RuntimeError, match="nested"):
            with record():
                pass
    with pytest.raises(ValueError, match="on_oob"):
        with record(on_oob="ignore"):
            pass


def test_online_softmax_trace_matches_kernel():
    from labkit.kernels.softmax import online_softmax_trace

    x = rnd(1, 37) * 3
    tr = online_softmax_trace(x.cpu().numpy(), 16)
    xs = x.double().cpu()[0]
    assert len(tr) == 3 and [t["cols"] for t in tr] == [(0, 16), (16, 32), (32, 37)]
    assert tr[-1]["m"] == xs.max().item()
    assert tr[0]["scale"] == 0.0 and all(0 < t["scale"] <= 1 for t in tr[1:])
    assert math.isclose(tr[-1]["s"], torch.exp(xs - xs.max()).sum().item(), rel_tol=1e-12)
    want = torch.exp(xs - tr[-1]["m"]) / tr[-1]["s"]
    torch.testing.assert_close(softmax(x, block_size=16)[0].double().cpu(), want, rtol=1e-6, atol=1e-8)


def test_online_softmax_frame_draws():
    from labkit.kernels.softmax import online_softmax_trace
    from labkit.kernels.draw import online_softmax_frame
    import matplotlib.pyplot as plt

    row = np.array([1.0, 5.0, 2.0, 7.0, 0.0])
    tr = online_softmax_trace(row, 2)
    assert [t["m"] for t in tr] == [5.0, 7.0, 7.0]
    fig = online_softmax_frame(row, tr, 1)
    assert "m = 7.000" in fig.axes[0].get_title()
    plt.close(fig)


# ---------------------------------------------------------------- bad block sizes / configs: one-line errors
def _raises_one_line(exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match) as excinfo:
        fn(*args, **kwargs)
    assert "\n" not in str(excinfo.value), str(excinfo.value)


MM_CFG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}


@pytest.mark.parametrize("change,exc,match", [
    ({"GROUP_M": 0}, ValueError, r"config\['GROUP_M'\] must be an int in 1\.\.65536, got 0"),
    ({"GROUP_M": -1}, ValueError, r"config\['GROUP_M'\] must be an int in 1\.\.65536, got -1"),
    ({"GROUP_M": 2.0}, TypeError, r"config\['GROUP_M'\] must be an int, got float"),
    ({"GROUP_M": True}, TypeError, r"config\['GROUP_M'\] must be an int, got bool"),
    ({"BLOCK_M": 8}, ValueError, r"config\['BLOCK_M'\] must be a power of two in 16\.\.256, got 8"),
    ({"BLOCK_N": 24}, ValueError, r"config\['BLOCK_N'\] must be a power of two in 16\.\.256, got 24"),
    ({"BLOCK_K": 512}, ValueError, r"config\['BLOCK_K'\] must be a power of two in 16\.\.256, got 512"),
    ({"BLOCK_K": 16.0}, TypeError, r"config\['BLOCK_K'\] must be an int \(a power of two in 16\.\.256\), got float"),
    ({"BLOCK_M": -16}, ValueError, r"config\['BLOCK_M'\] must be a power of two"),
    ({"num_warps": 3}, ValueError, r"config\['num_warps'\] must be a power of two in 1\.\.32"),
    ({"num_stages": 0}, ValueError, r"config\['num_stages'\] must be an int in 1\.\.8"),
    ({"BLOCK": 16}, ValueError, r"unknown config key\(s\) 'BLOCK'"),
    ({"DOT_FP32": True}, ValueError, r"unknown config key\(s\) 'DOT_FP32'"),
])
def test_matmul_bad_config_one_line(change, exc, match):
    _raises_one_line(exc, "matmul: " + match, matmul, rnd(20, 20), rnd(20, 20, seed=1), config={**MM_CFG, **change})


def test_matmul_bad_config_type_and_missing_keys():
    a, b = rnd(4, 4), rnd(4, 4, seed=1)
    _raises_one_line(TypeError, "matmul: config must be a dict", matmul, a, b, config=[16, 16, 16, 2])
    _raises_one_line(ValueError, "matmul: config is missing BLOCK_N, BLOCK_K, GROUP_M", matmul, a, b,
                     config={"BLOCK_M": 16})


def test_matmul_valid_configs_still_work():
    a, b = rnd(37, 29), rnd(29, 45, seed=1)
    for cfg in ({**MM_CFG, "GROUP_M": 1}, {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 3},
                {**MM_CFG, "GROUP_M": np.int64(4), "num_warps": 4, "num_stages": 2}):
        torch.testing.assert_close(matmul(a, b, config=cfg), a @ b, rtol=1e-5, atol=1e-5)


def test_program_tile_and_traffic_bad_input_one_line():
    _raises_one_line(ValueError, "program_tile: group_m must be an int >= 1, got 0",
                     program_tile, 0, 64, 64, 16, 16, 0)
    _raises_one_line(ValueError, r"program_tile: pid must be an int in 0\.\.15, got 16",
                     program_tile, 16, 64, 64, 16, 16, 2)
    _raises_one_line(ValueError, "tiled_traffic_elements: block_n must be an int >= 1, got 0",
                     tiled_traffic_elements, 4, 4, 4, 16, 0)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(block_m=-16), ValueError, r"block_m must be a power of two in 16\.\.256, got -16"),
    (dict(block_m=3), ValueError, r"block_m must be a power of two in 16\.\.256, got 3"),
    (dict(block_m=0), ValueError, r"block_m must be a power of two in 16\.\.256, got 0"),
    (dict(block_m=8), ValueError, r"block_m must be a power of two in 16\.\.256, got 8"),
    (dict(block_m=16.0), TypeError, r"block_m must be an int \(a power of two in 16\.\.256\), got float 16\.0"),
    (dict(block_m=True), TypeError, r"block_m must be an int"),
    (dict(block_n=-16), ValueError, r"block_n must be a power of two in 16\.\.256, got -16"),
    (dict(block_m=2**30), ValueError, r"block_m must be a power of two in 16\.\.256, got 1073741824"),
    (dict(block_n=512), ValueError, r"block_n must be a power of two in 16\.\.256, got 512"),
    (dict(scale=float("nan")), ValueError, r"scale must be a finite number, got nan"),
    (dict(scale="x"), TypeError, r"scale must be a real number, got str"),
    (dict(causal="yes"), TypeError, r"causal must be True or False"),
])
def test_attention_bad_tiles_one_line(kwargs, exc, match):
    q = rnd(1, 1, 8, 16)
    _raises_one_line(exc, "attention: " + match, attention, q, q, q, **kwargs)


def test_attention_valid_tiles_still_work():
    q, k, v = rnd(1, 2, 20, 16), rnd(1, 2, 37, 16, seed=1), rnd(1, 2, 37, 16, seed=2)
    ref = attention_reference(q, k, v)
    for bm, bn in ((16, 16), (32, 16), (16, 64), (np.int64(32), None)):
        torch.testing.assert_close(attention(q, k, v, block_m=bm, block_n=bn), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn,name", [("add", "block_size"), ("softmax", "block_size"), ("layernorm", "block_size"),
                                     ("layernorm_backward", "block_size")])
@pytest.mark.parametrize("value,exc,match", [
    (0, ValueError, r"must be a power of two in 1\.\.1048576, got 0"),
    (-4, ValueError, r"must be a power of two in 1\.\.1048576, got -4"),
    (12, ValueError, r"must be a power of two in 1\.\.1048576, got 12"),
    (2**21, ValueError, r"must be a power of two in 1\.\.1048576, got 2097152"),
    (16.0, TypeError, r"must be an int \(a power of two in 1\.\.1048576\), got float 16\.0"),
    (True, TypeError, r"must be an int \(a power of two in 1\.\.1048576\), got bool True"),
])
def test_block_size_checks_one_line(fn, name, value, exc, match):
    from labkit.kernels.layernorm import layernorm_backward

    x, w = rnd(2, 8), rnd(8, seed=1)
    call = {"add": lambda: add(x, x, block_size=value),
            "softmax": lambda: softmax(x, block_size=value),
            "layernorm": lambda: layernorm(x, w, w, block_size=value),
            "layernorm_backward": lambda: layernorm_backward(x, x, w, torch.zeros(2, device=DEV),
                                                             torch.ones(2, device=DEV), block_size=value)}[fn]
    _raises_one_line(exc, f"{fn}: {name} {match}", call)


def test_layernorm_degenerate_shapes_one_line():
    from labkit.kernels.layernorm import layernorm_backward

    s, w1 = torch.tensor(1.0, device=DEV), rnd(1)
    _raises_one_line(ValueError, r"layernorm: x must have at least 1 dimension\(s\), got shape \(\) "
                     r"\(a 0-d tensor\)", layernorm, s, w1, w1)
    _raises_one_line(ValueError, r"layernorm_backward: dy must have at least 1 dimension", layernorm_backward,
                     s, s, w1, torch.zeros(1, device=DEV), torch.ones(1, device=DEV))
    _raises_one_line(ValueError, r"layernorm: x is empty \(shape \(3, 0\)\)", layernorm, rnd(3, 0), rnd(0), rnd(0))
    _raises_one_line(ValueError, r"layernorm: x is empty \(shape \(0, 4\)\)", layernorm, rnd(0, 4), rnd(4), rnd(4))
    x, w = rnd(2, 4), rnd(4)
    _raises_one_line(ValueError, "layernorm: eps must be a finite positive number, got inf", layernorm, x, w, w,
                     eps=float("inf"))
    _raises_one_line(ValueError, "layernorm: eps must be a finite positive number, got 0", layernorm, x, w, w, eps=0)
    _raises_one_line(TypeError, "layernorm: eps must be a real number, got bool", layernorm, x, w, w, eps=True)
    torch.testing.assert_close(layernorm(rnd(5), rnd(5, seed=1), rnd(5, seed=2)),        # 1-d x: one row
                               layernorm_reference(rnd(5), rnd(5, seed=1), rnd(5, seed=2)), rtol=1e-5, atol=1e-5)


def test_recorder_interprets_compiled_kernels_on_a_gpu_box(tmp_path):
    """With TRITON_INTERPRET=0 the kernels are compiled JITFunctions (as on a GPU box): record()
    still records them, by running them through the interpreter on CPU tensors; outside the
    block the wrappers ask for CUDA tensors again (timing cells use compiled kernels)."""
    import subprocess
    import sys

    script = tmp_path / "gpu_box.py"
    script.write_text(
        "import os\n"
        "os.environ['TRITON_INTERPRET'] = '0'\n"
        "import torch, triton\n"
        "from labkit.kernels import add, softmax, record\n"
        "from labkit.kernels.add import add_kernel\n"
        "from labkit.kernels.checks import interpreting\n"
        "assert type(add_kernel) is triton.runtime.jit.JITFunction and not interpreting()\n"
        "x, y = torch.randn(37), torch.randn(37)\n"
        "with record() as rec:\n"
        "    out = add(x, y, block_size=16)\n"
        "assert torch.equal(out, x + y) and rec.launches[0].grid == (3, 1, 1)\n"
        "assert rec.n_masked('store', 'out_ptr') == 3 * 16 - 37\n"
        "with record() as rec:\n"
        "    s = softmax(torch.randn(3, 50), block_size=16)\n"
        "assert len(rec.launches) == 1 and rec.launches[0].grid == (3, 1, 1)\n"
        "assert not interpreting() and os.environ['TRITON_INTERPRET'] == '0'\n"
        "try:\n"
        "    add(x, y)\n"
        "except ValueError as e:\n"
        "    assert 'expected a cuda tensor' in str(e)\n"
        "else:\n"
        "    raise AssertionError('compiled kernels took CPU tensors outside record()')\n"
        "print('ok')\n")
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HOME": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_unfused_softmax_makes_eight_passes_fused_two():
    from labkit.roofline.measure import count_passes

    def unfused(x):
        m = x.max(dim=1, keepdim=True).values
        e = (x - m).exp()
        return e / e.sum(dim=1, keepdim=True)

    x = torch.randn(64, 50)
    got = count_passes(unfused, x, numel=x.numel())
    assert (got["reads"], got["writes"]) == (5, 3)
    assert [op.split(".")[0] for op, _, _ in got["ops"]] == ["max", "sub", "exp", "sum", "div"]
    fused = count_passes(lambda t: torch.softmax(t, 1), x, numel=x.numel())
    assert (fused["reads"], fused["writes"]) == (1, 1)
    with record() as rec:
        softmax(x, block_size=64)
    assert sum(a.offsets.size for a in rec.accesses) == 2 * x.numel()   # the Triton kernel: 2 passes


def test_lab04_pictures(monkeypatch):
    import IPython.display

    import exercises.lab04_triton as stubs
    import solutions.lab04_triton as answers
    from labkit.kernels import lab

    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    want_masked = {"add_kernel": 3 * 16 - 37, "softmax_kernel": 3 * (64 - 50), "layernorm_kernel": 4 * (64 - 50)}
    for name in lab.DRAWN:
        got = lab.picture(name)(getattr(answers, name))
        assert got["close"] and got["out_of_bounds"] == 0, name
        if name in want_masked:
            assert got["masked_stores"] == want_masked[name], name
        with pytest.raises(NotImplementedError):
            lab.check(name, getattr(stubs, name))


def test_lab04_worked_problems():
    import math

    assert math.ceil(10 ** 6 / 1024) == 977 and 977 * 1024 - 10 ** 6 == 448
    assert round(2 * 4096 ** 2 * 4 / 3.35e12 * 1e6) == 40 and round(8 * 4096 ** 2 * 4 / 3.35e12 * 1e6) == 160
    from labkit.kernels.matmul import tiled_traffic_elements
    assert tiled_traffic_elements(4096, 4096, 4096, 128, 128)["total"] == 2 * 4096 ** 3 // 128 + 4096 ** 2
    assert round(tiled_traffic_elements(4096, 4096, 4096, 64, 64)["total"] / 1e9, 2) == 2.16
    assert 8192 ** 2 * 2 == 134217728 and 2 * 8192 * 4 == 64 * 1024
    from labkit.kernels.softmax import online_softmax_trace
    trace = online_softmax_trace([1.0, 0.0, 5.0, 2.0, 3.0, -1.0], 2)      # block maxima 1, 5, 3
    assert [t["block_max"] for t in trace] == [1.0, 5.0, 3.0]
    assert round(trace[1]["scale"], 3) == 0.018 and trace[2]["scale"] == 1.0 and trace[-1]["m"] == 5.0


@needs_interp
def test_older_tritons_scalar_index_falls_back(monkeypatch):
    """Triton 3.6's interpreter reads a scalar as int(array), which NumPy >= 2.4 refuses for its
    1-element arrays: range(0, tl.cdiv(K, BLOCK_K)) in the matmul kernel failed. labkit.kernels.compat
    patches it on Triton < 3.7; here 3.6's behaviour is put back and the patch applied to it."""
    from triton.runtime import interpreter as I

    from labkit.kernels import compat

    original = I._patch_lang_tensor

    def as_in_3_6(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(I, "_patch_lang_tensor", as_in_3_6)
    a, b = torch.randn(20, 40), torch.randn(40, 24)
    if tuple(int(x) for x in np.__version__.split(".")[:2]) >= (2, 4):
        with pytest.raises(Exception, match="0-dimensional"):
            matmul(a, b)
    assert not compat.patch_interpreter_scalar_index()           # 3.7+: nothing to do
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert compat.patch_interpreter_scalar_index() and compat.patch_interpreter_scalar_index()
    torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- shared memory against the device's limit
H100_SMEM, A100_SMEM = 232448, 167936      # bytes per block (opt-in), as torch reports them


def test_attention_tiles_fit_the_devices_shared_memory():
    from labkit.kernels.attention import gpu_tiles, shared_bytes

    assert shared_bytes(128, 32, 256, 4, 3) == 278528 > H100_SMEM      # the defaults, fp32, head dim 256
    assert gpu_tiles(128, 4, H100_SMEM) == (128, 32, 3)                 # fits: unchanged
    assert gpu_tiles(64, 2, H100_SMEM) == (128, 64, 3)
    assert gpu_tiles(256, 4, H100_SMEM) == (128, 32, 2)                 # one stage fewer
    assert gpu_tiles(256, 4, A100_SMEM) == (64, 32, 2)                  # then smaller tiles
    assert gpu_tiles(256, 4, None) == (128, 32, 3)                      # interpreter: no limit
    for d, size in ((256, 4), (256, 2), (128, 4), (40, 4)):
        for limit in (H100_SMEM, A100_SMEM, 101376):
            bm, bn, stages = gpu_tiles(d, size, limit)
            assert shared_bytes(bm, bn, max(16, triton.next_power_of_2(d)), size, stages) <= limit
    with pytest.raises(ValueError, match=r"attention: tiles 128x32 at head dim 256 \(4-byte elements\) need "
                                         r"\d+ KiB of shared memory per program, this GPU allows 40 KiB"):
        gpu_tiles(256, 4, 40 * 1024, block_m=128, block_n=32)


def test_matmul_config_that_cannot_fit_is_refused_in_one_line():
    from labkit.kernels.matmul import GPU_CONFIGS, check_config, shared_bytes

    big = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3}
    assert shared_bytes(big, 4) == 2 * (128 * 64 + 64 * 256) * 4 == 196608
    assert check_config(big, 4, H100_SMEM) == big and check_config(big) == big    # no limit: interpreter
    with pytest.raises(ValueError, match=r"^matmul: tiles 128x256x64 with 3 stages \(4-byte elements\) need 192 "
                                         r"KiB of shared memory per program, this GPU allows 164 KiB; use smaller"):
        check_config(big, 4, A100_SMEM)
    assert check_config(big, 2, A100_SMEM)                                          # fp16 halves it
    assert all(shared_bytes({**c.kwargs, "num_stages": c.num_stages}, 2) <= A100_SMEM for c in GPU_CONFIGS)
