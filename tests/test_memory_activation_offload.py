"""Activation offload (labkit.memory.activation_offload): saved activations copied to a slower tier
in forward and back in backward, with exact byte counts against Lab 09's closed form, the same
gradients bit for bit, and the fast tier's bytes at the end of forward lower by exactly what moved.
"""
import pytest
import torch

from labkit.memory import activation_offload as A
from labkit.memory.estimate import gpt_saved_activation_bytes
from labkit.model import GPT, GPTConfig, batch

CFG = GPTConfig(layers=3, hidden=32, heads=4, seq_len=16, vocab=64)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16))
def test_bytes_moved_each_way_are_the_saved_activation_bytes(dtype):
    step = A.measure_step(CFG, batch_size=3, dtype=dtype, repeat=1)
    assert step.to_tier == step.from_tier == step.saved_bytes == gpt_saved_activation_bytes(CFG, 3, dtype=dtype)["total"]
    assert step.same_grads


def test_the_fast_tier_holds_exactly_what_moved_less_at_the_end_of_forward():
    step = A.measure_step(CFG, batch_size=3, repeat=1)
    assert step.forward_end[False] - step.forward_end[True] == step.to_tier - step.held_elsewhere
    assert step.held_elsewhere == 2 * 8 * 3 * CFG.seq_len               # the caller's token ids and targets
    assert step.peak[True] < step.peak[False]


def test_a_storage_saved_twice_moves_once_and_small_ones_can_stay():
    x = torch.randn(64, requires_grad=True, dtype=torch.float64)
    with A.ActivationOffload() as off:
        y = (x * x).sum()                        # mul saves x twice: one storage
    y.backward()
    assert off.bytes_to_tier == off.bytes_from_tier == 64 * 8 and off.storages == 1
    assert torch.equal(x.grad, 2 * x.detach())
    with A.ActivationOffload(min_bytes=1024) as off:
        (x * x).sum().backward()
    assert off.bytes_to_tier == 0
    off.close()


def test_parameters_stay_and_tier_memory_is_reused_between_steps():
    model = GPT(CFG, seed=0)
    tokens, targets = batch(CFG, 2)
    off = A.ActivationOffload(model)
    for _ in range(3):
        with off:
            loss = model(tokens, targets)[1]
        loss.backward()
        chunks = len(off._chunks)
    assert chunks == 1 and off.bytes_to_tier == gpt_saved_activation_bytes(CFG, 2)["total"]
    off.close()


def test_fast_tier_tracker_leaves_file_backed_storages_out():
    from labkit.memory.offload import Tier

    tier = Tier("mmap")
    tr = A.FastTierTracker()
    with tr:
        a = tier.empty(1000, torch.float32)
        b = torch.empty(1000, dtype=torch.float32)
        a.copy_(b)
    assert tr.peak_bytes == 4000
    tier.close()


def test_bad_arguments_are_one_line():
    with pytest.raises(ValueError, match="ActivationOffload: tier must be one of mmap, pinned, got 'disk'"):
        A.ActivationOffload(tier="disk")
    with pytest.raises(ValueError, match="ActivationOffload: min_bytes must be an int >= 0"):
        A.ActivationOffload(min_bytes=-1)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="ActivationOffload: tier 'pinned' needs CUDA"):
            A.ActivationOffload(tier="pinned")


def test_when_copies_hide_behind_a_layer():
    compute, copy = A.layer_hides(8192, 4096, 1e12, 1e9)
    assert compute == pytest.approx((2 * 12 * 8192**2 + 4 * 4096 * 8192) / 1e12)
    assert copy == pytest.approx((16 * 8192 * 2 + 8) / 1e9)
    # hides once h >~ 1.3 F / B (r = 4, bf16): for F/B = 1000, h = 1024 does not, h = 2048 does
    assert A.layer_hides(1024, 1, 1e12, 1e9)[0] < A.layer_hides(1024, 1, 1e12, 1e9)[1]
    assert A.layer_hides(2048, 1, 1e12, 1e9)[0] > A.layer_hides(2048, 1, 1e12, 1e9)[1]
    assert A.layer_hides(2048, 4096, 1e12, 1e9, heads=16, scores_saved=True)[1] > \
        A.layer_hides(2048, 4096, 1e12, 1e9, heads=16)[1]


def test_the_save_on_cpu_report_says_why_not_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the report compares for real (next test)")
    assert A.save_on_cpu_report().startswith("No GPU here")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: compares with torch's save_on_cpu there")
def test_save_on_cpu_and_ours_cut_the_gpu_peak():
    r = A.compare_save_on_cpu()
    assert r["ours"][0] < r["plain"][0] and r["save_on_cpu"][0] < r["plain"][0]
