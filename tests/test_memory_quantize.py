"""labkit.memory.quantize: the round-trip bound, exact byte counts, int4 packing, per-channel
against per-tensor on outlier rows, the straight-through estimator, and QAT against PTQ."""
import math

import pytest
import torch

from labkit.memory import quantize as Q
from labkit.model import GPT, GPTConfig, parameter_count

SMALL = GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)
EPS32 = torch.finfo(torch.float32).eps          # 2^-23


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def trained():
    return Q.train_gpt(SMALL, 200)


def _step(q: Q.Quantized) -> torch.Tensor:
    """Each element's quantization step s, shaped like the tensor."""
    return Q.clip_range(q) / (2 ** (q.bits - 1) - 1)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("granularity", Q.GRANULARITIES)
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_is_at_most_half_a_step(bits, granularity, scale_dtype):
    w = torch.randn(48, 96, generator=torch.Generator().manual_seed(bits)) * 0.02
    q = Q.quantize(w, bits, granularity, group_size=32, scale_dtype=scale_dtype)
    s, err = _step(q), (w - Q.dequantize(q)).abs()
    # |w - q s| <= s/2 in exact arithmetic; float32 rounding of w/s and of q*s adds at most
    # 2^-24 * max|w| each, so the stated tolerance is EPS32 * max|w| (= 2^-23 * max|w|)
    assert bool((err <= s / 2 + EPS32 * w.abs().max()).all())
    assert float((err / s).max()) > 0.45                    # the bound is tight: rounding, not flooring
    codes = Q.codes_of(q)
    qmax = 2 ** (bits - 1) - 1
    assert codes.dtype == torch.int8 and int(codes.abs().max()) == qmax   # the absmax maps to +-q_max
    assert q.scales.dtype == scale_dtype


def test_exact_bytes_and_int4_packing():
    w = torch.randn(24, 64)
    n = w.numel()
    assert Q.nbytes(Q.quantize(w, 8)) == n + 4                                  # codes + one fp32 scale
    assert Q.nbytes(Q.quantize(w, 8, "channel")) == n + 4 * 24
    assert Q.nbytes(Q.quantize(w, 4, "group", 16)) == n // 2 + 4 * 24 * 4
    assert Q.nbytes(Q.quantize(w, 4, "group", 16, scale_dtype=torch.bfloat16)) == n // 2 + 2 * 24 * 4
    odd = torch.randn(7, 3)                                                      # 21 codes: 11 bytes
    assert Q.nbytes(Q.quantize(odd, 4)) == math.ceil(21 / 2) + 4
    codes = torch.tensor([-8, 7, -1, 0, 3], dtype=torch.int8)
    packed = Q.pack_int4(codes)
    # element 2i in the low nibble, 2i+1 in the high; each nibble two's complement
    assert packed.tolist() == [0x8 | (0x7 << 4), 0xF | (0x0 << 4), 0x3]
    assert torch.equal(Q.unpack_int4(packed, 5), codes)
    all16 = torch.arange(-8, 8, dtype=torch.int8)
    assert torch.equal(Q.unpack_int4(Q.pack_int4(all16), 16), all16)


def test_per_channel_beats_per_tensor_on_an_outlier_row():
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(0)) * 0.02
    w[3] *= 100                                                  # one row of large weights
    tensor, channel = Q.quantize(w, 8, "tensor"), Q.quantize(w, 8, "channel")
    e_t, e_c = (w - Q.dequantize(tensor)).abs(), (w - Q.dequantize(channel)).abs()
    # a row's step is its own max/127 <= the tensor's max/127: the bound is never worse
    assert bool((_step(channel) <= _step(tensor)).all())
    assert bool((e_c <= _step(tensor) / 2 + EPS32 * w.abs().max()).all())
    others = torch.arange(16) != 3
    # measured: the other rows' squared error drops ~10^4-fold (their step shrinks ~100x)
    assert float((e_c[others] ** 2).mean()) < float((e_t[others] ** 2).mean()) / 1000
    assert int((Q.codes_of(tensor)[others] == 0).sum()) > 0.2 * others.sum() * 64   # many flushed to 0
    assert torch.equal(e_c[3], e_t[3])                           # the outlier row sets both scales


def test_fake_quant_forward_and_straight_through_backward():
    w = torch.randn(8, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    out = Q.fake_quant(w, 4, "channel", clip=0.5)
    q = Q.quantize(w.detach(), 4, "channel", clip=0.5)
    assert torch.equal(out.detach(), Q.dequantize(q))
    g = torch.randn(8, 32)
    out.backward(g)
    inside = w.detach().abs() <= 0.5 * w.detach().abs().amax(dim=1, keepdim=True)   # per row
    assert 0 < int(inside.sum()) < w.numel()                     # clip 0.5: some weights saturate
    assert torch.equal(w.grad, g * inside)                       # identity inside, zero outside
    w.grad = None
    Q.fake_quant(w, 8, "tensor").sum().backward()               # clip 1: the absmax range holds all
    assert torch.equal(w.grad, torch.ones_like(w))


def test_quantized_gpt_bytes_and_loss(trained):
    model = GPT(SMALL)
    names = Q.linear_weights(model)
    h, f, L, V = SMALL.hidden, SMALL.ffn, SMALL.layers, SMALL.vocab
    assert len(names) == 4 * L + 1 and names[-1] == "tok_emb.weight"
    elements = L * (3 * h * h + h * h + 2 * h * f) + V * h        # qkv, proj, fc, mlp.proj + the head
    qm = Q.quantize_model(model, 4, "group", 32)
    assert qm.weights == elements and qm.full_bytes == 4 * elements
    assert qm.quantized_bytes == elements // 2 + 4 * elements // 32     # packed codes + a scale per 32
    assert parameter_count(SMALL) > elements
    table = Q.quantization_table(SMALL, group_size=32, model=trained)
    rows = {(w, g): (b, saved, change) for w, g, b, saved, _, change in table.rows}
    assert rows[("fp32", "-")][0] == 4 * elements
    assert rows[("int8", "tensor")][0] == elements + 4 * (4 * L + 1)
    # measured loss changes: int8 |dl| < 1e-3; int4 tensor ~ +0.03 > channel ~ +0.012 > group ~ +0.009
    assert all(abs(rows[("int8", g)][2]) < 2e-3 for g in Q.GRANULARITIES)
    changes = [rows[("int4", g)][2] for g in Q.GRANULARITIES]
    assert changes[0] > changes[1] > changes[2] > 0
    assert all(len(line) <= 100 for line in str(table).splitlines())


def test_qat_ends_below_post_training_quantization(trained):
    r = Q.qat_vs_ptq(SMALL, qat_steps=40, start=trained)
    # measured: start 1.5245 -> PTQ 1.5337; QAT 1.4520; control 1.4478 fp32 / 1.4569 quantized
    assert r.ptq > r.start                                        # int4 costs something
    assert r.qat < r.ptq                                          # QAT ends below PTQ of the start...
    assert r.qat < r.control_ptq                                  # ...and below PTQ after as much training


def test_bad_arguments():
    w = torch.randn(4, 6)
    with pytest.raises(ValueError, match="quantize: bits must be 4 or 8"):
        Q.quantize(w, 3)
    with pytest.raises(ValueError, match="quantize: granularity must be one of"):
        Q.quantize(w, 8, "row")
    with pytest.raises(ValueError, match="quantize: group_size 4 must divide the 6"):
        Q.quantize(w, 8, "group", 4)
    with pytest.raises(ValueError, match="needs a tensor with >= 2 dims"):
        Q.quantize(torch.randn(5), 8, "channel")
    with pytest.raises(TypeError, match="quantize: w must be a floating-point"):
        Q.quantize(torch.ones(3, dtype=torch.int64), 8)
    with pytest.raises(ValueError, match="quantize: clip must be in"):
        Q.quantize(w, 8, clip=1.5)
    with pytest.raises(TypeError, match="dequantize: q must be a Quantized"):
        Q.dequantize(w)
    zero = Q.quantize(torch.zeros(2, 4), 4, "channel")           # an all-zero block: scale 0, exact
    assert torch.equal(Q.dequantize(zero), torch.zeros(2, 4))


def test_qat_seed_table_reports_each_seed_and_the_mean():
    trained = Q.train_gpt(SMALL, 30)
    t = Q.qat_seed_table(trained, SMALL, seeds=range(3), qat_steps=5)
    assert [r[0] for r in t.rows] == [0, 1, 2, "mean"] and len(t.data["diffs"]) == 3
    assert t.data["diffs"] == [r.qat - r.control_ptq for r in t.data["runs"]]
    assert len({r.ptq for r in t.data["runs"]}) == 1                    # PTQ of the one trained model
    assert len({r.qat for r in t.data["runs"]}) == 3                     # the seeds' batches differ
    assert all(len(line) <= 100 for line in str(t).splitlines())
    with pytest.raises(ValueError, match="at least 2 seeds"):
        Q.qat_seed_table(trained, SMALL, seeds=[0])
