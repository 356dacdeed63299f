"""Lab 10's notebook one-liners, pictures and drawings, and the notebook's worked problems."""
import math

import matplotlib
import pytest

import solutions.lab10_zero as S
from labkit.model import parameter_count
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
    peak = dict(zip(m.column("method"), m.column("step peak B")))
    assert all(p > t for p, t in zip(m.column("step peak B"), m.column("total B")))
    assert peak["ddp"] > peak["zero1"] > peak["zero2"]               # ZeRO-2 frees full gradients as it goes
    t = lab.traffic_table(world=3)
    assert t.column("bytes sent") == t.column("formula")
    ratio = dict(zip(t.column("method"), t.column("x DDP")))
    assert ratio["zero1"] == ratio["zero2"] == pytest.approx(1, abs=0.01) and 1.4 < ratio["fsdp"] < 1.5   # padding
    # PyTorch's ZeroRedundancyOptimizer: DDP's all-reduce of Ψ plus a broadcast of Ψ, read by the profiler
    row = dict(zip(t.columns, next(r for r in t.rows if r[0] == "torch-zero1")))
    assert row["all-reduce"] == row["broadcast"] == parameter_count(lab.DATA_PARALLEL_GPT)
    assert row["x DDP"] == pytest.approx(1.5)


def test_accumulation_zero2_reduce_scatters_every_micro_batch():
    t = lab.accumulation_table(world=2, micro_batches=(1, 3))
    assert t.column("bytes sent") == t.column("formula")
    rows = {(r[0], r[1]): dict(zip(t.columns, r)) for r in t.rows}
    assert [rows[(3, m)]["reduce-scatters"] for m in ("ddp", "zero1", "zero2")] == [0, 1, 3]
    assert rows[(3, "ddp")]["all-reduces"] == 1 and rows[(1, "zero2")]["x DDP"] == pytest.approx(1, abs=0.01)
    assert rows[(3, "zero2")]["x DDP"] == pytest.approx(2, abs=0.02)            # (k + 1) / 2, up to padding


def test_pytorch_fsdp_shards_one_dimensional_parameters_too():
    t = lab.fsdp2_placements(world=2)
    assert all(p == "S(0)" for p in t.column("placement"))
    one_d = [(g, piece) for _, g, _, piece in t.rows if len(g) == 1]
    assert one_d and all(piece[0] == g[0] // 2 for g, piece in one_d)


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
