"""Lab 09's notebook one-liners, pictures and drawings, and the notebook's worked problems."""
import matplotlib
import pytest
import torch

import solutions.lab09_memory as S
from labkit.memory import activation_checkpointing as checkpointing, lab
from labkit.memory.estimate import gpt_layer_saved_bytes
from labkit.model import GPTConfig
from labkit.viz import memory as V

matplotlib.use("Agg")


def test_budget_and_state_tables():
    t = lab.budget_table(70e9)
    gb = dict(zip(t.column("state"), t.column("GB")))
    assert gb["total"] == 1120 and gb["fp32 master weights"] + gb["Adam m (fp32)"] + gb["Adam v (fp32)"] == 840
    assert gb["Adam states as m, v only (a slip)"] == 560 and t.title.startswith("Ψ = 70B parameters: 14 devices")
    assert lab.budget_table(7e9).title.startswith("Ψ = 7B parameters: 2 devices")
    s = lab.state_table()
    assert s.column("total B/p") == s.column("16 + 4·tensors/Ψ")
    assert s.column("params B/p") == [4.0, 2.0] and s.column("grads B/p") == [4.0, 2.0]


def test_activation_table_measured_equals_the_closed_form():
    t = lab.activation_table()
    b = dict(zip(t.column("part"), t.column("bytes")))
    assert b["measured (tracker)"] == b["total"] and b["layers"] == 2 * b["one layer of ours"]
    # Korthikanti's per-layer count = ours + dropout - LayerNorm statistics - causal mask, exactly
    assert b["  = reconciled"] == b["Korthikanti 34sbh + 5as²b"] != b["one layer of ours"]


@pytest.mark.parametrize("segment", [None, 1, 3, 8])
def test_step_timeline_activation_peak_is_the_closed_form(segment):
    t = lab.step_timeline(8, segment)
    assert max(s.by_category["activations"] for s in t.samples) == t.closed_form
    assert [s.phase for s in t.samples][-1] == "step" and t.peak == max(s.total for s in t.samples)
    assert all(sum(s.by_category.values()) == s.total for s in t.samples)


def test_drawings_and_the_widget():
    t = lab.step_timeline(4, 2, width=4, batch_size=4)
    fig = V.checkpoint_frame([t], 0, ymax=100)
    assert "closed form" in fig.axes[0].get_title(loc="left") and "k = 2" in fig.axes[0].get_title(loc="left")
    matplotlib.pyplot.close(fig)
    assert lab.checkpoint_widget(n_layers=3, width=4, batch_size=4) is not None


def test_pictures_with_the_reference_answers(capsys):
    rows = lab.checkpoint_picture(S.checkpointed_forward, n_layers=4, width=4, batch_size=4)
    assert all(float(err) == 0 for _, err, *_ in rows)
    assert all(peak == every for _, _, peak, every, _ in rows)
    table = lab.policy_picture(S.checkpoint_policy)
    assert all(table.column("optimal")) and table.column("kept B") == table.column("measured B")
    assert table.column("recomputed FLOPs") == table.column("measured")
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100


def test_the_notebooks_worked_problems():
    cfg = GPTConfig(hidden=12288, heads=96, seq_len=2048, vocab=8)
    none, selective = (gpt_layer_saved_bytes(cfg, 1, 2048, 2, p) for p in ("none", "selective"))
    assert none == 1_614_823_424 and none - selective == 809_500_672
    assert 16 * 13e9 / 1e9 == 208 and checkpointing.sqrt_rule(100) == 10
    assert 2**16 // 2**3 * 2**(9990 // 2000) == 131072
    assert 7e9 / 2 / 1e9 + 7e9 / 128 * 2 / 1e9 == pytest.approx(3.609375)


def test_cuda_peak_table_needs_a_gpu():
    if torch.cuda.is_available():
        t = lab.cuda_peak_table()
        tracker, allocator, requested, workspace = t.column("peak bytes")
        gap = allocator - tracker
        assert requested <= allocator and 0 < workspace <= gap and workspace >= gap / 2   # mostly the workspace
    else:
        pytest.skip("needs a CUDA GPU (the notebook's GPU cell; its CPU stand-in runs in test_notebooks_fake_gpu)")
