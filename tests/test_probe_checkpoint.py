"""Probe: `labkit.checkpoint.io` under bad input, damage, rollbacks and concurrent writers.

Every bad input gets a one-line error of the stated type that names the argument (or the file);
after each, every good checkpoint is still on disk byte for byte, and a failed load has left the
model (and optimizer) exactly as they were. The rotation, rollback, damage and concurrency
scenarios of issue 23 are tested one by one below the probes.
"""
import errno
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from labkit.checkpoint import io

ROOT = Path(__file__).resolve().parents[1]


def _model(out=4, seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Linear(8, out)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 8)).sum().backward()
    opt.step()
    return m, opt


def _state(m, opt=None):
    return ({k: v.clone() for k, v in m.state_dict().items()},
            None if opt is None else repr(opt.state_dict()))


def _same(a, b) -> bool:
    return a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and a[1] == b[1]


def _good_files(folder: Path) -> dict:
    """name -> bytes of every checkpoint in ``folder`` that reads back whole."""
    out = {}
    for p in folder.glob("step-*.ckpt"):
        try:
            io.read(p)
            out[p.name] = p.read_bytes()
        except io.CheckpointError:
            pass
    return out


def _still_there(folder: Path, good: dict) -> bool:
    """Each good file is still whole, in the folder or in its quarantine."""
    return all((folder / n).exists() and (folder / n).read_bytes() == b
               or any(q.read_bytes() == b for q in (folder / "quarantine").glob(n + "*"))
               for n, b in good.items())


def _damage(path: Path, at: int = -10) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


class Custom:
    pass


# ---------------------------------------------------------------------- probes: arguments
NAN = float("nan")
BAD_STEPS = [("5", TypeError), (3.7, TypeError), (1.5, TypeError), (NAN, TypeError), (True, TypeError),
             (None, TypeError), (-1, ValueError), (np.float64(2.0), TypeError)]


@pytest.mark.parametrize("step,exc", BAD_STEPS, ids=[repr(s) for s, _ in BAD_STEPS])
@pytest.mark.parametrize("where", ["save", "manager.save", "manager.path", "manager.rollback"])
def test_bad_steps_are_refused_naming_step(tmp_path, step, exc, where):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    mgr.save(1, model=m, optimizer=opt)
    good, before = _good_files(tmp_path), _state(m, opt)
    call = {"save": lambda: io.save(tmp_path / "x.ckpt", model=m, step=step),
            "manager.save": lambda: mgr.save(step, model=m),
            "manager.path": lambda: mgr.path(step),
            "manager.rollback": lambda: mgr.rollback(step, model=m)}[where]
    with pytest.raises(exc, match=r"step must be an int") as e:
        call()
    assert "\n" not in str(e.value)
    assert _still_there(tmp_path, good) and _same(before, _state(m, opt))
    assert not list(tmp_path.glob(".*.tmp")) and not (tmp_path / "x.ckpt").exists()


UNLOADABLE = [("lr", np.float64(0.1), "numpy.float64"), ("arr", np.zeros(3), "numpy.ndarray"),
              ("obj", Custom(), "Custom"), ("fn", lambda: 1, "function"), ("gen", (i for i in ()), "generator"),
              ("nested", {"a": [1, {"b": np.int64(3)}]}, "numpy.int64"), ("list_of_np", [np.float32(1)], "numpy.float32")]


@pytest.mark.parametrize("key,value,kind", UNLOADABLE, ids=[k for k, _, _ in UNLOADABLE])
def test_save_refuses_what_a_weights_only_load_cannot_read_back(tmp_path, key, value, kind):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    for step in (1, 2):
        mgr.save(step, model=m, optimizer=opt, extra={"ok": 1})
    good = _good_files(tmp_path)
    with pytest.raises(io.CheckpointError, match=rf"save: extra\[{key!r}\].* is a (\w+\.)?{kind}, which a weights_only") as e:
        mgr.save(3, model=m, optimizer=opt, extra={"ok": 1, key: value})
    assert "\n" not in str(e.value)
    assert _still_there(tmp_path, good) and mgr.good_steps() == [2, 1]          # rotation never ran
    assert not list(tmp_path.glob(".*.tmp")) and mgr.load_latest(model=m)[0] == 2


def _other_model():
    return torch.nn.Linear(8, 3)


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 4), torch.nn.Linear(4, 4)


MISMATCHES = {
    "shape": (lambda: (_model(out=3)[0], None, None), r"model\['weight'\] of shape \(4, 8\), the model \(3, 8\)"),
    "keys": (lambda: (TwoLayer(), None, None), r"lacks model key\(s\) \['a.weight'"),
    "no optimizer state": (lambda: (lambda m: (m, torch.optim.SGD(m.parameters(), lr=0.1), None))(
        _model()[0]), r"no optimizer state"),
    "optimizer groups": (lambda: (lambda m: (m, torch.optim.Adam([{"params": [m.weight]}, {"params": [m.bias]}]),
                                             None))(_model()[0]), r"optimizer groups"),
    "no scheduler state": (lambda: (lambda m, o: (m, o, torch.optim.lr_scheduler.StepLR(o, 2)))(
        *_model()), r"no scheduler state"),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_load_that_does_not_fit_changes_nothing(tmp_path, case):
    saved, opt = _model(seed=1)
    path = io.save(tmp_path / "a.ckpt", model=saved, optimizer=None if case == "no optimizer state" else opt, step=3)
    make, pattern = MISMATCHES[case]
    m, o, s = make()
    if o is not None and not o.state:
        m(torch.randn(2, 8)).sum().backward()
        o.step()                                   # optimizer state worth protecting
    before, rng = _state(m, o), torch.get_rng_state()
    with pytest.raises(io.CheckpointMismatch, match=pattern) as e:
        io.load(path, model=m, optimizer=o, scheduler=s)
    assert str(path) in str(e.value) and "\n" not in str(e.value) and "nothing was changed" in str(e.value)
    assert _same(before, _state(m, o)) and torch.equal(rng, torch.get_rng_state())


def test_optimizer_state_of_other_shapes_is_refused_before_anything_changes(tmp_path):
    a, opt_a = _model(out=4)
    path = io.save(tmp_path / "a.ckpt", model=a, optimizer=opt_a)
    b, opt_b = _model(out=4, seed=5)
    state = io.read(path)
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3, 8)         # a tampered but whole file
    bad = tmp_path / "b.ckpt"
    io.save(bad, model=a)
    import hashlib, io as _io, json
    buf = _io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    bad.write_bytes(io.MAGIC + json.dumps({"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()})
                    .encode() + b"\n" + payload)
    before = _state(b, opt_b)
    with pytest.raises(io.CheckpointMismatch, match=r"optimizer state 'exp_avg' of parameter 0 of shape \(3, 8\)"):
        io.load(bad, model=b, optimizer=opt_b)
    assert _same(before, _state(b, opt_b))


def _header(path: Path, new: bytes) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n", 2)
    path.write_bytes(lines[0] + b"\n" + new + b"\n" + lines[2])


DAMAGE = {
    "bit flip in payload": (lambda p: _damage(p), "is corrupted (checksum mismatch)"),
    "bit flip in header key": (lambda p: p.write_bytes(p.read_bytes().replace(b'"bytes"', b'"bytez"', 1)),
                               "damaged header"),
    "null header": (lambda p: _header(p, b"null"), "damaged header"),
    "list header": (lambda p: _header(p, b"[1, 2]"), "damaged header"),
    "non-numeric length": (lambda p: p.write_bytes(p.read_bytes().replace(b'"bytes": ', b'"bytes": "1', 1)
                                                   .replace(b', "sha', b'", "sha', 1)), "damaged header"),
    "negative length": (lambda p: p.write_bytes(p.read_bytes().replace(b'"bytes": ', b'"bytes": -', 1)),
                        "damaged header"),
    "float length": (lambda p: p.write_bytes(p.read_bytes().replace(b', "sha', b'.5, "sha', 1)), "damaged header"),
    "bad sha": (lambda p: p.write_bytes(p.read_bytes().replace(b'"sha256": "', b'"sha256": "zz', 1)),
                "damaged header"),
    "header not JSON": (lambda p: _header(p, b"{bytes"), "damaged header (not JSON)"),
    "header without end": (lambda p: p.write_bytes(io.MAGIC + b"{" + b" " * 9000), "no end of line"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-100]), "is truncated"),
    "extra bytes": (lambda p: p.write_bytes(p.read_bytes() + b"xx"), "2 bytes more"),
    "empty": (lambda p: p.write_bytes(b""), "not a labkit checkpoint"),
    "not a checkpoint": (lambda p: p.write_bytes(b"hello"), "not a labkit checkpoint"),
    "a folder": (lambda p: (p.unlink(), p.mkdir()), "not a regular file"),
    "a fifo": (lambda p: (p.unlink(), os.mkfifo(p)), "not a regular file"),
    "missing": (lambda p: p.unlink(), "cannot be read (No such file"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_files_give_one_line_naming_the_file(tmp_path, case):
    m, opt = _model()
    path = io.save(tmp_path / "step-00000001.ckpt", model=m, optimizer=opt, step=1)
    damage, problem = DAMAGE[case]
    damage(path)
    target, _ = _model(seed=3)
    before = _state(target)
    with pytest.raises(io.CheckpointError) as e:
        io.load(path, model=target)
    assert problem in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
    assert _same(before, _state(target))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_devices_are_refused_without_reading_them(device):
    with pytest.raises(io.CheckpointError, match=f"{device} is not a regular file"):
        io.read(device)


def test_an_unpicklable_payload_with_a_good_checksum_is_refused(tmp_path):
    import hashlib, io as _io, json
    buf = _io.BytesIO()
    torch.save({"step": 1, "model": {}, "x": np.float64(1)}, buf)
    payload = buf.getvalue()
    path = tmp_path / "old.ckpt"
    path.write_bytes(io.MAGIC + json.dumps({"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()})
                     .encode() + b"\n" + payload)
    with pytest.raises(io.CheckpointError, match=r"cannot be unpickled with weights_only \(holds a numpy"):
        io.read(path)


# ---------------------------------------------------------------------- probes: OS errors
def _raise(err, *_a, **_k):
    raise OSError(err, os.strerror(err))


OS_ERRORS = {
    "read-only folder": ("tempfile.mkstemp", errno.EACCES, "Permission denied"),
    "full disk at fsync": ("os.fsync", errno.ENOSPC, "No space left on device"),
    "read-only file system at rename": ("os.replace", errno.EROFS, "Read-only file system"),
    "read-only file at rename": ("os.replace", errno.EPERM, "Operation not permitted"),
}


@pytest.mark.parametrize("case", list(OS_ERRORS))
def test_os_errors_become_checkpoint_errors_and_the_old_file_survives(tmp_path, monkeypatch, case):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    mgr.save(1, model=m, optimizer=opt)
    mgr.save(2, model=m, optimizer=opt)
    good = _good_files(tmp_path)
    target, err, words = OS_ERRORS[case]
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(sys.modules[module], name, lambda *a, **k: _raise(err))
    with pytest.raises(io.CheckpointError, match=words) as e:
        mgr.save(2, model=m, optimizer=opt)                     # over the existing step 2
    monkeypatch.undo()
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)
    assert _still_there(tmp_path, good) and not list(tmp_path.glob(".*.tmp"))
    assert mgr.load_latest(model=m)[0] == 2


def test_saving_onto_a_folder_or_into_a_missing_folder_is_refused(tmp_path):
    m, _ = _model()
    (tmp_path / "d").mkdir()
    with pytest.raises(io.CheckpointError, match="is a folder, not a file name"):
        io.save(tmp_path / "d", model=m)
    with pytest.raises(io.CheckpointError, match="does not exist"):
        io.save(tmp_path / "no" / "x.ckpt", model=m)
    (tmp_path / "f").write_text("x")
    with pytest.raises(io.CheckpointError, match=r"cannot use folder .*/f"):
        io.CheckpointManager(tmp_path / "f")


BAD_MANAGER = [({"keep": 0}, ValueError, "keep"), ({"keep": "2"}, TypeError, "keep"),
               ({"keep": 2.0}, TypeError, "keep"), ({"folder": None}, TypeError, "folder"),
               ({"folder": 3}, TypeError, "folder")]


@pytest.mark.parametrize("kwargs,exc,name", BAD_MANAGER, ids=[str(k) for k, _, _ in BAD_MANAGER])
def test_bad_manager_arguments(tmp_path, kwargs, exc, name):
    with pytest.raises(exc, match=f"CheckpointManager: {name}"):
        io.CheckpointManager(**{"folder": tmp_path, **kwargs})


BAD_LOAD = [({"model": "nope"}, TypeError, "model"), ({"optimizer": 3}, TypeError, "optimizer"),
            ({"scheduler": "x"}, TypeError, "scheduler")]


@pytest.mark.parametrize("kwargs,exc,name", BAD_LOAD, ids=[str(k) for k, _, _ in BAD_LOAD])
def test_bad_load_arguments(tmp_path, kwargs, exc, name):
    m, _ = _model()
    path = io.save(tmp_path / "a.ckpt", model=m)
    with pytest.raises(exc, match=f"load: {name} must"):
        io.load(path, **{"model": m, **kwargs})
    with pytest.raises(TypeError, match="save: model must"):
        io.save(tmp_path / "b.ckpt", model="nope")


# ---------------------------------------------------------------------- scenarios: rotation, rollback
@pytest.mark.parametrize("keep", [2, 3])
def test_rotation_after_a_fallback_keeps_the_good_and_quarantines_the_damaged(tmp_path, keep, caplog):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=keep)
    for step in (10, 20, 30):
        mgr.save(step, model=m, optimizer=opt)
    _damage(mgr.path(30))
    damaged = mgr.path(30).read_bytes()
    assert mgr.load_latest(model=m, optimizer=opt)[0] == 20
    line = caplog.records[-1].getMessage()
    assert f"to {mgr.quarantine} " in line and "step-00000030.ckpt: is corrupted" in line and "\n" not in line
    mgr.save(21, model=m, optimizer=opt)
    assert mgr.good_steps() == [21, 20, 10][:keep] and [p.name for p in mgr.paths()] == \
        ["step-00000021.ckpt", "step-00000020.ckpt", "step-00000010.ckpt"][:keep]
    assert (mgr.quarantine / "step-00000030.ckpt").read_bytes() == damaged      # moved, never deleted
    assert io.CheckpointManager(tmp_path, keep=keep).load_latest(model=m)[0] == 21   # a restart


def test_a_damaged_file_is_never_counted_by_rotation_nor_deleted(tmp_path):
    m, _ = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3):
        mgr.save(step, model=m)
    _damage(mgr.path(3))                         # damaged later, behind the manager's back
    mgr.save(4, model=m)
    assert mgr.good_steps() == [4, 2] and [p.name for p in mgr.quarantine.iterdir()] == ["step-00000003.ckpt"]


@pytest.mark.parametrize("how", ["rollback", "load by hand"])
def test_an_abandoned_run_is_never_resumed(tmp_path, how):
    m, opt = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    for step in (10, 20, 30):
        mgr.save(step, model=m, optimizer=opt)
    if how == "rollback":
        assert mgr.rollback(20, model=m, optimizer=opt)[0] == 20
        assert [p.name for p in mgr.paths()] == ["step-00000020.ckpt"]         # 30 is aside already
    else:
        io.load(mgr.path(20), model=m, optimizer=opt)
    mgr.save(21, model=m, optimizer=opt)
    mgr.save(22, model=m, optimizer=opt)
    assert io.CheckpointManager(tmp_path, keep=2).load_latest(model=m)[0] == 22
    assert (mgr.quarantine / "step-00000030.ckpt").exists()
    # the same name quarantined twice keeps both
    mgr.save(30, model=m)
    mgr.rollback(22, model=m)
    assert sorted(p.name for p in mgr.quarantine.iterdir()) == ["step-00000030.ckpt", "step-00000030.ckpt.1"]


def test_a_rollback_to_a_damaged_or_missing_step_moves_nothing(tmp_path):
    m, _ = _model()
    mgr = io.CheckpointManager(tmp_path, keep=3)
    for step in (1, 2, 3):
        mgr.save(step, model=m)
    _damage(mgr.path(2))
    with pytest.raises(io.CheckpointError, match="corrupted"):
        mgr.rollback(2, model=m)
    with pytest.raises(io.CheckpointError, match="No such file"):
        mgr.rollback(7, model=m)
    assert [p.name for p in mgr.paths()] == ["step-00000003.ckpt", "step-00000002.ckpt", "step-00000001.ckpt"]


def test_a_mismatch_is_not_damage_nothing_is_moved(tmp_path):
    m, _ = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    mgr.save(1, model=m)
    mgr.save(2, model=m)
    with pytest.raises(io.CheckpointMismatch):
        mgr.load_latest(model=_other_model())
    assert mgr.good_steps() == [2, 1] and not mgr.quarantine.exists()


def test_nothing_loads_returns_none_and_moves_nothing(tmp_path):
    m, _ = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    mgr.save(1, model=m)
    _damage(mgr.path(1))
    assert mgr.load_latest(model=m) is None and len(mgr.skipped) == 1 and mgr.path(1).exists()


# ---------------------------------------------------------------------- scenarios: concurrent writers
def _sleeper(tmp_path: Path) -> subprocess.Popen:
    """A live process that has a temporary checkpoint in flight in ``tmp_path`` (named as save names it)."""
    host = io._writer_tag().rsplit(".", 1)[0]                 # the child's tag: this host, its own pid
    code = textwrap.dedent(f"""
        import os, tempfile, time
        fd, name = tempfile.mkstemp(dir={str(tmp_path)!r}, prefix=f".step-00000009.ckpt.{host}.{{os.getpid()}}.",
                                    suffix=".tmp")
        print(name, flush=True)
        time.sleep(60)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)


def test_the_sweep_spares_a_live_writers_temp_and_removes_a_dead_ones(tmp_path):
    m, _ = _model()
    mgr = io.CheckpointManager(tmp_path, keep=2)
    writer = _sleeper(tmp_path)
    try:
        in_flight = Path(writer.stdout.readline().strip())
        host = io._writer_tag().rsplit(".", 1)[0]
        reused = tmp_path / f".step-00000008.ckpt.{host}.{os.getpid()}.zz.tmp"   # our pid, but older than us
        reused.write_bytes(b"half")
        past = time.time() - 10 * 24 * 3600
        os.utime(reused, (past, past))
        other_host = tmp_path / f".step-00000008.ckpt.elsewhere.1.ab.tmp"
        other_host.write_bytes(b"half")
        legacy = tmp_path / ".step-00000008.ckpt.abc.tmp"                      # no writer in its name
        legacy.write_bytes(b"half")
        mgr.save(1, model=m)
        assert in_flight.exists() and other_host.exists() and legacy.exists() and not reused.exists()
    finally:
        writer.kill()
        writer.wait()
    mgr.save(2, model=m)
    assert not in_flight.exists()                # its writer is dead now


WRITER = """
import sys, torch
from labkit.checkpoint import io
m = torch.nn.Linear(16, 16)
mgr = io.CheckpointManager(sys.argv[1], keep=2)
for step in range(1, 11):
    with torch.no_grad():
        m.weight.fill_(step)
    mgr.save(step, model=m, extra={"writer": sys.argv[2]})
"""


def test_two_writers_sharing_a_folder_never_tear_or_lose_a_file(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), w], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for w in "ab"]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    assert not list(tmp_path.glob(".*.tmp"))
    every = list(tmp_path.glob("step-*.ckpt")) + list(tmp_path.glob("quarantine/step-*"))
    m = torch.nn.Linear(16, 16)
    for p in every:                              # whole, and holding the step its name says
        step, extra = io.load(p, model=m, restore_rng=False)
        assert torch.all(m.weight == step) and extra["writer"] in "ab"
    assert io.CheckpointManager(tmp_path).load_latest(model=m)[0] == 10
