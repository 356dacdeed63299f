"""Automatic differentiation on the `labkit.compiler.ir` graphs: reverse mode and forward mode.

Automatic differentiation is neither symbolic nor numerical differentiation. It never builds a
formula for the derivative of the whole function (so no expression swell), and it takes no finite
steps (so no truncation error): it applies the chain rule to the *program*, one primitive op at a
time, with values, and the result is exact up to floating-point rounding.

**Reverse mode** (`grad`). Each op has a vector-Jacobian product (VJP) rule: given the gradient
``ḡ`` of a scalar loss with respect to the op's output, it returns the gradients with respect to
the op's inputs, ``ḡ·∂out/∂in``. `grad` walks the nodes the output depends on in reverse
topological order, calls the rules, and adds up the contributions of every consumer of a node.
The rules do not compute numbers: they *build nodes in the same IR* (``VJP_RULES[op](node,
upstream, graph)``), so the backward pass is itself a graph that can be printed, rewritten and
run, and differentiated again (second derivatives come for free). One backward pass yields the
gradient of one scalar with respect to every input. For an output with m elements, one pass per
output element (seeded with a unit vector) gives one row of the Jacobian: m passes.

`vjp(op, inputs, output, grad_output, attrs)` is the eager twin of the rules: the same products
computed directly on tensors (the contract a graded exercise implements).

**Forward mode** (`jvp`). Every value carries a tangent, its derivative along one chosen input
direction: a dual number ``Dual(value, tangent)``, with arithmetic that applies the chain rule as
it goes (``(a, ȧ)·(b, ḃ) = (ab, ȧb + aḃ)``). One forward pass gives the derivative of *every*
output along one input direction, a column of the Jacobian: n passes for n input elements.

So for f: Rⁿ → Rᵐ, forward mode costs n passes and reverse mode m (`jacobian_race` counts and
times them). Training has one scalar loss and millions of parameters, hence reverse mode.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from labkit.checks import check_int, check_numel, check_sequence
from labkit.compiler.ir import (DTYPE, KERNELS, Graph, Node, _as_node_list, _check_feeds, _feed_tensor,
                                _fmt_shape, run, topo_order)
from labkit.table import Table

__all__ = ["VJP_RULES", "grad", "vjp", "VJP_OPS", "Dual", "DUAL_KERNELS", "jvp",
           "JacobianResult", "jacobian_forward", "jacobian_reverse", "example_function",
           "jacobian_race"]


# ---- reverse mode: VJP rules that build backward nodes ------------------------------------------
def _unbroadcast(graph: Graph, g: Node, inp: Node) -> Node:
    """The gradient for ``inp`` from ``g`` (the output's shape): a scalar operand that was
    combined with every element receives the sum of their gradients."""
    return graph.sum(g) if inp.shape == () and g.shape != () else g


def _vjp_add(node, g, graph):
    a, b = node.inputs
    return [_unbroadcast(graph, g, a), _unbroadcast(graph, g, b)]


def _vjp_sub(node, g, graph):
    a, b = node.inputs
    return [_unbroadcast(graph, g, a), _unbroadcast(graph, graph.neg(g), b)]


def _vjp_mul(node, g, graph):
    a, b = node.inputs
    return [_unbroadcast(graph, g * b, a), _unbroadcast(graph, g * a, b)]


def _vjp_div(node, g, graph):
    a, b = node.inputs                      # out = a / b; ∂out/∂b = −a/b² = −out/b
    return [_unbroadcast(graph, g / b, a), _unbroadcast(graph, graph.neg(g * node / b), b)]


def _vjp_matmul(node, g, graph):
    a, b = node.inputs                      # a (m, k), b (k, n), g (m, n)
    return [g @ b.T, a.T @ g]               # (m, k), (k, n)


def _vjp_sum(node, g, graph):
    (a,) = node.inputs
    axis = node.attrs["axis"]
    return [graph.broadcast(g, a.shape) if axis is None else graph.expand(g, axis, a.shape[axis])]


#: op -> rule(node, upstream gradient node, graph) -> [gradient node (or None = zero) per input].
#: Each rule builds nodes in ``graph``; a returned gradient has the shape of its input.
# BEGIN SOLUTION (labkit's backward rules: they answer vjp)
VJP_RULES = {
    "add": _vjp_add,
    "sub": _vjp_sub,
    "mul": _vjp_mul,
    "div": _vjp_div,
    "neg": lambda node, g, graph: [graph.neg(g)],
    "exp": lambda node, g, graph: [g * node],                                  # (eˣ)' = eˣ
    "log": lambda node, g, graph: [g / node.inputs[0]],
    "tanh": lambda node, g, graph: [g * (1.0 - node * node)],                  # 1 − tanh²
    "relu": lambda node, g, graph: [g * graph.step(node.inputs[0])],
    "step": lambda node, g, graph: [None],                                     # zero a.e.
    "sin": lambda node, g, graph: [g * graph.cos(node.inputs[0])],
    "cos": lambda node, g, graph: [graph.neg(g * graph.sin(node.inputs[0]))],
    "matmul": _vjp_matmul,
    "transpose": lambda node, g, graph: [g.T],
    "sum": _vjp_sum,
    "expand": lambda node, g, graph: [graph.sum(g, node.attrs["axis"])],
    "broadcast": lambda node, g, graph: [graph.sum(g)],
}
# END SOLUTION


def _fresh_name(graph: Graph, base: str) -> str:
    name, k = base, 1
    while name in graph.inputs:
        name, k = f"{base}{k}", k + 1
    return name


def _wrt_nodes(fn: str, graph: Graph, wrt) -> list:
    items = [wrt] if isinstance(wrt, (str, Node)) else list(wrt)
    nodes = []
    for w in items:
        if isinstance(w, str):
            if w not in graph.inputs:
                raise ValueError(f"{fn}: no input named {w!r}; inputs are {sorted(graph.inputs)}")
            w = graph.inputs[w]
        if not isinstance(w, Node) or w.graph is not graph or w.op != "input":
            raise ValueError(f"{fn}: wrt must name input nodes of this graph, got {w!r}")
        if w in nodes:
            raise ValueError(f"{fn}: input {w.name!r} listed twice in wrt")
        nodes.append(w)
    if not nodes:
        raise ValueError(f"{fn}: wrt is empty")
    return nodes


def grad(graph: Graph, output: Node, wrt, seed: Node | None = None) -> dict:
    """Reverse mode: ``{input name: node of d(output)/d(input)}``, built as backward nodes in
    ``graph`` (appended to it; nodes no gradient needs are dropped again).

    ``output`` must be a scalar () node, unless ``seed`` is given: a node of the output's shape,
    the vector ``v`` of the vector-Jacobian product ``vᵀ·∂output/∂input`` (feed a unit vector to
    get one row of the Jacobian). ``wrt``: an input name or node, or a list of them. Each result
    has its input's shape; an input the output does not depend on gets a zero constant. Run the
    results with ``run(graph, feeds, grads)``; print them with ``graph.listing(list(grads.values()))``.
    """
    fn = "grad"
    if not isinstance(output, Node) or output.graph is not graph:
        raise ValueError(f"{fn}: output must be a node of this graph, got {output!r}")
    wrt_nodes = _wrt_nodes(fn, graph, wrt)
    if seed is None and output.shape != ():
        raise ValueError(f"{fn}: output has shape {_fmt_shape(output.shape)}; reverse mode needs a "
                         "scalar () output, or a seed= node of that shape for a vector-Jacobian product")
    if seed is not None and (not isinstance(seed, Node) or seed.graph is not graph
                             or seed.shape != output.shape):
        raise ValueError(f"{fn}: seed must be a node of this graph with the output's shape "
                         f"{_fmt_shape(output.shape)}, got {seed!r}")
    start = len(graph.nodes)
    order = topo_order(output)
    needs = set(wrt_nodes)                       # nodes on a path from some wrt input
    for node in order:
        if any(i in needs for i in node.inputs):
            needs.add(node)
    grads, pending = {}, {}
    if output in needs:
        pending[output] = [graph.constant(1.0) if seed is None else seed]
    for node in reversed(order):
        if node not in pending:
            continue
        parts = pending.pop(node)
        g = parts[0]
        for p in parts[1:]:                      # a node read by several consumers: add them up
            g = g + p
        if node.op in ("input", "constant"):
            grads[node] = g
            continue
        for inp, gi in zip(node.inputs, VJP_RULES[node.op](node, g, graph)):
            if gi is None or inp not in needs:
                continue
            if gi.shape != inp.shape:
                raise RuntimeError(f"{fn}: the {node.op} rule gave shape {gi.shape} "
                                   f"for an input of shape {inp.shape}")
            pending.setdefault(inp, []).append(gi)
    result = {w.name: grads[w] if w in grads else graph.constant(torch.zeros(w.shape, dtype=DTYPE))
              for w in wrt_nodes}
    keep = set(topo_order(list(result.values())))
    graph.nodes[start:] = [n for n in graph.nodes[start:] if n in keep]
    return result


# ---- reverse mode, eager: the same products on tensors ------------------------------------------
def _unb(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return g.sum() if x.ndim == 0 and g.ndim != 0 else g


def _eager_sum(xs, out, g, attrs):
    (x,) = xs
    axis = attrs.get("axis")
    return [g.expand(x.shape) if axis is None else g.unsqueeze(axis % x.ndim).expand(x.shape)]


_EAGER = {
    "add": lambda xs, out, g, attrs: [_unb(g, xs[0]), _unb(g, xs[1])],
    "sub": lambda xs, out, g, attrs: [_unb(g, xs[0]), _unb(-g, xs[1])],
    "mul": lambda xs, out, g, attrs: [_unb(g * xs[1], xs[0]), _unb(g * xs[0], xs[1])],
    "div": lambda xs, out, g, attrs: [_unb(g / xs[1], xs[0]), _unb(-(g * out / xs[1]), xs[1])],
    "neg": lambda xs, out, g, attrs: [-g],
    "exp": lambda xs, out, g, attrs: [g * out],
    "log": lambda xs, out, g, attrs: [g / xs[0]],
    "tanh": lambda xs, out, g, attrs: [g * (1.0 - out * out)],
    "relu": lambda xs, out, g, attrs: [g * (xs[0] > 0).to(g.dtype)],
    "step": lambda xs, out, g, attrs: [torch.zeros_like(xs[0])],
    "sin": lambda xs, out, g, attrs: [g * torch.cos(xs[0])],
    "cos": lambda xs, out, g, attrs: [-(g * torch.sin(xs[0]))],
    "matmul": lambda xs, out, g, attrs: [g @ xs[1].T, xs[0].T @ g],
    "transpose": lambda xs, out, g, attrs: [g.T],
    "sum": _eager_sum,
    "expand": lambda xs, out, g, attrs: [g.sum(dim=attrs["axis"])],
    "broadcast": lambda xs, out, g, attrs: [g.sum()],
}
#: the ops `vjp` accepts (every op of the IR except the leaves input and constant)
VJP_OPS = tuple(_EAGER)
_ARITY = {op: 2 if op in ("add", "sub", "mul", "div", "matmul") else 1 for op in VJP_OPS}


def _check_vjp_shapes(op: str, shapes: list, out: tuple) -> None:
    """One-line ValueError unless ``output``'s shape is what ``op`` makes of ``inputs``' shapes
    (a wrong pair would give gradients of the wrong shapes, silently)."""
    want = None
    if op == "matmul":
        (a, b) = shapes
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise ValueError(f"vjp: matmul needs inputs of shapes (m, k) and (k, n), got {a} and {b}")
        want = (a[0], b[1])
    elif _ARITY[op] == 2:
        a, b = shapes
        if a != b and a != () and b != ():
            raise ValueError(f"vjp: {op} needs inputs of one shape (or a 0-d one), got {a} and {b}")
        want = a if a != () else b
    elif op == "transpose":
        if len(shapes[0]) != 2:
            raise ValueError(f"vjp: transpose needs a 2-D input, got shape {shapes[0]}")
        want = shapes[0][::-1]
    elif op == "broadcast":
        if shapes[0] != ():
            raise ValueError(f"vjp: broadcast needs a 0-d input, got shape {shapes[0]}")
    elif op == "expand":
        if len(out) != len(shapes[0]) + 1:
            raise ValueError(f"vjp: expand's output must have one more axis than its input, got "
                             f"{shapes[0]} -> {out}")
    elif op != "sum":
        want = shapes[0]
    if want is not None and out != want:
        raise ValueError(f"vjp: {op} of inputs of shapes {', '.join(map(str, shapes))} gives shape {want}, "
                         f"but output has shape {out}")


# BEGIN SOLUTION (labkit's eager vjp, more ops, checked: it answers vjp)
def vjp(op: str, inputs, output, grad_output, attrs: dict | None = None) -> list:
    """Gradients with respect to each input of one op, given the gradient of its output.

    Contract (the eager twin of ``VJP_RULES``; a graded exercise implements the same function):

    - ``op``: one of `VJP_OPS`: add, sub, mul, div, neg, exp, log, tanh, relu, step, sin, cos,
      matmul, transpose, sum, expand, broadcast.
    - ``inputs``: list of tensors, the op's operands in order (two for add, sub, mul, div,
      matmul; one otherwise). ``output``: the op's result on them (exp, tanh and div use it).
      ``grad_output``: ∂L/∂output for some scalar L, a tensor of ``output``'s shape.
    - ``attrs``: for ``sum``, ``{"axis": None}`` means all elements were summed (output shape ()),
      ``{"axis": k}`` means axis k (negative counts from the end) was summed away; for
      ``expand``, ``{"axis": k, "size": s}`` is the inserted axis; for ``broadcast``,
      ``{"shape": shape}``. Other ops ignore attrs (None is fine).
    - Returns a list with one tensor per input, ∂L/∂input, each of that input's shape and the
      grad's dtype. Elementwise ops take equal shapes or a 0-d operand; a 0-d operand's
      gradient is the sum over all elements. matmul: a (m, k), b (k, n), grad_output (m, n) ->
      [(m, k), (k, n)]. relu at exactly 0 and step use derivative 0.
    """
    fn = "vjp"
    if op not in _EAGER:
        raise ValueError(f"{fn}: unknown op {op!r}; known ops: {', '.join(VJP_OPS)}")
    if not isinstance(inputs, (list, tuple)) or not all(isinstance(x, torch.Tensor) for x in inputs):
        raise TypeError(f"{fn}: inputs must be a list of tensors")
    if len(inputs) != _ARITY[op]:
        raise ValueError(f"{fn}: {op} takes {_ARITY[op]} inputs, got {len(inputs)}")
    if not isinstance(output, torch.Tensor) or not isinstance(grad_output, torch.Tensor):
        raise TypeError(f"{fn}: output and grad_output must be tensors")
    if tuple(grad_output.shape) != tuple(output.shape):
        raise ValueError(f"{fn}: grad_output shape {tuple(grad_output.shape)} differs from output "
                         f"shape {tuple(output.shape)}")
    attrs = dict(attrs or {})
    if op == "expand" and "axis" not in attrs:
        raise ValueError(f"{fn}: expand needs attrs['axis'], the inserted axis")
    _check_vjp_shapes(op, [tuple(x.shape) for x in inputs], tuple(output.shape))
    if op in ("sum", "expand") and attrs.get("axis") is not None:
        nd = inputs[0].ndim if op == "sum" else grad_output.ndim   # the axis indexes these
        attrs["axis"] = check_int(fn, "attrs['axis']", attrs["axis"], minimum=-nd, maximum=nd - 1)
    grads = _EAGER[op](list(inputs), output, grad_output, attrs)
    return [gr.contiguous() for gr in grads]


# ---- forward mode: dual numbers ----------------------------------------------------------------
# END SOLUTION


class Dual:
    """A value with its tangent (directional derivative), both float64 tensors of one shape.

    Arithmetic and the methods below apply the chain rule as they compute: the tangent of a
    result is the Jacobian of the op applied to the operands' tangents (a Jacobian-vector
    product). Numbers and plain tensors mix in as constants (tangent 0).
    """

    __slots__ = ("value", "tangent")

    def __init__(self, value, tangent=None):
        try:
            self.value = torch.as_tensor(value, dtype=DTYPE)
            self.tangent = (torch.zeros_like(self.value) if tangent is None
                            else torch.as_tensor(tangent, dtype=DTYPE))
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"Dual: value and tangent must be real numbers or tensors, got "
                            f"{type(value).__name__} and {type(tangent).__name__}") from None
        if self.tangent.shape != self.value.shape:
            raise ValueError(f"Dual: tangent shape {tuple(self.tangent.shape)} differs from value "
                             f"shape {tuple(self.value.shape)}")

    def __repr__(self) -> str:
        return f"Dual(value={self.value}, tangent={self.tangent})"

    @staticmethod
    def lift(x) -> "Dual":
        return x if isinstance(x, Dual) else Dual(x)

    def __add__(self, o):
        o = Dual.lift(o)
        return Dual(self.value + o.value, self.tangent + o.tangent)

    def __sub__(self, o):
        o = Dual.lift(o)
        return Dual(self.value - o.value, self.tangent - o.tangent)

    def __mul__(self, o):
        o = Dual.lift(o)
        return Dual(self.value * o.value, self.tangent * o.value + self.value * o.tangent)

    def __truediv__(self, o):
        o = Dual.lift(o)
        out = self.value / o.value
        return Dual(out, (self.tangent - out * o.tangent) / o.value)

    def __radd__(self, o): return Dual.lift(o) + self
    def __rsub__(self, o): return Dual.lift(o) - self
    def __rmul__(self, o): return Dual.lift(o) * self
    def __rtruediv__(self, o): return Dual.lift(o) / self

    def __neg__(self):
        return Dual(-self.value, -self.tangent)

    def __matmul__(self, o):
        o = Dual.lift(o)
        return Dual(self.value @ o.value, self.tangent @ o.value + self.value @ o.tangent)

    @property
    def T(self):  # noqa: N802
        return Dual(self.value.T, self.tangent.T)

    def exp(self):
        e = torch.exp(self.value)
        return Dual(e, self.tangent * e)

    def log(self):
        return Dual(torch.log(self.value), self.tangent / self.value)

    def tanh(self):
        t = torch.tanh(self.value)
        return Dual(t, self.tangent * (1.0 - t * t))

    def relu(self):
        return Dual(torch.relu(self.value), self.tangent * (self.value > 0).to(DTYPE))

    def step(self):
        return Dual((self.value > 0).to(DTYPE), torch.zeros_like(self.value))

    def sin(self):
        return Dual(torch.sin(self.value), self.tangent * torch.cos(self.value))

    def cos(self):
        return Dual(torch.cos(self.value), -(self.tangent * torch.sin(self.value)))

    def _linear(self, kernel, attrs):
        """A linear op (sum, expand, broadcast) acts the same on value and tangent."""
        return Dual(kernel([self.value], attrs), kernel([self.tangent], attrs))


#: op -> kernel(list of Duals, attrs) -> Dual: the interpreter `jvp` uses
DUAL_KERNELS = {
    "constant": lambda args, attrs: Dual(attrs["value"]),
    "add": lambda args, attrs: args[0] + args[1],
    "sub": lambda args, attrs: args[0] - args[1],
    "mul": lambda args, attrs: args[0] * args[1],
    "div": lambda args, attrs: args[0] / args[1],
    "neg": lambda args, attrs: -args[0],
    "exp": lambda args, attrs: args[0].exp(),
    "log": lambda args, attrs: args[0].log(),
    "tanh": lambda args, attrs: args[0].tanh(),
    "relu": lambda args, attrs: args[0].relu(),
    "step": lambda args, attrs: args[0].step(),
    "sin": lambda args, attrs: args[0].sin(),
    "cos": lambda args, attrs: args[0].cos(),
    "matmul": lambda args, attrs: args[0] @ args[1],
    "transpose": lambda args, attrs: args[0].T,
    "sum": lambda args, attrs: args[0]._linear(KERNELS["sum"], attrs),
    "expand": lambda args, attrs: args[0]._linear(KERNELS["expand"], attrs),
    "broadcast": lambda args, attrs: args[0]._linear(KERNELS["broadcast"], attrs),
}


def jvp(graph: Graph, feeds: dict, tangents: dict, outputs=None) -> tuple:
    """Forward mode: one pass computing the outputs and their tangents.

    ``feeds``: {input name: value}; ``tangents``: {input name: tangent of that input's shape}
    (inputs left out have tangent 0), the input direction v. Returns ``(values, tangents)``
    packed like `run` does (list / tensor / dict), where each output tangent is J·v, the
    derivative of that output along v."""
    fn = "jvp"
    _check_feeds(fn, graph, feeds)
    _check_feeds(fn, graph, tangents)
    nodes, pack = _as_node_list(fn, graph, outputs)
    duals: dict = {}
    for node in topo_order(nodes):
        if node.op == "input":
            value = _feed_tensor(fn, node, feeds)
            tangent = _feed_tensor(fn, node, tangents) if node.name in tangents else None
            duals[node] = Dual(value, tangent)
        else:
            duals[node] = DUAL_KERNELS[node.op]([duals[i] for i in node.inputs], node.attrs)
    return pack([duals[n].value for n in nodes]), pack([duals[n].tangent for n in nodes])


# ---- Jacobians both ways -------------------------------------------------------------------------
@dataclass
class JacobianResult:
    """A Jacobian (m, n) = d output (m elements) / d input (n elements), flattened row-major,
    with the number of passes it took and their wall time in seconds (build time excluded)."""

    mode: str
    jacobian: torch.Tensor
    passes: int
    seconds: float


def _jac_setup(fn, graph, feeds, wrt, output):
    (x,) = _wrt_nodes(fn, graph, wrt)
    if not isinstance(output, Node) or output.graph is not graph:
        raise ValueError(f"{fn}: output must be a node of this graph, got {output!r}")
    _check_feeds(fn, graph, feeds)
    n = int(torch.Size(x.shape).numel())
    m = int(torch.Size(output.shape).numel())
    return x, n, m


def jacobian_forward(graph: Graph, feeds: dict, wrt, output: Node) -> JacobianResult:
    """The Jacobian by forward mode: one `jvp` pass per input element (n passes), each with the
    unit tangent e_j, gives column j."""
    x, n, m = _jac_setup("jacobian_forward", graph, feeds, wrt, output)
    cols, passes = [], 0
    t0 = time.perf_counter()
    for j in range(n):
        e = torch.zeros(n, dtype=DTYPE)
        e[j] = 1.0
        _, tangent = jvp(graph, feeds, {x.name: e.reshape(x.shape)}, output)
        passes += 1
        cols.append(tangent.reshape(m))
    seconds = time.perf_counter() - t0
    return JacobianResult("forward", torch.stack(cols, dim=1), passes, seconds)


def jacobian_reverse(graph: Graph, feeds: dict, wrt, output: Node) -> JacobianResult:
    """The Jacobian by reverse mode: the backward graph is built once with a seed input (added
    to ``graph``); each pass runs forward + backward with the unit seed e_i and gives row i
    (m passes)."""
    x, n, m = _jac_setup("jacobian_reverse", graph, feeds, wrt, output)
    seed = graph.input(_fresh_name(graph, "seed"), output.shape)
    gx = grad(graph, output, x, seed=seed)[x.name]
    rows, passes = [], 0
    t0 = time.perf_counter()
    for i in range(m):
        e = torch.zeros(m, dtype=DTYPE)
        e[i] = 1.0
        rows.append(run(graph, {**feeds, seed.name: e.reshape(output.shape)}, gx).reshape(n))
        passes += 1
    seconds = time.perf_counter() - t0
    return JacobianResult("reverse", torch.stack(rows, dim=0), passes, seconds)


def example_function(n: int, m: int, hidden: int = 16, seed: int = 0) -> tuple:
    """f: Rⁿ → Rᵐ, ``y = sin(W2·tanh(W1·x))`` with fixed random W1 (hidden, n), W2 (m, hidden).

    Returns ``(graph, y, feeds)``: the input is ``x`` of shape (n, 1), y has shape (m, 1), and
    feeds holds a random x."""
    fn = "example_function"
    n, m = check_int(fn, "n", n, minimum=1), check_int(fn, "m", m, minimum=1)
    hidden, seed = check_int(fn, "hidden", hidden, minimum=1), check_int(fn, "seed", seed, minimum=0)
    check_numel(fn, "max(n, m)·hidden", max(n, m) * hidden)
    gen = torch.Generator().manual_seed(seed)
    w1 = torch.randn(hidden, n, generator=gen, dtype=DTYPE) / n ** 0.5
    w2 = torch.randn(m, hidden, generator=gen, dtype=DTYPE) / hidden ** 0.5
    g = Graph()
    x = g.input("x", (n, 1))
    y = g.sin(g.constant(w2) @ g.tanh(g.constant(w1) @ x))   # (m, 1)
    g.output(y)
    return g, y, {"x": torch.randn(n, 1, generator=gen, dtype=DTYPE)}


def _race_args(n, m, hidden, seed):
    graph, y, feeds = example_function(n, m, hidden, seed)   # a fresh graph per measurement
    return graph, feeds, "x", y


def jacobian_race(shapes=((1, 100), (100, 1)), hidden: int = 16, repeats: int = 3, seed: int = 0) -> Table:
    """For each (n, m): the Jacobian of `example_function` both ways. Passes are counted (forward
    n, reverse m) and timed (best of ``repeats``, milliseconds); the two Jacobians must agree.
    Columns: n, m, fwd passes, rev passes, fwd ms, rev ms, faster, max |diff|."""
    repeats = check_int("jacobian_race", "repeats", repeats, minimum=1, maximum=100)
    shapes = check_sequence("jacobian_race", "shapes", shapes)
    rows = []
    for n, m in shapes:
        fwd = min((jacobian_forward(*_race_args(n, m, hidden, seed)) for _ in range(repeats)),
                  key=lambda r: r.seconds)
        rev = min((jacobian_reverse(*_race_args(n, m, hidden, seed)) for _ in range(repeats)),
                  key=lambda r: r.seconds)
        diff = float((fwd.jacobian - rev.jacobian).abs().max())
        rows.append([n, m, fwd.passes, rev.passes, 1e3 * fwd.seconds, 1e3 * rev.seconds,
                     "forward" if fwd.seconds < rev.seconds else "reverse", diff])
    return Table(["n", "m", "fwd passes", "rev passes", "fwd ms", "rev ms", "faster", "max |diff|"],
                 rows, formats={"fwd ms": ".2f", "rev ms": ".2f", "max |diff|": ".1e"},
                 title="Jacobian of f: R^n -> R^m, forward vs reverse mode")


def _vjp(op, inputs, output, grad_output, attrs=None):
    """Gradients of a scalar loss L with respect to each input of one op, given ∂L/∂output.

    Derive each rule yourself: only the forward definitions are given. With a, b the inputs and
    out the output (elementwise ops act on each element; their operands have equal shapes):

    - "mul": out = a·b            - "div": out = a / b          - "tanh": out = tanh(a)
    - "exp": out = eᵃ             - "log": out = ln a (a > 0)    - "relu": out = max(a, 0)
    - "matmul": out = a @ b, a of shape (m, k), b of shape (k, n), out (m, n)
    - "sum": attrs {"axis": None}: out = the sum of all of a's elements (shape ());
      attrs {"axis": k}: out = a summed over axis k (that axis removed; k may be negative).

    inputs: list of tensors, the op's operands (two for mul, div, matmul; one otherwise).
    output: the op's result on them (use it where it saves work). grad_output: ∂L/∂output, a
    tensor of output's shape. attrs: as above for "sum"; None or ignored for the other ops.
    Returns a list with one tensor per input, ∂L/∂input = Σ over output elements of
    ∂L/∂out · ∂out/∂input, each of that input's shape. relu's derivative at exactly 0 is 0.
    """
    # BEGIN SOLUTION
    # HINT: the chain rule, op by op: an elementwise op multiplies ∂L/∂out by its local derivative
    # HINT: (work it out on paper; some are cheapest written with out); for matmul, write one output
    # HINT: element as a sum and ask which a and b elements it touches (match the shapes with .T);
    # HINT: each summed element receives the gradient of the output it fed (unsqueeze, expand).
    a = inputs[0]
    g = grad_output
    if op == "mul":
        return [g * inputs[1], g * a]
    if op == "div":
        b = inputs[1]
        return [g / b, -g * a / (b * b)]
    if op == "matmul":
        return [g @ inputs[1].t(), a.t() @ g]
    if op == "tanh":
        return [g * (1 - output * output)]
    if op == "exp":
        return [g * output]
    if op == "log":
        return [g / a]
    if op == "relu":
        return [g * (a > 0).to(g.dtype)]
    if op == "sum":
        axis = (attrs or {}).get("axis")
        if axis is None:
            return [g.expand_as(a).clone()]
        return [g.unsqueeze(axis).expand_as(a).clone()]
    raise ValueError(f"vjp: unknown op {op!r}")
    # END SOLUTION
