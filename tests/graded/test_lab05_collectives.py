"""Graded tests for Lab 05 (exercises/lab05_collectives.py).

Each test launches 1-4 real gloo ranks that call the chosen implementation
(`impl`) on uneven sizes. torch.distributed's own collectives are disabled on
the ranks, so only point-to-point messages can move data. Expected values are
computed locally from every rank's (deterministic) input; inputs are small
integers, so any summation order gives exactly the same sums.
"""
import pytest
import torch
import torch.distributed as dist

from labkit.collectives import chunk_bounds
from labkit.dist import launch

WORLD_SIZES = (1, 2, 3, 4)
FORBIDDEN = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
             "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
             "all_to_all_single", "_all_gather_base", "_reduce_scatter_base")


def _forbid_builtin_collectives():
    def forbidden(*args, **kwargs):
        raise RuntimeError("built-in torch.distributed collectives are not allowed in this lab; "
                           "use exchange / isend / irecv")

    for name in FORBIDDEN:
        if hasattr(dist, name):
            setattr(dist, name, forbidden)


def _data(rank, length, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(7919 * seed + rank)
    return torch.randint(-9, 10, (length,), generator=g).to(dtype)


def _total(n, length, dtype=torch.float64, seed=0):
    return sum(_data(r, length, torch.float64, seed) for r in range(n)).to(dtype)


def _bounds_cases(n):
    """Uneven cuts of a buffer: the course rule, plus hand-made ones with empty and odd-sized chunks."""
    cases = [chunk_bounds(length, n) for length in (1, 7, 10, 4 * n + 3)]
    sizes = [(2 * i + 1) % 5 for i in range(n)]  # e.g. 1, 3, 0, 2 — includes an empty chunk at n >= 3
    cut = [0]
    for s in sizes:
        cut.append(cut[-1] + s)
    cases.append(cut)
    return cases


_CACHE = {}


def _run(worker, impl):
    """Launch worker on each world size; return {n: per-rank results}.

    The two tests of an exercise share one set of runs (cached per worker and
    implementation), so a hanging or failing exercise is launched only once.
    """
    key = (worker.__name__, impl.__name__)
    if key not in _CACHE:
        try:
            _CACHE[key] = {n: launch(worker, n, impl, timeout=45) for n in WORLD_SIZES}
        except Exception as e:  # remembered: the sibling test fails the same way without relaunching
            _CACHE[key] = e
    if isinstance(_CACHE[key], Exception):
        raise _CACHE[key]
    return _CACHE[key]


# ---- ring reduce-scatter ---------------------------------------------------------------------

def _rs_worker(rank, n, impl):
    _forbid_builtin_collectives()
    out = []
    for bounds in _bounds_cases(n):
        for dtype in (torch.float64, torch.bfloat16):
            length = bounds[-1]
            buf = _data(rank, length, dtype)
            stats = impl.ring_reduce_scatter_chunks(buf, bounds)
            mine = slice(bounds[rank], bounds[rank + 1])
            out.append((bounds, dtype, buf[mine].clone(), _total(n, length, dtype)[mine], stats))
    return out


@pytest.mark.graded(points=3, exercise="ring_reduce_scatter_chunks")
def test_ring_reduce_scatter_sums_own_chunk(impl):
    for n, per_rank in _run(_rs_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for bounds, dtype, got, want, _ in cases:
                assert torch.equal(got, want), f"N={n} rank {rank} bounds={bounds} {dtype}: chunk {rank} is not the sum"


@pytest.mark.graded(points=1, exercise="ring_reduce_scatter_chunks")
def test_ring_reduce_scatter_bytes(impl):
    for n, per_rank in _run(_rs_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for bounds, dtype, _, _, stats in cases:
                item = torch.empty((), dtype=dtype).element_size()
                own = (bounds[rank + 1] - bounds[rank]) * item
                want = 0 if n == 1 else bounds[-1] * item - own
                assert stats.bytes_sent == want, (f"N={n} rank {rank} bounds={bounds}: sent {stats.bytes_sent} bytes, "
                                                  f"a ring reduce-scatter sends every chunk but its own once = {want}")
                assert stats.steps == n - 1, f"N={n}: expected {n - 1} steps, got {stats.steps}"


# ---- ring all-gather -------------------------------------------------------------------------

def _ag_worker(rank, n, impl):
    _forbid_builtin_collectives()
    out = []
    for bounds in _bounds_cases(n):
        length = bounds[-1]
        buf = torch.full((length,), float("nan"), dtype=torch.float64)
        mine = slice(bounds[rank], bounds[rank + 1])
        buf[mine] = _data(rank, length)[mine]
        want = torch.cat([_data(r, length)[bounds[r]:bounds[r + 1]] for r in range(n)])
        stats = impl.ring_all_gather_chunks(buf, bounds)
        out.append((bounds, buf, want, stats))
    return out


@pytest.mark.graded(points=3, exercise="ring_all_gather_chunks")
def test_ring_all_gather_collects_every_chunk(impl):
    for n, per_rank in _run(_ag_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for bounds, got, want, _ in cases:
                assert torch.equal(got, want), f"N={n} rank {rank} bounds={bounds}: got {got.tolist()}, want {want.tolist()}"


@pytest.mark.graded(points=1, exercise="ring_all_gather_chunks")
def test_ring_all_gather_bytes(impl):
    for n, per_rank in _run(_ag_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for bounds, _, _, stats in cases:
                nxt = (rank + 1) % n
                want = 0 if n == 1 else (bounds[-1] - (bounds[nxt + 1] - bounds[nxt])) * 8
                assert stats.bytes_sent == want, f"N={n} rank {rank} bounds={bounds}: sent {stats.bytes_sent}, want {want}"


# ---- ring all-reduce -------------------------------------------------------------------------

SHAPES = ((1,), (7,), (3, 5), (2, 1, 3), (13,))


def _ar_worker(rank, n, impl):
    _forbid_builtin_collectives()
    out = []
    for shape in SHAPES:
        length = int(torch.tensor(shape).prod())
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            t = _data(rank, length, dtype, seed=3).reshape(shape)
            stats = impl.ring_all_reduce(t)
            out.append((shape, dtype, t, _total(n, length, dtype, seed=3).reshape(shape), stats))
    return out


@pytest.mark.graded(points=2, exercise="ring_all_reduce")
def test_ring_all_reduce_matches_sum(impl):
    for n, per_rank in _run(_ar_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for shape, dtype, got, want, _ in cases:
                assert got.shape == want.shape and torch.equal(got, want), f"N={n} rank {rank} shape={shape} {dtype}"


@pytest.mark.graded(points=2, exercise="ring_all_reduce")
def test_ring_all_reduce_bytes_and_steps(impl):
    for n, per_rank in _run(_ar_worker, impl).items():
        total_sent = {}
        for rank, cases in enumerate(per_rank):
            for shape, dtype, got, _, stats in cases:
                item = got.element_size()
                c = [(b1 - b0) * item for b0, b1 in zip(chunk_bounds(got.numel(), n), chunk_bounds(got.numel(), n)[1:])]
                s = got.numel() * item
                want = 0 if n == 1 else 2 * s - c[rank] - c[(rank + 1) % n]
                assert stats.bytes_sent == want, f"N={n} rank {rank} shape={shape}: sent {stats.bytes_sent}, want {want}"
                assert stats.steps == 2 * (n - 1), f"N={n}: expected 2(N-1) = {2 * (n - 1)} steps, got {stats.steps}"
                total_sent[(shape, dtype)] = total_sent.get((shape, dtype), 0) + stats.bytes_sent
        for (shape, dtype), sent in total_sent.items():
            s = int(torch.tensor(shape).prod()) * torch.empty((), dtype=dtype).element_size()
            assert sent == 2 * (n - 1) * s, f"N={n} shape={shape}: total sent {sent} != 2(N-1)·S = {2 * (n - 1) * s}"


# ---- tree broadcast --------------------------------------------------------------------------

def _bc_worker(rank, n, impl):
    _forbid_builtin_collectives()
    out = []
    for src in range(n):
        for shape in ((5,), (2, 3)):
            t = _data(rank, 6, seed=5)[: int(torch.tensor(shape).prod())].reshape(shape).clone()
            stats = impl.tree_broadcast(t, src)
            want = _data(src, 6, seed=5)[: t.numel()].reshape(shape)
            out.append((src, shape, t, want, stats))
    return out


@pytest.mark.graded(points=2, exercise="tree_broadcast")
def test_tree_broadcast_copies_root(impl):
    for n, per_rank in _run(_bc_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for src, shape, got, want, _ in cases:
                assert torch.equal(got, want), f"N={n} rank {rank} src={src} shape={shape}"


@pytest.mark.graded(points=1, exercise="tree_broadcast")
def test_tree_broadcast_is_a_binomial_tree(impl):
    for n, per_rank in _run(_bc_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for src, shape, got, _, stats in cases:
                v, s = (rank - src) % n, got.numel() * 8
                children = sum(1 for k in range(n.bit_length()) if v < 2 ** k and v + 2 ** k < n)
                assert stats.bytes_sent == children * s, \
                    f"N={n} rank {rank} src={src}: sent {stats.bytes_sent} bytes, a binomial tree sends {children * s}"
                assert stats.bytes_received == (0 if v == 0 else s)


# ---- recursive doubling ----------------------------------------------------------------------

def _rd_worker(rank, n, impl):
    _forbid_builtin_collectives()
    out = []
    for shape in ((1,), (5,), (3, 4)):
        for dtype in (torch.float64, torch.bfloat16):
            length = int(torch.tensor(shape).prod())
            t = _data(rank, length, dtype, seed=9).reshape(shape)
            stats = impl.recursive_doubling_all_reduce(t)
            out.append((shape, dtype, t, _total(n, length, dtype, seed=9).reshape(shape), stats))
    return out


@pytest.mark.graded(points=2, exercise="recursive_doubling_all_reduce")
def test_recursive_doubling_matches_sum(impl):
    for n, per_rank in _run(_rd_worker, impl).items():
        for rank, cases in enumerate(per_rank):
            for shape, dtype, got, want, _ in cases:
                assert torch.equal(got, want), f"N={n} rank {rank} shape={shape} {dtype}"


@pytest.mark.graded(points=1, exercise="recursive_doubling_all_reduce")
def test_recursive_doubling_bytes(impl):
    for n, per_rank in _run(_rd_worker, impl).items():
        p = 1 << (n.bit_length() - 1)
        for rank, cases in enumerate(per_rank):
            for shape, dtype, got, _, stats in cases:
                s = got.numel() * got.element_size()
                if rank >= p:
                    want = s
                else:
                    want = (p.bit_length() - 1) * s + (s if rank + p < n else 0)
                assert stats.bytes_sent == want, f"N={n} rank {rank}: sent {stats.bytes_sent}, want {want}"
