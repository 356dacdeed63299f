"""Lab 07's notebook one-liners, pictures and drawings."""
import matplotlib
import matplotlib.pyplot
import pytest

import solutions.lab07_tensor_parallel as S
from labkit.tensor_parallel import lab
from labkit.tensor_parallel import draw as V

matplotlib.use("Agg")


def test_model_and_sequence_parallel_tables_count_the_closed_forms():
    t = lab.model_table(worlds=(1, 2))
    assert t.column("fwd b·s·h") == [0, 5] and t.column("bwd b·s·h") == [0, 5] and t.column("fwd small") == [0, 3]
    assert all(e < 1e-12 for e in t.column("|loss - unsplit|"))
    sp = lab.model_table(worlds=(2,), sequence_parallel=True)
    assert sp.column("fwd b·s·h") == [10] and sp.column("kind") == ["all_gather+reduce_scatter"]
    st = lab.sp_table(worlds=(2,))
    assert st.column("TP bytes") == st.column("SP bytes") and st.column("ratio") == [2.0]


def test_pairing_and_moe_tables():
    p = lab.pairing_table(worlds=(2,))
    megatron, gathered = p.rows
    assert megatron[2] == megatron[3] == 4096 and gathered[2] == 3 * 4096
    m = lab.moe_table(factors=(0.5, 2.0), tokens=8)
    assert m.column("dropped")[1] == 0 < m.column("dropped")[0] and all(m.column("= 1 process"))
    assert m.column("a2a bytes") == m.column("formula")


def test_pictures_accept_the_reference_and_refuse_stubs(capsys):
    for ex in ("copy_to_tp", "reduce_from_tp", "column_parallel_linear", "row_parallel_linear",
               "vocab_parallel_cross_entropy"):
        lab.picture(ex)(getattr(S, ex))
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 10 and all("DIFFERENT" not in line and len(line) <= 100 for line in out)
    from labkit.grading.check import run_picture

    run_picture("lab07_tensor_parallel", "copy_to_tp", lab.picture("copy_to_tp"))   # a stub raising on 2 ranks
    assert capsys.readouterr().out.splitlines()[0] == "copy_to_tp is still a stub."


def test_megatron_steps_and_frames():
    for block in ("mlp", "attention"):
        steps = lab.megatron_steps(block)
        assert [s["collective"] is not None for s in steps].count(True) == 2      # one all-reduce each way
        assert steps[4]["layout"]["Z"] == "replicated" and steps[3]["layout"]["Z"] == "partial"
        for i in range(len(steps)):
            fig = V.tp_frame(steps, i, 2, block)
            assert fig.axes[0].get_title("left").startswith(f"step {i + 1}/{len(steps)}")
            matplotlib.pyplot.close(fig)
    assert lab.tp_widget("mlp") is not None
    with pytest.raises(ValueError, match="block must be"):
        lab.megatron_steps("conv")


def test_worked_problems():
    from labkit.tensor_parallel.experts import MoEConfig

    S = 4096 * 8192 * 2
    assert 4 * 2 * 7 / 8 * S / 2**20 == 448                                            # problem 1
    assert (4 * 1024 // 4, 1024) == (1024, 1024) and 2 * 1024 == 2048                  # problem 2
    assert round(16384 * 51200 * 4 / 1e9, 2) == 3.36                                   # problem 3
    assert MoEConfig(hidden=8, experts=8, top_k=2, capacity_factor=1.25).capacity(64) == 20   # problem 4
