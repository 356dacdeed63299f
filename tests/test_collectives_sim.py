"""Lab 05: the pure simulator and the α–β model — checked against the formulas and
replayed against real gloo runs (recorded sends/receives and final buffers)."""
import math

import numpy as np
import pytest
import torch

import labkit.collectives as C
from labkit.collectives import alpha_beta, formulas
from labkit.collectives.simulate import ALGORITHMS, trace_collective
from labkit.dist import launch

FULL = lambda n: frozenset(range(n))  # noqa: E731


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("length", [0, 3, 8, 13])
def test_simulated_end_states(n, length):
    t = trace_collective("ring_all_reduce", n, length)
    assert t.n_steps == 2 * (n - 1)
    assert all(chunk == FULL(n) for row in t.final for chunk in row)
    rs = trace_collective("ring_reduce_scatter", n, length).final
    assert all(rs[r][r] == FULL(n) for r in range(n))
    ag = trace_collective("ring_all_gather", n, length).final
    assert all(ag[r][c] == frozenset({c}) for r in range(n) for c in range(n))
    for root in range(n):
        assert all(row[0] == frozenset({root}) for row in trace_collective("tree_broadcast", n, length, root).final)
        assert trace_collective("tree_reduce", n, length, root).final[root][0] == FULL(n)
    assert all(row[0] == FULL(n) for row in trace_collective("recursive_doubling_all_reduce", n, length).final)
    assert all(row[0] == FULL(n) for row in trace_collective("tree_all_reduce", n, length).final)


def test_reduce_scatter_ends_with_chunk_i_on_rank_i():
    # with our schedule (rank r first sends chunk r-1) rank i owns the full sum of chunk i after
    # reduce-scatter; starting with chunk i instead leaves chunk (i+1) mod N on rank i
    # (labkit.collectives.lab.complete_chunk_owner, tested in test_collectives_lab.py).
    t = trace_collective("ring_reduce_scatter", 4, 4)
    owners = {r: [c for c in range(4) if t.final[r][c] == FULL(4)] for r in range(4)}
    assert owners == {0: [0], 1: [1], 2: [2], 3: [3]}


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("length", [0, 1, 7, 16, 101])
def test_simulated_bytes_equal_formulas(n, length):
    for alg, fn in formulas.BYTES.items():
        t = trace_collective(alg, n, length)
        for r in range(n):
            assert (t.bytes_sent(r, 2), t.bytes_received(r, 2)) == fn(r, n, length, 2), (alg, r)


@pytest.mark.parametrize("n", range(1, 9))
def test_alpha_beta_model_equals_simulated_rounds_and_bytes(n):
    length, item = 8 * 840, 4  # 840 = lcm(1..8): every ring chunk is equal
    for alg in ALGORITHMS:
        t = trace_collective(alg, n, length)
        # α = 1, β = 0 counts rounds; α = 0, β = 1 counts critical-path bytes
        a, b = alpha_beta.coefficients(alg, n, length * item)
        assert t.alpha_beta_time(1.0, 0.0, item) == a, alg
        assert math.isclose(t.alpha_beta_time(0.0, 1.0, item), b, rel_tol=1e-12), alg
        assert math.isclose(t.alpha_beta_time(3e-5, 2e-9, item),
                            alpha_beta.predict_time(alg, n, length * item, 3e-5, 2e-9), rel_tol=1e-12)


def test_ring_and_log_p_formulas_by_hand():
    # ring: 2(p-1)α + 2(p-1)/p·nβ — not α·log p, and not (2p-1)/p
    assert alpha_beta.coefficients("ring_all_reduce", 4, 1000) == (6, 1500)
    assert alpha_beta.coefficients("recursive_doubling_all_reduce", 4, 1000) == (2, 2000)
    assert alpha_beta.coefficients("recursive_doubling_all_reduce", 6, 1000) == (4, 4000)
    assert alpha_beta.coefficients("tree_all_reduce", 5, 1000) == (6, 6000)


def test_fit_recovers_known_alpha_beta_and_crossover():
    alpha, beta = 40e-6, 1.5e-9
    samples = [(alg, p, n, alpha_beta.predict_time(alg, p, n, alpha, beta))
               for alg in ("ring_all_reduce", "recursive_doubling_all_reduce")
               for p in (2, 4) for n in (4096, 65536, 1 << 20)]
    a, b = alpha_beta.fit_alpha_beta(samples)
    assert math.isclose(a, alpha, rel_tol=1e-9) and math.isclose(b, beta, rel_tol=1e-9)
    x = alpha_beta.crossover_bytes("recursive_doubling_all_reduce", "ring_all_reduce", 4, alpha, beta)
    # p=4: 2α + 2nβ = 6α + 1.5nβ  ->  n = 8α/β
    assert math.isclose(x, 8 * alpha / beta, rel_tol=1e-12)
    assert math.isclose(alpha_beta.predict_time("recursive_doubling_all_reduce", 4, x, alpha, beta),
                        alpha_beta.predict_time("ring_all_reduce", 4, x, alpha, beta), rel_tol=1e-12)
    assert alpha_beta.crossover_bytes("ring_all_reduce", "ring_all_reduce", 4, alpha, beta) == math.inf


def test_simulator_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown algorithm"):
        trace_collective("ring", 4, 8)
    with pytest.raises(ValueError, match="world_size"):
        trace_collective("ring_all_reduce", 0, 8)
    with pytest.raises(ValueError, match="root"):
        trace_collective("tree_broadcast", 3, 8, root=3)


# ---- replay: real runs vs the trace ------------------------------------------------------------

def _inputs(n, length):
    return np.arange(n * length, dtype=np.float64).reshape(n, length) % 17 - 8


def _replay_worker(rank, n, length, algorithm, root):
    x = torch.from_numpy(_inputs(n, length)[rank].copy())
    buf = x.clone()
    base = buf.data_ptr()
    with C.recording() as events:
        if algorithm == "ring_all_reduce":
            stats = C.ring_all_reduce(buf)
        elif algorithm == "recursive_doubling_all_reduce":
            stats = C.recursive_doubling_all_reduce(buf)
        elif algorithm == "tree_broadcast":
            stats = C.tree_broadcast(buf, root)
        else:
            stats = C.tree_reduce(buf, root)
    sends = [(e.step, e.peer, (e.data_ptr - base) // 8, e.numel) for e in events if e.op == "send"]
    recvs = [(e.step, e.peer, e.numel) for e in events if e.op == "recv"]
    return buf.numpy(), sends, recvs, stats


@pytest.mark.parametrize("algorithm,n,length,root", [
    ("ring_all_reduce", 3, 10, 0), ("ring_all_reduce", 4, 4, 0), ("ring_all_reduce", 5, 13, 0),
    ("recursive_doubling_all_reduce", 6, 5, 0), ("tree_broadcast", 5, 6, 2), ("tree_reduce", 7, 3, 4),
])
def test_replay_trace_against_real_run(algorithm, n, length, root):
    trace = trace_collective(algorithm, n, length, root)
    real = launch(_replay_worker, n, length, algorithm, root)
    for r, (buf, sends, recvs, stats) in enumerate(real):
        # the trace's sends from rank r, in round order, skipping empty chunks (never sent)
        expected_sends = [(t.dst, t.start, t.numel) for s in trace.steps for t in s.transfers
                          if t.src == r and t.numel > 0]
        expected_recvs = [(t.src, t.numel) for s in trace.steps for t in s.transfers
                          if t.dst == r and t.numel > 0]
        if algorithm == "ring_all_reduce":
            # the real ring sends views of the caller's buffer: the offset names the chunk
            assert [(p, off, k) for _, p, off, k in sends] == expected_sends, f"rank {r}"
            assert [st for st, *_ in sends] == [i for i, s in enumerate(trace.steps)
                                                for t in s.transfers if t.src == r and t.numel > 0]
        else:
            assert [(p, k) for _, p, _, k in sends] == [(d, k) for d, _, k in expected_sends], f"rank {r}"
        assert [(p, k) for _, p, k in recvs] == expected_recvs, f"rank {r}"
        assert stats.bytes_sent == trace.bytes_sent(r, 8) and stats.messages == trace.messages(r)
    expected = trace.values(_inputs(n, length))
    for r, (buf, *_rest) in enumerate(real):
        if algorithm == "tree_reduce" and r != root:
            continue  # non-root ranks keep their input; the trace shows their working partial sums
        np.testing.assert_array_equal(buf, expected[r])


def test_values_of_intermediate_steps():
    t = trace_collective("ring_all_reduce", 3, 3)
    x = np.array([[1.0, 10, 100], [2, 20, 200], [4, 40, 400]])
    # after the first round rank 1 has added rank 0's chunk 2 (rank 0 sends chunk (0-0-1)%3 = 2)
    v = t.values(x, after=1)
    assert v[1].tolist() == [2, 20, 300] and v[0].tolist() == [1, 50, 100]  # rank 2 sent its chunk 1
    assert t.values(x).tolist() == [[7, 70, 700]] * 3
