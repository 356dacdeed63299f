"""The Lab 11 notebook's one-liners (labkit.planner.lab) and drawings (labkit.viz.parallel3d)."""
import matplotlib
import pytest

from labkit.parallel3d.comm_bytes import rank_bytes_per_step
from labkit.parallel3d.grid import Coord
from labkit.parallel3d.train import Timeline3D, TrainSetup
from labkit.parallel3d import lab as grid_lab
from labkit.planner import lab
from labkit.planner.memory import first_stage_bytes, memory_per_gpu
from labkit.planner.model import flops_per_iteration
from labkit.viz import parallel3d as V
from solutions import lab11_parallel3d as S

matplotlib.use("Agg")


def _lines_fit(table):
    assert all(len(line) <= 100 for line in str(table).splitlines()), str(table)


def test_bytes_by_dimension_is_the_closed_form_and_tp_dominates():
    table = lab.bytes_by_dimension_table("39.1", micro_batches=48)
    _lines_fit(table)
    run = lab._run("39.1")
    m = run.model
    from labkit.model import GPTConfig
    cfg = GPTConfig(layers=m.layers, hidden=m.hidden, heads=m.heads, seq_len=m.seq_len, vocab=m.vocab)
    want = rank_bytes_per_step(cfg, run.dp, run.tp, run.pp, run.batch, 48, 2, rank=0)
    got = {row[0]: row[1] for row in table.rows}
    for dim, v in want.items():
        assert got[dim] == pytest.approx(v / 1e9, rel=1e-12)
    assert max(got, key=got.get) == "tp" and got["tp"] > 20 * got["dp"] > 20 * got["pp"]


def test_flops_table_counts_equal_the_closed_form():
    table = lab.flops_table()
    assert [row[-1] for row in table.rows] == ["yes", "yes"]
    assert table.rows[1][2] > table.rows[0][2]


def test_activations_do_not_shrink_with_pp():
    table = lab.activations_table("145.6", micro_batches=96, pps=(1, 2, 4, 8, 16))
    assert {row[2] for row in table.rows} == {80}                 # l layers whatever pp is
    assert [row[1] for row in table.rows] == [80, 40, 20, 10, 5]


def test_the_shortcut_gets_parameters_pp_times_too_big_and_activations_pp_times_too_small():
    table = lab.memory_mistake_table("145.6")
    run = lab._run("145.6")
    for recompute, states, shortcut_states, acts, shortcut_acts in table.rows:
        assert shortcut_states / states == pytest.approx(run.pp, rel=0.05)   # embeddings make it inexact
        assert acts / shortcut_acts == pytest.approx(run.pp, rel=1e-12)
    _lines_fit(table)


def test_first_stage_bytes_is_close_to_the_full_estimate():
    """The exercise's back-of-envelope budget leaves out the embeddings and the logits: within 10 %
    of memory_per_gpu for the Table 1 runs (full recomputation, micro-batch 1, ZeRO off)."""
    from labkit.memory.estimate import activation_bytes_per_layer
    from labkit.planner.grid import Plan
    from labkit.planner.published import MEGATRON_2021_TABLE1
    for run in MEGATRON_2021_TABLE1[3:]:
        m = run.model
        act = activation_bytes_per_layer(m.seq_len, 1, m.hidden, m.heads, run.tp, recompute="full")
        mem = memory_per_gpu(m, Plan(run.dp, run.tp, run.pp, 1, 1, 0, "full"), run.batch)
        quick = first_stage_bytes(m.params, m.layers, act, run.dp, run.tp, run.pp, run.batch // run.dp, 0)
        assert quick == pytest.approx(mem.model_states + mem.activations, rel=0.10), run


def test_megatron_and_findings_tables():
    table, summary, rows = lab.megatron_table()
    assert len(table.rows) == 10 and summary.median < summary.constant_median and summary.spearman >= 0.6
    assert [row[3] for row in table.rows] == [r.paper.tflops_per_gpu for r in rows]
    _lines_fit(table)
    held, s, held_rows = lab.held_out_table()
    assert len(held.rows) == 12 and s.worst < 0.2
    _lines_fit(held)
    tp = {row[0]: row[-1] for row in lab.tp_sweep_table().rows}
    assert max(tp, key=tp.get) == "8×8" and 0.75 < tp["16×4"] / tp["8×8"] < 0.95
    rows = lab.batch_table().rows
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)     # bubble shrinks with batch
    assert all(r[4] > 0 for r in rows) and rows[0][4] > rows[-1][4]               # interleaving helps, less later


def test_the_parts_tables():
    # each table the notebook's section 5.1 prints: lines fit, numbers are the model's
    gemm = lab.gemm_table("18.4", (1, 4))
    _lines_fit(gemm)
    from labkit.planner.device import A100_80GB, gemm_time
    row = next(r for r in gemm.rows if r[0] == 4 and r[1] == "fc1")
    t = gemm_time(A100_80GB, 8192, 3072, 6144)
    assert (row[3], row[4], row[7]) == (t.tiles, t.waves, t.bound) == (768, 8, "compute")
    nccl = lab.nccl_table()
    _lines_fit(nccl)
    assert [r[2] for r in nccl.rows] == [232.5, 24.0, 96.0, 96.0]
    layers, worst = lab.layer_table()
    assert worst < 0.12 and len(layers.rows) == 5
    stages, worst = lab.pipeline_check()
    assert worst < 1e-3
    exposed, simulated, plain = lab.overlap_check()
    assert exposed == pytest.approx(simulated, rel=1e-9) and exposed < plain
    best = lab.search_table(lab._run("39.1").model, __import__("labkit.planner.cost", fromlist=["x"]).selene(512),
                            1536, top=1)[1].best
    parts = lab.parts_table(best)
    assert parts.rows[-1][1] == pytest.approx(best.step_time) and sum(r[1] for r in parts.rows[:-1]) == \
        pytest.approx(best.step_time)


def test_calibration_tables_on_fake_measurements():
    # the CPU checks' tables from given measurements (the notebook measures; tests do not time)
    from labkit.planner import calibrate as C
    truth = C.cpu_device(50e9, 10e9, 2e-6)
    samples = [C.GemmSample(m, n, k, C.model_seconds(truth, C.GemmSample(m, n, k, 1.0))) for m, n, k in C.GEMM_SHAPES]
    check = C.check_sweep(samples)
    assert check.model_error < 0.02 < check.constant_error
    _lines_fit(lab.cpu_gemm_table(check))
    kernels = {k: (b * 1000, b * 1000 / 10e9) for k, b in C.KERNEL_BYTES.items()}
    assert [r[3] for r in lab.kernel_table(kernels).rows] == pytest.approx([1.0] * 6)
    times = {1000: 1e-3, 10 ** 5: 1.2e-3, 10 ** 6: 2e-3}
    net = C.fit_ring(4, times)
    table = lab.gloo_table(times, net, 4)
    assert [r[1] for r in table.rows] == ["check", "fit", "fit"]
    assert table.rows[1][4] == pytest.approx(1.0) and table.rows[2][4] == pytest.approx(1.0)


def test_search_table_and_rejections():
    from labkit.planner.cost import selene
    model = lab._run("39.1").model
    table, result = lab.search_table(model, selene(512), 1536, top=3)
    assert len(table.rows) == 3 and table.rows[0][1] == result.plans[0].step_time
    counts = lab.rejection_counts(result)
    assert sum(row[1] for row in counts.rows) == len(result.rejected)


PAIRS = {"rank_coords": (grid_lab.coords_picture, [(2, 3)]), "group_ranks": (grid_lab.groups_picture, [(1, 2)]),
         "fits_in_memory": (lab.memory_picture, [(1, 2), (3, 4)]), "flops_per_iteration": (lab.flops_picture, [(1, 2)])}


@pytest.mark.parametrize("exercise", sorted(PAIRS))
def test_pictures_agree_with_the_solutions(exercise):
    draw, columns = PAIRS[exercise]
    table = draw(getattr(S, exercise))
    _lines_fit(table)
    for row in table.rows:
        for yours, ours in columns:
            assert row[yours] == row[ours], row


def test_partition_picture_agrees_with_the_solution(capsys):
    table = lab.partition_picture(S.partition_stages)
    assert table.rows[0][1:] == table.rows[1][1:]
    lab.picture("partition_stages")(S.partition_stages)
    assert "bottleneck" in capsys.readouterr().out


def test_pictures_show_a_wrong_answer():
    def tp_outermost(rank, dp, tp, pp):
        t, rest = divmod(rank, pp * dp)
        p, d = divmod(rest, dp)
        return d, t, p
    table = grid_lab.coords_picture(tp_outermost)
    assert "NO" in [row[-1] for row in table.rows] and "span up to 2 nodes" in table.title


def test_worked_answers():
    got = lab.worked_answers()
    assert got["1T flops"] == flops_per_iteration(lab._run("1008").model, 3072, True)
    assert got["1T seconds per iteration"] == pytest.approx(got["1T flops"] / (3072 * 163e12))
    assert got["1T last term"] == 51200 / (16 * 128 * 25600)         # V/(16·l·h), Problem 1's denominator
    assert got["175B model states GiB"] == pytest.approx(got["175B model states GB"] * 1e9 / 2 ** 30)
    assert got["bubble p=8 m=64"] == pytest.approx(7 / 71)
    assert got["tp16 bus GB/s"] == 192.0 and got["BLOOM split"] == (5,) + (6,) * 10 + (5,)


def test_equivalence_and_bytes_tables_on_four_ranks():
    runs = grid_lab.run_grids(grids=((2, 1, 2, 2, "1f1b", "sgd"),), world=4, steps=2)
    table = grid_lab.equivalence_table(runs)
    assert table.rows[0][4] < 1e-12 and table.rows[0][5] == 0 and table.rows[0][6] == "yes"
    counted = grid_lab.counted_bytes_table(runs[0])
    assert all(row[1] == row[2] and row[3] == row[4] for row in counted.rows)
    tl = grid_lab.timeline_of(runs[0])
    assert sorted(tl.timeline) == [0, 1, 2, 3]
    V.timeline_figure(tl)


def test_drawings():
    fig = V.cluster_figure(2, 2, 2, 4, "tp")
    assert "each on ≤ 1 node" in fig.axes[0].get_title(loc="left")
    fig = V.cluster_figure(1, 8, 1, 4, "tp")
    assert "each on ≤ 2 nodes" in fig.axes[0].get_title(loc="left")
    with pytest.raises(ValueError, match="colour_by must be one of"):
        V.cluster_figure(2, 2, 2, 4, "xx")
    assert len(V.plan_frame("39.1", 512, 1536, "pp").axes) == 3
    assert "no plan fits" in V.plan_frame("1008", 32, 128).axes[0].texts[0].get_text()
    setup = TrainSetup(1, 1, 2, 4, 2)
    tl = Timeline3D({0: [("F0@s0", 0.0, 0.1), ("dp all-reduce", 0.2, 0.3)], 1: [("B0@s1", 0.1, 0.2)]}, 0.3,
                    {0: Coord(0, 0, 0), 1: Coord(0, 0, 1)}, setup)
    assert V.timeline_figure(tl).axes[0].get_title(loc="left").startswith("one step on 2 gloo ranks")
    V.plan_widget()
