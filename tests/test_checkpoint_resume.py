"""labkit.checkpoint: atomic, checked checkpoint files; exact resume on 1, 2 and 4 ranks (and the
states whose loss breaks it); a killed rank survived by a supervisor, by torchrun, and on fewer
ranks. Equality is bitwise (torch.equal): the resumed run repeats the same operations on the same
numbers."""
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labkit.checkpoint import io
from labkit.checkpoint.failures import continue_on_fewer, smaller, supervise
from labkit.checkpoint.lab import compare_runs
from labkit.checkpoint.resume import FORGETTABLE, RunConfig, train
from labkit.checkpoint.state import ResumableSampler
from labkit.dist import launch

ROOT = Path(__file__).resolve().parents[1]
RUN = RunConfig()


def _same(full, resumed) -> bool:
    """Parameters, optimizer state and the losses the resumed processes computed, bit for bit."""
    cmp = compare_runs(full, resumed)
    return cmp["same"] and (cmp["recomputed"] > 0 or resumed["resumed_from"] == 0)


def _model():
    m = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    return m, opt


# ---------------------------------------------------------------------- files
@pytest.mark.parametrize("cut", [0.0, 0.5, 1.0])
def test_a_crash_during_save_leaves_the_previous_checkpoint(tmp_path, cut):
    m, opt = _model()
    path = io.save(tmp_path / "ckpt", model=m, optimizer=opt, step=1)
    before = path.read_bytes()
    code = ("import torch; from labkit.checkpoint import io; m = torch.nn.Linear(3, 2); "
            f"io.save({str(path)!r}, model=m, step=2)")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **{io.CRASH_ENV: str(cut)}),
                          cwd=ROOT, capture_output=True)
    assert done.returncode == 9                                  # the writer died mid-save
    assert path.read_bytes() == before                           # the old checkpoint is whole
    assert io.load(path, model=torch.nn.Linear(3, 2))[0] == 1
    assert len(list(tmp_path.glob(".ckpt.*.tmp"))) == 1          # only a temporary file is left


def test_damaged_files_are_refused_and_the_manager_falls_back(tmp_path):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=3)
    for step in (2, 4, 6, 8):
        mgr.save(step, model=m, optimizer=opt)
    assert [p.name for p in mgr.paths()] == ["step-00000008.ckpt", "step-00000006.ckpt", "step-00000004.ckpt"]
    newest, older = mgr.paths()[:2]
    data = bytearray(newest.read_bytes())
    data[-10] ^= 0xFF                                            # one flipped bit in the payload
    newest.write_bytes(bytes(data))
    with pytest.raises(io.CheckpointError, match="corrupted \\(checksum mismatch\\)"):
        io.load(newest, model=m)
    older.write_bytes(older.read_bytes()[:-100])
    with pytest.raises(io.CheckpointError, match="truncated"):
        io.load(older, model=m)
    with pytest.raises(io.CheckpointError, match="corrupted"):
        mgr.load_latest(fallback=False, model=m)
    step, _, path = mgr.load_latest(model=m, optimizer=opt)
    assert step == 4 and path.name == "step-00000004.ckpt" and len(mgr.skipped) == 2
    # the damaged ones are moved aside, whole as they were, and named in one line
    assert sorted(p.name for p in mgr.quarantine.iterdir()) == ["step-00000006.ckpt", "step-00000008.ckpt"]
    assert mgr.paths() == [path] and str(mgr.quarantine) in mgr.quarantined[0]
    (tmp_path / "x.ckpt").write_bytes(b"hello")
    with pytest.raises(io.CheckpointError, match="not a labkit checkpoint"):
        io.load(tmp_path / "x.ckpt", model=m)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = io._writer_tag().rsplit(".", 1)[0]
    (tmp_path / f".step-00000010.ckpt.{host}.{int(dead.stdout)}.abc.tmp").write_bytes(b"half")
    mgr.save(10, model=m)
    assert not list(tmp_path.glob("*.tmp"))                      # a crashed writer's leftovers go


def test_sampler_resumes_its_order_across_epochs():
    a, b = ResumableSampler(10, 3, seed=4), ResumableSampler(10, 3, seed=4)
    seen = [a.next_batch() for _ in range(5)]                    # 3 per epoch: crosses into epoch 1
    b.load_state_dict(ResumableSampler(10, 3, seed=4).state_dict())
    for _ in range(2):
        b.next_batch()
    state = b.state_dict()
    c = ResumableSampler(10, 3, seed=4)
    c.load_state_dict(state)
    assert all(torch.equal(x, c.next_batch()) for x in seen[2:])
    assert a.state_dict() == {"epoch": 1, "position": 6}


# ---------------------------------------------------------------------- exact resume
@pytest.mark.parametrize("world", [1, 2, 4])
def test_stop_and_resume_in_fresh_processes_is_bit_identical(tmp_path, world):
    full = launch(train, world, RUN, 9)
    launch(train, world, RUN, 9, tmp_path, False, 5)             # 5 steps, save, exit
    resumed = launch(train, world, RUN, 9, tmp_path, True)       # fresh processes: steps 6..9
    assert resumed[0]["resumed_from"] == 5
    assert all(_same(full[r], resumed[r]) for r in range(world))


def test_forgetting_any_state_breaks_the_resume(tmp_path):
    full = launch(train, 1, RUN, 8)[0]
    for forget in FORGETTABLE:
        folder = tmp_path / forget
        launch(train, 1, RUN, 8, folder, False, 4)
        wrong = launch(train, 1, RUN, 8, folder, True, None, None, (forget,))[0]
        assert not _same(full, wrong), forget
    with pytest.raises(Exception, match="forget takes"):
        launch(train, 1, RUN, 8, tmp_path / "rng", True, None, None, ("weights",))


# ---------------------------------------------------------------------- failures
def test_a_killed_rank_is_survived_by_the_supervisor(tmp_path):
    kill = (random.Random(12).randrange(4), random.Random(12).randrange(3, 9))   # a "random" rank and step
    full = launch(train, 4, RUN, 10)[0]
    run = supervise(4, RUN, 10, tmp_path, kill=kill)
    assert run.attempts == 2 and f"rank {kill[0]} died" in run.log[0]
    # the killed rank died before its checkpoint of step 6: every rank goes back to step 4, the
    # newest checkpoint they all have (a coordinated recovery line)
    assert run.result["resumed_from"] == (kill[1] - 1) // RUN.every * RUN.every == 4
    assert _same(full, run.result)
    assert all(len(line) <= 100 for line in run.log)


def test_torchrun_restarts_the_job_and_it_ends_like_the_uninterrupted_run(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    out = tmp_path / "final.pt"
    done = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "4", "--max-restarts", "3",
                           "-m", "labkit.checkpoint.elastic", "--folder", str(tmp_path / "ckpt"), "--steps", "10",
                           "--out", str(out), "--fail", "2", "7"], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"))
    assert done.returncode == 0, done.stderr[-3000:]
    final = torch.load(out)
    assert final["attempt"] == 1 and final["resumed_from"] == 6  # one restart, from the step-6 checkpoint
    full = launch(train, 4, RUN, 10)[0]
    assert _same(full, final)


def test_continuing_on_fewer_ranks(tmp_path):
    four = launch(train, 4, RUN, 10)[0]
    run = continue_on_fewer(4, RUN, 10, tmp_path, kill=(3, 5))
    less = smaller(RUN, 4, 3)
    assert (less.batch, less.lr) == (6, RUN.lr * 3 / 4)
    assert run.result["resumed_from"] == 4 and run.result["losses"][:4] == four["losses"][:4]
    assert len(run.result["losses"]) == 10 and run.result["losses"] != four["losses"]
    assert run.result["global_losses"][:4] == four["global_losses"][:4]          # the same run until then
    assert all(a != b for a, b in zip(run.result["global_losses"][4:], four["global_losses"][4:]))
    assert "batch 6" in run.log[1]


def test_the_global_loss_is_the_mean_of_the_ranks_losses():
    ranks = launch(train, 2, RUN, 3)
    for k in range(3):
        mean = (ranks[0]["losses"][k] + ranks[1]["losses"][k]) / 2
        assert ranks[0]["global_losses"][k] == ranks[1]["global_losses"][k] == pytest.approx(mean, rel=1e-6)
    assert launch(train, 1, RUN, 2)[0]["global_losses"] == launch(train, 1, RUN, 2)[0]["losses"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="keep must be an int >= 1"):
        io.CheckpointManager("/tmp", keep=0)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        io.save("/tmp/x", model="nope")
    with pytest.raises(ValueError, match="batch_size must be an int in 1..4"):
        ResumableSampler(4, 5)
