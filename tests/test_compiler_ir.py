"""Lab 13: the dataflow-graph IR — shape inference, the interpreter, the listing, the MLP two ways."""
import pytest
import torch

from labkit.compiler import ir
from labkit.compiler.ir import Graph, build_mlp, mlp_eager, mlp_feeds, run, topo_order

F64 = torch.float64


def assert_close(got, want, rtol, atol=0.0, msg=""):
    """|got − want| <= atol + rtol·|want| elementwise, same shape and dtype (torch.testing's
    version costs ~2 s to import on first use)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (msg, got.shape, want.shape)
    err = (got - want).abs()
    assert bool((err <= atol + rtol * want.abs()).all()), f"{msg}: max |error| {float(err.max()):.3e}"


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ---- one MLP, define-and-run vs define-by-run ---------------------------------------------------
@pytest.mark.parametrize("dims", [(4, 3, 5, 2), (1, 1, 1, 1), (7, 6, 9, 3)])
def test_mlp_graph_equals_eager_pytorch_exactly(dims):
    # both run the same torch kernels on the same values in the same order: bit-for-bit equal
    graph, loss, y = build_mlp(*dims)
    feeds = mlp_feeds(*dims, seed=3)
    got_loss, got_y = run(graph, feeds)
    want_loss, want_y = mlp_eager(**feeds)
    assert got_loss.shape == () and got_y.shape == (dims[0], dims[3])
    assert torch.equal(got_loss, want_loss) and torch.equal(got_y, want_y)
    # and the loss is what the formula says, computed independently
    h = torch.tanh(feeds["x"] @ feeds["W1"] + feeds["b1"])
    ref = ((h @ feeds["W2"] + feeds["b2"] - feeds["target"]) ** 2).mean()
    assert_close(got_loss, ref, rtol=1e-14, atol=0)


def test_mlp_graph_is_built_before_it_runs():
    graph, loss, _ = build_mlp(2, 3, 4, 1)
    assert [n.op for n in graph.nodes].count("input") == 6
    assert {"matmul", "expand", "tanh", "sum", "div"} <= {n.op for n in graph.nodes}
    # one graph, many runs with different values
    a = run(graph, mlp_feeds(2, 3, 4, 1, seed=0), loss)
    b = run(graph, mlp_feeds(2, 3, 4, 1, seed=1), loss)
    assert not torch.equal(a, b)


# ---- shape inference at build time ----------------------------------------------------------------
def test_matmul_shape_error_is_one_line_at_build_time():
    g = Graph()
    with pytest.raises(ValueError) as err:
        g.input("a", (3, 4)) @ g.input("b", (5, 2))
    assert str(err.value) == "Graph.matmul: (3, 4) @ (5, 2): inner sizes 4 and 5 differ"
    with pytest.raises(ValueError, match=r"Graph.matmul: \(3,\) @ \(3, 2\): both operands must be 2-D"):
        g.input("v", (3,)) @ g.input("m", (3, 2))


def test_elementwise_rule_equal_shapes_or_scalar():
    g = Graph()
    a, b, s = g.input("a", (2, 3)), g.input("b", (3, 2)), g.input("s", ())
    for op in ir.ELEMENTWISE_BINARY:
        with pytest.raises(ValueError, match=rf"^Graph.{op}: shapes \(2, 3\) and \(3, 2\) differ"):
            getattr(g, op)(a, b)
        assert getattr(g, op)(a, s).shape == (2, 3)
        assert getattr(g, op)(s, a).shape == (2, 3)
        assert getattr(g, op)(s, s).shape == ()
    v = g.input("v", (3,))
    with pytest.raises(ValueError, match="use expand"):  # no implicit bias broadcasting
        a + v
    assert (a + g.expand(v, 0, 2)).shape == (2, 3)
    # numbers become scalar constants on either side
    assert (2.0 * a - 1).shape == (2, 3) and (1 / a).shape == (2, 3)


def test_other_shape_rules():
    g = Graph()
    a = g.input("a", (2, 3))
    assert a.T.shape == (3, 2) and g.sum(a).shape == () and g.sum(a, 0).shape == (3,)
    assert g.sum(a, -1).shape == (2,) and g.sum(a, -1).attrs["axis"] == 1   # normalized
    assert g.expand(a, 1, 4).shape == (2, 4, 3) and g.expand(a, 2, 5).shape == (2, 3, 5)
    assert g.broadcast(g.sum(a), (4, 1)).shape == (4, 1)
    with pytest.raises(ValueError, match="^Graph.sum: axis must be an int in -2..1, got 2$"):
        g.sum(a, 2)
    with pytest.raises(TypeError, match="^Graph.sum: axis must be an int"):
        g.sum(a, 0.0)
    with pytest.raises(ValueError, match="^Graph.transpose: expected a 2-D operand"):
        g.transpose(g.sum(a, 0))
    with pytest.raises(ValueError, match="^Graph.broadcast: operand must be a scalar"):
        g.broadcast(a, (2, 3))
    with pytest.raises(ValueError, match="^Graph.expand: size must be an int >= 1"):
        g.expand(a, 0, 0)
    with pytest.raises(ValueError, match="^Graph.input: an input named 'a' already exists$"):
        g.input("a", (1,))
    with pytest.raises(ValueError, match="^Graph.input: shape entry must be an int >= 1"):
        g.input("z", (2, 0))
    with pytest.raises(TypeError, match="^Graph.input: shape must be a tuple"):
        g.input("z", 3)
    with pytest.raises(ValueError, match="belongs to another graph"):
        a + Graph().input("a", (2, 3))
    with pytest.raises(TypeError, match="^Graph.add: operands must be Nodes or numbers"):
        a + "1"


# ---- the interpreter ------------------------------------------------------------------------------
def test_every_kernel_against_plain_torch():
    x, y = _rand(3, 4, seed=1), _rand(3, 4, seed=2)
    p, m = x.abs() + 0.5, _rand(4, 2, seed=3)
    g = Graph()
    nx, ny, np_, nm = g.input("x", (3, 4)), g.input("y", (3, 4)), g.input("p", (3, 4)), g.input("m", (4, 2))
    cases = {
        "add": (nx + ny, x + y), "sub": (nx - ny, x - y), "mul": (nx * ny, x * y),
        "div": (nx / np_, x / p), "neg": (-nx, -x), "exp": (g.exp(nx), x.exp()),
        "log": (g.log(np_), p.log()), "tanh": (g.tanh(nx), x.tanh()), "relu": (g.relu(nx), x.clamp(min=0)),
        "step": (g.step(nx), (x > 0).double()), "sin": (g.sin(nx), x.sin()), "cos": (g.cos(nx), x.cos()),
        "matmul": (nx @ nm, x @ m), "transpose": (nx.T, x.t()), "sum": (g.sum(nx), x.sum()),
        "sum0": (g.sum(nx, 0), x.sum(0)), "sum1": (g.sum(nx, 1), x.sum(1)),
        "expand": (g.expand(g.sum(nx, 0), 0, 3), x.sum(0).repeat(3, 1)),
        "broadcast": (g.broadcast(g.sum(nx), (2, 2)), torch.full((2, 2), float(x.sum()), dtype=F64)),
        "constant": (g.constant(m), m), "scalar": (2.0 * nx - 1.0, 2 * x - 1),
    }
    got = run(g, {"x": x, "y": y, "p": p, "m": m}, {k: v[0] for k, v in cases.items()})
    for name, (_, want) in cases.items():
        assert got[name].dtype == F64
        assert_close(got[name], want, rtol=1e-15, atol=0, msg=name)
    assert set(ir.KERNELS) | {"input"} == set(ir.OPS)


def test_run_checks_feeds_and_accepts_float32_by_converting():
    g = Graph()
    a = g.input("a", (2, 2))
    g.output(g.tanh(a))
    with pytest.raises(ValueError, match="^run: no value fed for input 'a'$"):
        run(g, {})
    with pytest.raises(ValueError, match=r"^run: input 'a' expects shape \(2, 2\), got \(2,\)$"):
        run(g, {"a": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"^run: feeds name unknown inputs \['b'\]"):
        run(g, {"a": torch.zeros(2, 2), "b": 1.0})
    with pytest.raises(TypeError, match="^run: feeds must be a dict"):
        run(g, [1])
    out = run(g, {"a": torch.ones(2, 2, dtype=torch.float32)})
    assert isinstance(out, list) and out[0].dtype == F64
    with pytest.raises(ValueError, match="^run: the graph has no outputs"):
        run(Graph(), {})


def test_run_evaluates_only_what_the_outputs_need(monkeypatch):
    calls = []
    real_exp = ir.KERNELS["exp"]
    monkeypatch.setitem(ir.KERNELS, "exp", lambda args, attrs: calls.append(1) or real_exp(args, attrs))
    g = Graph()
    a = g.input("a", (3,))
    b = g.input("b", (3,))
    unused = g.exp(b)          # not needed by the output below; b need not even be fed
    out = g.neg(a)
    assert torch.equal(run(g, {"a": torch.ones(3)}, out), -torch.ones(3, dtype=F64))
    assert calls == []
    run(g, {"b": torch.ones(3)}, unused)
    assert calls == [1]


def test_topological_order_puts_every_node_after_its_inputs():
    graph, loss, y = build_mlp(2, 3, 4, 2)
    order = topo_order([loss, y])
    pos = {n: k for k, n in enumerate(order)}
    assert len(order) == len(graph.nodes) == len(pos)
    for n in order:
        assert all(pos[i] < pos[n] for i in n.inputs)
    # diamond: shared node visited once
    g = Graph()
    a = g.input("a", ())
    b, c = g.exp(a), g.sin(a)
    d = b * c
    assert topo_order(d) == [a, b, c, d]
    # a chain deeper than Python's recursion limit
    x = g.input("x", ())
    node = x
    for _ in range(5000):
        node = g.neg(node)
    assert len(topo_order(node)) == 5001
    assert float(run(g, {"x": 2.0}, node)) == 2.0


def test_listing_is_one_ssa_line_per_node():
    graph, loss, y = build_mlp(4, 3, 5, 2)
    text = str(graph)
    lines = text.splitlines()
    assert len(lines) == len(graph.nodes) + 1 and lines[-1].startswith("return ")
    assert all(len(line) <= 100 for line in lines)
    assert any(line.split("=", 1)[1].split(":")[0].strip() == "matmul(%x, %W1)" for line in lines)
    assert lines[0].replace(" ", "") == "%x=input:(4,3)"
    # each non-input node gets a fresh name, defined before it is used
    defined = set()
    for line in lines[:-1]:
        lhs, rhs = line.split("=", 1)
        args = [t.strip(" ,()") for t in rhs.split(":")[0].replace("(", " ").split() if t.startswith("%")]
        assert all(a in defined for a in args), line
        assert lhs.strip() not in defined
        defined.add(lhs.strip())
    # a partial listing of one output
    sub = graph.listing(y).splitlines()
    assert len(sub) == len(topo_order(y)) + 1 and "target" not in "".join(sub)
