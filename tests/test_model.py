"""labkit.model: the small GPT shared by Labs 06-12."""
import math

import pytest
import torch
import torch.nn.functional as F

from labkit.model import GPT, GPTConfig, batch, parameter_count

CONFIGS = [GPTConfig(), GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=11),
           GPTConfig(layers=3, hidden=48, heads=6, seq_len=16, vocab=97, mlp_ratio=2)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_parameter_count_closed_form(cfg):
    model = GPT(cfg)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(cfg)
    if cfg.mlp_ratio == 4:
        h = cfg.hidden
        assert parameter_count(cfg) == cfg.layers * (12 * h * h + 13 * h) + (cfg.vocab + cfg.seq_len + 2) * h


def test_head_is_tied_to_the_token_embedding():
    model = GPT(CONFIGS[1])
    tokens, _ = batch(model.cfg, 2)
    logits = model(tokens)
    assert not any("head" in n for n, _ in model.named_parameters())
    x = model.tok_emb(tokens) + model.pos_emb(torch.arange(tokens.shape[1]))
    for b in model.blocks:
        x = b(x)
    assert torch.equal(logits, model.ln_f(x) @ model.tok_emb.weight.t())


def test_same_seed_same_weights_and_outputs_global_rng_untouched():
    torch.manual_seed(7)
    before = torch.rand(1)
    torch.manual_seed(7)
    a, b = GPT(CONFIGS[0], seed=3), GPT(CONFIGS[0], seed=3)
    assert torch.rand(1) == before                    # construction did not draw from the global RNG
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(GPT(CONFIGS[0], seed=4).tok_emb.weight, a.tok_emb.weight)
    tokens, targets = batch(a.cfg, 4, seed=1)
    assert torch.equal(a(tokens, targets)[1], b(tokens, targets)[1])


def test_initialisation_statistics():
    cfg = GPTConfig(layers=4, hidden=128, heads=4, seq_len=8, vocab=512)
    m = GPT(cfg)
    assert abs(m.tok_emb.weight.std().item() - 0.02) < 0.001          # 65k samples: std error ~1e-4
    assert abs(m.blocks[0].mlp.proj.weight.std().item() - 0.02 / math.sqrt(8)) < 0.0005
    assert torch.equal(m.blocks[0].ln1.weight, torch.ones(128)) and not m.blocks[0].attn.qkv.bias.any()


def test_attention_is_causal_and_equals_pytorch_sdpa():
    cfg = CONFIGS[0]
    model = GPT(cfg, dtype=torch.float64)
    tokens, _ = batch(cfg, 3)
    logits = model(tokens)
    changed = tokens.clone()
    changed[:, 20:] = (changed[:, 20:] + 1) % cfg.vocab
    assert torch.equal(model(changed)[:, :20], logits[:, :20])       # the future cannot leak back
    attn = model.blocks[0].attn
    x = torch.randn(2, 10, cfg.hidden, dtype=torch.float64)
    q, k, v = (t.view(2, 10, cfg.heads, -1).transpose(1, 2) for t in attn.qkv(x).split(cfg.hidden, -1))
    ref = attn.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 10, -1))
    torch.testing.assert_close(attn(x), ref, rtol=0, atol=1e-12)     # float64: rounding order only


def test_loss_is_mean_cross_entropy_and_bf16_runs():
    cfg = CONFIGS[1]
    tokens, targets = batch(cfg, 5, seed=2)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        model = GPT(cfg, dtype=dtype)
        logits, loss = model(tokens, targets)
        assert logits.dtype == dtype and logits.shape == (5, 4, 11)
        assert loss.dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)
        want = -torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).mean()
        torch.testing.assert_close(loss, want.to(loss.dtype))
    assert abs(GPT(cfg)(tokens, targets)[1].item() - math.log(cfg.vocab)) < 0.1   # small init: ≈ uniform


def test_batch_is_deterministic_shifted_and_learnable():
    cfg = GPTConfig(layers=2, hidden=32, heads=2, seq_len=16, vocab=32)
    t, y = batch(cfg, 6, seed=5)
    t2, y2 = batch(cfg, 6, seed=5)
    assert torch.equal(t, t2) and torch.equal(y, y2) and torch.equal(t[:, 1:], y[:, :-1])
    assert t.dtype == torch.int64 and t.shape == (6, 16)
    torch.manual_seed(0)
    model = GPT(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(60):
        tokens, targets = batch(cfg, 16, seed=step)
        _, loss = model(tokens, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > math.log(32) - 0.1 and sum(losses[-5:]) / 5 < 2.6   # ln 32 = 3.47 → towards ln 4 = 1.39


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(hidden=10, heads=4), ValueError, "divisible"),
    (dict(layers=0), ValueError, "layers must be an int >= 1"),
    (dict(vocab=12.0), TypeError, "vocab must be an int"),
])
def test_bad_config_one_line(kwargs, error, match):
    with pytest.raises(error, match=match) as e:
        GPTConfig(**kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("make,error,match", [
    (lambda c: torch.zeros(2, 5), TypeError, "integer token ids"),
    (lambda c: torch.zeros(5, dtype=torch.int64), ValueError, r"shape \(batch, seq\)"),
    (lambda c: torch.zeros(2, c.seq_len + 1, dtype=torch.int64), ValueError, "seq_len=4"),
    (lambda c: torch.full((2, 3), c.vocab, dtype=torch.int64), ValueError, "vocabulary is 0..10"),
    (lambda c: [[1, 2]], TypeError, "torch.Tensor"),
])
def test_bad_tokens_one_line(make, error, match):
    cfg = CONFIGS[1]
    with pytest.raises(error, match=match) as e:
        GPT(cfg)(make(cfg))
    assert "\n" not in str(e.value)


def test_bad_model_arguments():
    with pytest.raises(TypeError, match="GPTConfig"):
        GPT({"layers": 2})
    with pytest.raises(TypeError, match="dtype"):
        GPT(CONFIGS[1], dtype=torch.int32)
    with pytest.raises(ValueError, match="targets has shape"):
        tokens, targets = batch(CONFIGS[1], 2)
        GPT(CONFIGS[1])(tokens, targets[:1])
