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
        "backend": dist.get_backend(),
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


def test_threads_per_rank_do_not_oversubscribe():
    cores = os.cpu_count() or 1
    for ws in (1, 2, 3):
        assert {o["threads"] for o in launch(_all_reduce_rank_ids, ws)} == {max(1, cores // ws)}


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
    _assert_all_gone(tmp_path, 4)


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
    (dict(world_size=2, timeout=0), ValueError, "timeout must be a positive"),
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
    out = launch(_all_reduce_rank_ids, 2, backend="nccl")
    assert [o["backend"] for o in out] == ["nccl", "nccl"] and out[0]["sum"] == 3.0


def test_spawned_ranks_work_too(monkeypatch):
    # NCCL launches spawn their ranks; exercise that path on CPU with gloo.
    monkeypatch.setattr(ldist, "_start_method", lambda backend: "spawn")
    out = launch(_all_reduce_rank_ids, 2, timeout=60)
    assert [o["sum"] for o in out] == [3.0, 3.0]
    with pytest.raises(TypeError, match="cannot be sent to spawned ranks"):
        launch(lambda r, w: r, 2)
