"""Sharding specs (labkit.sharding): the placement rule against DTensor's own choices on real gloo
ranks (a (2,) mesh and a 2 x 2 mesh), the bytes CommBytesMode counts against Lab 05's ring
formulas, and the MLP's bytes under 1-D and 2-D sharding against the closed forms.

Exact: placements, collective counts and bytes. Results of the DTensor einsums: 1e-12 (float64
sums in another order).
"""
import itertools

import pytest
import torch

from labkit.dist import launch
from labkit.sharding import mlp
from labkit.sharding.dtensor import run_cases
from labkit.sharding.rules import cuts_line_up, einsum_placement, propagate

SHAPES = {"mk,kn->mn": ((8, 8), (8, 8)), "bmk,bkn->bmn": ((4, 8, 8), (4, 8, 8)),
          "bsh,hf->bsf": ((4, 8, 8), (8, 8)), "mk,nk->mn": ((8, 8), (8, 8))}


def _choices(n):
    return ["R", "P"] + [f"S({i})" for i in range(n)]


def test_the_rule_on_a_matmul():
    eq = "mk,kn->mn"
    assert einsum_placement(eq, "S(0)", "R") == "S(0)"          # rows of A: rows of the output
    assert einsum_placement(eq, "R", "S(1)") == "S(1)"          # columns of B: columns of the output
    assert einsum_placement(eq, "S(1)", "S(0)") == "P"          # the contracted dimension: partial sums
    assert einsum_placement(eq, "S(1)", "R") == "P"             # B cuts itself along k for free
    assert einsum_placement(eq, "P", "R") == "P" and einsum_placement(eq, "R", "R") == "R"
    assert einsum_placement(eq, "S(0)", "S(1)") is None and einsum_placement(eq, "P", "P") is None
    assert einsum_placement("bmk,bkn->bmn", "S(0)", "S(0)") == "S(0)"


@pytest.mark.parametrize("bad", ["S", "S(x)", "Shard(0)", "r", ""])
def test_bad_placements_and_equations_are_one_line(bad):
    with pytest.raises(ValueError, match="a placement is 'R', 'P' or 'S\\(i\\)'"):
        einsum_placement("mk,kn->mn", bad, "R")
    with pytest.raises(ValueError, match="einsum_placement: a=S\\(2\\) but that operand has 2 dimensions"):
        einsum_placement("mk,kn->mn", "S(2)", "R")
    with pytest.raises(ValueError, match="equation must look like"):
        einsum_placement("mk,kn", "R", "R")


def _agree(cases, answers):
    for (eq, a, b), ans in zip(cases, answers):
        assert ans["err"] < 1e-12
        rule = propagate(eq, a, b)
        moved = sum(ans["counts"].values())
        if rule is None:
            assert moved > 0, (eq, a, b, ans)
        else:
            assert moved == 0 and rule == ans["out"], (eq, a, b, rule, ans)


def test_the_rule_is_dtensors_on_a_line_of_two_ranks():
    cases = []
    for eq in SHAPES:
        lhs, rhs = eq.split("->")[0].split(",")
        cases += [(eq, (a,), (b,)) for a, b in itertools.product(_choices(len(lhs)), _choices(len(rhs)))]
    answers = launch(run_cases, 2, (2,), [(eq, a, b, *SHAPES[eq], 0) for eq, a, b in cases], timeout=240,
                     quiet=True)[0]
    _agree(cases, answers)


MESH_CASES = [
    ("mk,kn->mn", ("R", "S(1)"), ("S(1)", "S(0)")),            # the 2-D MLP's first matmul
    ("mk,kn->mn", ("S(1)", "R"), ("S(0)", "S(0)")),            # k cut along 0 then 1 in B: A extends locally
    ("mk,kn->mn", ("S(1)", "S(1)"), ("R", "S(0)")),            # cuts in the wrong order
    ("bsh,hf->bsf", ("S(2)", "R"), ("R", "S(0)")),             # h cut along different mesh dimensions
    ("bmk,bkn->bmn", ("S(0)", "S(2)"), ("S(0)", "S(1)")),
    ("bmk,bkn->bmn", ("S(0)", "S(0)"), ("R", "S(0)")),
    ("mk,nk->mn", ("S(0)", "S(1)"), ("R", "S(1)")),
    ("mk,kn->mn", ("P", "S(0)"), ("R", "R")),
    ("mk,kn->mn", ("S(0)", "P"), ("S(1)", "R")),
]


def test_the_mesh_rule_is_dtensors_on_a_two_by_two_mesh():
    answers = launch(run_cases, 4, (2, 2), [(eq, a, b, *SHAPES[eq], 1) for eq, a, b in MESH_CASES], timeout=240,
                     quiet=True)[0]
    _agree(MESH_CASES, answers)
    assert not cuts_line_up(*MESH_CASES[2]) and not cuts_line_up(*MESH_CASES[3]) and cuts_line_up(*MESH_CASES[1])


def _comm_bytes(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    from labkit.sharding.dtensor import CommBytesMode, make_dtensor

    mesh = init_device_mesh("cpu", (world,))
    t = torch.ones(8, 6, dtype=torch.float64)
    out = {}
    for name, src, dst in (("all_gather", "S(0)", Replicate()), ("reduce_scatter", "P", Shard(0)),
                           ("all_reduce", "P", Replicate())):
        d = make_dtensor(t, mesh, (src,))
        with CommBytesMode() as comm:
            d.redistribute(mesh, [dst])
        out[name] = (comm.bytes_sent, sum(comm.get_comm_counts().values()))
    return out


def test_comm_bytes_follow_the_ring_formulas():
    got = launch(_comm_bytes, 4, timeout=120, quiet=True)[0]
    s = 8 * 6 * 8                                               # the whole tensor's bytes
    assert got == {"all_gather": (3 / 4 * s, 1), "reduce_scatter": (3 / 4 * s, 1), "all_reduce": (2 * 3 / 4 * s, 1)}


@pytest.mark.parametrize("scheme", mlp.SCHEMES)
def test_mlp_bytes_equal_the_closed_forms(scheme):
    m, h, f = 16, 8, 32
    res = launch(mlp.mlp_rank, 4, scheme, m, h, f, timeout=120, quiet=True)
    want = mlp.bytes_1d(m, h, 4) if scheme == "1-D" else mlp.bytes_2d(m, h, f, 2, 2)
    for r in res:
        assert r["err"] < 1e-12 and r["bytes"] == want
        assert r["x_local"] == (m * h if scheme == "1-D" else m * h // 2)
    assert res[0]["out"] == (("R",) if scheme == "1-D" else ("R", "S(1)"))


def test_two_d_sends_less_from_five_by_five_on():
    assert mlp.crossover(h=1024, f=4096) == 5
    assert mlp.bytes_2d(1, 1024, 4096, 4, 4) == mlp.bytes_1d(1, 1024, 16)          # a tie on 4 x 4
    assert mlp.bytes_2d(1, 1024, 4096, 2, 2) > mlp.bytes_1d(1, 1024, 4)
