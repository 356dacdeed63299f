"""labkit.matmul.thread_model: simulated per-thread loads equal the GPU traffic formulas exactly."""
import numpy as np
import pytest

from labkit.matmul import thread_model as G


def ints(N, seed):
    return np.random.default_rng(seed).integers(-4, 5, size=(N, N)).astype(np.float64)


@pytest.mark.parametrize("N", [4, 8, 12])
def test_v1_one_output_per_thread(N):
    A, B = ints(N, 0), ints(N, 1)
    C, t = G.simulate_v1(A, B)
    np.testing.assert_array_equal(C, A @ B)
    assert t.threads == N * N
    assert (t.per_thread_global == 2 * N).all()                 # a row of A + a column of B
    assert t.counts() == {"global_reads": 2 * N ** 3, "global_writes": N * N, "shared_reads": 0, "shared_writes": 0}
    assert t.counts() == G.gpu_formula("v1", N)


@pytest.mark.parametrize("N,V", [(4, 2), (8, 2), (8, 4), (12, 3), (6, 1)])
def test_v15_and_v2(N, V):
    A, B = ints(N, 2), ints(N, 3)
    C, t = G.simulate_v15(A, B, V)
    np.testing.assert_array_equal(C, A @ B)
    assert t.threads == (N // V) ** 2
    assert (t.per_thread_global == N * V + N * V * V).all()
    assert t.global_reads == N ** 3 // V + N ** 3 == G.gpu_formula("v1.5", N, V)["global_reads"]
    C, t = G.simulate_v2(A, B, V)
    np.testing.assert_array_equal(C, A @ B)
    assert (t.per_thread_global == 2 * N * V).all()
    assert t.global_reads == 2 * N ** 3 // V
    assert t.counts() == G.gpu_formula("v2", N, V)


@pytest.mark.parametrize("N,V,L,S", [(8, 2, 4, 2), (8, 2, 8, 4), (12, 2, 6, 3), (16, 4, 8, 8), (8, 1, 4, 1),
                                     (12, 3, 6, 4)])
def test_v3_shared_memory(N, V, L, S):
    A, B = ints(N, 4), ints(N, 5)
    C, t = G.simulate_v3(A, B, V, L, S)
    np.testing.assert_array_equal(C, A @ B)
    assert t.blocks == (N // L) ** 2 and t.threads == (N // V) ** 2
    assert t.global_reads == 2 * N ** 3 // L                    # each block: L x N of A + N x L of B
    assert t.shared_reads == 2 * N ** 3 // V                    # each thread: 2NV from shared memory
    assert t.shared_writes == t.global_reads
    assert t.per_thread_global.sum() == t.global_reads
    assert t.counts() == G.gpu_formula("v3", N, V, L, S)
    # cooperative fetching spreads the loads: no thread loads more than one share (rounded up) per slab
    per_step = -(-(L * S) // (L // V) ** 2)
    assert t.per_thread_global.max() <= 2 * per_step * (N // S)


def test_v3_reading_b_from_sA_has_same_traffic_but_wrong_result():
    A, B = ints(8, 6), ints(8, 7)
    C_ok, t_ok = G.simulate_v3(A, B, 2, 4, 2)
    C_bad, t_bad = G.simulate_v3(A, B, 2, 4, 2, b_from_sA=True)
    assert t_bad.counts() == t_ok.counts()
    np.testing.assert_array_equal(C_ok, A @ B)
    assert not np.array_equal(C_bad, A @ B)
    # reading b from sA: block (by, bx) computes A_rows @ A_rows^T with A_rows the block's L rows of A
    for r0 in range(0, 8, 4):
        for c0 in range(0, 8, 4):
            np.testing.assert_array_equal(C_bad[r0:r0 + 4, c0:c0 + 4], A[r0:r0 + 4] @ A[r0:r0 + 4].T)


def test_traffic_ordering_matches_formulas():
    N, V, L = 16, 4, 8
    A, B = ints(N, 8), ints(N, 9)
    reads = {k: G.run_thread_model(k, A, B, V=V, L=L, S=4)[1].global_reads for k in G.KERNELS}
    assert reads["v1"] > reads["v1.5"] > reads["v2"] > reads["v3"]


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: G.simulate_v15(np.ones((6, 6)), np.ones((6, 6)), 4), ValueError, "V=4 must divide N=6"),
    (lambda: G.simulate_v3(np.ones((12, 12)), np.ones((12, 12)), 4, 6, 2), ValueError, "V=4 must divide L=6"),
    (lambda: G.simulate_v3(np.ones((8, 8)), np.ones((8, 8)), 2, 6, 2), ValueError, "L=6 must divide N=8"),
    (lambda: G.simulate_v3(np.ones((8, 8)), np.ones((8, 8)), 2, 4, 3), ValueError, "S=3 must divide N=8"),
    (lambda: G.simulate_v1(np.ones((2, 3)), np.ones((3, 2))), ValueError, "square"),
    (lambda: G.simulate_v1([[1.0]], np.ones((1, 1))), TypeError, "numpy array"),
    (lambda: G.run_thread_model("v4", np.ones((2, 2)), np.ones((2, 2))), ValueError, "unknown kernel"),
    (lambda: G.gpu_formula("v4", 4), ValueError, "unknown kernel"),
])
def test_bad_input(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: G.gpu_formula("v2", 8, V=0), ValueError, "tile size V must be >= 1, got 0"),
    (lambda: G.gpu_formula("v1", 8, V=0), ValueError, "tile size V must be >= 1, got 0"),
    (lambda: G.gpu_formula("v3", 8, L=0), ValueError, "tile size L must be >= 1, got 0"),
    (lambda: G.gpu_formula("v3", 8, S=-2), ValueError, "tile size S must be >= 1, got -2"),
    (lambda: G.gpu_formula("v2", 8, V=2.0), TypeError, "tile size V must be a positive int"),
    (lambda: G.gpu_formula("v1", -1), ValueError, "matrix size N must be >= 0, got -1"),
    (lambda: G.gpu_formula("v1", 8.0), TypeError, "matrix size N must be an int"),
    (lambda: G.gpu_formula("v2", 8, V=3), ValueError, "V=3 must divide N=8"),
    (lambda: G.gpu_formula("v3", 8, V=2, L=6), ValueError, "L=6 must divide N=8"),
    (lambda: G.run_thread_model("v1", np.ones((4, 4)), np.ones((4, 4)), V=0), ValueError, "tile size V must be >= 1"),
])
def test_gpu_formula_bad_tiles_one_line(call, exc, msg):
    with pytest.raises(exc, match=msg) as excinfo:
        call()
    assert "\n" not in str(excinfo.value)


def test_pseudocode_names_the_loads_the_simulator_counts():
    N, V, L, S = 8, 2, 4, 2
    A, B = np.ones((N, N)), np.ones((N, N))
    code = G.PSEUDOCODE
    assert set(code) == set(G.KERNELS)
    assert all(len(line) <= 100 for c in code.values() for line in c.splitlines())
    # the per-thread global loads stated in the comments, against the simulation
    per = {k: set(G.run_thread_model(k, A, B, V=V, L=L, S=S)[1].per_thread_global.tolist()) for k in G.KERNELS}
    assert "2N per thread" in code["v1"] and per["v1"] == {2 * N}
    assert "N loads, V times" in code["v1.5"] and "N loads, V*V times" in code["v1.5"]
    assert per["v1.5"] == {N * V + N * V * V}
    assert code["v2"].count("// V global loads") == 2 and per["v2"] == {2 * N * V}
    assert "2*L*S global loads" in code["v3"]            # per slab step, shared by the block's threads
    t3 = G.run_thread_model("v3", A, B, V=V, L=L, S=S)[1]
    assert t3.global_reads == (N // L) ** 2 * (N // S) * 2 * L * S
    assert "b[:] = sB[ki" in code["v3"] and "b[:] = sA" not in code["v3"]
