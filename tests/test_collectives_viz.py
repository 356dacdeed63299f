"""Lab 05: the seven primitives' before/after states (checked against torch.distributed's own
collectives) and the drawing functions behind the notebook's pictures and ring animation."""
import pytest
import torch
import torch.distributed as dist

from labkit.collectives.primitives import PRIMITIVES, primitive_states
from labkit.collectives.simulate import trace_collective
from labkit.dist import launch
from labkit.viz import collectives as V


def _value(r, b, n):
    return float(2 ** (r * n + b))  # distinct powers of two: a sum decodes to its contributors


def _encode(cell, n):
    return sum(_value(r, b, n) for r, b in cell)


def _primitives_worker(rank, n, root):
    v = lambda b=0: torch.tensor([_value(rank, b, n)], dtype=torch.float64)  # noqa: E731
    out = {}
    t = v() if rank == root else torch.zeros(1, dtype=torch.float64)
    dist.broadcast(t, root)
    out["broadcast"] = [t]
    t = torch.zeros(1, dtype=torch.float64)
    dist.scatter(t, [v(b) for b in range(n)] if rank == root else None, src=root)
    out["scatter"] = [t]
    lst = [torch.zeros(1, dtype=torch.float64) for _ in range(n)]
    dist.gather(v(), lst if rank == root else None, dst=root)
    out["gather"] = lst if rank == root else None
    t = v()
    dist.reduce(t, root)
    out["reduce"] = [t] if rank == root else None
    lst = [torch.zeros(1, dtype=torch.float64) for _ in range(n)]
    dist.all_gather(lst, v())
    out["all_gather"] = lst
    t = torch.zeros(1, dtype=torch.float64)
    dist.reduce_scatter_tensor(t, torch.cat([v(b) for b in range(n)]))
    out["reduce_scatter"] = [t]
    t = v()
    dist.all_reduce(t)
    out["all_reduce"] = [t]
    return out


@pytest.mark.parametrize("n,root", [(1, 0), (3, 1), (4, 0)])
def test_primitive_states_match_torch_collectives(n, root):
    real = launch(_primitives_worker, n, root)
    for name in PRIMITIVES:
        before, after = primitive_states(name, n, root)
        assert len(before) == len(after) == n
        for r in range(n):
            got = real[r][name]
            if got is None:  # torch leaves these unspecified; so do our states
                assert all(not cell for cell in after[r]), (name, r)
                continue
            assert [float(t) for t in got] == [_encode(cell, n) for cell in after[r]], (name, r)


def test_primitive_states_bad_name():
    with pytest.raises(ValueError, match="unknown primitive"):
        primitive_states("allreduce", 4)


def test_ring_frame_shows_accumulation_and_transfers():
    trace = trace_collective("ring_all_reduce", 3, 7)
    first = V.ring_frame(trace, 0)
    assert "start" in first and first.count("<tr>") == 4  # header + 3 ranks
    # round 1 (reduce-scatter): rank 0 sends its chunk 2 to rank 1, which now holds A+B there
    f1 = V.ring_frame(trace, 1)
    assert "round 1/4: reduce-scatter" in f1
    assert "rank 0 → rank 1: chunk 2 (add, 2 el)" in f1
    assert "A+B" in f1 and f1.count("3px solid") == 3  # three cells written in this round
    last = V.ring_frame(trace, trace.n_steps)
    assert "all-gather" in last and last.count("A+B+C") == 9  # every chunk on every rank is complete
    with pytest.raises(ValueError, match="frame must be in"):
        V.ring_frame(trace, trace.n_steps + 1)


def test_chunk_colours_darken_as_contributions_accumulate():
    def lightness(hex_colour):
        return sum(int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))

    cols = [V.chunk_colour(1, k, 4) for k in range(5)]
    assert cols[0] == "#ffffff"
    assert all(lightness(a) > lightness(b) for a, b in zip(cols, cols[1:]))
    assert V.chunk_colour(0, 2, 4) != V.chunk_colour(1, 2, 4)  # a hue per chunk


def test_primitive_html_labels():
    before, after = primitive_states("reduce_scatter", 2)
    out = V.primitive_html("reduce_scatter", before, after)
    assert "A0" in out and "B1" in out and "A1+B1" in out and "A0+B0" in out
    before, after = primitive_states("broadcast", 3, root=1)
    out = V.primitive_html("broadcast", before, after)
    assert out.count(">B<") == 4 and "·" in out  # B before on rank 1, then on all 3 ranks


def test_alpha_beta_figure_draws_both_series():
    import matplotlib
    matplotlib.use("Agg")
    fig = V.alpha_beta_figure([1e3, 1e4], {"ring": [1e-4, 2e-4]}, {"ring": [1.1e-4, 2.1e-4]}, "t")
    assert len(fig.axes[0].lines) == 2


def test_result_frame_marks_wrong_cells_and_greys_unspecified_ones():
    from labkit.collectives.lab import YourRun

    t = trace_collective("ring_reduce_scatter", 2, 4)
    full = frozenset({0, 1})
    run = YourRun("ring_reduce_scatter_chunks", "ring_reduce_scatter", 2, 4, 0, t.bounds,
                  buffers=[[full, frozenset({1})], [None, frozenset({0})]], expected=t.final,
                  matters=[[True, False], [False, True]], stats=[{}, {}], want_bytes=[(0, 0), (0, 0)])
    html = V.result_frame(run)
    assert not run.results_ok
    assert html.count("3px solid #c00") == 1 and "want A+B" in html     # rank 1's chunk 1 is wrong
    assert html.count("background:#eee") == 2 and "?" in html            # unspecified cells, one undecodable
