"""labkit.memory.accumulation: the full batch's gradient, a micro-batch at a time."""
import pytest
import torch

from labkit.memory.accumulation import (
    accumulate_gradients, accumulation_peak, accumulation_peak_bytes, accumulation_table)
from labkit.memory.estimate import gpt_layer_saved_bytes
from labkit.model import GPT, GPTConfig, batch, parameter_count

CFG = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=128)


def _full_batch(model, tokens, targets):
    model.zero_grad(set_to_none=True)
    loss = model(tokens, targets)[1]
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


def test_gradients_equal_one_full_batch_backward():
    model = GPT(CFG, dtype=torch.float64)
    tokens, targets = batch(CFG, 12, seed=3)
    loss, full = _full_batch(model, tokens, targets)
    scale = max(float(g.abs().max()) for g in full)
    for m in (1, 3, 4, 12):
        model.zero_grad(set_to_none=True)
        got = accumulate_gradients(model, tokens, targets, m)
        # float64: the same sums added in a different order (per micro-batch, then across them),
        # so equal up to rounding: 1e-12 relative is ~10⁴ ulps of slack, far below any real error
        assert got == pytest.approx(loss, rel=1e-12, abs=0)
        worst = max(float((p.grad - g).abs().max()) for p, g in zip(model.parameters(), full))
        assert worst <= 1e-12 * scale, m


def test_without_the_scaling_the_gradient_is_n_times_too_large():
    model = GPT(CFG, dtype=torch.float64)
    tokens, targets = batch(CFG, 4, seed=3)
    _, full = _full_batch(model, tokens, targets)
    model.zero_grad(set_to_none=True)
    for i in range(4):                                        # the common mistake: no 1/n
        model(tokens[i:i + 1], targets[i:i + 1])[1].backward()
    ratio = [float((p.grad * g).sum() / (g * g).sum()) for p, g in zip(model.parameters(), full)]
    assert ratio == pytest.approx([4.0] * len(ratio), rel=1e-10)


def test_peak_grows_by_a_constant_per_row_and_model_states_do_not_change():
    model = GPT(CFG, dtype=torch.float64)
    B = 8
    tokens, targets = batch(CFG, B, seed=1)
    sizes = (2, 4, 8)                                         # m = 1: see the next test
    runs = {m: accumulation_peak(model, tokens, targets, m) for m in sizes}
    peaks = [runs[m]["activations"] for m in sizes]
    steps = {(peaks[i + 1] - peaks[i]) // (sizes[i + 1] - sizes[i]) for i in range(len(sizes) - 1)}
    assert all((peaks[i + 1] - peaks[i]) % (sizes[i + 1] - sizes[i]) == 0 for i in range(len(sizes) - 1))
    assert len(steps) == 1                                    # peak(m) = c0 + m·c1 exactly
    (c1,) = steps
    assert peaks == [accumulation_peak_bytes(CFG, B, m, 8) for m in sizes]
    e, T, V = 8, CFG.seq_len, CFG.vocab
    per_layer = gpt_layer_saved_bytes(CFG, 1, T, e) - T * T    # one row; the mask is in c0
    ln_f = (2 * CFG.hidden * T + 2 * T) * e                   # final LayerNorm: in, out, mean, 1/σ
    head = 3 * T * V * e                                      # log-softmax out, its grad in and out
    assert c1 == CFG.layers * per_layer + ln_f + head
    n = parameter_count(CFG) * 8
    assert {(r["parameters"], r["gradients"]) for r in runs.values()} == {(n, n)}


def test_a_small_micro_batch_peaks_elsewhere():
    # at a small m (m = 1 for vocab 128, m <= 3 for vocab 32) the peak comes deeper in backward, at
    # a moment whose bytes hardly depend on m; the loss-moment closed form is then a lower bound
    for cfg, small in ((CFG, 1), (GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32), 3)):
        model = GPT(cfg, dtype=torch.float64)
        tokens, targets = batch(cfg, 6, seed=1)
        gaps = {m: accumulation_peak(model, tokens, targets, m)["activations"]
                - accumulation_peak_bytes(cfg, 6, m, 8) for m in (small, 6)}
        assert gaps[small] > 0 and gaps[6] == 0


def test_bad_arguments():
    model = GPT(CFG)
    tokens, targets = batch(CFG, 6)
    cases = [
        (lambda: accumulate_gradients(model, tokens, targets, 4), ValueError, "must divide the batch"),
        (lambda: accumulate_gradients(model, tokens, targets, 0), ValueError, "micro_batch"),
        (lambda: accumulate_gradients(model, tokens, targets, 7), ValueError, "micro_batch"),
        (lambda: accumulate_gradients(model, tokens, targets, 2.0), TypeError, "micro_batch"),
        (lambda: accumulate_gradients(model, tokens, targets[:3], 3), ValueError, "differ in shape"),
        (lambda: accumulate_gradients("gpt", tokens, targets, 3), TypeError, "model"),
        (lambda: accumulate_gradients(model, tokens[0], targets, 3), ValueError, "tokens"),
        (lambda: accumulate_gradients(model, tokens.tolist(), targets, 3), TypeError, "tokens"),
        (lambda: accumulation_table(CFG, batch=6, micro_batches=(4,)), ValueError, "must divide"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind) as err:
            call()
        msg = str(err.value)
        assert text in msg and "\n" not in msg
        assert msg.split(":")[0] in ("accumulate_gradients", "accumulation_table")


def test_table():
    t = accumulation_table(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=64), batch=4,
                           micro_batches=(1, 2, 4))
    assert t.column("passes") == [4, 2, 1]
    peak, closed = t.column("peak act. bytes"), t.column("closed form")
    assert all(p >= c for p, c in zip(peak, closed)) and peak[1:] == closed[1:]
    assert len(set(t.column("params+grads bytes"))) == 1
    assert t.column("max |dgrad|")[-1] == 0.0 and max(t.column("max |dgrad|")) < 1e-15
    assert max(len(line) for line in str(t).splitlines()) <= 100
