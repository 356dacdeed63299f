"""labkit.memory.inference (Lab 09, section 12): forward-only peaks, lifetimes, the KV cache, CNN and
RNN activations, each measured with the exact tracker and equal to its closed form; the tables and
the lifetime widget of labkit.memory.lab and labkit.viz.inference."""
import pytest
import torch

from labkit.memory import inference as I
from labkit.memory import lab as L
from labkit.model import GPT, GPTConfig
from labkit.viz.inference import lifetime_html


@pytest.mark.parametrize("widths,batch", [([64, 64, 64, 64, 64], 8), ([32, 128, 16, 256, 8], 4), ([5, 7], 3),
                                          ([16, 300, 4, 300, 4], 2)])
def test_chain_peaks_equal_the_closed_forms(widths, batch):
    m, f = I.chain_peaks(widths, batch), I.chain_peak_formula(widths, batch)
    assert m == f
    sizes = I._activation_bytes(widths, batch, 4)
    assert m["inference_peak"] <= 2 * max(sizes) and m["training_kept"] >= max(sizes[1::2])


def test_forward_only_peak_is_two_neighbours():
    assert I.forward_only_peak([5]) == 5
    assert I.forward_only_peak([10, 1, 1, 10]) == 11
    assert I.forward_only_peak([3, 100, 2]) == 103
    with pytest.raises(ValueError):
        I.forward_only_peak([])


def test_lifetimes_hold_at_most_two_outputs_without_autograd_and_all_relu_outputs_with_it():
    lt = I.chain_lifetimes([64, 64, 64, 64], 8)
    inf, tr = lt.frames["inference"], lt.frames["training"]
    assert len(inf) == len(tr) == 2 * 6
    assert max(sum(alive) for _, alive, _ in inf) == 2
    assert max(live for _, _, live in inf) == 2 * lt.sizes[0]
    _, alive_end, live_end = tr[-1]
    assert alive_end == (False, True, False, True, False, True)            # the ReLU outputs
    assert live_end == 3 * lt.sizes[0]
    for (_, alive, live) in inf:                                            # tracker agrees with liveness
        assert live == sum(s for s, a in zip(lt.sizes, alive) if a)
    html = lifetime_html(lt, 4)
    assert "4,096 B live" in html and "step 5 of 12" in html
    with pytest.raises(ValueError):
        lifetime_html(lt, 12)


def test_kv_cache_bytes_and_logits():
    cfg = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32)
    m = I.measure_kv_cache(cfg, batch=3, tokens=9)
    assert m.per_token == 3 * I.kv_cache_bytes_per_token(2, 4, 8, 4) == 3 * 2 * 2 * 32 * 4
    assert m.held == tuple(m.per_token * t for t in range(1, 10))
    assert set(m.tracker_growth) == {m.per_token} and m.same_logits


def test_generate_with_a_cache_equals_greedy_decoding_without_one():
    cfg = GPTConfig(layers=2, hidden=32, heads=4, seq_len=16, vocab=32)
    model = GPT(cfg, seed=3).eval()
    prompt = torch.randint(0, 32, (2, 3), generator=torch.Generator().manual_seed(1))
    out, cache, _ = I.generate(model, prompt, 6)
    ref = prompt
    with torch.no_grad():
        for _ in range(6):
            ref = torch.cat([ref, model(ref)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(out, ref)
    assert cache.tokens == 8 and cache.nbytes() == 2 * 8 * I.kv_cache_bytes_per_token(2, 4, 8, 4)
    with pytest.raises(ValueError, match="exceed the model's seq_len"):
        I.generate(model, torch.zeros(1, 10, dtype=torch.long), 8)


@pytest.mark.parametrize("batch,c1,c2,size", [(4, 8, 16, 16), (2, 3, 5, 8), (1, 4, 4, 12)])
def test_cnn_closed_form_equals_measurement(batch, c1, c2, size):
    model = I.SmallCNN(c1, c2, size, classes=7)
    x = torch.randn(batch, 3, size, size)
    assert I.measure_training_forward(model, x) == I.cnn_activation_bytes(batch, c1, c2, size, 7)["total"]


@pytest.mark.parametrize("batch,steps,inputs,hidden", [(4, 12, 8, 32), (3, 1, 5, 7), (2, 20, 16, 16)])
def test_rnn_closed_form_equals_measurement(batch, steps, inputs, hidden):
    model = I.ElmanRNN(inputs, hidden, classes=6)
    x = torch.randn(batch, steps, inputs)
    assert I.measure_training_forward(model, x) == I.rnn_activation_bytes(batch, steps, inputs, hidden, 6)["total"]


def test_tables_fit_and_agree():
    for t in (L.chain_table(), L.kv_table(), L.cnn_rnn_table()):
        assert all(len(line) <= 100 for line in str(t).splitlines())
    kt = L.kv_table()
    assert [r[4] for r in kt.rows] == [4608, 512, 320]
    w = L.lifetime_player()
    assert w.children[0].children[1].max == 12


def test_pictures_accept_the_reference_answers():
    import solutions.lab09_memory as S

    assert all(L.peak_picture(S.forward_only_peak).column("equal"))
    assert all(L.kv_picture(S.kv_cache_bytes).column("equal"))
