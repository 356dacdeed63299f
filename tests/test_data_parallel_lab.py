"""Lab 06's notebook one-liners, pictures and drawings, and its worked problems' answers."""
import matplotlib
import pytest
import torch

from labkit.data_parallel import assign_buckets, lab
from labkit.data_parallel.overlap import overlap_step_time, simulate_overlap
from labkit.data_parallel.param_server import server_bytes_per_step
from labkit.data_parallel.scaling import amdahl_speedup, gustafson_speedup
from labkit.data_parallel.ssp import ssp_makespan, ssp_start_times
from labkit.viz import data_parallel as V

import solutions.lab06_data_parallel as S

matplotlib.use("Agg")


def test_equivalence_and_bucket_tables():
    eq = lab.equivalence_table(worlds=(1, 3))
    assert eq.column("ranks") == [1, 3] and all(eq.column("equal to 1e-12"))
    bt = lab.bucket_table(cap_mb=0.004)
    assert all(bt.column("PyTorch has it")) and "same buckets as PyTorch: True" in bt.title
    assert bt.column("bucket") == list(range(7))
    assert all(len(line) <= 100 for t in (eq, bt) for line in str(t).splitlines())


def test_overlap_table_combines_the_measured_parts_with_the_formulas():
    m = lab.measure_overlap(lab.DATA_PARALLEL_GPT, batch_per_rank=2, cap_mb=0.004, steps=1)
    t = lab.overlap_table(m)
    assert t.column("variant") == ["naive", "per-parameter", "bucketed"]
    assert t.column("ARs") == [len(m.nbytes), len(m.nbytes), len(m.buckets)]
    per = lab.comm_times(m, bucketed=False)
    lag = {name: v.lag for name, v in m.variants.items()}
    assert all(v >= 0 for v in lag.values()) and m.burst > 0
    assert t.column("lag") == pytest.approx([v * 1e3 for v in lag.values()])
    assert t.column("model")[1] == pytest.approx((overlap_step_time(m.fwd, m.bwd, per) + lag["per-parameter"]) * 1e3)
    assert t.column("model")[0] == pytest.approx((m.fwd + m.bwd + lag["naive"] + m.burst) * 1e3)
    assert t.column("comm")[0] == pytest.approx(m.burst * 1e3)
    assert t.column("meas/model") == pytest.approx([m.variants[k].step / lab.predicted_step(m, k) for k in lag])
    alpha, beta = lab.fitted_alpha_beta(m)
    assert alpha > 0 or beta > 0


def test_torch_bucket_history_one_bucket_then_rebuilt():
    rows = lab.torch_bucket_history(lab.DATA_PARALLEL_GPT, caps=(None, 0.004))
    total = sum(p.numel() * 4 for p in lab.GPT(lab.DATA_PARALLEL_GPT).parameters())
    assert [r["at_construction"] for r in rows] == [[total], [total]]
    assert rows[0]["cap_bytes"] == 25 * 2**20 and rows[0]["after_first_step"] == [total]   # < 1 MiB: one bucket
    assert rows[1]["after_first_step"] == rows[1]["ours"] and len(rows[1]["ours"]) > 1


def test_parameter_server_comparison():
    table, runs, sweep = lab.ps_compare(workers=2, steps=6, compute_s=0.001, straggler_s=0.002, staleness=1,
                                        lrs=(0.05, 0.4))
    assert table.column("run") == ["BSP", "ASP", "SSP s=1"]
    assert sorted(sweep) == sorted((n, lr) for n in runs for lr in (0.05, 0.4))
    assert all(sweep[name, 0.05] is r for name, r in runs.items())
    lrt = lab.ps_lr_table(sweep)
    assert lrt.column("run") == ["BSP", "ASP", "SSP s=1"] and lrt.column("updates") == [6, 12, 12]
    best = lrt.column("best loss")[0]
    assert best == min(sweep["BSP", lr].loss[-1] for lr in (0.05, 0.4) if sweep["BSP", lr].loss[-1] < sweep["BSP", lr].loss[0])
    assert [r.updates for r in runs.values()] == [6, 12, 12]
    assert table.column("max staleness")[0] == 0
    assert table.column("clock rule") == [pytest.approx(6 * 0.003)] * 3    # the straggler sets the pace
    bsp = runs["BSP"]
    assert bsp.bytes_in + bsp.bytes_out == bsp.updates * (server_bytes_per_step(2, 32) + 4 * 8 * 2)


def test_scaling_large_batch_compression_and_local_sgd_tables():
    from labkit.model import GPTConfig

    tiny = GPTConfig(layers=1, hidden=16, heads=2, seq_len=8, vocab=32)
    strong, weak, s_a, s_g = lab.scaling_tables(tiny, worlds=(1, 2), global_batch=4, per_rank=2)
    assert strong.column("ranks") == [1, 2] and strong.column("speedup")[0] == 1.0
    assert 0 <= s_a <= 1 and 0 <= s_g <= 1
    assert strong.column("Amdahl fit")[1] == pytest.approx(amdahl_speedup(s_a, 2))
    assert weak.column("Gustafson fit")[1] == pytest.approx(gustafson_speedup(s_g, 2))
    lb = lab.large_batch_table(tiny, samples=64, batches=(8, 32))
    assert lb.column("steps") == [8, 2] and lb.column("linear lr") == [0.1, pytest.approx(0.4)]
    assert lab.compression_table(tiny, steps=2).column("method") == ["dense", "topk", "topk+ef", "sign+ef"]
    assert lab.local_sgd_table(tiny, total_steps=4, local_steps=(1, 4)).column("averages") == [4, 1]


def test_server_bytes_table():
    t = lab.server_bytes_table(workers=(2, 16), params=10**8, itemsize=4)
    assert t.column("server link GB/step") == [1.6, 12.8]
    assert t.column("ring link GB/step") == pytest.approx([0.4, 0.75])


def test_pictures_run_the_reference_answers(capsys):
    from labkit.grading.check import run_picture

    assert all(lab.bucket_picture(S.bucket_indices).column("equal"))
    assert lab.hooks_picture(S.data_parallel_hooks) < 1e-12
    timed = lab.bucketed_picture(S.bucketed_ddp_hooks, steps=1)
    assert dict(zip(timed.column("variant"), zip(timed.column("all-reduces"), timed.column("in backward")))) == {
        "yours (bucketed)": (4, 4), "per-parameter": (52, 52), "naive": (52, 0)}
    assert "equal (to 1e-12)" in capsys.readouterr().out
    assert all(lab.ssp_picture(S.ssp_start_times).column("equal"))
    capsys.readouterr()
    run_picture("lab06_data_parallel", "data_parallel_hooks", lab.hooks_picture)   # the stub, raising on ranks
    assert capsys.readouterr().out.splitlines()[0] == "data_parallel_hooks is still a stub."


def test_drawings_are_pure_functions_of_their_inputs():
    r = simulate_overlap([3.0, 2.0, 1.0], [100, 100, 100], None, 2, 0.0, 0.01, 0.5)
    fig = V.overlap_figure(r, "hand")
    assert "exposed comm 1000.0 ms" in fig.axes[0].get_title("left")
    fig = V.overlap_frame([3.0, 2.0, 1.0], [100, 100, 100], 2, 0.0, 0.01, 0.5, cap_kib=0)
    assert "per-parameter: 3 all-reduces" in fig.axes[0].get_title("left")
    events = [(0, 8, 0.001, 0.001, 0.004), (1, 8, 0.002, 0.004, 0.006)]
    real = V.measured_overlap(events, t_fwd=0.01, t_bwd=0.005)
    assert (real.step, round(real.exposed, 9)) == (0.016, 0.001)
    fig = V.ssp_figure([[1, 1], [3, 3]], 1)
    assert [ax.get_title("left") for ax in fig.axes[:3]] == ["ASP: done at 6", "SSP s=1: done at 6", "BSP: done at 6"]
    assert V.ssp_widget([[1, 1], [3, 3]]) is not None
    assert V.overlap_widget([1.0], [8], 2, 0.0, 1e-9, 0.1) is not None


def test_worked_problems():
    assert round(2 * 63 / 64 * 1.5e9 * 4 / 1e9, 1) == 11.8                         # problem 1
    assert overlap_step_time(30, 60, [10, 15, 20, 15]) == 105                       # problem 2
    assert assign_buckets([torch.empty(k * 256) for k in (4, 4, 8, 2, 2)], 8 * 1024) == [[4, 3, 2], [1, 0]]
    d = [[1, 4, 1, 1], [4, 1, 1, 1]]                                                # problem 4
    assert ssp_start_times(d, 1) == [[0, 1, 5, 6], [0, 4, 5, 6]] and ssp_makespan(d, 1) == 7
    assert ssp_makespan(d, 0) == 10
    assert server_bytes_per_step(16, 10**8, 4) / 1e9 == 12.8                         # problem 5
    assert round(gustafson_speedup(0.2, 8), 2) == 6.6 and round(amdahl_speedup(0.2, 8), 2) == 3.33  # 6
    moving = [[3 if (c + k) % 3 == 0 else 1 for c in range(9)] for k in range(3)]  # the widget's text
    assert [ssp_makespan(moving, s) for s in (0, 1, 2, None)] == [27, 16, 15, 15]
