"""Lab 13: automatic differentiation on the IR (reverse and forward mode), and the three ways to
differentiate (symbolic, finite differences, automatic).

Tolerances. Everything runs in float64 (ε = 2⁻⁵² ≈ 2.2e-16). Where our backward graph performs
the same torch ops in the same order as torch.autograd's backward, results are compared for exact
equality (the MLP's W2 and b2 gradients, most single-op rules). Elsewhere they are compared with
relative tolerance 1e-12: torch's fused backward kernels round differently (aten's tanh_backward
computes g·(1 − y²) with a different rounding than our mul/sub nodes, ≈1 ulp per element), and
these last-bit differences then propagate through a few matmuls — errors of order 10–100 ε, far
below 1e-12, while a wrong rule is off by O(1). Finite differences carry truncation and rounding
error (central, h = 1e-6: about h²|f'''| + ε|f|/h ≈ 1e-10), so they are compared at 1e-6.
"""
import math

import pytest
import torch

from labkit.compiler import autodiff as AD
from labkit.compiler import differentiation as D
from labkit.compiler import ir
from labkit.compiler.ir import Graph, build_mlp, mlp_eager, mlp_feeds, run, topo_order

F64 = torch.float64
RTOL = 1e-12


def assert_close(got, want, rtol, atol=0.0, msg=""):
    """|got − want| <= atol + rtol·|want| elementwise, same shape and dtype (torch.testing's
    version costs ~2 s to import on first use)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (msg, got.shape, want.shape)
    err = (got - want).abs()
    assert bool((err <= atol + rtol * want.abs()).all()), f"{msg}: max |error| {float(err.max()):.3e}"


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- reverse mode on the MLP --------------------------------------------------------------------
def test_mlp_gradients_equal_torch_autograd():
    dims = (6, 4, 5, 3)
    graph, loss, _ = build_mlp(*dims)
    feeds = mlp_feeds(*dims, seed=7)
    grads = AD.grad(graph, loss, list(ir.MLP_INPUTS))
    got = run(graph, feeds, grads)
    leaves = {k: v.clone().requires_grad_() for k, v in feeds.items()}
    want_loss, _ = mlp_eager(**leaves)
    want = dict(zip(ir.MLP_INPUTS, torch.autograd.grad(want_loss, [leaves[k] for k in ir.MLP_INPUTS])))
    for name in ir.MLP_INPUTS:
        assert got[name].shape == feeds[name].shape
        assert_close(got[name], want[name], rtol=RTOL, atol=1e-15, msg=name)
    # the layers after the tanh use the same kernels in the same order as autograd: exact
    for name in ("W2", "b2", "target"):
        assert torch.equal(got[name], want[name]), name


def test_backward_is_a_graph_in_the_same_ir():
    graph, loss, _ = build_mlp(3, 2, 4, 1)
    n_forward = len(graph.nodes)
    grads = AD.grad(graph, loss, ["W1", "W2"])
    backward = graph.nodes[n_forward:]
    assert backward and all(n.op in ir.KERNELS for n in backward)
    # nothing dead left behind: every node grad added is needed by some gradient
    needed = set(topo_order(list(grads.values())))
    assert all(n in needed for n in backward)
    # it prints like any graph, and gradients of W2 never need W1's backward
    text = graph.listing([grads["W2"]])
    assert "tanh" in text and "transpose" in text
    assert len(topo_order(grads["W2"])) < len(topo_order(grads["W1"]))
    # one backward graph, run with new values, still right
    feeds = mlp_feeds(3, 2, 4, 1, seed=9)
    leaves = {k: v.clone().requires_grad_() for k, v in feeds.items()}
    want = torch.autograd.grad(mlp_eager(**leaves)[0], [leaves["W1"], leaves["W2"]])
    got = run(graph, feeds, [grads["W1"], grads["W2"]])
    for a, b in zip(got, want):
        assert_close(a, b, rtol=RTOL, atol=1e-15)


def test_fan_out_accumulates_and_unused_inputs_get_zero():
    g = Graph()
    x = g.input("x", (3,))
    g.input("y", (3,))
    out = g.sum(x * x + x + g.sin(x) * g.exp(x))   # x read four times
    grads = AD.grad(g, out, ["x", "y"])
    xv = torch.tensor([0.3, -1.2, 2.0], dtype=F64)
    got = run(g, {"x": xv, "y": torch.zeros(3)}, grads)
    want = 2 * xv + 1 + torch.cos(xv) * torch.exp(xv) + torch.sin(xv) * torch.exp(xv)
    assert_close(got["x"], want, rtol=1e-15, atol=1e-15)
    assert torch.equal(got["y"], torch.zeros(3, dtype=F64))
    got["y"] += 1.0                  # the zero gradient is a copy, not the graph's constant
    assert torch.equal(run(g, {"x": xv, "y": torch.zeros(3)}, grads["y"]), torch.zeros(3, dtype=F64))


def test_second_derivative_by_differentiating_the_backward_graph():
    g = Graph()
    x = g.input("x", ())
    y = g.tanh(x) * g.sin(x)
    dy = AD.grad(g, y, x)["x"]
    d2y = AD.grad(g, dy, x)["x"]
    for xv in (-1.3, 0.2, 0.9):
        t, s, c = math.tanh(xv), math.sin(xv), math.cos(xv)
        dt = 1 - t * t
        want1 = dt * s + t * c
        want2 = -2 * t * dt * s + 2 * dt * c - t * s
        got1, got2 = run(g, {"x": xv}, [dy, d2y])
        assert float(got1) == pytest.approx(want1, rel=1e-14)
        assert float(got2) == pytest.approx(want2, rel=1e-13)


def test_grad_argument_checks():
    g = Graph()
    a = g.input("a", (2,))
    v = g.exp(a)
    with pytest.raises(ValueError, match=r"^grad: output has shape \(2,\); reverse mode needs a scalar"):
        AD.grad(g, v, "a")
    with pytest.raises(ValueError, match="^grad: no input named 'b'"):
        AD.grad(g, g.sum(v), "b")
    with pytest.raises(ValueError, match="^grad: input 'a' listed twice"):
        AD.grad(g, g.sum(v), ["a", "a"])
    with pytest.raises(ValueError, match="^grad: seed must be a node"):
        AD.grad(g, v, "a", seed=g.input("s", (3,)))


# ---- each VJP rule: graph rule vs torch.autograd vs finite differences vs the eager twin -------
def _cases():
    """(label, op, input tensors, attrs) with inputs away from kinks and poles."""
    r = lambda seed, *shape: torch.randn(*shape, generator=_gen(seed), dtype=F64)  # noqa: E731
    pos = lambda seed, *shape: torch.rand(*shape, generator=_gen(seed), dtype=F64) + 0.5  # noqa: E731
    away = lambda seed, *shape: torch.sign(r(seed, *shape)) * (0.2 + r(seed + 1, *shape).abs())  # noqa: E731
    scalar = torch.tensor(0.7, dtype=F64)
    return [
        ("add", "add", [r(1, 2, 3), r(2, 2, 3)], {}),
        ("add scalar", "add", [scalar, r(2, 2, 3)], {}),
        ("sub", "sub", [r(3, 2, 3), r(4, 2, 3)], {}),
        ("sub scalar", "sub", [r(3, 2, 3), scalar], {}),
        ("mul", "mul", [r(5, 2, 3), r(6, 2, 3)], {}),
        ("mul scalar", "mul", [r(5, 4), scalar], {}),
        ("div", "div", [r(7, 2, 3), away(8, 2, 3)], {}),
        ("div scalar num", "div", [scalar, away(8, 2, 3)], {}),
        ("div scalar den", "div", [r(7, 2, 3), scalar], {}),
        ("neg", "neg", [r(9, 3)], {}),
        ("exp", "exp", [r(10, 2, 3)], {}),
        ("log", "log", [pos(11, 2, 3)], {}),
        ("tanh", "tanh", [r(12, 2, 3)], {}),
        ("relu", "relu", [away(13, 3, 4)], {}),
        ("sin", "sin", [r(14, 5)], {}),
        ("cos", "cos", [r(15, 5)], {}),
        ("matmul", "matmul", [r(16, 3, 4), r(17, 4, 2)], {}),
        ("transpose", "transpose", [r(18, 3, 4)], {}),
        ("sum all", "sum", [r(19, 3, 4)], {"axis": None}),
        ("sum axis 0", "sum", [r(20, 3, 4)], {"axis": 0}),
        ("sum axis -1", "sum", [r(21, 3, 4)], {"axis": -1}),
        ("expand", "expand", [r(22, 4)], {"axis": 0, "size": 3}),
        ("expand mid", "expand", [r(23, 2, 4)], {"axis": 1, "size": 3}),
        ("broadcast", "broadcast", [scalar], {"shape": (2, 3)}),
    ]


CASES = _cases()


def _build_one(op, inputs, attrs):
    g = Graph()
    nodes = [g.input(f"i{k}", tuple(t.shape)) for k, t in enumerate(inputs)]
    kwargs = {k: v for k, v in attrs.items()}
    node = getattr(g, op)(*nodes, **kwargs)
    return g, nodes, node


def _f(op, inputs, attrs):
    g, nodes, node = _build_one(op, inputs, attrs)
    return run(g, {f"i{k}": t for k, t in enumerate(inputs)}, node)


@pytest.mark.parametrize("label,op,inputs,attrs", CASES, ids=[c[0] for c in CASES])
def test_vjp_rule_against_autograd_fd_and_eager(label, op, inputs, attrs):
    g, nodes, node = _build_one(op, inputs, attrs)
    upstream = g.input("gout", node.shape)
    rule_nodes = AD.VJP_RULES[op](node, upstream, g)
    assert len(rule_nodes) == len(inputs)
    gout = torch.randn(node.shape, generator=_gen(99), dtype=F64)
    feeds = {**{f"i{k}": t for k, t in enumerate(inputs)}, "gout": gout}
    out, *got = run(g, feeds, [node, *rule_nodes])
    for t, gr in zip(inputs, got):
        assert gr.shape == t.shape

    # 1. torch.autograd on the same forward computation
    leaves = [t.clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(ir.KERNELS[op](leaves, node.attrs), leaves, gout)
    for gr, w in zip(got, want):
        assert_close(gr, w, rtol=RTOL, atol=1e-14)

    # 2. central finite differences of L = Σ out·gout, element by element
    h = 1e-6
    for k, t in enumerate(inputs):
        fd = torch.zeros_like(t).reshape(-1)
        for j in range(t.numel()):
            plus, minus = [u.clone() for u in inputs], [u.clone() for u in inputs]
            plus[k].reshape(-1)[j] += h
            minus[k].reshape(-1)[j] -= h
            fd[j] = ((_f(op, plus, attrs) * gout).sum() - (_f(op, minus, attrs) * gout).sum()) / (2 * h)
        assert_close(got[k], fd.reshape(t.shape), rtol=1e-6, atol=1e-7)

    # 3. the eager twin gives the same numbers (same formulas, same kernels: exact)
    eager = AD.vjp(op, inputs, out, gout, attrs)
    assert len(eager) == len(inputs)
    for gr, e in zip(got, eager):
        assert e.shape == gr.shape and e.is_contiguous()
        assert torch.equal(gr, e)


def test_step_has_zero_gradient_and_relu_is_zero_at_zero():
    x = torch.tensor([-1.0, 0.0, 2.0], dtype=F64)
    g = torch.ones(3, dtype=F64)
    assert torch.equal(AD.vjp("step", [x], (x > 0).double(), g)[0], torch.zeros(3, dtype=F64))
    assert torch.equal(AD.vjp("relu", [x], x.clamp(min=0), g)[0], torch.tensor([0.0, 0.0, 1.0], dtype=F64))
    gr = Graph()
    a = gr.input("a", (3,))
    assert torch.equal(run(gr, {"a": x}, AD.grad(gr, gr.sum(gr.step(a)), a)["a"]), torch.zeros(3, dtype=F64))


def test_every_op_has_a_vjp_rule_an_eager_twin_and_a_dual_kernel():
    differentiable = set(ir.KERNELS) - {"constant"}
    assert set(AD.VJP_RULES) == differentiable == set(AD.VJP_OPS)
    assert set(AD.DUAL_KERNELS) == set(ir.KERNELS)


def test_vjp_contract_errors():
    x = torch.ones(2, 2, dtype=F64)
    with pytest.raises(ValueError, match="^vjp: unknown op 'pow'"):
        AD.vjp("pow", [x], x, x)
    with pytest.raises(ValueError, match="^vjp: mul takes 2 inputs, got 1$"):
        AD.vjp("mul", [x], x, x)
    with pytest.raises(ValueError, match=r"^vjp: grad_output shape \(2,\) differs from output shape"):
        AD.vjp("exp", [x], x, torch.ones(2))
    with pytest.raises(TypeError, match="^vjp: inputs must be a list of tensors$"):
        AD.vjp("exp", x, x, x)
    with pytest.raises(ValueError, match=r"^vjp: attrs\['axis'\] must be an int in -2..1, got 2$"):
        AD.vjp("sum", [x], x.sum(0), torch.ones(2, dtype=F64), {"axis": 2})
    with pytest.raises(ValueError, match="^vjp: expand needs attrs"):
        AD.vjp("expand", [x], x, x)
    # sum with attrs None sums everything
    (gx,) = AD.vjp("sum", [x], x.sum(), torch.tensor(3.0, dtype=F64))
    assert torch.equal(gx, torch.full((2, 2), 3.0, dtype=F64))


# ---- forward mode ------------------------------------------------------------------------------------
def test_dual_numbers_apply_the_chain_rule():
    a, b = AD.Dual(2.0, 1.0), AD.Dual(3.0, 0.0)       # d/da of each expression
    assert float((a * b).tangent) == 3.0
    assert float((a / b).tangent) == pytest.approx(1 / 3, rel=1e-15)
    assert float((b / a).tangent) == pytest.approx(-3 / 4, rel=1e-15)
    assert float((1.0 - a * a).tangent) == -4.0
    assert float(a.exp().tangent) == pytest.approx(math.exp(2.0), rel=1e-15)
    assert float(a.tanh().tangent) == pytest.approx(1 - math.tanh(2.0) ** 2, rel=1e-15)
    with pytest.raises(ValueError, match=r"^Dual: tangent shape \(3,\) differs from value shape \(2,\)$"):
        AD.Dual(torch.zeros(2), torch.zeros(3))


def test_jvp_equals_directional_derivative_from_reverse_mode_and_torch():
    dims = (5, 4, 6, 2)
    graph, loss, y = build_mlp(*dims)
    feeds = mlp_feeds(*dims, seed=4)
    direction = {k: torch.randn(v.shape, generator=_gen(50 + i), dtype=F64)
                 for i, (k, v) in enumerate(feeds.items())}
    (val, yv), (tan, ytan) = AD.jvp(graph, feeds, direction)
    assert torch.equal(val, run(graph, feeds, loss)) and torch.equal(yv, run(graph, feeds, y))
    grads = run(graph, feeds, AD.grad(graph, loss, list(ir.MLP_INPUTS)))
    directional = sum((grads[k] * direction[k]).sum() for k in ir.MLP_INPUTS)
    assert float(tan) == pytest.approx(float(directional), rel=RTOL)
    _, want = torch.autograd.functional.jvp(lambda *a: mlp_eager(*a)[1],
                                           tuple(feeds[k] for k in ir.MLP_INPUTS),
                                           tuple(direction[k] for k in ir.MLP_INPUTS))
    assert_close(ytan, want, rtol=RTOL, atol=1e-15)
    # inputs left out of the tangents are held fixed
    (_, _), (t_x, _) = AD.jvp(graph, feeds, {"x": direction["x"]})
    assert float(t_x) == pytest.approx(float((grads["x"] * direction["x"]).sum()), rel=RTOL)


# ---- Jacobians: forward needs n passes, reverse m -----------------------------------------------
@pytest.mark.parametrize("n,m", [(3, 5), (1, 4), (6, 1)])
def test_jacobian_both_ways_equals_torch(n, m):
    graph, y, feeds = AD.example_function(n, m, hidden=7, seed=n + m)
    w1 = graph.nodes[2].attrs["value"]
    w2 = graph.nodes[1].attrs["value"]
    want = torch.autograd.functional.jacobian(lambda x: torch.sin(w2 @ torch.tanh(w1 @ x)), feeds["x"])
    want = want.reshape(m, n)
    fwd = AD.jacobian_forward(graph, feeds, "x", y)
    rev = AD.jacobian_reverse(graph, feeds, "x", y)
    assert (fwd.passes, rev.passes) == (n, m)
    assert_close(fwd.jacobian, want, rtol=RTOL, atol=1e-15)
    assert_close(rev.jacobian, want, rtol=RTOL, atol=1e-15)


def test_jacobian_race_forward_wins_few_inputs_reverse_wins_few_outputs():
    table = AD.jacobian_race(((1, 100), (100, 1)), hidden=16, repeats=3)
    assert table.column("fwd passes") == [1, 100] and table.column("rev passes") == [100, 1]
    # 100x fewer passes: a factor no scheduling noise on a shared CPU undoes
    assert table.column("faster") == ["forward", "reverse"]
    fwd_ms, rev_ms = table.column("fwd ms"), table.column("rev ms")
    assert rev_ms[0] > 10 * fwd_ms[0] and fwd_ms[1] > 10 * rev_ms[1]
    assert max(table.column("max |diff|")) < 1e-14


# ---- three ways to differentiate -------------------------------------------------------------------
def test_symbolic_simplification_and_sharing():
    x = D.var("x")
    assert D.mul(D.const(1), x) is x and D.add(x, D.const(0)) is x and D.mul(x, D.const(0)) is D.const(0)
    assert D.sub(x * x, x * x) is D.const(0) and D.neg(D.neg(x)) is x
    assert D.const(2) * D.const(3) is D.const(6)
    assert x * D.sin(x) is x * D.sin(x)                   # hash-consed: equal means identical
    assert str(D.diff(x * x)) == "(x + x)"
    assert str(D.diff(D.sin(x))) == "cos(x)"
    assert D.tree_size(x * D.sin(x)) == 4 and D.dag_size(x * D.sin(x)) == 3


@pytest.mark.parametrize("xv", [-1.1, 0.3, 0.7, 2.5])
def test_symbolic_derivative_is_exact_formula(xv):
    e = D.example_expr()
    want = (math.sin(xv) + xv * math.cos(xv) + xv * math.sin(xv)) * math.exp(xv)
    assert D.evaluate(D.diff(e), xv) == pytest.approx(want, rel=1e-14)
    assert D.exact_derivative(e, xv) == pytest.approx(want, rel=1e-14)
    if xv > 0:                                   # quotient, log, cos and a chain
        x = D.var("x")
        q = D.log(x) / (1.0 + x * x) - D.cos(D.exp(x))
        ex = math.exp(xv)
        dq = (1 / xv * (1 + xv * xv) - math.log(xv) * 2 * xv) / (1 + xv * xv) ** 2 + math.sin(ex) * ex
        assert D.evaluate(D.diff(q), xv) == pytest.approx(dq, rel=1e-13)


def test_expression_swell_versus_automatic_differentiation():
    table = D.swell_table(range(1, 7))
    f_tree, df_tree = table.column("f tree"), table.column("f' tree")
    assert f_tree == [6 * 2 ** d - 5 for d in range(1, 7)]         # s_{k+1} = 2 s_k + 5
    ratio = table.column("f'/f")
    assert all(b > a for a, b in zip(ratio, ratio[1:])) and ratio[-1] > 5   # f' outgrows f
    assert all(b > 2 * a for a, b in zip(df_tree, df_tree[1:]))
    # the graphs AD works on grow by a constant per level, and the backward stays a bounded
    # multiple of the forward
    fwd, bwd = table.column("AD fwd nodes"), table.column("AD bwd nodes")
    assert len({b - a for a, b in zip(fwd, fwd[1:])}) == 1
    assert all(b <= 2 * f for f, b in zip(fwd, bwd))
    # the formula and the AD graph agree on the value
    e = D.nested_product(4)
    g, x, out = D.to_graph(e)
    gx = AD.grad(g, out, x)["x"]
    for xv in (0.1, 0.35, 0.8):
        assert float(run(g, {"x": xv}, gx)) == pytest.approx(D.evaluate(D.diff(e), xv), rel=1e-12)


def test_finite_difference_error_versus_step_size():
    s = D.fd_sweep(x=0.7)
    steps = D.optimal_steps(D.example_expr(), 0.7)
    # truncation regime: error ∝ h (forward), h² (central); rounding regime: ∝ 1/h
    assert s.slope("forward", 1e-4, 1e-2) == pytest.approx(1.0, abs=0.05)
    assert s.slope("central", 1e-3, 1e-1) == pytest.approx(2.0, abs=0.05)
    assert -1.5 < s.slope("forward", 1e-15, 1e-11) < -0.6
    assert -1.5 < s.slope("central", 1e-15, 1e-9) < -0.6
    # the measured best h sits near the modelled optimum, around sqrt(eps) / eps^(1/3)
    assert steps["forward"] / 10 < s.best_forward_h < steps["forward"] * 10
    assert steps["central"] / 10 < s.best_central_h < steps["central"] * 10
    assert 1e-9 < s.best_forward_h < 1e-7 and 1e-7 < s.best_central_h < 1e-4
    # best errors: about sqrt(eps) and eps^(2/3) relative to |f'|, far from eps
    rel_f, rel_c = s.best_forward_error / abs(s.exact), s.best_central_error / abs(s.exact)
    assert 1e-10 < rel_f < 1e-7 and 1e-13 < rel_c < 1e-10
    assert str(s.table()).count("\n") >= 10


def test_compare_methods_table():
    table = D.compare_methods(x=0.7)
    err = dict(zip(table.column("method"), table.column("abs error")))
    exact = D.exact_derivative(D.example_expr(), 0.7)
    for exact_method in ("symbolic", "AD forward mode", "AD reverse mode"):
        assert err[exact_method] <= 8 * D.EPS * abs(exact)
    assert 1e-9 < err["forward difference"] / abs(exact) < 1e-6
    assert 1e-13 < err["central difference"] / abs(exact) < 1e-9
    assert all(len(line) <= 100 for line in str(table).splitlines())


def test_differentiation_argument_checks():
    with pytest.raises(ValueError, match="^forward_difference: h must be a finite positive number"):
        D.forward_difference(math.sin, 0.0, -1e-3)
    with pytest.raises(TypeError, match="^fd_sweep: per_decade must be an int"):
        D.fd_sweep(per_decade=2.0)
    with pytest.raises(ValueError, match="^nested_product: depth must be an int in 0..64"):
        D.nested_product(-1)
    with pytest.raises(TypeError, match="^diff: expected an Expr"):
        D.diff(1.0)
