"""labkit.memory.offload: Adam with its states in a memory-mapped file equals torch.optim.Adam bit
for bit; the bytes on the tier and across the link are exact; the time model holds; the pinned
(GPU) path runs here with faked pinned memory and for real only on a CUDA machine."""
import gc
import os

import numpy as np
import pytest
import torch

from labkit.memory import mixed_precision as mp
from labkit.memory import offload as off
from labkit.model import GPT, GPTConfig, batch, parameter_count

TINY = GPTConfig(layers=1, hidden=32, heads=2, seq_len=16, vocab=64)
SMALL = GPTConfig(layers=2, hidden=128, heads=4, seq_len=32, vocab=256)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def fake_pinned(monkeypatch):
    """The pinned tier on a CPU-only machine: plain host memory stands in for page-locked memory."""
    monkeypatch.setattr(off, "cuda_available", lambda: True)
    monkeypatch.setattr(off, "pinned_empty", lambda n, dtype: torch.empty(n, dtype=dtype))


def _train_side_by_side(dtype, tier, steps=3, device="cpu"):
    a, b = GPT(TINY).to(device=device, dtype=dtype), GPT(TINY).to(device=device, dtype=dtype)
    ref = (torch.optim.Adam(a.parameters(), lr=1e-2) if dtype == torch.float32
           else mp.MixedPrecisionAdam(a.parameters(), lr=1e-2))
    opt = off.OffloadedAdam(b.parameters(), lr=1e-2, tier=tier)
    for step in range(steps):
        for model, o in ((a, ref), (b, opt)):
            o.zero_grad()
            tokens, targets = (t.to(device) for t in batch(TINY, 2, seed=step))
            model(tokens, targets)[1].backward()
            o.step()
    return a, b, opt


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mmap_offloaded_adam_equals_torch_adam(dtype):
    a, b, opt = _train_side_by_side(dtype, "mmap")
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    n, size = parameter_count(TINY), torch.tensor([], dtype=dtype).element_size()
    # the link carries one gradient and one parameter per element, in the model's dtype
    assert opt.bytes_moved == 2 * size * n
    # the tier: fp32 copy, gradient, m, v (16 B) + 16-bit staging for gradient and parameter
    assert opt.tier_bytes == 16 * n + (0 if dtype == torch.float32 else 2 * size * n)
    files = [os.path.join(opt.tier.dir, f) for f in os.listdir(opt.tier.dir)]
    assert sum(os.path.getsize(f) for f in files) == opt.tier_bytes        # measured on disk
    # m lives in the file: Adam kept the state we gave it, and the file's bytes are its values
    m = opt._flat["exp_avg"]
    inner = opt._inner.state[opt._views["param"][0]]["exp_avg"]
    assert inner.untyped_storage().data_ptr() == m.untyped_storage().data_ptr()
    on_disk = np.fromfile(os.path.join(opt.tier.dir, "buffer2.bin"), dtype=np.float32)
    assert np.array_equal(on_disk, m.numpy()) and np.abs(on_disk).max() > 0
    tier_dir = opt.tier.dir
    opt.close()
    assert not os.path.exists(tier_dir)


def test_a_parameter_without_a_gradient_is_skipped_as_torch_adam_skips_it():
    a = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    b = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    ref = torch.optim.Adam(a, lr=0.1)
    with off.OffloadedAdam(b, lr=0.1) as opt:
        for step in range(3):
            for params, o in ((a, ref), (b, opt)):
                params[0].grad = torch.full((3,), 0.5)
                params[1].grad = torch.ones(2) if step == 0 else None   # a gradient only once
                o.step()
        assert all(torch.equal(p, q) for p, q in zip(a, b))
        assert not torch.equal(b[1].detach(), torch.ones(2))
    with pytest.raises(RuntimeError, match="OffloadedAdam: the optimizer is closed"):
        opt.step()


def test_the_tier_is_removed_when_the_optimizer_is_collected():
    model = GPT(TINY)
    opt = off.OffloadedAdam(model.parameters())
    tier_dir = opt.tier.dir
    assert os.path.isdir(tier_dir)
    del opt
    gc.collect()
    assert not os.path.exists(tier_dir)


def test_pinned_code_path_with_faked_pinned_memory(fake_pinned):
    a, b, opt = _train_side_by_side(torch.float32, "pinned")
    assert opt.tier.dir is None and opt.tier.kind == "pinned"
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    opt.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and H2D/D2H copies need a CUDA GPU")
def test_pinned_tier_on_a_gpu():
    model = GPT(TINY).cuda()
    with off.OffloadedAdam(model.parameters(), lr=1e-2, tier="pinned") as opt:
        assert all(t.is_pinned() for t in opt.tier.buffers)
        model(*(t.cuda() for t in batch(TINY, 2)))[1].backward()
        ref = [torch.nn.Parameter(p.detach().cpu()) for p in model.parameters()]
        for r, p in zip(ref, model.parameters()):
            r.grad = p.grad.cpu()
        ref_opt = torch.optim.Adam(ref, lr=1e-2)                 # Adam runs on the host in both
        opt.step()
        ref_opt.step()
        assert all(torch.equal(p.cpu(), r) for p, r in zip(model.parameters(), ref))
    t = off.time_offloaded_step(SMALL, "pinned", device="cuda")
    print(t)
    assert 1 / 3 < t.ratio < 3


def test_time_model_predicts_the_measured_step():
    t = off.time_offloaded_step(SMALL, "mmap", repeat=9)
    print(f"\nmmap tier: {t.bytes_moved} B moved, {t.to_tier_bw / 1e9:.2f}/{t.from_tier_bw / 1e9:.2f} GB/s, "
          f"update {t.update_s * 1e3:.2f} ms, predicted {t.predicted_s * 1e3:.2f} ms, "
          f"measured {t.measured_s * 1e3:.2f} ms (ratio {t.ratio:.2f}), in-memory Adam {t.adam_s * 1e3:.2f} ms")
    assert t.bytes_moved == 8 * parameter_count(SMALL)
    assert t.predicted_s > t.update_s > 0 and t.to_tier_bw > 0 and t.from_tier_bw > 0
    # each time is the fastest of 9 interleaved samples (other jobs' time slices inflate single
    # samples ~4x on this busy 2-core machine). Seen here: 1.0x-1.2x of the model; the memory bus
    # is shared too, so a factor of 3 either way — which still catches a model that leaves out the
    # update (~80% of the step here) or the copies counted ten times over — does not flake
    assert 1 / 3 < t.ratio < 3


def test_offload_table():
    table = off.offload_table(TINY, repeat=3)
    assert table.column("tier") == (["mmap", "pinned"] if torch.cuda.is_available() else ["mmap"])
    assert table.column("bytes moved/step") == [8 * parameter_count(TINY)] * len(table.rows)
    assert all(len(line) <= 100 for line in str(table).splitlines())


def test_bad_arguments(tmp_path):
    params = list(GPT(TINY).parameters())
    with pytest.raises(ValueError, match="OffloadedAdam: tier must be one of"):
        off.OffloadedAdam(params, tier="disk")
    with pytest.raises(ValueError, match="OffloadedAdam: path must be an existing directory"):
        off.OffloadedAdam(params, path=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="OffloadedAdam: lr must be a finite positive"):
        off.OffloadedAdam(params, lr=-1.0)
    with pytest.raises(TypeError, match="OffloadedAdam: all parameters must share one dtype"):
        off.OffloadedAdam([torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2).half())])
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="tier 'pinned' needs CUDA"):
            off.OffloadedAdam(params, tier="pinned")
    with off.OffloadedAdam(params, path=str(tmp_path)) as opt:       # a private directory inside path
        assert os.path.dirname(opt.tier.dir) == str(tmp_path)
    assert os.listdir(tmp_path) == []
