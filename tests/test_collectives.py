"""Lab 05 core: labkit.collectives on real gloo ranks vs torch.distributed's own collectives,
counted bytes vs the closed-form formulas, and bad-input errors."""
import pytest
import torch
import torch.distributed as dist

import labkit.collectives as C
from labkit.collectives import formulas
from labkit.dist import RankError, launch

DTYPES = (torch.float64, torch.float32, torch.bfloat16)
LENGTHS = (0, 1, 7, 13, 64)


def _data(rank, length, dtype, seed=0):
    # integer values in [-8, 8): every partial sum over <= 8 ranks is exact in bf16/fp32/fp64,
    # so any summation order gives bit-identical results and we may compare exactly.
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(-8, 8, (length,), generator=g).to(dtype)


def _compare_worker(rank, n):
    """Run every algorithm on many lengths/dtypes/shapes; return a list of mismatches (empty = good)."""
    bad = []

    def check(cond, what):
        if not cond:
            bad.append(f"rank {rank}: {what}")

    for dtype in DTYPES:
        item = torch.empty((), dtype=dtype).element_size()
        for length in LENGTHS:
            x = _data(rank, length, dtype)
            ref = x.clone()
            dist.all_reduce(ref)
            tag = f"{dtype} L={length}"

            y = x.clone()
            st = C.ring_all_reduce(y)
            check(torch.equal(y, ref), f"ring_all_reduce {tag}")
            check((st.bytes_sent, st.bytes_received) == formulas.ring_all_reduce_bytes(rank, n, length, item),
                  f"ring_all_reduce bytes {tag}: {st}")
            check(st.steps == 2 * (n - 1), f"ring steps {tag}: {st}")
            if length >= n:
                check(st.messages == 2 * (n - 1), f"ring messages {tag}: {st}")

            y = x.clone()
            st = C.recursive_doubling_all_reduce(y)
            check(torch.equal(y, ref), f"recursive_doubling {tag}")
            check((st.bytes_sent, st.bytes_received) == formulas.recursive_doubling_bytes(rank, n, length, item),
                  f"recursive_doubling bytes {tag}: {st}")

            for root in sorted({0, n - 1, n // 2}):
                y, ref_b = x.clone(), x.clone()
                st = C.tree_broadcast(y, root)
                dist.broadcast(ref_b, root)
                check(torch.equal(y, ref_b), f"tree_broadcast root={root} {tag}")
                check((st.bytes_sent, st.bytes_received)
                      == formulas.tree_broadcast_bytes(rank, n, length, item, root), f"bcast bytes {tag}")
                y = x.clone()
                st = C.tree_reduce(y, root)
                check(torch.equal(y, ref if rank == root else x), f"tree_reduce root={root} {tag}")
                check((st.bytes_sent, st.bytes_received)
                      == formulas.tree_reduce_bytes(rank, n, length, item, root), f"reduce bytes {tag}")

        # torch-shaped reduce-scatter / all-gather (equal chunks, any shape)
        for m in (1, 5):
            inp = _data(rank, n * m, dtype, seed=1).reshape(n, m)
            inp_copy = inp.clone()
            out, ref = torch.empty(m, dtype=dtype), torch.empty(m, dtype=dtype)
            st = C.ring_reduce_scatter(out, inp)
            dist.reduce_scatter_tensor(ref, inp.clone().reshape(-1))
            check(torch.equal(out, ref), f"ring_reduce_scatter {dtype} m={m}")
            check(torch.equal(inp, inp_copy), "ring_reduce_scatter must not modify input")
            check((st.bytes_sent, st.bytes_received) == formulas.ring_reduce_scatter_bytes(rank, n, n * m, item),
                  f"reduce_scatter bytes {st}")

            small = _data(rank, m, dtype, seed=2)
            out, ref = torch.empty(n, m, dtype=dtype), torch.empty(n * m, dtype=dtype)
            st = C.ring_all_gather(out, small)
            dist.all_gather_into_tensor(ref, small)
            check(torch.equal(out.reshape(-1), ref), f"ring_all_gather {dtype} m={m}")
            check((st.bytes_sent, st.bytes_received) == formulas.ring_all_gather_bytes(rank, n, n * m, item),
                  f"all_gather bytes {st}")

    # any shape, non-contiguous input (a transposed view): results land in the caller's tensor
    base = _data(rank, 12, torch.float64).reshape(3, 4)
    ref = base.clone()
    dist.all_reduce(ref)
    for fn in (C.ring_all_reduce, C.recursive_doubling_all_reduce):
        y = base.clone().t()
        fn(y)
        check(torch.equal(y, ref.t()), f"{fn.__name__} on a non-contiguous (4, 3) view")
    return bad


@pytest.mark.parametrize("world_size", range(1, 9))
def test_matches_torch_distributed_and_byte_formulas(world_size):
    results = launch(_compare_worker, world_size, timeout=120)
    problems = [p for per_rank in results for p in per_rank]
    assert problems == [], "\n".join(problems[:20])


def _random_float_worker(rank, n):
    torch.manual_seed(rank)
    x = torch.randn(1001, dtype=torch.float32)
    ref, y = x.clone(), x.clone()
    dist.all_reduce(ref)
    C.ring_all_reduce(y)
    z = x.clone()
    C.recursive_doubling_all_reduce(z)
    return y, z, ref


def test_random_floats_close_and_ranks_agree():
    out = launch(_random_float_worker, 4)
    for y, z, ref in out:
        # non-integer float32 data: summation order differs from gloo's, so allow rounding
        # (4 terms of size ~1: a few ulps of ~2 -> 1e-5 absolute is generous but still catches bugs)
        torch.testing.assert_close(y, ref, rtol=0, atol=1e-5)
        torch.testing.assert_close(z, ref, rtol=0, atol=1e-5)
    # every rank holds bit-identical results (all-gather copies, recursive doubling adds commutatively)
    for y, z, _ in out[1:]:
        assert torch.equal(y, out[0][0]) and torch.equal(z, out[0][1])


@pytest.mark.parametrize("world_size", range(1, 9))
@pytest.mark.parametrize("length", [0, 1, 5, 8, 13, 100, 1001])
def test_ring_bytes_total_and_per_rank_rounding(world_size, length):
    item = 4
    s = length * item
    per_rank = [formulas.ring_all_reduce_bytes(r, world_size, length, item) for r in range(world_size)]
    # summed over ranks: exactly 2(N-1)·S, in both directions
    assert sum(p[0] for p in per_rank) == 2 * (world_size - 1) * s
    assert sum(p[1] for p in per_rank) == 2 * (world_size - 1) * s
    # per rank: within 2 elements of 2(N-1)/N·S; exactly equal when N divides L
    ideal = 2 * (world_size - 1) * s / world_size
    for sent, recv in per_rank:
        assert abs(sent - ideal) < 2 * item and abs(recv - ideal) < 2 * item
        if length % world_size == 0:
            assert sent == recv == ideal


def test_formula_values_by_hand():
    # L=11, N=3, float64: chunks 4,4,3 elements = 32,32,24 bytes; S = 88
    assert formulas.ring_all_reduce_bytes(0, 3, 11, 8) == (2 * 88 - 32 - 32, 2 * 88 - 24 - 32)
    assert formulas.ring_all_reduce_bytes(2, 3, 11, 8) == (2 * 88 - 24 - 32, 2 * 88 - 32 - 24)
    # binomial tree on 6 ranks, root 0: children of 0 are 1, 2, 4
    assert formulas.tree_children(0, 6) == [1, 2, 4] and formulas.tree_children(1, 6) == [3, 5]
    assert formulas.tree_broadcast_bytes(0, 6, 10, 4) == (120, 0)
    # recursive doubling, N=6: P=4; rank 1 folds in rank 5: 2 rounds + fold + unfold
    assert formulas.recursive_doubling_bytes(1, 6, 10, 4) == (3 * 40, 3 * 40)
    assert formulas.recursive_doubling_bytes(3, 6, 10, 4) == (2 * 40, 2 * 40)
    assert formulas.recursive_doubling_bytes(5, 6, 10, 4) == (40, 40)


def _bad_input_worker(rank, n):
    cases = {
        "list": lambda: C.ring_all_reduce([1.0, 2.0]),
        "int dtype": lambda: C.ring_all_reduce(torch.arange(4)),
        "src out of range": lambda: C.tree_broadcast(torch.zeros(3), n),
        "dst not int": lambda: C.tree_reduce(torch.zeros(3), 0.5),
        "rs shape": lambda: C.ring_reduce_scatter(torch.zeros(2), torch.zeros(2 * n + 1)),
        "ag shape": lambda: C.ring_all_gather(torch.zeros(2 * n - 1), torch.zeros(2)),
        "rs dtype": lambda: C.ring_reduce_scatter(torch.zeros(2), torch.zeros(2 * n, dtype=torch.float64)),
        "bounds": lambda: C.ring_reduce_scatter_chunks(torch.zeros(5), [0, 3, 4][: n + 1]),
    }
    out = {}
    for name, call in cases.items():
        try:
            call()
            out[name] = None
        except (TypeError, ValueError) as e:
            out[name] = (type(e).__name__, str(e))
    return out


def test_bad_inputs_get_clear_errors():
    out = launch(_bad_input_worker, 2)[0]
    expected = {"list": "TypeError", "int dtype": "TypeError", "src out of range": "ValueError",
                "dst not int": "ValueError", "rs shape": "ValueError", "ag shape": "ValueError",
                "rs dtype": "TypeError", "bounds": "ValueError"}
    for name, kind in expected.items():
        assert out[name] is not None, f"{name}: no error raised"
        assert out[name][0] == kind, f"{name}: {out[name]}"
        assert "\n" not in out[name][1] and len(out[name][1]) < 300
    assert "world_size * output.numel()" in out["rs shape"][1]


def test_without_a_process_group_is_a_clear_error():
    if dist.is_initialized():
        pytest.skip("a default group exists in this process")
    with pytest.raises(RuntimeError, match="no process group"):
        C.ring_all_reduce(torch.zeros(3))


def test_a_rank_error_names_the_rank():
    def worker(rank, n):
        C.tree_broadcast(torch.zeros(2), src=-1)

    with pytest.raises(RankError, match="src must be an int rank"):
        launch(worker, 2)


def _only_point_to_point_worker(rank, n):
    """Disable every built-in collective on this rank, then run all six labkit algorithms."""
    def forbidden(*args, **kwargs):
        raise AssertionError("labkit.collectives called a built-in torch.distributed collective")

    for name in ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_to_all_single",
                 "_all_gather_base", "_reduce_scatter_base"):
        if hasattr(dist, name):
            setattr(dist, name, forbidden)
    x = torch.full((10,), float(rank + 1))
    C.ring_all_reduce(x.clone())
    C.recursive_doubling_all_reduce(x.clone())
    C.tree_broadcast(x.clone(), 0)
    C.tree_reduce(x.clone(), 0)
    C.ring_reduce_scatter(torch.empty(2), torch.ones(2 * n))
    C.ring_all_gather(torch.empty(2 * n), torch.ones(2))
    return True


def test_only_point_to_point_calls_are_used():
    assert launch(_only_point_to_point_worker, 3) == [True] * 3


def _segmented_worker(rank, n):
    import math

    from labkit.collectives import ring
    ring.SEGMENT_BYTES = 16  # 2 float64 elements per segment: forces the pipelined reduce-scatter path
    bad = []
    for length in (1, 5, 23, 64):
        x = _data(rank, length, torch.float64)
        ref, y = x.clone(), x.clone()
        dist.all_reduce(ref)
        stats = C.ring_all_reduce(y)
        sizes = C.chunk_sizes(length, n)
        rs_sent = [c for c in range(n) if c != rank]              # reduce-scatter sends every chunk but mine
        ag_sent = [c for c in range(n) if c != (rank + 1) % n]    # all-gather: every chunk but my right's
        want_msgs = (sum(math.ceil(sizes[c] / 2) for c in rs_sent if sizes[c])
                     + sum(1 for c in ag_sent if sizes[c]))
        if not torch.equal(y, ref):
            bad.append(f"L={length}: wrong sum")
        if (stats.bytes_sent, stats.bytes_received) != formulas.ring_all_reduce_bytes(rank, n, length, 8):
            bad.append(f"L={length}: bytes {stats}")
        if stats.messages != want_msgs or stats.steps != 2 * (n - 1):
            bad.append(f"L={length}: messages {stats.messages} != {want_msgs} or steps {stats.steps}")
    return bad


@pytest.mark.parametrize("world_size", [2, 3])
def test_segmented_reduce_scatter_same_result_and_bytes(world_size):
    problems = [p for per_rank in launch(_segmented_worker, world_size) for p in per_rank]
    assert problems == [], "\n".join(problems)
