"""Lab 13 rewrite-rule search (`labkit.compiler.rewrite_search`): verified rules, cost, greedy vs
TASO-style backtracking. Values are compared in float64 with rtol = atol = 1e-9 (rewrites only
reorder exact sums of products; rounding differs by far less)."""
import pytest
import torch

from labkit.compiler.rewrite_search import (RULES, WRONG_RULES, Concat, CostModel, Eye, P, Rule, Var, Zero,
                                            backtracking_search, evaluate, greedy_search, measured_seconds,
                                            random_inputs, rewrites, shape, stuck_example, verified_rules,
                                            verify_rule)


def same_value(e1, e2):
    env = random_inputs(e1, seed=3)
    return torch.allclose(evaluate(e1, env), evaluate(e2, env), rtol=1e-9, atol=1e-9)


def test_every_rule_is_verified_and_the_wrong_candidate_is_rejected():
    for rule in RULES:
        verdict = verify_rule(rule)
        assert verdict.ok and verdict.trials > 0, (str(rule), verdict.reason)
    (wrong,) = WRONG_RULES
    verdict = verify_rule(wrong)
    assert not verdict.ok and verdict.reason.startswith("values differ")
    assert verified_rules() == RULES


def test_verifier_rejects_ill_typed_and_commuting_rules():
    a, b = P("A"), P("B")
    transposes = Rule("t-general", (a @ b).t(), a.t() @ b.t(), (("A", ("m", "k")), ("B", ("k", "n"))))
    commute = Rule("matmul-commute", a @ b, b @ a, (("A", ("n", "n")), ("B", ("n", "n"))))
    zero = Rule("zero-wrong-shape", a @ Zero(("k", "n")), Zero(("m", "k")), (("A", ("m", "k")),))
    for rule in (transposes, commute, zero):
        assert not verify_rule(rule, trials=20).ok, str(rule)
    with pytest.raises(ValueError, match="verify_rule: trials must be an int >= 1"):
        verify_rule(RULES[0], trials=0)


def test_rules_match_only_consistent_shapes():
    x = Var("X", (3, 4))
    identity = next(r for r in RULES if r.name == "matmul-identity-right")
    assert identity.apply(x @ Eye(4)) == x
    a, b, c = Var("A", (2, 3)), Var("B", (3, 5)), Var("C", (3, 5))
    factor = next(r for r in RULES if r.name == "factor-left")
    assert factor.apply(a @ b + a @ c) == a @ (b + c)
    assert factor.apply(a @ b + Var("A2", (2, 3)) @ c) is None       # different left operands
    with pytest.raises(ValueError, match="shape: MatMul of shapes"):
        shape(a @ a)


@pytest.mark.parametrize("expr", [
    stuck_example(3, 4),
    (Var("A", (2, 3)) @ Var("B", (3, 4))).t() + Var("D", (4, 2)),
    Concat(Var("A", (2, 3)) @ Var("B", (3, 4)), Var("A", (2, 3)) @ Var("C", (3, 2)), 1) + Zero((2, 6)),
    Eye(3) @ (Var("B", (3, 3)) + Var("C", (3, 3))).t().t(),
], ids=["stuck", "transpose", "concat", "identity"])
def test_every_rewrite_keeps_the_value(expr):
    found = rewrites(expr, RULES)
    assert found
    for name, new in found:
        assert shape(new) == shape(expr) and same_value(expr, new), (name, str(new))


def test_cost_model_counts_each_distinct_op_once():
    m, k, n = 3, 5, 7
    a, b = Var("A", (m, k)), Var("B", (k, n))
    cm = CostModel()
    assert cm.counts(a @ b) == (2 * m * k * n, m * k + k * n + m * n)
    assert cm.counts(a @ b + a @ b) == (2 * m * k * n + m * n, m * k + k * n + m * n + 3 * m * n)
    assert cm(a @ b) == pytest.approx(2 * m * k * n / 1e11 + (m * k + k * n + m * n) * 4 / 2e10)
    assert measured_seconds(a @ b, repeat=1) > 0


def test_greedy_finds_direct_improvements():
    a, b, c = Var("A", (4, 8)), Var("B", (8, 8)), Var("C", (8, 8))
    res = greedy_search(a @ b + a @ c)
    assert res.best == a @ (b + c) and res.path == ("factor-left",) and res.cost < res.start_cost
    x = Var("X", (64, 8))          # many rows share the weights: reading X once beats the weight concat
    shared = Concat(x @ b, x @ Var("E", (8, 3)), 1)
    res = greedy_search(shared)
    assert res.path == ("concat-shared-left",) and same_value(shared, res.best)


def test_greedy_is_stuck_where_backtracking_escapes():
    start = stuck_example()
    cm = CostModel()
    steps = rewrites(start, RULES)
    assert steps and all(cm(new) >= cm(start) for _, new in steps)   # a local optimum for greedy
    greedy = greedy_search(start)
    assert greedy.best == start and greedy.path == () and greedy.cost == cm(start)
    back = backtracking_search(start, alpha=1.05)
    assert back.cost < greedy.cost and same_value(start, back.best)
    first = next(new for name, new in steps if name == back.path[0])
    assert cm(first) > cm(start)                                     # the way out goes uphill first
    assert backtracking_search(start, alpha=1.0).cost == greedy.cost  # no uphill step: stuck too
    assert backtracking_search(stuck_example(48, 64), alpha=1.05).best == stuck_example(48, 64)
    assert backtracking_search(stuck_example(48, 64), alpha=1.2).cost < cm(stuck_example(48, 64))
