"""Lab 12's notebook one-liners and pictures (the heavier ones — resume_table, failure_demo,
fewer_table, torchrun_demo — run in the notebook under nbval and in tests/test_checkpoint_resume.py's
equivalents), and the notebook's worked problems."""
import math
import os
import tempfile

import pytest

import solutions.lab12_fault_tolerance as S
from labkit.checkpoint import interval, lab, voting


def test_crash_table_tells_in_place_from_atomic_and_sees_the_fsyncs():
    t = lab.crash_table(size=4096)
    rows = {r[0]: r[1:] for r in t.rows}
    assert rows["in place"][:2] == ["torn", "torn"]
    # a kill is not a power loss: without fsync the kills look the same; the fsync columns differ
    assert rows["temp + rename, no fsync"] == ["old", "old", "old", "old", "new", "NO", "NO"]
    assert rows["temp + fsync + rename"] == ["old", "old", "old", "old", "new", "yes", "yes"]
    assert max(len(line) for line in str(t).splitlines()) <= 100


def _fsync_before_data_is_flushed(data, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())               # the bytes are still in the file object's buffer
    os.replace(tmp, path)
    dfd = os.open(folder, os.O_RDONLY)
    os.fsync(dfd)                          # the folder, but before ...
    os.close(dfd)


def _fsync_folder_before_rename(data, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    dfd = os.open(folder, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    os.replace(tmp, path)                  # ... the rename it should make durable


def test_crash_test_observes_which_file_and_folder_were_fsynced_and_when():
    from labkit.checkpoint.experiments import crash_test

    cases = [(b"old", b"x" * 100, "none")]
    assert [(r["fsync_file"], r["fsync_dir"]) for r in crash_test(S.atomic_save, cases)] == [(True, True)]
    assert [(r["fsync_file"], r["fsync_dir"]) for r in crash_test(_fsync_before_data_is_flushed, cases)] == \
        [(False, True)]
    assert [(r["fsync_file"], r["fsync_dir"]) for r in crash_test(_fsync_folder_before_rename, cases)] == \
        [(True, False)]


def test_overwriting_a_dcp_checkpoint_in_place_can_load_a_mix():
    torn = lab.overwrite_demo(size=10)
    assert torn["error"] is None and torn["a"] == [2.0] and torn["b"] == [1.0]
    assert torn["files"] == [".metadata", "__0_0.distcp", "__0_1.distcp"]


def test_pictures_with_the_reference_answers(capsys):
    assert lab.atomic_save_picture(S.atomic_save).rows[0][1:] == ["old", "old", "old", "old", "new", "yes", "yes"]
    assert lab.resume_picture(S.resume_state) == []
    y = lab.young_picture(S.young_interval)
    assert y.column("yours min") == y.column("√(2CM) min")
    sim = lab.simulate_picture(S.simulate_wall_time)
    (mean, se), (_, ref_se), (want, _) = [(r[1], r[2]) for r in sim.rows]
    assert abs(mean - want) < 5 * ref_se
    a = lab.abft_picture(S.abft_locate)
    assert a.column("your answer") == a.column("right answer")
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 100


def test_torchrun_command():
    cmd = lab.torchrun_command(2, 6, "ckpt", "final.pt", (1, 3))
    assert cmd[1:6] == ["--standalone", "--nproc-per-node", "2", "--max-restarts", "3"]
    assert cmd[-3:] == ["--fail", "1", "3"] and "labkit.checkpoint.elastic" in cmd


def test_the_notebooks_worked_problems():
    m = interval.system_mtbf(3 * 365 * 86400, 16384)
    tau = interval.young_interval(120, m)
    assert round(m) == 5774 and round(tau) == 1177
    assert interval.first_order_waste(tau, 120, m) == pytest.approx(math.sqrt(2 * 120 / m))
    assert round(interval.first_order_waste(tau, 120, m), 3) == 0.204
    assert voting.tmr_reliability(0.95) == pytest.approx(0.99275)
    assert interval.system_mtbf(5 * 365 * 86400, 10_000) == pytest.approx(15768)


def test_reshard_table():
    from labkit.checkpoint.dcp_measure import reshard_table

    t = reshard_table(saved_on=3, load_on=(2,))
    assert t.column("loaded = saved, bit for bit") == ["yes"]
    assert t.column("max |param - uninterrupted|, +2")[0] < 1e-12 and "__2_0.distcp" in t.title
