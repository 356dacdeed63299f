"""labkit.memory.activation_checkpointing: hand-made checkpointing, measured to the byte and the FLOP."""
import math

import pytest
import torch

from labkit.memory.activation_checkpointing import (
    best_segments, chain_loss, chain_peak_bytes, checkpoint_segment, checkpoint_table, checkpointed_chain,
    compare_table, make_chain, measure_chain, num_segments, sqrt_rule, step_flops, torch_checkpointed_chain)
from labkit.memory.tracker import ActivationPeakTracker, MemoryTracker


# ---------------------------------------------------------------------- memory: closed form == measured
@pytest.mark.parametrize("B, w", [(4, 8), (16, 4)])       # a < g and a > g: different peak moments
def test_peak_bytes_equal_the_closed_form_exactly(B, w):
    for n in (1, 4, 7):
        assert measure_chain(n, None, B, w, impl="none").peak_activation_bytes == \
            chain_peak_bytes(n, None, B, w, 8)
        for k in range(1, n + 1):                           # k = 1, k = N, and k not dividing N
            for impl in ("ours", "torch"):
                got = measure_chain(n, k, B, w, impl=impl)
                assert got.peak_activation_bytes == got.closed_form == \
                    chain_peak_bytes(n, k, B, w, 8, impl), (n, k, impl)


def test_closed_form_by_hand():
    # N = 8, k = 3: S = 3 segments (3, 3, 2); a = 4·8·8 = 256, g = (64 + 8)·8 = 576, s = 8
    assert num_segments(8, 3) == 3
    assert chain_peak_bytes(8, None, 4, 8, 8) == 10 * 256 + 576 + 16
    assert chain_peak_bytes(8, 3, 4, 8, 8) == (3 + 3 + 2) * 256 + 576 + 16
    assert chain_peak_bytes(8, 3, 4, 8, 8, impl="torch") == max(6 * 256 + 576, 6 * 256 + 576, 7 * 256) + 16
    assert chain_peak_bytes(8, 8, 4, 8, 8, impl="torch") == chain_peak_bytes(8, None, 4, 8, 8)


def test_float32_chain_also_exact():
    got = measure_chain(6, 4, batch=3, width=5, dtype=torch.float32)
    assert got.peak_activation_bytes == chain_peak_bytes(6, 4, 3, 5, 4)


def test_the_best_segment_is_near_sqrt_n():
    n, B, w = 16, 4, 8
    peaks = {k: measure_chain(n, k, B, w).peak_activation_bytes for k in range(1, n + 1)}
    low = min(peaks.values())
    assert tuple(k for k, p in peaks.items() if p == low) == best_segments(n) == (4,) == (sqrt_rule(n),)
    assert low < measure_chain(n, None, B, w, impl="none").peak_activation_bytes
    # N = 8: ⌈8/k⌉ + k ties at k = 2, 3, 4; PyTorch's closed form prefers a shorter last segment
    peaks = {k: measure_chain(8, k, B, w).peak_activation_bytes for k in range(1, 9)}
    assert tuple(k for k, p in peaks.items() if p == min(peaks.values())) == best_segments(8) == (2, 3, 4)
    torch_peaks = {k: measure_chain(8, k, B, w, impl="torch").peak_activation_bytes for k in range(1, 9)}
    assert [k for k, p in torch_peaks.items() if p == min(torch_peaks.values())] == [3]
    assert torch_peaks == {k: chain_peak_bytes(8, k, B, w, 8, "torch") for k in range(1, 9)}


def test_sqrt_rule_minimises_the_sum():
    for n in range(1, 400):
        assert sqrt_rule(n) in best_segments(n)
        assert -(-n // best_segments(n)[0]) + best_segments(n)[0] == math.ceil(2 * math.sqrt(n) - 1e-12)


class _Checked(ActivationPeakTracker):
    """Compares the fast count with the parent's full classification after every op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.seen = max(getattr(self, "seen", 0), self.live_by_category()["activations"])
        assert self.live_activation_bytes() == self.live_by_category()["activations"]
        return out


def test_activation_peak_tracker_agrees_with_the_parent_after_every_op():
    layers = torch.nn.ModuleList(make_chain(3, 4))
    opt = torch.optim.Adam(layers.parameters())
    tr = _Checked(layers, opt)
    with tr:
        for _ in range(2):                                   # 2nd step: grads and Adam state exist
            x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
            chain_loss(layers, x, 2).backward()
            opt.step()
    assert tr.peak_activation_bytes == tr.seen >= tr.peak_by_category["activations"]
    assert isinstance(tr, MemoryTracker)


# ---------------------------------------------------------------------- FLOPs
def test_one_extra_forward_exactly():
    n, B, w = 5, 3, 6
    layers = make_chain(n, w)
    x = torch.randn(B, w, dtype=torch.float64, requires_grad=True)
    fwd = 2 * B * w * w * n                                  # addmm: 2·B·w² per layer
    plain = step_flops(layers, x, None)
    assert plain == 3 * fwd                                  # forward + (dX and dW) in backward
    for k in range(1, n + 1):
        assert step_flops(layers, x, k, "ours") == plain + fwd
        assert step_flops(layers, x, k, "torch") == plain + fwd
    assert measure_chain(n, 2, B, w).flops - measure_chain(n, None, B, w, impl="none").flops == \
        measure_chain(n, 2, B, w).forward_flops == fwd


# ---------------------------------------------------------------------- gradients, bit for bit
def _grads(layers, x, seed, **kw):
    for m in layers:
        m.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    chain_loss(layers, x, **kw).backward()
    after = torch.rand(3)                                    # where the global RNG stream is now
    return [p.grad.clone() for m in layers for p in m.parameters()] + [x.grad], after


def test_gradients_bitwise_equal_with_and_without_dropout():
    x = torch.randn(4, 6, dtype=torch.float64)
    for p in (0.0, 0.3):
        layers = make_chain(5, 6, dropout=p).train()
        ref, ref_after = _grads(layers, x, 7, segment=None)
        for k in (1, 2, 5):
            got, after = _grads(layers, x, 7, segment=k)
            assert all(torch.equal(a, b) for a, b in zip(got, ref)), (p, k)
            assert torch.equal(after, ref_after)             # recomputation left the RNG stream alone


def test_without_the_rng_restore_dropout_gradients_are_wrong():
    x = torch.randn(4, 6, dtype=torch.float64)
    layers = make_chain(4, 6, dropout=0.5).train()
    ref, _ = _grads(layers, x, 3, segment=None)
    bad, _ = _grads(layers, x, 3, segment=2, preserve_rng_state=False)
    worst = max(float((a - b).abs().max()) for a, b in zip(bad, ref))
    assert worst > 1e-3                                      # new masks: not rounding, a wrong gradient


def test_same_gradients_as_torch_checkpoint():
    x = torch.randn(3, 5, dtype=torch.float64)
    layers = make_chain(7, 5, dropout=0.2).train()
    for k in (2, 3, 7):
        ours, _ = _grads(layers, x, 11, segment=k, impl="ours")
        theirs, _ = _grads(layers, x, 11, segment=k, impl="torch")
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_parameters_get_gradients_when_the_input_does_not_need_one():
    layers = make_chain(3, 4)
    x = torch.randn(2, 4, dtype=torch.float64)               # data: requires_grad False
    checkpointed_chain(layers, x, 2).sum().backward()
    got = [p.grad.clone() for m in layers for p in m.parameters()]
    for m in layers:
        m.zero_grad(set_to_none=True)
    torch_checkpointed_chain(layers, x, 3).sum().backward()   # PyTorch's, as a reference
    assert all(torch.equal(a, p.grad) for a, p in zip(got, (p for m in layers for p in m.parameters())))


def test_checkpoint_segment_on_a_module_finds_its_parameters():
    lin = torch.nn.Linear(3, 3).double()
    x = torch.randn(2, 3, dtype=torch.float64)
    checkpoint_segment(lin, x).pow(2).sum().backward()
    ref = torch.nn.Linear(3, 3).double()
    ref.load_state_dict(lin.state_dict())
    ref(x).pow(2).sum().backward()
    assert torch.equal(lin.weight.grad, ref.weight.grad) and torch.equal(lin.bias.grad, ref.bias.grad)


def test_bad_arguments_give_one_line_errors():
    layers = make_chain(3, 4)
    x = torch.randn(2, 4, dtype=torch.float64)
    cases = [
        (lambda: checkpointed_chain(layers, x, 0), ValueError, "checkpointed_chain: segment"),
        (lambda: checkpointed_chain(layers, x, 4), ValueError, "checkpointed_chain: segment"),
        (lambda: checkpointed_chain(layers, x, 1.5), TypeError, "checkpointed_chain: segment"),
        (lambda: checkpointed_chain([], x, 1), TypeError, "checkpointed_chain: layers"),
        (lambda: checkpointed_chain(layers[0], x, 1), TypeError, "checkpointed_chain: layers"),
        (lambda: checkpointed_chain(layers, [1.0], 1), TypeError, "checkpointed_chain: x"),
        (lambda: checkpoint_segment(3, x), TypeError, "checkpoint_segment: fn"),
        (lambda: checkpoint_segment(layers[0], x, preserve_rng_state=1), TypeError, "preserve_rng_state"),
        (lambda: chain_peak_bytes(4, 5, 2, 2, 8), ValueError, "chain_peak_bytes: segment"),
        (lambda: chain_peak_bytes(4, 2, 2, 2, 8, impl="mine"), ValueError, "chain_peak_bytes: impl"),
        (lambda: make_chain(2, 4, dropout=1.0), ValueError, "make_chain: dropout"),
        (lambda: sqrt_rule(0), ValueError, "sqrt_rule: n_layers"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind) as err:
            call()
        assert text in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------- tables for the notebook
def test_tables():
    t = checkpoint_table(n_layers=6, width=4, batch=2)
    assert t.column("k")[0] == "none" and t.column("k")[1:] == list(range(1, 7))
    assert t.column("peak act. bytes") == t.column("closed form")
    assert [k for k, b in zip(t.column("k"), t.column("best")) if b] == list(best_segments(6))
    assert set(t.column("extra FLOPs")[1:]) == {2 * 2 * 4 * 4 * 6}
    c = compare_table(n_layers=4, width=8, batch=4, segments=(2,), repeat=1)
    assert c.column("impl") == ["-", "ours", "torch"]
    assert c.column("peak act. bytes")[1:] == [chain_peak_bytes(4, 2, 4, 8, 8, i) for i in ("ours", "torch")]
    for table in (t, c):
        assert max(len(line) for line in str(table).splitlines()) <= 100
