"""Lab 10's notebook one-liners, pictures and drawings, and the notebook's worked problems."""
import math

import matplotlib
import pytest

import solutions.lab10_zero as S
from labkit.viz import zero as V
from labkit.zero import lab
from labkit.zero.formulas import comm_bytes_per_step, model_state_bytes

matplotlib.use("Agg")


def test_stage_table_is_the_zero_papers_figure():
    t = lab.stage_table(7.5e9, 64)
    assert [round(g, 1) for g in t.column("GB per rank")] == [120.0, 31.4, 16.6, 1.9]
    assert [round(r, 2) for r in t.column("x less, N=8")] == [1.0, 2.91, 4.27, 8.0]


def test_memory_and_traffic_tables_equal_their_formulas():
    m = lab.memory_table(world=3)
    assert m.column("total B") == m.column("formula B")
    t = lab.traffic_table(world=3)
    assert t.column("bytes sent") == t.column("closed form")
    ratio = dict(zip(t.column("method"), t.column("x DDP")))
    assert ratio["zero1"] == ratio["zero2"] == pytest.approx(1, abs=0.01) and 1.4 < ratio["fsdp"] < 1.5   # padding


def test_equivalence_table_and_fsdp_trace():
    e = lab.equivalence_table(worlds=(1, 2))
    assert all(err < 1e-12 for err in e.column("max |param - one process|"))
    assert set(e.column("method")) == {"zero1", "zero2", "fsdp", "torch-zero1", "torch-fsdp2"}
    f = lab.fsdp_trace(world=2)
    for unit in ("root", "blocks.0", "blocks.1"):
        mine = [(p, e) for p, e, u in zip(f.column("pass"), f.column("event"), f.column("unit")) if u == unit]
        assert mine == [("forward", "gather"), ("forward", "free"), ("backward", "gather"), ("backward", "free"),
                        ("backward", "reduce_scatter")], unit
    assert max(len(w.split(" + ")) for w in f.column("whole now")) == 2     # the root and one block
    assert f.column("whole now")[-1] == "-"
    assert "(2.0x)" in f.title and "keeps shards, grads in float32" in f.title and len(f.title) <= 100


def test_pictures_with_the_reference_answers(capsys):
    assert all(lab.state_bytes_picture(S.model_state_bytes).column("equal"))
    z = lab.zero1_picture(S.zero1_step)
    assert all(float(err) < 1e-12 for err in z.column("max |param error|"))
    assert all(sizes == [shard] * n for n, sizes, shard in zip(z.column("ranks"), z.column("state sizes per rank"),
                                                                z.column("a shard: ceil(P/N)")))
    f = lab.fsdp_linear_picture(S.fsdp_linear)
    assert all(float(e) < 1e-12 for e in f.column("max error (y, dx, dW shard)"))
    assert all(k < w for k, w in zip(f.column("bytes kept after forward"), f.column("full W bytes")))
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100


def test_shards_drawing_every_stage_and_moment():
    for stage in range(4):
        for i in range(V.moment_count(stage)):
            fig = V.shards_figure(stage, 4, i)
            assert V.STAGE_NAMES[stage] in fig.axes[0].get_title(loc="left")
            matplotlib.pyplot.close(fig)
    assert V.shards_widget() is not None


def test_the_notebooks_worked_problems():
    assert model_state_bytes(70e9, 64, 2) / 1e9 == pytest.approx(155.3125)
    assert model_state_bytes(70e9, 64, 3) / 1e9 == pytest.approx(17.5)
    assert 16 / (2 + 14 / 21) == pytest.approx(6)
    assert comm_bytes_per_step(1.3e9, 16, 2) == pytest.approx(4.875e9)
    assert comm_bytes_per_step(1.3e9, 16, 3) == pytest.approx(7.3125e9)
    assert math.ceil(10_000_001 / 8) == 1_250_001 and 8 * 1_250_001 - 10_000_001 == 7
