"""Lab 05's notebook one-liners (labkit.collectives.lab): the tables its cells print, the α–β fits
per algorithm, the interconnect table, and a learner's function run through the lab's pictures."""
import math

import pytest
import torch
import torch.distributed as dist

import exercises.lab05_collectives as stubs
import solutions.lab05_collectives as answers
from labkit.collectives import alpha_beta, lab
from labkit.collectives.simulate import trace_collective, trace_from_rounds
from labkit.table import Table
from labkit.viz import collectives as V


def _lines_fit(table) -> bool:
    return all(len(line) <= 100 for line in str(table).splitlines())


def _printed(out: str) -> str:
    """What a picture printed, less the plain-text stand-ins of displayed widgets and HTML (no IPython here)."""
    return "\n".join(line for line in out.splitlines() if not line.startswith(("StaticVBox(", "<IPython")))


def test_table_aligns_columns_and_gives_raw_values():
    t = Table(["name", "x", "xs"], [("a", 1.23456, [1, 2]), ("bbb", 10.0, [3])], formats={"x": ".2f"})
    assert str(t).splitlines() == ["name |     x |     xs", "a    |  1.23 | [1, 2]", "bbb  | 10.00 |    [3]"]
    assert t.column("x") == [1.23456, 10.0] and repr(t) == str(t)
    assert str(Table(["a"], [(1,)], title="T")).splitlines()[0] == "T"


def test_primitives_ring_and_byte_tables_on_real_ranks():
    prim = lab.primitives_vs_torch(3)
    assert prim.column("primitive") == list(lab.PRIMITIVES) and all(prim.column("picture matches torch.distributed"))
    table, result = lab.ring_vs_trace(3, 7)
    assert all(all(table.column(c)) for c in table.columns[1:])
    assert result.tolist() == lab.ring_inputs(3, 7).sum(axis=0).tolist()
    rb = lab.ring_bytes_table(sizes=(2, 3), length=1001)
    assert rb.column("bytes sent per rank") == [[4004, 4004], [5336, 5340, 5340]]
    assert all(rb.column("= formula")) and all(rb.column("= 2(N-1)·S"))
    lb = lab.log_bytes_table(n=5, length=13)
    assert lb.column("algorithm") == list(lab.LOG_ALGORITHMS) and all(lb.column("= formula"))
    assert all(_lines_fit(t) for t in (prim, table, rb, lb, lab.log_bytes_table(n=6, length=1001)))


@pytest.mark.parametrize("n", range(2, 8))
def test_complete_chunk_owner_for_both_starts(n):
    # rank i first sending chunk i leaves rank i with chunk i+1; starting with chunk i-1 gives chunk i
    assert lab.complete_chunk_owner(0, n) == {i: (i + 1) % n for i in range(n)}
    assert lab.complete_chunk_owner(1, n) == {i: i for i in range(n)}
    owners = {r: [c for c in range(n) if len(trace_collective("ring_reduce_scatter", n, n).final[r][c]) == n]
              for r in range(n)}
    assert owners == {i: [i] for i in range(n)}


def test_rabenseifner_model_and_rounds_table():
    # 2·log2 p rounds, the ring's bytes; a fold/unfold pair adds 2 rounds of whole buffers
    assert alpha_beta.coefficients("rabenseifner_all_reduce", 8, 1000) == (6, 1750)
    assert alpha_beta.coefficients("rabenseifner_all_reduce", 16, 1.0) == (8, 1.875)
    assert alpha_beta.coefficients("rabenseifner_all_reduce", 6, 1000) == (6, 3500)
    t = lab.rounds_table(ps=(2, 4, 8, 16, 64))
    assert t.column("ring rounds traced") == [2, 6, 14, 30, 126]
    assert t.column("Rabenseifner")[3] == "8α + 1.88·Sβ" and t.column("ring")[1] == "6α + 1.5·Sβ"
    assert _lines_fit(t)


def test_link_table_beta_in_picoseconds_and_crossover():
    t = lab.link_table(alpha_s=5e-6, p=4)
    beta = dict(zip(t.column("link"), t.column("β (ps/B)")))
    assert math.isclose(beta["NVLink 3 (A100), 600 GB/s both ways"], 1e12 / 300e9)      # ≈ 3.3 ps/B
    assert math.isclose(beta["HDR InfiniBand, 200 Gb/s"], 40.0)                           # 25 GB/s
    x = dict(zip(t.column("link"), t.column("crossover p=4 (MB)")))
    assert math.isclose(x["NVLink 3 (A100), 600 GB/s both ways"], 8 * 5e-6 * 300e9 / 1e6)  # 8α/β = 12 MB
    assert _lines_fit(t)


def _synthetic(p=4):
    true = {"ring_all_reduce": (300e-6, 1e-9), "recursive_doubling_all_reduce": (280e-6, 0.9e-9),
            "tree_all_reduce": (130e-6, 0.5e-9)}
    measured = {(a, n): alpha_beta.predict_time(a, p, n, *ab) for a, ab in true.items() for n in lab.SIZES}
    measured.update({("gloo_all_reduce", n): 1e-3 for n in lab.SIZES})
    return true, measured


def test_fit_per_algorithm_recovers_each_algorithms_alpha_beta():
    true, measured = _synthetic()
    fits = alpha_beta.fit_per_algorithm(lab.samples_of(measured, 4))
    for a, (al, be) in true.items():
        assert math.isclose(fits[a][0], al, rel_tol=1e-9) and math.isclose(fits[a][1], be, rel_tol=1e-9)
    table, fits2 = lab.fit_table(measured, 4)
    assert table.column("fit") == ["joint", *true] and _lines_fit(table)
    own = dict(zip(table.column("fit"), zip(table.column("min meas/model"), table.column("max meas/model"))))
    assert all(math.isclose(lo, 1) and math.isclose(hi, 1) for a, (lo, hi) in own.items() if a != "joint")
    lo, hi = own["joint"]
    assert lo < 0.95 and hi > 1.05                       # one (α, β) cannot fit all three
    ratios = lab.ratio_table(measured, 4, fits2)
    assert all(math.isclose(v, 1) for c in ratios.columns if c.endswith("own") for v in ratios.column(c))
    assert _lines_fit(ratios) and _lines_fit(lab.times_table(measured))
    assert math.isclose(lab.median_ratio(measured, 4, fits2["tree_all_reduce"], "tree_all_reduce"), 1)
    # crossover with per-algorithm fits: both model times agree there
    rd, ring = "recursive_doubling_all_reduce", "ring_all_reduce"
    x = alpha_beta.crossover_fitted(rd, true[rd], ring, true[ring], 4)
    assert math.isclose(alpha_beta.predict_time(rd, 4, x, *true[rd]), alpha_beta.predict_time(ring, 4, x, *true[ring]))
    same = alpha_beta.crossover_fitted(rd, true[ring], ring, true[ring], 4)
    assert math.isclose(same, alpha_beta.crossover_bytes(rd, ring, 4, *true[ring]))
    assert alpha_beta.crossover_fitted(ring, true[ring], ring, true[ring], 4) == math.inf


def test_time_all_reduces_and_builtin_times_return_positive_seconds():
    m = lab.time_all_reduces(2, sizes=(256, 4096), repeat=2)
    assert set(m) == {(a, n) for a in lab.TIMED for n in (256, 4096)} and all(t > 0 for t in m.values())
    b = lab.builtin_times(2, sizes=(1024,), backend="gloo", repeat=2)
    assert list(b) == [1024] and b[1024] > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for NCCL")
def test_gloo_vs_nccl_on_two_gpus():
    t = lab.gloo_vs_nccl(2, sizes=(4096,), repeat=2)
    assert t.column("bytes") == [4096] and t.column("NCCL us")[0] > 0


# ---- a learner's function through the lab's pictures -------------------------------------------

@pytest.mark.parametrize("exercise", list(lab.YOUR_SETUP))
def test_reference_answers_pass_the_picture(exercise):
    run = lab.run_yours(getattr(answers, exercise), exercise)
    assert run.results_ok and run.bytes_ok, (run.buffers, run.stats)
    if run.algorithm.startswith("ring"):   # sends recorded through exchange: the animation replays them
        assert run.trace is not None and run.trace.final == trace_collective(run.algorithm, 4, 10).final
    else:
        assert run.trace is None and not run.trace_error
    assert _lines_fit(run.bytes_table())


@pytest.mark.parametrize("exercise", list(lab.YOUR_SETUP))
def test_stubs_raise_not_implemented(exercise):
    with pytest.raises(NotImplementedError):
        lab.run_yours(getattr(stubs, exercise), exercise)


def _gather_that_adds(buf, bounds):
    """A known-wrong all-gather: it adds what it receives instead of storing it."""
    from labkit.collectives import CommStats, exchange

    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    for s in range(n - 1):
        c_send, c_recv = (rank - s) % n, (rank - s - 1) % n
        tmp = torch.empty(bounds[c_recv + 1] - bounds[c_recv], dtype=buf.dtype)
        exchange(stats, send=buf[bounds[c_send]:bounds[c_send + 1]].contiguous(), dst=(rank + 1) % n,
                 recv=tmp, src=(rank - 1) % n)
        buf[bounds[c_recv]:bounds[c_recv + 1]] += tmp + 0.5   # wrong twice: adds, and adds 0.5
    return stats


def _reduce_scatter_from_chunk_i(buf, bounds):
    """A known-wrong reduce-scatter: step s sends chunk (r - s), so rank r completes chunk r + 1, not r."""
    from labkit.collectives import CommStats, exchange

    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    for s in range(n - 1):
        c_send, c_recv = (rank - s) % n, (rank - s - 1) % n
        tmp = torch.empty(bounds[c_recv + 1] - bounds[c_recv], dtype=buf.dtype)
        exchange(stats, send=buf[bounds[c_send]:bounds[c_send + 1]], dst=(rank + 1) % n, recv=tmp,
                 src=(rank - 1) % n)
        buf[bounds[c_recv]:bounds[c_recv + 1]] += tmp
    return stats


def _reduce_scatter_same_chunk(buf, bounds):
    """A known-wrong reduce-scatter: every step sends chunk r - 1, so rank r + 1 adds rank r's part twice."""
    from labkit.collectives import CommStats, exchange

    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    for _ in range(n - 1):
        c_send, c_recv = (rank - 1) % n, (rank - 2) % n
        tmp = torch.empty(bounds[c_recv + 1] - bounds[c_recv], dtype=buf.dtype)
        exchange(stats, send=buf[bounds[c_send]:bounds[c_send + 1]], dst=(rank + 1) % n, recv=tmp,
                 src=(rank - 1) % n)
        buf[bounds[c_recv]:bounds[c_recv + 1]] += tmp
    return stats


def test_known_wrong_answers_show_up_in_the_picture(capsys):
    run = lab.run_yours(_gather_that_adds, "ring_all_gather_chunks")
    assert not run.results_ok and run.trace is not None      # right sends, wrong arithmetic
    assert any(cell is None for row in run.buffers for cell in row)   # "+0.5": no clean sum of ranks
    html = V.result_frame(run)
    assert "want " in html and "3px solid #c00" in html
    run = lab.run_yours(_reduce_scatter_from_chunk_i, "ring_reduce_scatter_chunks")
    assert not run.results_ok and run.trace is not None
    assert all(run.buffers[r][(r + 1) % 4] == frozenset(range(4)) for r in range(4))
    run = lab.run_yours(_reduce_scatter_same_chunk, "ring_reduce_scatter_chunks")
    assert not run.results_ok and run.trace is None and "twice" in run.trace_error
    capsys.readouterr()
    lab.picture("ring_reduce_scatter_chunks")(_reduce_scatter_same_chunk)
    out = _printed(capsys.readouterr().out)
    assert "results as simulated False" in out and "your sends, replayed as a ring" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_picture_of_a_reference_answer_prints_short_lines(capsys):
    run = lab.picture("ring_all_reduce")(answers.ring_all_reduce)
    out = _printed(capsys.readouterr().out)
    assert run.results_ok and "results as simulated True, bytes as formulas True" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_trace_from_rounds_replays_the_simulator_and_refuses_double_counting():
    t = trace_collective("ring_all_reduce", 4, 10)
    rounds = [(s.phase, [(m.src, m.dst, m.chunk, m.op) for m in s.transfers]) for s in t.steps]
    again = trace_from_rounds("ring_all_reduce", 4, 10, rounds)
    assert again.final == t.final and again.bounds == t.bounds and again.n_steps == t.n_steps
    with pytest.raises(ValueError, match="twice"):
        trace_from_rounds("ring_all_reduce", 4, 10, rounds[:1] * 2)
    with pytest.raises(ValueError, match="bad move"):
        trace_from_rounds("ring_all_reduce", 4, 10, [("x", [(0, 9, 0, "add")])])


def test_a_failed_rank_stalls_every_later_all_reduce():
    """One rank hangs (or crashes) between two all-reduces on 4 gloo ranks: everyone finished the
    first, nobody the second; a hang ends at launch's timeout, a crash at once, naming the rank."""
    hang = lab.failure_run("hangs", "ring", n=3, dead=1, timeout=2.0)
    assert hang.done == ((0, 1, 2), ()) and hang.ended == "TimeoutError" and hang.seconds >= 2.0
    crash = lab.failure_run("crashes", "gloo", n=3, dead=1, timeout=30.0)
    assert crash.done == ((0, 1, 2), ()) and crash.ended == "RankError" and crash.message.startswith("rank 1 ")
    assert crash.seconds < 30.0
    table, runs = lab.failure_table(n=2, dead=0, timeout=2.0, runs=(("crashes", "ring"),))
    assert table.column("2nd done by") == ["none"] and runs[0].done[0] == (0, 1)
    with pytest.raises(ValueError, match="failure in"):
        lab.failure_run("explodes")
