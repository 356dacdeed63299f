"""labkit.matmul.traffic and .blocked: counted traffic equals the closed forms exactly; C is exact."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.matmul import traffic as T
from labkit.matmul.traffic import Traffic


def ints(shape, seed):
    """Integer-valued float64 matrix: every partial sum is exact, so C must equal A @ B bit for bit."""
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float64)


def operands(M, K, N, seed=0):
    return ints((M, K), seed), ints((K, N), seed + 1)


def as_tuple(t: Traffic):
    return (t.a_reads, t.b_reads, t.c_writes)


# Shapes include tiles that do not divide, tiles larger than the matrix, 1 x n, n x 1 and K = 1.
SHAPES = [(8, 8, 8), (7, 5, 9), (1, 6, 5), (6, 5, 1), (5, 1, 7), (1, 1, 1), (12, 3, 10), (9, 13, 4)]
TILES = [(1, 1), (2, 3), (3, 2), (4, 4), (5, 7), (16, 16)]


# ------------------------------------------------------------------ square, tiles divide n: the textbook forms
@pytest.mark.parametrize("n,b1,b2", [(8, 2, 4), (8, 4, 2), (12, 3, 6), (12, 6, 4), (16, 16, 1), (6, 1, 6)])
def test_cache_tiled_square_form(n, b1, b2):
    A, B = operands(n, n, n)
    C, t = T.cache_tiled(A, B, b1, b2)
    np.testing.assert_array_equal(C, A @ B)
    assert as_tuple(t) == (n * n, n ** 3 // b1, n * n)        # n^2 + n^3/b1 (+ n^2 writes of C)


@pytest.mark.parametrize("n,v1,v2,v3", [(8, 2, 4, 1), (8, 4, 2, 8), (12, 3, 6, 4), (12, 6, 4, 3), (6, 1, 1, 2)])
def test_register_tiled_square_form(n, v1, v2, v3):
    A, B = operands(n, n, n)
    C, t = T.register_tiled(A, B, v1, v2, v3)
    np.testing.assert_array_equal(C, A @ B)
    # v1 = rows of the C tile, v2 = its columns: A is re-read once per column tile -> n^3/v2
    assert as_tuple(t) == (n ** 3 // v2, n ** 3 // v1, n * n)


def test_naive_square_form():
    A, B = operands(6, 6, 6)
    C, t = T.naive(A, B)
    np.testing.assert_array_equal(C, A @ B)
    assert as_tuple(t) == (6 ** 3, 6 ** 3, 36)                # 2n^3 reads


@pytest.mark.parametrize("n,b1,b2,v1,v2", [(8, 4, 4, 2, 2), (12, 6, 4, 3, 2), (12, 4, 6, 1, 3)])
def test_combined_square_form(n, b1, b2, v1, v2):
    A, B = operands(n, n, n)
    C, t = T.tiled(A, B, b1, b2, v1, v2)
    np.testing.assert_array_equal(C, A @ B)
    assert as_tuple(t.dram) == (n * n, n ** 3 // b1, n * n)   # n^3/b1, not the common slip n^2/b1
    assert as_tuple(t.l1) == (n ** 3 // v2, n ** 3 // v1, n * n)


# ------------------------------------------------------------------ general shapes: ceil-generalised forms
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("b1,b2", TILES)
def test_cache_tiled_general(shape, b1, b2):
    M, K, N = shape
    A, B = operands(M, K, N, seed=M * 100 + N)
    C, t = T.cache_tiled(A, B, b1, b2)
    np.testing.assert_array_equal(C, A @ B)
    assert t == T.cache_tiled_formula(M, K, N, b1, b2)
    assert as_tuple(t) == (M * K, -(-M // b1) * K * N, M * N)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("v1,v2,v3", [(1, 1, 1), (2, 3, 2), (3, 2, 5), (4, 4, 3), (7, 5, 1)])
def test_register_tiled_general(shape, v1, v2, v3):
    M, K, N = shape
    A, B = operands(M, K, N, seed=K * 10 + v1)
    C, t = T.register_tiled(A, B, v1, v2, v3)
    np.testing.assert_array_equal(C, A @ B)
    assert t == T.register_tiled_formula(M, K, N, v1, v2, v3)
    assert as_tuple(t) == (M * K * -(-N // v2), -(-M // v1) * K * N, M * N)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("b1,b2,v1,v2", [(4, 4, 2, 2), (5, 3, 2, 2), (3, 5, 2, 4), (6, 6, 4, 4), (2, 2, 3, 3)])
def test_combined_general(shape, b1, b2, v1, v2):
    M, K, N = shape
    A, B = operands(M, K, N, seed=3)
    C, t = T.tiled(A, B, b1, b2, v1, v2)
    np.testing.assert_array_equal(C, A @ B)
    assert t == T.tiled_formula(M, K, N, b1, b2, v1, v2)
    assert t.dram == T.cache_tiled_formula(M, K, N, b1, b2)


def test_register_tiles_per_dim_counts_real_tiles():
    # J(n, b, v) = number of v-wide tiles cut from each b-wide block, summed over blocks
    for n, b, v in itertools.product(range(0, 14), range(1, 7), range(1, 7)):
        blocks = [min(b, n - s) for s in range(0, n, b)]
        assert T.register_tiles_per_dim(n, b, v) == sum(-(-w // v) for w in blocks)


@settings(max_examples=60, deadline=None)
@given(M=st.integers(1, 9), K=st.integers(1, 9), N=st.integers(1, 9),
       b1=st.integers(1, 10), b2=st.integers(1, 10), v3=st.integers(1, 10))
def test_property_cache_and_register(M, K, N, b1, b2, v3):
    A, B = operands(M, K, N, seed=M + K + N)
    C1, t1 = T.cache_tiled(A, B, b1, b2)
    C2, t2 = T.register_tiled(A, B, b1, b2, v3)
    np.testing.assert_array_equal(C1, A @ B)
    np.testing.assert_array_equal(C2, A @ B)
    assert t1 == T.cache_tiled_formula(M, K, N, b1, b2)
    assert t2 == T.register_tiled_formula(M, K, N, b1, b2, v3)


def test_tiling_reduces_traffic_and_v3_and_b2_do_not_matter():
    A, B = operands(12, 12, 12)
    naive = T.naive(A, B)[1]
    cache = T.cache_tiled(A, B, 4, 4)[1]
    assert cache.total < naive.total
    assert T.cache_tiled(A, B, 4, 1)[1] == T.cache_tiled(A, B, 4, 12)[1]          # b2 is free
    assert T.register_tiled(A, B, 3, 4, 1)[1] == T.register_tiled(A, B, 3, 4, 12)[1]  # v3 is free
    # swapping v1 and v2 swaps which operand is re-read more
    t = T.register_tiled(A, B, 2, 6, 1)[1]
    assert t.a_reads == 12 ** 3 // 6 and t.b_reads == 12 ** 3 // 2


def test_tile_one_is_naive_for_register_tiling():
    A, B = operands(5, 4, 3)
    assert T.register_tiled(A, B, 1, 1, 1)[1] == T.naive(A, B)[1]


def test_traffic_bytes_and_total():
    t = Traffic(3, 4, 5)
    assert t.total == 12 and t.bytes() == 48 and t.bytes(2) == 24


def test_torch_inputs_accepted():
    torch = pytest.importorskip("torch")
    A, B = torch.arange(6.0).reshape(2, 3), torch.arange(12.0).reshape(3, 4)
    C, t = T.cache_tiled(A, B, 1, 3)
    np.testing.assert_array_equal(C, (A @ B).numpy())


# ------------------------------------------------------------------ traces (animation source)
@pytest.mark.parametrize("shape,b1,b2", [((6, 4, 5), 2, 2), ((5, 3, 7), 3, 4), ((1, 4, 6), 2, 5)])
def test_cache_trace_matches_counts(shape, b1, b2):
    M, K, N = shape
    A, B = operands(M, K, N)
    trace = []
    _, t = T.cache_tiled(A, B, b1, b2, trace=trace)
    assert len(trace) == -(-M // b1) * -(-N // b2)
    assert trace[-1].traffic == t
    assert [s.loaded for s in trace].count("AB") == -(-M // b1)      # A block loaded once per row block
    for s in trace:
        assert s.a[2:] == (0, K) and s.b[:2] == (0, K)               # full-width row/column blocks
    counts = [s.traffic.total for s in trace]
    assert counts == sorted(counts)


def test_register_trace_matches_counts():
    A, B = operands(5, 7, 4)
    trace = []
    _, t = T.register_tiled(A, B, 2, 3, 3, trace=trace)
    assert len(trace) == 3 * 2 * 3
    assert trace[-1].traffic == t


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("call,exc,msg", [
    (lambda: T.cache_tiled(np.ones((2, 3)), np.ones((4, 2)), 1, 1), ValueError, "inner dimensions"),
    (lambda: T.cache_tiled(np.ones(3), np.ones((3, 2)), 1, 1), ValueError, "2-D"),
    (lambda: T.cache_tiled([[1.0]], np.ones((1, 1)), 1, 1), TypeError, "numpy array"),
    (lambda: T.cache_tiled(np.ones((2, 2)), np.ones((2, 2)), 0, 1), ValueError, "b1 must be >= 1"),
    (lambda: T.register_tiled(np.ones((2, 2)), np.ones((2, 2)), 1, 2.0, 1), TypeError, "v2 must be a positive int"),
    (lambda: T.register_tiled(np.ones((2, 2)), np.ones((2, 2)), 1, 1, True), TypeError, "v3"),
    (lambda: T.cache_tiled(np.ones((2, 2), dtype=complex), np.ones((2, 2)), 1, 1), TypeError, "real numbers"),
    (lambda: T.cache_tiled_formula(-1, 2, 2, 1, 1), ValueError, "M must be"),
])
def test_bad_input(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


# ------------------------------------------------------------------ real-speed blocked matmul
def test_blocked_matmul_matches_torch():
    torch = pytest.importorskip("torch")
    from labkit.matmul.blocked import blocked_matmul, matmul_flops, measure

    g = torch.Generator().manual_seed(0)
    for (M, K, N), tile in [((37, 20, 29), 8), ((1, 9, 5), 4), ((9, 1, 6), 64), ((16, 16, 16), 16)]:
        A = torch.randint(-4, 5, (M, K), generator=g).double()
        B = torch.randint(-4, 5, (K, N), generator=g).double()
        assert torch.equal(blocked_matmul(A, B, tile), A @ B)
    assert matmul_flops(2, 3, 4) == 48
    res = measure(32, [8, 32], repeat=1)
    assert [r[0] for r in res["rows"]] == [8, 32] and all(r[2] > 0 for r in res["rows"])
    with pytest.raises(TypeError, match="torch.Tensor"):
        blocked_matmul(np.ones((2, 2)), np.ones((2, 2)), 1)
    with pytest.raises(ValueError, match="inner dimensions"):
        blocked_matmul(torch.ones(2, 3), torch.ones(2, 3), 1)


@pytest.mark.parametrize("kind,tiles,exc,msg", [
    ("cache", {}, TypeError, r"trace\('cache', M, K, N, \.\.\.\) needs the tile argument\(s\) b1, b2"),
    ("cache", {"b1": 2}, TypeError, r"needs the tile argument\(s\) b2 "),
    ("register", {"v1": 2}, TypeError, r"trace\('register', M, K, N, \.\.\.\) needs the tile argument\(s\) v2"),
    ("cache", {"b1": 2, "b2": 2, "v1": 3}, TypeError, r"unexpected tile argument\(s\) v1; it takes b1, b2"),
    ("cache", {"b1": 0, "b2": 2}, ValueError, "tile size b1 must be >= 1, got 0"),
    ("diagonal", {}, ValueError, "unknown loop 'diagonal'"),
])
def test_trace_bad_tiles_one_line(kind, tiles, exc, msg):
    with pytest.raises(exc, match=msg) as excinfo:
        T.trace(kind, 4, 3, 5, **tiles)
    assert "\n" not in str(excinfo.value)


def test_lab03_pictures_and_worked_problems(capsys, monkeypatch):
    import IPython.display

    import exercises.lab03_matmul as stubs
    import solutions.lab03_matmul as answers
    from labkit.matmul import lab

    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: None)
    for name in lab.CASES:
        table = lab.picture(name)(getattr(answers, name))
        assert all(table.column("equal")) and all(table.column("C == A@B")), name
        assert all(len(line) <= 100 for line in str(table).splitlines())
        with pytest.raises(NotImplementedError):
            lab.picture(name)(getattr(stubs, name))

    def forgets_the_last_row_block(A, B, b1, b2):      # counts floor(M/b1) passes over B
        C, t = answers.cache_tiled(A, B, b1, b2)
        return C, T.Traffic(t.a_reads, (A.shape[0] // b1) * B.size, t.c_writes)

    assert not all(lab.compare("cache_tiled", forgets_the_last_row_block).column("equal"))
    # the picture draws the learner's counts and their wrong cells of C, for every exercise
    for name in lab.CASES:
        html = lab.first_case_html(name, getattr(answers, name))
        assert "<th>yours</th>" in html and "0 wrong C cells" in html and "#de2d26" not in html

    def one_wrong_cell(A, B, b1, b2):
        C, t = answers.cache_tiled(A, B, b1, b2)
        C[-1, -1] += 1
        return C, None

    html = lab.first_case_html("cache_tiled", one_wrong_cell)
    assert html.count('fill="#de2d26"') == 1 and "1 wrong C cells" in html and "<td><b>?</b></td>" in html
    f = T.cache_tiled_formula(7, 5, 8, 3, 3)
    html = lab.first_case_html("cache_tiled", forgets_the_last_row_block)
    assert f"<td>B reads</td><td>{f.b_reads}</td><td>{f.b_reads}</td><td><b>{2 * 5 * 8}</b></td>" in html

    def wrong_shape(A, B, *tiles):
        return np.zeros((1, 1)), T.TwoLevelTraffic(T.Traffic(), T.Traffic())

    (M, K, N), tiles = lab.CASES["tiled"][0]
    assert f"{M * N} wrong C cells" in lab.first_case_html("tiled", wrong_shape)
    # worked problems
    n = 1024
    assert T.cache_tiled_formula(n, n, n, 64, 64).a_reads + T.cache_tiled_formula(n, n, n, 64, 64).b_reads == 17825792
    assert max(b1 for b1 in range(1, 100) if 4 * 256 * (b1 + 8) <= 32768) == 24
    f = T.register_tiled_formula(512, 512, 512, 8, 4)
    assert (f.a_reads, f.b_reads) == (2 ** 27 // 4, 2 ** 27 // 8)
    from labkit.matmul import thread_model as G
    g = G.gpu_formula("v3", 4096, V=8, L=128, S=8)
    assert (g["global_reads"], g["shared_reads"]) == (2 * 4096 ** 3 // 128, 2 * 4096 ** 3 // 8)
    N = 1024
    reads = {k: G.gpu_formula(k, N, V=4)["global_reads"] for k in ("v1", "v1.5", "v2")}
    assert reads == {"v1": 2147483648, "v1.5": 1342177280, "v2": 536870912}   # 2.15e9, 1.34e9, 5.37e8
    assert (512 // 16) ** 3 == 32768 and abs(32768 * 5e-6 - 0.16) < 0.01      # the speed section's question


def test_lab03_speed_table():
    from labkit.matmul import lab

    res = {"n": 100, "threads": 1, "blas_s": 0.002, "blas_gflops": 1.0,
           "rows": [(16, 0.345, 0.5, 0.5), (100, 0.001, 2.0, 2.0)]}
    t = lab.speed(res)
    assert t.column("calls") == [7 ** 3, 1]                            # cdiv(100, 16)^3
    assert t.column("us/call")[0] == pytest.approx(0.345 / 343 * 1e6)
    assert t.column("extra us/call") == pytest.approx([(0.345 - 0.002) / 343 * 1e6, -1000.0])
    assert t.column("x BLAS") == [0.5, 2.0]
    assert all(len(line) <= 100 for line in str(t).splitlines())
