"""Graded tests for Lab 11 (exercises/lab11_parallel3d.py). Run: python -m labkit.grade --lab 11.

All five exercises are pure functions; the judge compares what the submission returns with
labkit's own answers (`labkit.parallel3d.grid`, `labkit.planner.memory.first_stage_bytes`,
`labkit.planner.model.flops_per_iteration`, `labkit.cluster.autoparallel.partition_stages`) on
fixed and seeded random grids, plans, models and layer costs. Integers are compared exactly;
``fits_in_memory``'s bytes to 1e-12 relative (a few float products and one quotient), and
``partition_stages``'s bottleneck exactly (both sides sum a stage with math.fsum).
"""
import random

import pytest

from labkit.cluster.autoparallel import partition_stages
from labkit.grading.generate import references
from labkit.grading.static import Policy
from labkit.parallel3d.grid import coords, groups
from labkit.planner.memory import first_stage_bytes
from labkit.planner.model import Model, flops_per_iteration

POLICY = Policy(references=references("lab11_parallel3d"))
GRIDS = ((2, 2, 2), (1, 8, 1), (3, 2, 4), (4, 1, 2), (2, 4, 3), (1, 1, 1))


def _random_grids(seed, n=6):
    rng = random.Random(seed)
    return [tuple(rng.choice((1, 2, 3, 4, 5, 8)) for _ in range(3)) for _ in range(n)]


# ---- rank_coords ------------------------------------------------------------------------------

@pytest.mark.graded(points=1, exercise="rank_coords")
def test_rank_coords_of_the_2x2x2_grid(impl):
    for rank in range(8):
        got = tuple(impl.rank_coords(rank, 2, 2, 2))
        assert got == coords(rank, 2, 2, 2), f"rank {rank} of dp=tp=pp=2: {got}, want {coords(rank, 2, 2, 2)}"


@pytest.mark.graded(points=2, exercise="rank_coords")
def test_rank_coords_tp_is_innermost(impl, seed):
    for dp, tp, pp in GRIDS + tuple(_random_grids(seed)):
        for rank in range(dp * tp * pp):
            got = tuple(impl.rank_coords(rank, dp, tp, pp))
            want = coords(rank, dp, tp, pp)
            assert got == want, f"rank {rank} of dp={dp} tp={tp} pp={pp}: {got}, want (dp, tp, pp) = {want}"


# ---- group_ranks ------------------------------------------------------------------------------

@pytest.mark.graded(points=3, exercise="group_ranks")
def test_group_ranks(impl, seed):
    for dp, tp, pp in GRIDS + tuple(_random_grids(seed)):
        table = groups(dp, tp, pp)
        for kind in ("dp", "tp", "pp"):
            mine = {r: g for g in table[kind] for r in g}
            for rank in range(dp * tp * pp):
                got = list(impl.group_ranks(rank, kind, dp, tp, pp))
                assert got == sorted(mine[rank]), (f"{kind} group of rank {rank} (dp={dp} tp={tp} pp={pp}): "
                                                   f"{got}, want {sorted(mine[rank])}")


# ---- fits_in_memory ---------------------------------------------------------------------------

def _memory_cases(seed):
    rng = random.Random(seed)
    cases = [(1e9, 24, 1e8, 2, 2, 2, 8, 1, 8e9), (1e9, 24, 1e8, 2, 2, 2, 8, 1, 4e9)]
    for _ in range(40):
        pp = rng.choice((1, 2, 4, 8))
        case = (rng.uniform(1e8, 1e12), pp * rng.randint(1, 12), rng.uniform(1e6, 5e9), rng.choice((1, 2, 8, 64)),
                rng.choice((1, 2, 4, 8)), pp, rng.randint(1, 32), rng.randint(0, 3), rng.choice((16, 40, 80)) * 2**30)
        cases.append(case)
    return cases


@pytest.mark.graded(points=3, exercise="fits_in_memory")
def test_fits_in_memory(impl, seed):
    for case in _memory_cases(seed):
        want = first_stage_bytes(*case[:-1])
        fits, needed = impl.fits_in_memory(*case)
        args = ("Ψ={:.3g} l={} act/layer={:.3g} B dp={} tp={} pp={} m={} ZeRO-{} memory={:.3g} B".format(*case))
        assert needed == pytest.approx(want, rel=1e-12), f"{args}: needed {needed:.6g} B, want {want:.6g}"
        assert bool(fits) == (want <= case[-1]), f"{args}: fits={fits}, but {want:.4g} vs {case[-1]:.4g} bytes"


# ---- flops_per_iteration ----------------------------------------------------------------------

@pytest.mark.graded(points=1, exercise="flops_per_iteration")
def test_flops_of_the_megatron_1t_model(impl):
    model = Model(layers=128, hidden=25600, heads=160, seq_len=2048, vocab=51200)
    for recompute in (True, False):
        got = impl.flops_per_iteration(128, 25600, 2048, 51200, 3072, recompute)
        want = flops_per_iteration(model, 3072, recompute)
        assert got == want, f"1T model, batch 3072, recompute={recompute}: {got:.6g}, want {want:.6g}"


@pytest.mark.graded(points=2, exercise="flops_per_iteration")
def test_flops_random_models(impl, seed):
    rng = random.Random(seed)
    for _ in range(30):
        l, h, s, V, B = (rng.randint(1, 100), 64 * rng.randint(1, 200), rng.choice((128, 512, 2048, 4096)),
                         rng.randint(1000, 260000), rng.randint(1, 4096))
        recompute = rng.random() < 0.5
        want = flops_per_iteration(Model(layers=l, hidden=h, heads=1, seq_len=s, vocab=V), B, recompute)
        got = impl.flops_per_iteration(l, h, s, V, B, recompute)
        assert got == want, f"l={l} h={h} s={s} V={V} B={B} recompute={recompute}: {got}, want {want}"


# ---- partition_stages -------------------------------------------------------------------------

def _check_partition(impl, costs, stages):
    want_sizes, want_bottleneck = partition_stages(costs, stages)
    sizes, bottleneck = impl.partition_stages(list(costs), stages)
    where = f"costs={[round(c, 3) for c in costs]}, stages={stages}"
    assert bottleneck == want_bottleneck, f"{where}: bottleneck {bottleneck}, want {want_bottleneck}"
    assert list(sizes) == want_sizes, f"{where}: sizes {list(sizes)}, want {want_sizes}"


@pytest.mark.graded(points=1, exercise="partition_stages")
def test_partition_small_chains(impl):
    _check_partition(impl, [1.0] * 5, 2)
    _check_partition(impl, [4.0, 1.0, 1.0, 1.0, 1.0], 2)
    _check_partition(impl, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3)
    _check_partition(impl, [2.0, 2.0, 2.0], 3)
    _check_partition(impl, [3.0, 1.0, 2.0], 1)


@pytest.mark.graded(points=3, exercise="partition_stages")
def test_partition_random_chains(impl, seed):
    rng = random.Random(seed)
    for _ in range(40):
        n = rng.randint(1, 14)
        costs = [rng.choice((1.0, 2.0, 0.5, round(rng.uniform(0.1, 5), 2))) for _ in range(n)]
        _check_partition(impl, costs, rng.randint(1, n))
