"""labkit.memory.recompute: selective and full recomputation of the GPT, measured to the byte."""
import pytest
import torch

from labkit.memory.estimate import gpt_layer_saved_bytes
from labkit.memory.recompute import gpt_extra_flops, measure_gpt_step, recompute, recompute_table
from labkit.model import GPT, GPTConfig, batch

CFG = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32, mlp_ratio=3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_recomputation_keeps_results_and_frees_exactly_the_closed_form(dtype):
    B, T, e = 3, 6, torch.empty((), dtype=dtype).element_size()
    steps = []
    for layers in (1, 2):                                    # one more layer adds one layer's bytes
        cfg = GPTConfig(layers=layers, hidden=16, heads=2, seq_len=8, vocab=32, mlp_ratio=3)
        model = GPT(cfg, dtype=dtype)
        tokens, targets = batch(cfg, B, seq=T)
        steps.append({p: measure_gpt_step(model, tokens, targets, p) for p in ("none", "selective", "full")})
        assert not any("forward" in vars(m) or "core" in vars(m) for m in model.modules())   # restored
    one, two = steps
    for policy in ("none", "selective", "full"):
        assert two[policy].saved_bytes - one[policy].saved_bytes == \
            gpt_layer_saved_bytes(CFG, B, T, e, policy), policy
        assert two[policy].flops - two["none"].flops == gpt_extra_flops(CFG, B, T, policy)
        assert torch.equal(two[policy].loss, two["none"].loss)
        assert all(torch.equal(two[policy].grads[n], g) for n, g in two["none"].grads.items())
    saving = two["none"].saved_bytes - two["selective"].saved_bytes
    assert saving == 2 * (B * 2 * T * T * e + T * T)                       # softmax output + bool mask
    assert two["full"].peak_bytes < two["selective"].peak_bytes < two["none"].peak_bytes


def test_recompute_restores_the_model_and_refuses_nesting():
    model = GPT(CFG)
    tokens, targets = batch(CFG, 2)
    before = model(tokens, targets)[1]
    with recompute(model, "selective"):
        assert "core" in vars(model.blocks[0].attn)
        with pytest.raises(RuntimeError, match="already patched"):
            with recompute(model, "selective"):
                pass
    assert not any("core" in vars(m) for m in model.modules())
    assert torch.equal(model(tokens, targets)[1], before)
    with pytest.raises(ValueError, match="recompute: policy"):
        with recompute(model, "some"):
            pass


def test_recompute_table():
    r = recompute_table(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=16), batch_size=2)
    assert r.column("extra FLOPs") == r.column("closed form") and r.column("bitwise") == ["yes"] * 3
    assert max(len(line) for line in str(r).splitlines()) <= 100


def test_bad_arguments_give_one_line_errors():
    for call, kind, text in [
        (lambda: recompute(torch.nn.Linear(2, 2)).__enter__(), TypeError, "recompute: model"),
        (lambda: measure_gpt_step(GPT(CFG), *batch(CFG, 1), "all"), ValueError, "measure_gpt_step: policy"),
    ]:
        with pytest.raises(kind) as err:
            call()
        assert text in str(err.value) and "\n" not in str(err.value)
