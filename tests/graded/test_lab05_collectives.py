"""Graded tests for Lab 05 (exercises/lab05_collectives.py).

Each exercise runs once per world size (1-4 real gloo ranks) in the
submission's sandboxed worker (labkit.grading.harness.lab05_collective), on
inputs drawn here from the grading seed. torch.distributed's own collectives
are disabled on the ranks (and refused statically), and every point-to-point
byte is counted at torch.distributed ("wire"), independently of the CommStats
the submission returns. Inputs are small integers, so any summation order
gives exactly the same sums: results are compared exactly.
"""
import pytest
import torch

from labkit.collectives import chunk_bounds
from labkit.grading.generate import references
from labkit.grading.static import Policy

WORLD_SIZES = (1, 2, 3, 4)
POLICY = Policy(
    labkit_allowed=frozenset({f"labkit.collectives.{n}" for n in ("CommStats", "chunk_bounds", "chunk_sizes",
                                                                  "exchange")} |
                             {"labkit.collectives.stats.CommStats", "labkit.collectives.chunking.chunk_bounds",
                              "labkit.collectives.chunking.chunk_sizes", "labkit.collectives.p2p.exchange"}),
    references=references("lab05_collectives"),
    forbid_collectives=True)


def _data(seed, rank, length, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    return torch.randint(-9, 10, (length,), generator=g).to(dtype)


def _total(seed, n, length, dtype=torch.float64):
    return sum(_data(seed, r, length) for r in range(n)).to(dtype)


def _bounds_cases(n, seed):
    """Uneven cuts of a buffer: the course rule, plus random ones with empty and odd-sized chunks."""
    g = torch.Generator().manual_seed(seed)
    cases = [chunk_bounds(length, n) for length in (1, 7, 10, 4 * n + 3)]
    for _ in range(2):
        sizes = torch.randint(0, 5, (n,), generator=g).tolist()
        cases.append([0] + torch.tensor(sizes).cumsum(0).tolist())
    return [b for b in cases if b[-1] > 0]


_CACHE = {}


def _run(impl, fn_name, seed, build):
    """Run ``fn_name`` on each world size with the cases ``build(n, seed)`` gives ({per case: [args per rank]}).

    Returns {n: (cases, per-rank results)}. The tests of an exercise share one set of runs
    (cached by exercise name), so a hanging or failing exercise is launched only once.
    """
    if fn_name not in _CACHE:
        try:
            runs = {}
            for n in WORLD_SIZES:
                cases = build(n, seed)
                runs[n] = (cases, impl.harness("lab05_collective", fn_name, n, [c["args"] for c in cases]))
            _CACHE[fn_name] = runs
        except Exception as e:  # remembered: the sibling test fails the same way without relaunching
            _CACHE[fn_name] = e
    if isinstance(_CACHE[fn_name], Exception):
        raise _CACHE[fn_name]
    return _CACHE[fn_name]


def _each(runs):
    """(n, rank, case, result) for every rank's result of every case."""
    for n, (cases, per_rank) in runs.items():
        for rank, results in enumerate(per_rank):
            assert len(results) == len(cases), f"N={n} rank {rank}: {len(results)} results for {len(cases)} cases"
            for case, res in zip(cases, results):
                yield n, rank, case, res


def _stats(res, n, rank):
    stats = res["stats"]
    assert isinstance(stats, dict), f"N={n} rank {rank}: return a CommStats ({stats})"
    return stats


def _moved(n, rank, res):
    assert n == 1 or res["wire"]["bytes_sent"] + res["wire"]["bytes_received"] > 0, \
        f"N={n} rank {rank}: no data went over the wire; each rank only has its own input"


# ---- ring reduce-scatter ---------------------------------------------------------------------

def _rs_cases(n, seed):
    cases = []
    for bounds in _bounds_cases(n, seed):
        for dtype in (torch.float64, torch.bfloat16):
            cases.append({"bounds": bounds, "dtype": dtype,
                          "args": [(_data(seed, r, bounds[-1], dtype), bounds) for r in range(n)]})
    return cases


@pytest.mark.graded(points=3, exercise="ring_reduce_scatter_chunks")
def test_ring_reduce_scatter_sums_own_chunk(impl, seed):
    for n, rank, case, res in _each(_run(impl, "ring_reduce_scatter_chunks", seed, _rs_cases)):
        bounds, dtype = case["bounds"], case["dtype"]
        mine = slice(bounds[rank], bounds[rank + 1])
        want = _total(seed, n, bounds[-1], dtype)[mine]
        assert torch.equal(res["result"][mine], want), f"N={n} rank {rank} bounds={bounds} {dtype}: chunk {rank} is not the sum"
        _moved(n, rank, res)


@pytest.mark.graded(points=1, exercise="ring_reduce_scatter_chunks")
def test_ring_reduce_scatter_bytes(impl, seed):
    for n, rank, case, res in _each(_run(impl, "ring_reduce_scatter_chunks", seed, _rs_cases)):
        bounds = case["bounds"]
        item = torch.empty((), dtype=case["dtype"]).element_size()
        own = (bounds[rank + 1] - bounds[rank]) * item
        want = 0 if n == 1 else bounds[-1] * item - own
        stats = _stats(res, n, rank)
        assert stats["bytes_sent"] == want, (f"N={n} rank {rank} bounds={bounds}: CommStats says {stats['bytes_sent']} "
                                             f"bytes sent, a ring reduce-scatter sends every chunk but its own once = {want}")
        assert res["wire"]["bytes_sent"] == want, f"N={n} rank {rank}: {res['wire']['bytes_sent']} bytes went on the wire, want {want}"
        assert stats["steps"] == n - 1, f"N={n}: expected {n - 1} steps, got {stats['steps']}"


# ---- ring all-gather -------------------------------------------------------------------------

def _ag_cases(n, seed):
    cases = []
    for bounds in _bounds_cases(n, seed):
        args = []
        for r in range(n):
            buf = torch.full((bounds[-1],), float("nan"), dtype=torch.float64)
            buf[bounds[r]:bounds[r + 1]] = _data(seed, r, bounds[-1])[bounds[r]:bounds[r + 1]]
            args.append((buf, bounds))
        cases.append({"bounds": bounds, "args": args})
    return cases


@pytest.mark.graded(points=3, exercise="ring_all_gather_chunks")
def test_ring_all_gather_collects_every_chunk(impl, seed):
    for n, rank, case, res in _each(_run(impl, "ring_all_gather_chunks", seed, _ag_cases)):
        bounds = case["bounds"]
        want = torch.cat([_data(seed, r, bounds[-1])[bounds[r]:bounds[r + 1]] for r in range(n)])
        got = res["result"]
        assert torch.equal(got, want), f"N={n} rank {rank} bounds={bounds}: got {got.tolist()}, want {want.tolist()}"
        _moved(n, rank, res)


@pytest.mark.graded(points=1, exercise="ring_all_gather_chunks")
def test_ring_all_gather_bytes(impl, seed):
    for n, rank, case, res in _each(_run(impl, "ring_all_gather_chunks", seed, _ag_cases)):
        bounds = case["bounds"]
        nxt = (rank + 1) % n
        want = 0 if n == 1 else (bounds[-1] - (bounds[nxt + 1] - bounds[nxt])) * 8
        stats = _stats(res, n, rank)
        assert stats["bytes_sent"] == want, f"N={n} rank {rank} bounds={bounds}: CommStats says {stats['bytes_sent']}, want {want}"
        assert res["wire"]["bytes_sent"] == want, f"N={n} rank {rank}: {res['wire']['bytes_sent']} bytes on the wire, want {want}"


# ---- ring all-reduce -------------------------------------------------------------------------

SHAPES = ((1,), (7,), (3, 5), (2, 1, 3), (13,))


def _ar_cases(n, seed):
    cases = []
    for shape in SHAPES:
        length = int(torch.tensor(shape).prod())
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            cases.append({"shape": shape, "dtype": dtype,
                          "args": [(_data(seed, r, length, dtype).reshape(shape),) for r in range(n)]})
    return cases


@pytest.mark.graded(points=2, exercise="ring_all_reduce")
def test_ring_all_reduce_matches_sum(impl, seed):
    for n, rank, case, res in _each(_run(impl, "ring_all_reduce", seed, _ar_cases)):
        shape, dtype = case["shape"], case["dtype"]
        want = _total(seed, n, int(torch.tensor(shape).prod()), dtype).reshape(shape)
        got = res["result"]
        assert got.shape == want.shape and torch.equal(got, want), f"N={n} rank {rank} shape={shape} {dtype}"
        _moved(n, rank, res)


@pytest.mark.graded(points=2, exercise="ring_all_reduce")
def test_ring_all_reduce_bytes_and_steps(impl, seed):
    total_sent = {}
    for n, rank, case, res in _each(_run(impl, "ring_all_reduce", seed, _ar_cases)):
        shape, dtype = case["shape"], case["dtype"]
        item = torch.empty((), dtype=dtype).element_size()
        length = int(torch.tensor(shape).prod())
        b = chunk_bounds(length, n)
        c = [(b1 - b0) * item for b0, b1 in zip(b, b[1:])]
        s = length * item
        want = 0 if n == 1 else 2 * s - c[rank] - c[(rank + 1) % n]
        stats = _stats(res, n, rank)
        assert stats["bytes_sent"] == want, f"N={n} rank {rank} shape={shape}: CommStats says {stats['bytes_sent']}, want {want}"
        assert res["wire"]["bytes_sent"] == want, f"N={n} rank {rank}: {res['wire']['bytes_sent']} bytes on the wire, want {want}"
        assert stats["steps"] == 2 * (n - 1), f"N={n}: expected 2(N-1) = {2 * (n - 1)} steps, got {stats['steps']}"
        key = (n, shape, dtype)
        total_sent[key] = total_sent.get(key, 0) + res["wire"]["bytes_sent"]
    for (n, shape, dtype), sent in total_sent.items():
        s = int(torch.tensor(shape).prod()) * torch.empty((), dtype=dtype).element_size()
        assert sent == 2 * (n - 1) * s, f"N={n} shape={shape}: total sent {sent} != 2(N-1)·S = {2 * (n - 1) * s}"


# ---- tree broadcast --------------------------------------------------------------------------

def _bc_cases(n, seed):
    cases = []
    for src in range(n):
        for shape in ((5,), (2, 3)):
            numel = int(torch.tensor(shape).prod())
            cases.append({"src": src, "shape": shape,
                          "args": [(_data(seed, r, 6)[:numel].reshape(shape).clone(), src) for r in range(n)]})
    return cases


@pytest.mark.graded(points=2, exercise="tree_broadcast")
def test_tree_broadcast_copies_root(impl, seed):
    for n, rank, case, res in _each(_run(impl, "tree_broadcast", seed, _bc_cases)):
        src, shape = case["src"], case["shape"]
        want = _data(seed, src, 6)[: int(torch.tensor(shape).prod())].reshape(shape)
        assert torch.equal(res["result"], want), f"N={n} rank {rank} src={src} shape={shape}"
        if rank != src:
            _moved(n, rank, res)


@pytest.mark.graded(points=1, exercise="tree_broadcast")
def test_tree_broadcast_is_a_binomial_tree(impl, seed):
    for n, rank, case, res in _each(_run(impl, "tree_broadcast", seed, _bc_cases)):
        src = case["src"]
        v, s = (rank - src) % n, res["result"].numel() * 8
        children = sum(1 for k in range(n.bit_length()) if v < 2 ** k and v + 2 ** k < n)
        stats = _stats(res, n, rank)
        for who, counted in (("CommStats", stats), ("the wire", res["wire"])):
            assert counted["bytes_sent"] == children * s, \
                f"N={n} rank {rank} src={src}: {who} says {counted['bytes_sent']} bytes sent, a binomial tree sends {children * s}"
            assert counted["bytes_received"] == (0 if v == 0 else s), f"N={n} rank {rank} src={src}: {who}, bytes received"


# ---- recursive doubling ----------------------------------------------------------------------

def _rd_cases(n, seed):
    cases = []
    for shape in ((1,), (5,), (3, 4)):
        for dtype in (torch.float64, torch.bfloat16):
            length = int(torch.tensor(shape).prod())
            cases.append({"shape": shape, "dtype": dtype,
                          "args": [(_data(seed, r, length, dtype).reshape(shape),) for r in range(n)]})
    return cases


@pytest.mark.graded(points=2, exercise="recursive_doubling_all_reduce")
def test_recursive_doubling_matches_sum(impl, seed):
    for n, rank, case, res in _each(_run(impl, "recursive_doubling_all_reduce", seed, _rd_cases)):
        shape, dtype = case["shape"], case["dtype"]
        want = _total(seed, n, int(torch.tensor(shape).prod()), dtype).reshape(shape)
        assert torch.equal(res["result"], want), f"N={n} rank {rank} shape={shape} {dtype}"
        _moved(n, rank, res)


@pytest.mark.graded(points=1, exercise="recursive_doubling_all_reduce")
def test_recursive_doubling_bytes(impl, seed):
    for n, rank, case, res in _each(_run(impl, "recursive_doubling_all_reduce", seed, _rd_cases)):
        p = 1 << (n.bit_length() - 1)
        s = res["result"].numel() * res["result"].element_size()
        want = s if rank >= p else (p.bit_length() - 1) * s + (s if rank + p < n else 0)
        stats = _stats(res, n, rank)
        assert stats["bytes_sent"] == want, f"N={n} rank {rank}: CommStats says {stats['bytes_sent']}, want {want}"
        assert res["wire"]["bytes_sent"] == want, f"N={n} rank {rank}: {res['wire']['bytes_sent']} bytes on the wire, want {want}"
