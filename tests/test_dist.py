"""labkit.dist.launch: results, output, threads, errors, hangs, deaths, collisions, bad arguments."""
import concurrent.futures
import glob
import os
import sys
import time

import pytest
import torch
import torch.distributed as dist

from labkit import dist as ldist
from labkit.dist import RankError, launch


def _all_reduce_rank_ids(rank, world_size):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {
        "sum": t.item(),
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "backend": ldist.backend(),
        "device": str(ldist.device()),
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_results_by_rank_inside_a_process_group(world_size):
    out = launch(_all_reduce_rank_ids, world_size)
    assert [o["rank"] for o in out] == list(range(world_size))
    assert all(o["world"] == world_size and o["backend"] == "gloo" for o in out)
    assert all(o["sum"] == world_size * (world_size + 1) / 2 for o in out)
    assert len({o["pid"] for o in out} | {os.getpid()}) == world_size + 1  # separate processes


def test_forked_ranks_compute_with_one_thread():
    for ws in (1, 2, 3):
        assert {o["threads"] for o in launch(_all_reduce_rank_ids, ws)} == {1}


def _layer_norm_rank(rank, world_size):
    return torch.nn.functional.layer_norm(torch.randn(64, 64, dtype=torch.float64), (64,)).shape[0]


def test_a_forked_rank_does_not_hang_after_the_parent_used_threads():
    # GNU OpenMP hangs in a forked child whose parent already ran a thread team (layer_norm runs
    # in parallel even on small tensors); a notebook has always run torch ops before it launches.
    torch.set_num_threads(max(2, os.cpu_count() or 1))
    torch.nn.functional.layer_norm(torch.randn(64, 64, dtype=torch.float64), (64,))
    assert launch(_layer_norm_rank, 1, timeout=30) == [64]


def test_extra_args_and_notebook_style_functions():
    # A lambda cannot be pickled: it runs because CPU ranks are forked, as a notebook cell's function would.
    assert launch(lambda rank, ws, a, b: rank * a + b, 3, 10, 1) == [1, 11, 21]


def test_rank_output_is_reprinted_in_rank_order(capsys):
    def talk(rank, ws):
        time.sleep(0.05 * (ws - rank))  # later ranks print first
        print(f"hello from {rank}")

    launch(talk, 3)
    assert capsys.readouterr().out.splitlines() == [f"[rank {r}] hello from {r}" for r in range(3)]
    launch(talk, 2, quiet=True)
    assert capsys.readouterr().out == ""


def _pid_file(tmp, rank):
    with open(os.path.join(tmp, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))


def _my_children() -> list[int]:
    """PIDs of live processes whose parent is this process (Linux /proc)."""
    kids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            kids.append(int(stat.split("/")[2]))
    return kids


def _assert_all_gone(tmp, world_size):
    for r in range(world_size):
        path = os.path.join(tmp, f"pid{r}")
        if os.path.exists(path):  # a rank killed before its fn started never wrote one
            with pytest.raises(ProcessLookupError):
                os.kill(int(open(path).read()), 0)
    if sys.platform.startswith("linux"):
        assert _my_children() == []


def _raise_on_rank_two(rank, ws, tmp):
    _pid_file(tmp, rank)
    if rank == 2:
        raise ValueError("rank two is unhappy")
    t = torch.zeros(1)
    dist.recv(t, src=2)  # would wait forever: rank 2 never sends


def test_a_raising_rank_is_named_with_its_traceback_and_all_ranks_stop(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(_raise_on_rank_two, 4, str(tmp_path), timeout=30)
    assert time.monotonic() - t0 < 10  # not the 30 s timeout: the error ends the launch
    err = info.value
    assert err.rank == 2 and err.exc_type == "ValueError"
    assert "rank two is unhappy" in str(err) and "_raise_on_rank_two" in err.remote_traceback
    # the caller's own failing line first (file:line: source), then the shortest useful traceback
    assert err.where == 'test_dist.py:103: raise ValueError("rank two is unhappy")', err.where
    assert str(err).startswith(f"rank 2 failed at {err.where} with ValueError: rank two is unhappy\n")
    assert "labkit/dist.py" not in err.remote_traceback and "multiprocessing" not in err.remote_traceback
    _assert_all_gone(tmp_path, 4)


def _matmul_mismatch(rank, ws):
    return torch.ones(3) @ torch.ones(4 + rank)      # raises inside torch, called from this line


def test_a_rank_failing_inside_torch_names_the_callers_line_and_the_frame_that_raised():
    with pytest.raises(RankError) as info:
        launch(_matmul_mismatch, 2, timeout=30)
    err = info.value
    assert err.where.startswith("test_dist.py:") and "torch.ones(3) @ torch.ones(4 + rank)" in err.where
    assert err.remote_traceback.count('File "') >= 1 and err.remote_traceback.rstrip().splitlines()[-1].startswith(
        "RuntimeError")


def _hang_on_rank_one(rank, ws, tmp):
    _pid_file(tmp, rank)
    if rank == 1:
        time.sleep(3600)
    return rank


def test_a_hanging_rank_gives_timeout_naming_it_and_where(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        launch(_hang_on_rank_one, 3, str(tmp_path), timeout=3)
    elapsed = time.monotonic() - t0
    assert 3 <= elapsed < 3 + 5
    msg = str(info.value)
    assert "rank(s) 1 of 3" in msg and "_hang_on_rank_one" in msg
    _assert_all_gone(tmp_path, 3)


def _die_on_rank_zero(rank, ws, tmp):
    _pid_file(tmp, rank)
    if rank == 0:
        os._exit(7)
    time.sleep(3600)


def test_a_dying_rank_is_named(tmp_path):
    with pytest.raises(RankError) as info:
        launch(_die_on_rank_zero, 2, str(tmp_path), timeout=30)
    assert info.value.rank == 0 and "exit code 7" in str(info.value)
    _assert_all_gone(tmp_path, 2)


def _peer_dies_survivors_talk(rank, world):
    """Rank 0 dies by SIGKILL; rank 1 sees its recv fail, then talks to rank 2."""
    import signal

    if rank == 0:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.zeros(1)
    if rank == 1:
        try:
            dist.recv(t, src=0)
            return "received from a dead rank?"
        except RuntimeError:
            dist.send(torch.ones(1), dst=2)
            return "noticed"
    dist.recv(t, src=1)
    return float(t)


def test_a_rank_allowed_to_die_does_not_end_the_launch():
    t0 = time.perf_counter()
    assert launch(_peer_dies_survivors_talk, 3, may_die=(0,), timeout=30, quiet=True) == [None, "noticed", 1.0]
    assert time.perf_counter() - t0 < 20          # no waiting for the survivors' closing barrier
    with pytest.raises(RankError, match="rank 0 failed with RankDied"):
        launch(_peer_dies_survivors_talk, 3, timeout=30, quiet=True)
    with pytest.raises(ValueError, match="may_die must list ranks in 0..2"):
        launch(_peer_dies_survivors_talk, 3, may_die=(3,))


def test_unpicklable_return_value_is_reported():
    with pytest.raises(RankError, match="could not be pickled"):
        launch(lambda r, w: (lambda: None), 1)


def _listening_addresses() -> set[tuple[str, int]]:
    """(hex local address, port) of every listening TCP socket on this machine, from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in open(table).read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    addr, port = fields[1].split(":")
                    found.add((addr, int(port, 16)))
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc/net/tcp")
def test_ranks_listen_on_loopback_only():
    before = _listening_addresses()

    def snapshot(rank, ws):
        dist.barrier()  # every rank's gloo sockets are open now
        return _listening_addresses() if rank == 0 else None

    new = launch(snapshot, 3)[0] - before
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1 (IPv4, IPv4-mapped IPv6)
    assert new, "expected the ranks to be listening while the launch ran"
    assert {addr for addr, _ in new} <= loopback, new


def test_two_launches_at_once_do_not_collide():
    def one(_):
        return launch(_all_reduce_rank_ids, 2)[0]["sum"]

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        assert list(pool.map(one, range(6))) == [3.0] * 6


@pytest.mark.parametrize("bad, err, text", [
    (dict(world_size=0), ValueError, "world_size must be an integer >= 1"),
    (dict(world_size=2.0), ValueError, "world_size must be an integer >= 1"),
    (dict(world_size=2, timeout=0), ValueError, "timeout must be a finite positive"),
        (dict(world_size=2, timeout=float("inf")), ValueError, "timeout must be a finite positive"),
    (dict(world_size=2, backend="mpi"), ValueError, "backend must be"),
])
def test_bad_arguments_get_one_line_errors(bad, err, text):
    with pytest.raises(err, match=text):
        launch(_all_reduce_rank_ids, **bad)


def test_not_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        launch("not a function", 2)


@pytest.mark.skipif(torch.cuda.device_count() >= 64, reason="needs fewer GPUs than ranks asked for")
def test_more_nccl_ranks_than_gpus():
    with pytest.raises(ValueError, match="needs one GPU per rank"):
        launch(_all_reduce_rank_ids, 64, backend="nccl")


def test_spawn_needs_picklable_functions():
    # Under NCCL ranks are spawned; a notebook-cell function cannot be sent to them.
    with pytest.raises(TypeError, match="define it at the top level of a .py module"):
        ldist._check_picklable(lambda r, w: r, ())
    ldist._check_picklable(_all_reduce_rank_ids, (1, "x"))


def test_backend_choice_and_device_on_cpu():
    if not torch.cuda.is_available():
        assert ldist.default_backend(1) == "gloo"
    assert launch(lambda r, w: str(ldist.device()), 2, backend="gloo") == ["cpu", "cpu"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL test needs at least 2 GPUs (none or one here)")
def test_nccl_all_reduce_on_gpus():
    out = launch(_all_reduce_rank_ids, 2, backend="nccl")   # a CPU tensor: served by the group's gloo part
    assert [o["backend"] for o in out] == ["nccl", "nccl"] and out[0]["sum"] == 3.0
    assert [o["device"] for o in out] == ["cuda:0", "cuda:1"]


def test_spawned_ranks_work_too(monkeypatch):
    # NCCL launches spawn their ranks; exercise that path on CPU with gloo.
    monkeypatch.setattr(ldist, "_start_method", lambda backend, fn=None: "spawn")
    out = launch(_all_reduce_rank_ids, 2, timeout=60)
    assert [o["sum"] for o in out] == [3.0, 3.0]
    with pytest.raises(TypeError, match="cannot be sent to spawned ranks"):
        launch(lambda r, w: r, 2)


# ---- probes: each bad situation ends in one clear error, and nothing is left behind

def _nested(rank, ws):
    return launch(lambda r, w: r, 2)


def test_nesting_is_refused_in_one_line():
    with pytest.raises(RankError) as info:
        launch(_nested, 1, timeout=30)
    assert info.value.exc_type == "RuntimeError" and "nesting is not supported" in str(info.value)
    assert "daemonic" not in str(info.value)


def _size_mismatch(rank, ws):
    t = torch.zeros(3 if rank == 0 else 5)
    dist.all_reduce(t)   # gloo aborts the process on mismatched sizes


def test_a_rank_that_aborts_shows_its_stderr():
    with pytest.raises(RankError) as info:
        launch(_size_mismatch, 2, timeout=30, quiet=True)
    msg = str(info.value)
    assert info.value.exc_type in ("RankDied", "RuntimeError", "DistBackendError"), msg
    if info.value.exc_type == "RankDied":
        assert "stderr ended with" in msg, msg


def _ring_without_modulo(rank, ws):
    from labkit.collectives import CommStats, exchange

    t = torch.ones(4)
    exchange(CommStats(), send=t, dst=rank + 1, recv=torch.empty(4), src=rank - 1)


def test_exchange_with_out_of_range_peers_is_a_clear_error():
    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(_ring_without_modulo, 3, timeout=30)
    assert time.monotonic() - t0 < 15          # no hang, no segfault
    msg = str(info.value).splitlines()[0]
    assert "must be an int rank in [0, 3)" in msg and "% world_size" in msg, msg


def _to_myself(rank, ws):
    from labkit.collectives import CommStats, exchange

    exchange(CommStats(), send=torch.ones(2), dst=rank)


def test_exchange_with_yourself_is_a_clear_error():
    with pytest.raises(RankError, match="is this rank itself"):
        launch(_to_myself, 2, timeout=30)


def _hang_in_exchange(rank, ws):
    from labkit.collectives import CommStats, exchange

    if rank == 0:
        exchange(CommStats(), recv=torch.empty(2), src=1)   # rank 1 never sends: the learner's line


def test_a_hang_names_the_learners_line_not_labkit():
    with pytest.raises(TimeoutError) as info:
        launch(_hang_in_exchange, 2, timeout=3)
    msg = str(info.value)
    assert "test_dist.py" in msg and "p2p.py" not in msg, msg


def _spawn_sleeper(rank, ws, tmp):
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=(rank == 1))
    with open(os.path.join(tmp, f"child{rank}"), "w") as f:
        f.write(str(child.pid))
    time.sleep(600)


def test_a_ranks_own_subprocesses_do_not_outlive_a_timed_out_launch(tmp_path):
    with pytest.raises(TimeoutError):
        launch(_spawn_sleeper, 2, str(tmp_path), timeout=3)
    time.sleep(0.5)
    for r in range(2):
        pid = int((tmp_path / f"child{r}").read_text())
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        assert state == "Z", f"rank {r}'s child {pid} is still running"


CALLER = """
import sys, time
sys.path.insert(0, {root!r})
from labkit.dist import launch
def sleep(rank, ws):
    time.sleep(600)
print("started", flush=True)
launch(sleep, 2, timeout=300)
"""


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_killed_caller_leaves_no_ranks_or_folders(tmp_path, how):
    import signal
    import subprocess
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    caller = subprocess.Popen([sys.executable, "-c", CALLER.format(root=root)], stdout=subprocess.PIPE, text=True)
    assert caller.stdout.readline().strip() == "started"
    mine = f"labkit-launch-{caller.pid}-"
    deadline = time.monotonic() + 30
    while not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)                                        # ranks are up
    caller.send_signal(getattr(signal, how))
    caller.wait(timeout=30)
    if how == "SIGKILL":                                   # nothing could clean up: the next launch does
        launch(lambda r, w: r, 1)
    time.sleep(0.5)
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith(mine)]
    for pid in filter(str.isdigit, os.listdir("/proc")):   # forked ranks carry the caller's command line
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        assert not (b"time.sleep(600)" in cmd and state != "Z"), f"rank {pid} of the killed caller lives on"


# ---- backend="auto" on a GPU box, tested here by faking the GPU count

@pytest.fixture
def four_fake_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)


def test_auto_picks_nccl_only_for_importable_functions(four_fake_gpus):
    assert ldist.auto_backend(_all_reduce_rank_ids, 4) == ("nccl", "")      # a module-level function
    assert ldist.auto_backend(_all_reduce_rank_ids, 5)[0] == "gloo"         # more ranks than GPUs
    backend, note = ldist.auto_backend(lambda r, w: r, 2)                   # a notebook-style function
    assert backend == "gloo" and "notebook cell" in note and "\n" not in note and len(note) <= 100

    def nested(rank, ws):
        return rank

    assert ldist.auto_backend(nested, 2)[0] == "gloo"
    nested.__module__ = "__main__"
    assert not ldist.importable(nested)


def test_a_notebook_function_runs_on_gloo_with_a_note_when_gpus_are_present(four_fake_gpus, capsys):
    out = launch(lambda r, w: (dist.get_backend(), r), 2)
    assert out == [("gloo", 0), ("gloo", 1)]
    assert "launch: <lambda> runs on gloo (CPU)" in capsys.readouterr().out
    with pytest.raises(TypeError, match="cannot be sent to spawned ranks"):   # nccl asked for explicitly
        launch(lambda r, w: r, 2, backend="nccl")


def test_nccl_group_serves_cpu_tensors_and_binds_each_rank_to_its_gpu(four_fake_gpus):
    assert ldist.group_options("nccl", 3) == ("cpu:gloo,cuda:nccl", {"device_id": torch.device("cuda", 3)})
    assert ldist.group_options("gloo", 3) == ("gloo", {})


@pytest.mark.parametrize("local_rank", [None, "1"])
def test_device_is_the_ranks_own_gpu_under_nccl(four_fake_gpus, monkeypatch, local_rank):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:                                   # torchrun: rank 6 is the second process of its machine
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    devices = []
    for rank in range(4) if local_rank is None else (6,):
        monkeypatch.setattr(dist, "get_rank", lambda group=None, r=rank: r)
        devices.append(ldist.device())
    want = [torch.device("cuda", r) for r in range(4)] if local_rank is None else [torch.device("cuda", 1)]
    assert devices == want and ldist.backend() == "nccl"
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    assert ldist.device() == torch.device("cpu") and ldist.backend() == "gloo"


def _group_kind(rank, ws):
    t = torch.ones(2)
    dist.all_reduce(t)
    return dist.get_backend(), ldist.backend(), str(ldist.device()), t.tolist()


def test_a_device_map_backend_string_goes_through_launch(monkeypatch):
    # An NCCL launch passes "cpu:gloo,cuda:nccl"; its CPU half, "cpu:gloo", runs here the same way.
    monkeypatch.setattr(ldist, "group_options", lambda backend, rank: ("cpu:gloo", {}))
    assert launch(_group_kind, 2) == [("cpu:gloo", "gloo", "cpu", [2.0, 2.0])] * 2


class _OnGpu(torch.Tensor):
    """A stand-in for a CUDA tensor on this CPU-only machine: it says it is on cuda:0."""

    @property
    def device(self):
        return torch.device("cuda", 0)

    def cpu(self):
        return self.as_subclass(torch.Tensor).clone()


def _returns_gpu_tensors(rank, ws):
    gpu = torch.Tensor._make_subclass(_OnGpu, torch.arange(3.0) + rank)
    return {"t": gpu, "nested": [gpu * 1]}


def test_gpu_tensors_a_rank_returns_arrive_on_the_cpu():
    out = launch(_returns_gpu_tensors, 2)
    for rank, got in enumerate(out):
        for t in (got["t"], got["nested"][0]):
            assert type(t) is torch.Tensor and t.device.type == "cpu" and t.tolist() == [rank, rank + 1, rank + 2]


def test_ranks_are_spawned_once_the_caller_has_initialised_cuda(monkeypatch, capsys):
    assert ldist._start_method("gloo", _all_reduce_rank_ids) == "fork"
    monkeypatch.setattr(ldist, "_cuda_initialised", lambda: True)
    assert ldist._start_method("gloo", _all_reduce_rank_ids) == "spawn"
    assert ldist._start_method("gloo", lambda r, w: r) == "fork"       # a notebook cell's function
    note = capsys.readouterr().out.strip()
    assert "forked after CUDA was initialised" in note and "\n" not in note and len(note) <= 100
    assert launch(_all_reduce_rank_ids, 2)[1]["sum"] == 3.0           # spawned, still correct


def test_an_older_torch_gets_the_newer_collective_names(monkeypatch):
    """torch 2.11 (a GPU box's preinstalled stack) has no all_gather_single/reduce_scatter_single."""
    from labkit.compat import torch_fallbacks

    monkeypatch.delattr(dist, "all_gather_single")
    monkeypatch.delattr(dist, "reduce_scatter_single")
    assert torch_fallbacks() == ["all_gather_single", "reduce_scatter_single"]
    assert dist.all_gather_single is dist.all_gather_into_tensor
    assert dist.reduce_scatter_single is dist.reduce_scatter_tensor and torch_fallbacks() == []


def test_on_a_gpu_box_each_launch_says_where_its_ranks_compute(four_fake_gpus, capsys):
    assert ldist.device_note("nccl", 4) == "launch: 4 rank(s) on NCCL, rank r on cuda:r"
    assert launch(_all_reduce_rank_ids, 5)[0]["backend"] == "gloo"              # more ranks than GPUs
    assert capsys.readouterr().out.splitlines()[0] == \
        "launch: 5 rank(s) on gloo, CPU tensors (4 GPU(s) here, NCCL needs one per rank)"
    launch(_all_reduce_rank_ids, 2, backend="gloo")
    assert "launch: 2 rank(s) on gloo, CPU tensors (asked for gloo)" in capsys.readouterr().out
    launch(_all_reduce_rank_ids, 2, backend="gloo", quiet=True)
    assert capsys.readouterr().out == ""


def test_without_gpus_a_launch_prints_nothing_of_its_own(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ldist.device_note("gloo", 2) == ""
