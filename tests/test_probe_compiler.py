"""Probe: Lab 13's compiler pieces (the IR, vjp and autodiff, differentiation methods, the TASO-style
rewrite search, autotuning, fx passes) given bad input.

Each bad input gets a one-line error of the stated type naming the argument, fast. Inputs that used
to give a silent wrong answer are checked: vjp of shapes that do not compose (it returned (2, 4) and
(3, 5) gradients), a complex feed (its imaginary part was dropped), a (−2, 3) matrix (cost −8.8e−10),
Concat on axis 2, one name with two shapes, a negative FLOP rate, and dead-code elimination of
``torch.add(x, 1, out=buf)`` (it was dropped: the buffer kept its old value).
"""
import time

import numpy as np
import pytest
import torch
from torch import fx, nn

from labkit.compiler import autodiff as AD, autotune, differentiation as D, ir, rewrite_search as RS
from labkit.compiler.fx_passes import dead_code_elimination

T = torch.ones


def _graph():
    g = ir.Graph()
    x = g.input("x", (2,))
    g.output(g.exp(x))
    return g


BAD = [
    # vjp: shapes that do not compose
    ("vjp matmul (2,3)(4,5)", lambda: AD.vjp("matmul", [T(2, 3), T(4, 5)], T(2, 5), T(2, 5)), ValueError,
     "vjp: matmul needs inputs of shapes (m, k) and (k, n), got (2, 3) and (4, 5)"),
    ("vjp matmul wrong output", lambda: AD.vjp("matmul", [T(2, 3), T(3, 5)], T(2, 4), T(2, 4)), ValueError,
     "but output has shape (2, 4)"),
    ("vjp add shapes", lambda: AD.vjp("add", [T(2), T(3)], T(3), T(3)), ValueError, "vjp: add needs inputs of one shape"),
    ("vjp exp output", lambda: AD.vjp("exp", [T(2)], T(3), T(3)), ValueError, "vjp: exp of inputs of shapes (2,)"),
    ("vjp transpose 1-D", lambda: AD.vjp("transpose", [T(3)], T(3), T(3)), ValueError, "vjp: transpose needs a 2-D"),
    ("vjp broadcast", lambda: AD.vjp("broadcast", [T(2)], T(2, 2), T(2, 2), {"shape": (2, 2)}), ValueError,
     "vjp: broadcast needs a 0-d input"),
    ("vjp unknown op", lambda: AD.vjp("softmax", [T(2)], T(2), T(2)), ValueError, "vjp: unknown op"),
    ("vjp grad shape", lambda: AD.vjp("exp", [T(2)], T(2), T(3)), ValueError, "vjp: grad_output shape"),
    # the IR
    ("run complex feed", lambda: ir.run(_graph(), {"x": torch.tensor([1 + 2j, 3j])}), TypeError,
     "run: input 'x' is complex"),
    ("run complex numpy", lambda: ir.run(_graph(), {"x": np.array([1 + 2j, 3])}), TypeError, "run: input 'x' is complex"),
    ("run string feed", lambda: ir.run(_graph(), {"x": "ab"}), TypeError, "run: input 'x' must be a real tensor"),
    ("run wrong shape", lambda: ir.run(_graph(), {"x": torch.ones(3)}), ValueError, "run: input 'x' expects shape"),
    ("run unknown feed", lambda: ir.run(_graph(), {"x": torch.ones(2), "y": 1}), ValueError, "run: feeds name unknown"),
    ("mlp_feeds huge", lambda: ir.mlp_feeds(10 ** 18, 4, 4, 4), ValueError, "mlp_feeds: the largest input"),
    ("Dual None", lambda: AD.Dual(None), TypeError, "Dual: value and tangent must be real"),
    ("example huge", lambda: AD.example_function(10 ** 18, 4), ValueError, "example_function: max(n, m)·hidden"),
    ("jacobian_race repeats", lambda: AD.jacobian_race(repeats=10 ** 9), ValueError, "jacobian_race: repeats"),
    ("jacobian_race shapes", lambda: AD.jacobian_race(shapes=4), TypeError, "jacobian_race: shapes"),
    # differentiation methods
    ("nested depth", lambda: D.nested_product(10 ** 6), ValueError, "nested_product: depth must be an int in 0..64"),
    ("fd_sweep per_decade", lambda: D.fd_sweep(per_decade=10 ** 9), ValueError, "fd_sweep: per_decade"),
    ("fd_sweep e", lambda: D.fd_sweep(e=3), TypeError, "fd_sweep: e must be an Expr"),
    ("compare overflow", lambda: D.compare_methods(x=1e300), ValueError, "compare_methods: e cannot be evaluated"),
    ("swell depths", lambda: D.swell_table(depths=3), TypeError, "swell_table: depths"),
    ("Expr args", lambda: D.Expr("add", 3), TypeError, "Expr: op must be a string and args a tuple"),
    ("Expr value", lambda: D.Expr("const", (), [1]), TypeError, "Expr: value"),
    # the rewrite search
    ("Var (-2, 3)", lambda: RS.Var("A", (-2, 3)), ValueError, "Var: shape must be an int >= 1"),
    ("Var 3-D", lambda: RS.Var("A", (2, 3, 4)), ValueError, "Var: shape must be (rows, cols)"),
    ("Var name", lambda: RS.Var(3, (2, 3)), TypeError, "Var: name"),
    ("Concat axis 2", lambda: RS.Concat(RS.Var("A", (2, 2)), RS.Var("B", (2, 2)), 2), ValueError,
     "Concat: axis must be an int in 0..1"),
    ("MatMul of a number", lambda: RS.MatMul(RS.Var("A", (2, 2)), 3), TypeError, "MatMul: b must be an Expr"),
    ("Eye 0", lambda: RS.Eye(0), ValueError, "Eye: n"),
    ("one name two shapes", lambda: RS.greedy_search(RS.Var("A", (2, 3)) @ RS.Var("A", (3, 3))), ValueError,
     "greedy_search: variables: A has shapes"),
    ("backtracking pattern", lambda: RS.backtracking_search(RS.P("A")), TypeError, "backtracking_search: e must be"),
    ("search shapes", lambda: RS.backtracking_search(RS.Var("A", (2, 3)) + RS.Var("B", (3, 2))), ValueError,
     "backtracking_search: shape: Add"),
    ("negative FLOP rate", lambda: RS.CostModel(flops_per_s=-1e11), ValueError, "CostModel: flops_per_s"),
    ("zero bandwidth", lambda: RS.CostModel(bytes_per_s=0), ValueError, "CostModel: bytes_per_s"),
    ("verified trials", lambda: RS.verified_rules(trials=10 ** 9), ValueError, "verified_rules: trials"),
    ("verified seed", lambda: RS.verified_rules(seed=10 ** 30), ValueError, "verified_rules: seed"),
    ("verified candidates", lambda: RS.verified_rules(candidates=3), TypeError, "verified_rules: candidates"),
    # autotuning, fx passes
    ("blocked_space int", lambda: autotune.blocked_space(16), TypeError, "blocked_space: values"),
    ("blocked_space zero", lambda: autotune.blocked_space((0, 16)), ValueError, "blocked_space: values[i]"),
    ("blocked_measure huge", lambda: autotune.blocked_measure(n=10 ** 9), ValueError, "blocked_measure: n·n"),
    ("blocked_measure seed", lambda: autotune.blocked_measure(n=8, seed=0.5), TypeError, "blocked_measure: seed"),
    ("dce of a module", lambda: dead_code_elimination(nn.Linear(2, 2)), TypeError,
     "dead_code_elimination: gm must be a torch.fx.GraphModule"),
]


@pytest.mark.parametrize("name,call,exc,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_fast_one_line_error(name, call, exc, words):
    t0 = time.monotonic()
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - t0 < 15.0              # refused up front: the inputs that hung ran for hours


class WritesOut(nn.Module):
    def forward(self, x, buf):
        torch.add(x, 1, out=buf)          # result unused: only the write into buf matters
        return x * 2


def test_dead_code_elimination_keeps_a_write_through_out():
    gm = dead_code_elimination(fx.symbolic_trace(WritesOut()))
    buf = torch.zeros(3)
    gm(torch.ones(3), buf)
    assert torch.equal(buf, torch.full((3,), 2.0))
    assert any(n.kwargs.get("out") is not None for n in gm.graph.nodes)


def test_vjp_of_shapes_that_compose_is_still_right():
    a, b = torch.randn(2, 3, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    g = torch.randn(2, 5, dtype=torch.float64)
    ga, gb = AD.vjp("matmul", [a, b], a @ b, g)
    assert torch.equal(ga, g @ b.T) and torch.equal(gb, a.T @ g)


def test_real_feeds_keep_float64_precision():
    g = ir.Graph()
    x = g.input("x", ())
    g.output(x)
    assert ir.run(g, {"x": 0.1})[0].item() == 0.1             # not rounded through float32
