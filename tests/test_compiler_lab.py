"""The Lab 13 notebook's one-liners (labkit.compiler.lab)."""
import pytest
import torch

from labkit.compiler import autotune, lab
from labkit.gpu_model.coalescing import strided_addresses, transactions
from solutions import lab13_compilers as S


def _fits(table):
    assert all(len(line) <= 100 for line in str(table).splitlines()), str(table)


def test_the_mlp_graph_matches_eager_pytorch():
    r = lab.mlp_both_ways()
    assert r["loss_equal"] and r["grad_diff"] < 1e-15          # one rounding step (fused tanh_backward)
    assert "matmul(%x, %W1)" in r["listing"] and r["backward"].count("\n") > r["listing"].count("\n")


def test_pass_table_outputs_and_counts():
    table = lab.pass_table()
    _fits(table)
    rows = {row[0]: row for row in table.rows}
    for exact in ("dead code elimination", "constant folding", "common subexpressions", "elementwise fusion",
                  "QKV concatenation"):
        assert float(rows[exact][3]) == 0.0, exact               # same kernels on the same values
    assert 0 < float(rows["conv + batch norm"][3]) < 1e-5        # float32 ulps: the arithmetic is reordered
    assert rows["elementwise fusion"][2] == "6 -> 1" and rows["QKV concatenation"][2] == "5 -> 3"
    assert str(lab.pass_table()) == str(table)                    # deterministic (nbval compares it)


def test_rewrite_search_table_and_wrong_rule():
    rows = lab.rewrite_table().rows
    assert rows[0][2] == 1.0 and rows[1][2] == 1.0 and rows[2][2] < 0.8
    assert "rejected" in lab.wrong_rule_verdict()


def test_recompile_counts():
    counts = [row[1] for row in lab.recompile_table().rows]
    assert counts == [8, 2, 1]


def test_autotune_table_on_the_synthetic_surface():
    table = lab.autotune_table(budget=20, seeds=range(4))
    _fits(table)
    rows = {row[0]: row[1:] for row in table.rows}
    for method, curve in rows.items():
        assert list(curve) == sorted(curve, reverse=True) and all(v >= 1 for v in curve), method
    assert rows["model"][-1] <= rows["random"][-1]
    assert autotune.synthetic_cost({"BM": 64, "BN": 64, "BK": 64}) > 0


@pytest.mark.parametrize("exercise", ["vjp", "dead_code_elimination", "constant_folding",
                                      "common_subexpression_elimination", "transactions"])
def test_pictures_agree_with_the_solutions(exercise, capsys):
    lab.picture(exercise)(getattr(S, exercise))
    out = capsys.readouterr().out
    assert " NO" not in out and all(len(line) <= 100 for line in out.splitlines())


def test_pictures_show_a_wrong_answer():
    table = lab.transactions_picture(lambda addresses, segment: 1)
    assert any(row[1] != row[2] for row in table.rows)
    table = lab.vjp_picture(lambda op, ins, out, g, attrs: [torch.zeros_like(x) for x in ins])
    assert "NO" in [row[2] for row in table.rows]


def test_worked_problem_numbers():
    assert transactions(strided_addresses(3)) == 3
    eps = 2.0 ** -52
    assert eps ** (1 / 3) == pytest.approx(6.06e-6, rel=1e-2)
