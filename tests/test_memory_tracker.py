"""labkit.memory.tracker: exact byte counts on models small enough to count by hand."""
import torch
from torch import nn

from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig, batch, parameter_count


def test_a_linear_layer_step_counted_by_hand():
    torch.manual_seed(0)
    m = nn.Linear(4, 3, bias=False)                  # W: 12 float32 = 48 bytes
    opt = torch.optim.Adam(m.parameters())
    tr = MemoryTracker(m, opt)
    with tr:
        tr.mark("forward")
        x = torch.randn(2, 4)                        # 32 bytes
        loss = m(x).sum()                            # y (24 bytes) dies at once: sum keeps no input
        assert tr.live_by_category() == {"parameters": 48, "gradients": 0, "optimizer": 0, "activations": 32 + 4}
        tr.mark("backward")
        loss.backward()
        del loss
        assert tr.live_by_category() == {"parameters": 48, "gradients": 48, "optimizer": 0, "activations": 32}
        tr.mark("step")
        opt.step()                                   # Adam: m and v (48 each) and a 4-byte step count
        assert tr.live_by_category() == {"parameters": 48, "gradients": 48, "optimizer": 100, "activations": 32}
        del x
        assert tr.live_by_category()["activations"] == 0 and tr.current == 48 + 48 + 100
    assert tr.peak_phase == "step" and tr.peak_by_category["optimizer"] == 100
    assert tr.peak_bytes == sum(tr.peak_by_category.values()) >= 196
    assert tr.timeline[0].phase == "start" and tr.timeline[-1].phase == "step"
    assert max(s.total for s in tr.timeline) == tr.peak_bytes


def test_gpt_parameters_and_gradients_are_counted_once_each():
    cfg = GPTConfig(layers=2, hidden=16, heads=2, seq_len=8, vocab=32)
    for dtype, size in ((torch.float32, 4), (torch.bfloat16, 2)):
        model = GPT(cfg, dtype=dtype)
        tr = MemoryTracker(model)
        with tr:
            model(*batch(cfg, 2))[1].backward()
            live = tr.live_by_category()
        n = parameter_count(cfg)                     # the tied embedding counts once
        assert live["parameters"] == n * size and live["gradients"] == n * size
        assert tr.peak_by_category["activations"] > 0
