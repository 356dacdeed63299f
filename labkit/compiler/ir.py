"""A tiny dataflow-graph IR: build the whole graph first, then run it (define-and-run).

A `Graph` holds `Node`s. A node is one operation: its ``op`` name, the nodes it reads
(``inputs``), its static attributes (``attrs``, e.g. the axis of a sum) and the ``shape`` of the
tensor it produces. The edges of the graph are those tensors: node ``b`` reads node ``a``'s result
when ``a`` is in ``b.inputs``. Nothing is computed while the graph is built; shapes are inferred
there, so a mismatch is reported when the faulty line runs, not later::

    g = Graph()
    x, w = g.input("x", (4, 3)), g.input("w", (3, 2))
    y = g.tanh(x @ w)                     # operators on nodes call the Graph's methods
    g.output(y)
    print(g)                              # an SSA-style listing, one line per node
    run(g, {"x": torch.randn(4, 3), "w": torch.randn(3, 2)})   # -> [tensor of shape (4, 2)]

`run` is an interpreter: it orders the nodes the requested outputs depend on topologically
(every node after all of its inputs) and evaluates each with a torch kernel in float64.

Ops (shapes: ``()`` is a scalar, ``(n,)`` a vector, ``(m, n)`` a matrix):

    input(name, shape)     a value fed at run time           constant(value)   a fixed tensor
    add sub mul div        elementwise, two operands          neg exp log tanh relu step sin cos
    matmul(a, b)           (m, k) @ (k, n) -> (m, n)          transpose(a)      (m, n) -> (n, m)
    sum(a, axis=None)      all elements -> (), or one axis removed
    expand(a, axis, size)  insert a new axis of length ``size``, repeating ``a`` along it
    broadcast(a, shape)    a scalar () repeated to ``shape``

**Elementwise shape rule (no implicit broadcasting).** The two operands of add, sub, mul and div
must have equal shapes, except that either may be a scalar ``()``, which combines with every
element of the other. Anything else (a bias ``(n,)`` added to a batch ``(b, n)``) must say so
with an explicit ``expand`` or ``broadcast`` node, as XLA's HLO does. Every broadcast is then a
node the backward pass can see (its gradient is a ``sum``), instead of a rule hidden in each op.

``step(a)`` is 1 where ``a > 0`` and 0 elsewhere: the derivative of ``relu``, needed by its
backward graph. Its own derivative is zero almost everywhere.

The other way to get a graph is define-by-run: run ordinary eager PyTorch and let autograd record
what happened (`mlp_eager`); the graph then exists only as that record, rebuilt on every call.
`build_mlp` and `mlp_eager` are the same small MLP written both ways, with equal outputs.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import torch

from labkit.checks import check_int, check_numel

__all__ = ["Node", "Graph", "run", "topo_order", "KERNELS", "OPS", "ELEMENTWISE_BINARY",
           "ELEMENTWISE_UNARY", "build_mlp", "mlp_eager", "mlp_feeds", "MLP_INPUTS"]

DTYPE = torch.float64
ELEMENTWISE_BINARY = ("add", "sub", "mul", "div")
ELEMENTWISE_UNARY = ("neg", "exp", "log", "tanh", "relu", "step", "sin", "cos")


def _fmt_shape(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


@dataclass(eq=False)
class Node:
    """One operation of a `Graph` and the tensor it produces.

    ``op``: the op's name (a key of `KERNELS`); ``inputs``: the nodes it reads, in order;
    ``attrs``: static attributes (``axis`` of a sum, ``value`` of a constant, ...);
    ``shape``: the shape of its result, inferred when the node was built; ``name``: the
    feed name of an input node (None for the others). Nodes compare by identity.
    Arithmetic operators build new nodes: ``a + b``, ``a - 1.0``, ``2 * a``, ``a / b``,
    ``-a``, ``a @ b``, ``a.T`` (numbers become ``constant`` nodes).
    """

    op: str
    inputs: tuple
    attrs: dict
    shape: tuple
    graph: "Graph" = field(repr=False, default=None)
    name: str | None = None

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name is not None else ""
        return f"Node({self.op}{label}, shape={_fmt_shape(self.shape)})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __add__(self, other): return self.graph.add(self, other)
    def __radd__(self, other): return self.graph.add(other, self)
    def __sub__(self, other): return self.graph.sub(self, other)
    def __rsub__(self, other): return self.graph.sub(other, self)
    def __mul__(self, other): return self.graph.mul(self, other)
    def __rmul__(self, other): return self.graph.mul(other, self)
    def __truediv__(self, other): return self.graph.div(self, other)
    def __rtruediv__(self, other): return self.graph.div(other, self)
    def __neg__(self): return self.graph.neg(self)
    def __matmul__(self, other): return self.graph.matmul(self, other)

    @property
    def T(self):  # noqa: N802  (mirrors torch's .T)
        return self.graph.transpose(self)


class Graph:
    """A dataflow graph under construction: nodes in creation order (which is a topological
    order, since a node can only read nodes that already exist) and the designated outputs."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.outputs: list[Node] = []
        self.inputs: dict[str, Node] = {}

    # ---- building blocks -------------------------------------------------------------------
    def _node(self, op: str, inputs: tuple, attrs: dict, shape: tuple, name=None) -> Node:
        node = Node(op, tuple(inputs), dict(attrs), tuple(shape), self, name)
        self.nodes.append(node)
        return node

    def _own(self, fn: str, value) -> Node:
        """A node of this graph; a number or tensor becomes a constant node."""
        if isinstance(value, Node):
            if value.graph is not self:
                raise ValueError(f"Graph.{fn}: {value!r} belongs to another graph")
            return value
        if isinstance(value, (numbers.Real, torch.Tensor)) and not isinstance(value, bool):
            return self.constant(value)
        raise TypeError(f"Graph.{fn}: operands must be Nodes or numbers, got {type(value).__name__}")

    def input(self, name: str, shape) -> Node:
        """A placeholder fed at run time under ``name``; ``shape`` a tuple of positive ints
        (``()`` for a scalar)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Graph.input: name must be an identifier string, got {name!r}")
        if name in self.inputs:
            raise ValueError(f"Graph.input: an input named {name!r} already exists")
        shape = _check_shape("Graph.input", shape)
        node = self._node("input", (), {}, shape, name=name)
        self.inputs[name] = node
        return node

    def constant(self, value) -> Node:
        """A fixed tensor (stored as float64; a Python number gives a scalar ``()``)."""
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, torch.Tensor)):
            raise TypeError(f"Graph.constant: value must be a number or a tensor, got {type(value).__name__}")
        tensor = torch.as_tensor(value, dtype=DTYPE).detach().clone()
        return self._node("constant", (), {"value": tensor}, tuple(tensor.shape))

    def _elementwise(self, op: str, a, b) -> Node:
        a, b = self._own(op, a), self._own(op, b)
        if a.shape != b.shape and a.shape != () and b.shape != ():
            raise ValueError(f"Graph.{op}: shapes {_fmt_shape(a.shape)} and {_fmt_shape(b.shape)} "
                             "differ (elementwise ops need equal shapes or a scalar; use expand)")
        return self._node(op, (a, b), {}, a.shape if a.shape != () else b.shape)

    def add(self, a, b) -> Node:
        """a + b, elementwise (equal shapes, or one operand a scalar)."""
        return self._elementwise("add", a, b)

    def sub(self, a, b) -> Node:
        """a - b, elementwise."""
        return self._elementwise("sub", a, b)

    def mul(self, a, b) -> Node:
        """a * b, elementwise (not a matrix product: see `matmul`)."""
        return self._elementwise("mul", a, b)

    def div(self, a, b) -> Node:
        """a / b, elementwise."""
        return self._elementwise("div", a, b)

    def _unary(self, op: str, a) -> Node:
        a = self._own(op, a)
        return self._node(op, (a,), {}, a.shape)

    def neg(self, a) -> Node: return self._unary("neg", a)
    def exp(self, a) -> Node: return self._unary("exp", a)
    def log(self, a) -> Node: return self._unary("log", a)
    def tanh(self, a) -> Node: return self._unary("tanh", a)
    def relu(self, a) -> Node: return self._unary("relu", a)
    def step(self, a) -> Node: return self._unary("step", a)
    def sin(self, a) -> Node: return self._unary("sin", a)
    def cos(self, a) -> Node: return self._unary("cos", a)

    def matmul(self, a, b) -> Node:
        """Matrix product of two 2-D nodes: (m, k) @ (k, n) -> (m, n)."""
        a, b = self._own("matmul", a), self._own("matmul", b)
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"Graph.matmul: {_fmt_shape(a.shape)} @ {_fmt_shape(b.shape)}: "
                             "both operands must be 2-D")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"Graph.matmul: {_fmt_shape(a.shape)} @ {_fmt_shape(b.shape)}: "
                             f"inner sizes {a.shape[1]} and {b.shape[0]} differ")
        return self._node("matmul", (a, b), {}, (a.shape[0], b.shape[1]))

    def transpose(self, a) -> Node:
        """Swap the two axes of a 2-D node: (m, n) -> (n, m)."""
        a = self._own("transpose", a)
        if a.ndim != 2:
            raise ValueError(f"Graph.transpose: expected a 2-D operand, got shape {_fmt_shape(a.shape)}")
        return self._node("transpose", (a,), {}, (a.shape[1], a.shape[0]))

    def sum(self, a, axis=None) -> Node:
        """Sum of all elements (``axis=None`` -> shape ()) or along one axis (that axis is
        removed; a negative axis counts from the end)."""
        a = self._own("sum", a)
        if axis is None:
            return self._node("sum", (a,), {"axis": None}, ())
        if a.ndim == 0:
            raise ValueError("Graph.sum: a scalar has no axis to sum over; use axis=None")
        axis = check_int("Graph.sum", "axis", axis, minimum=-a.ndim, maximum=a.ndim - 1) % a.ndim
        return self._node("sum", (a,), {"axis": axis}, a.shape[:axis] + a.shape[axis + 1:])

    def expand(self, a, axis: int, size: int) -> Node:
        """Insert a new axis at position ``axis`` (0..a.ndim) of length ``size``, repeating ``a``
        along it: a bias (n,) expanded with axis=0, size=b gives (b, n). The adjoint of sum."""
        a = self._own("expand", a)
        axis = check_int("Graph.expand", "axis", axis, minimum=0, maximum=a.ndim)
        size = check_int("Graph.expand", "size", size, minimum=1)
        return self._node("expand", (a,), {"axis": axis, "size": size},
                          a.shape[:axis] + (size,) + a.shape[axis:])

    def broadcast(self, a, shape) -> Node:
        """A scalar () repeated to ``shape``. The adjoint of a full sum."""
        a = self._own("broadcast", a)
        if a.shape != ():
            raise ValueError(f"Graph.broadcast: operand must be a scalar (), got {_fmt_shape(a.shape)}; "
                             "use expand for one axis")
        shape = _check_shape("Graph.broadcast", shape)
        return self._node("broadcast", (a,), {"shape": shape}, shape)

    def output(self, *nodes: Node):
        """Mark nodes as the graph's outputs (what `run` returns by default); returns them."""
        for n in nodes:
            if not isinstance(n, Node):
                raise TypeError(f"Graph.output: expected Nodes, got {type(n).__name__}")
            self.outputs.append(self._own("output", n))
        return nodes[0] if len(nodes) == 1 else nodes

    # ---- printing ---------------------------------------------------------------------------
    def listing(self, outputs=None) -> str:
        """An SSA-style listing, one line per node: ``%3 = matmul(%x, %W1)  : (4, 8)``.

        Inputs print under their feed names, other nodes as ``%k`` numbered in listing order.
        With ``outputs`` (a node or list of nodes) only the nodes they depend on are listed. Nodes
        appear in creation order (a topological order: forward nodes before the backward nodes
        `grad` appends); a final ``return`` line names the outputs."""
        if outputs is None:
            nodes, outs = list(self.nodes), list(self.outputs)
        else:
            outs, _ = _as_node_list("Graph.listing", self, outputs)
            needed = set(topo_order(outs))
            nodes = [n for n in self.nodes if n in needed]
        names, k = {}, 0
        for n in nodes:
            if n.op == "input":
                names[n] = "%" + n.name
            else:
                names[n] = f"%{k}"
                k += 1
        rows = []
        for n in nodes:
            if n.op == "input":
                rhs = "input"
            elif n.op == "constant":
                v = n.attrs["value"]
                rhs = f"constant {v.item():.6g}" if v.ndim == 0 else "constant <tensor>"
            else:
                args = [names[i] for i in n.inputs]
                args += [f"{key}={_fmt_shape(val) if isinstance(val, tuple) else val}"
                         for key, val in n.attrs.items()]
                rhs = f"{n.op}({', '.join(args)})"
            rows.append((names[n], rhs, _fmt_shape(n.shape)))
        w0 = max((len(r[0]) for r in rows), default=0)
        w1 = max((len(r[1]) for r in rows), default=0)
        lines = [f"{a.ljust(w0)} = {b.ljust(w1)} : {c}" for a, b, c in rows]
        if outs:
            lines.append("return " + ", ".join(names.get(o, "?") for o in outs))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.listing()

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, {len(self.inputs)} inputs, {len(self.outputs)} outputs)"


def _check_shape(fn: str, shape) -> tuple:
    if not isinstance(shape, (tuple, list, torch.Size)):
        raise TypeError(f"{fn}: shape must be a tuple of ints, got {type(shape).__name__}")
    return tuple(check_int(fn, "shape entry", d, minimum=1) for d in shape)


# ---- the interpreter ---------------------------------------------------------------------------
def _sum(args, attrs):
    (a,) = args
    return a.sum() if attrs["axis"] is None else a.sum(dim=attrs["axis"])


def _expand(args, attrs):
    (a,) = args
    a = a.unsqueeze(attrs["axis"])
    shape = list(a.shape)
    shape[attrs["axis"]] = attrs["size"]
    return a.expand(shape)


#: op -> kernel(list of input tensors, attrs) -> output tensor (torch, float64)
KERNELS = {
    "constant": lambda args, attrs: attrs["value"],
    "add": lambda args, attrs: args[0] + args[1],
    "sub": lambda args, attrs: args[0] - args[1],
    "mul": lambda args, attrs: args[0] * args[1],
    "div": lambda args, attrs: args[0] / args[1],
    "neg": lambda args, attrs: -args[0],
    "exp": lambda args, attrs: torch.exp(args[0]),
    "log": lambda args, attrs: torch.log(args[0]),
    "tanh": lambda args, attrs: torch.tanh(args[0]),
    "relu": lambda args, attrs: torch.relu(args[0]),
    "step": lambda args, attrs: (args[0] > 0).to(args[0].dtype),
    "sin": lambda args, attrs: torch.sin(args[0]),
    "cos": lambda args, attrs: torch.cos(args[0]),
    "matmul": lambda args, attrs: args[0] @ args[1],
    "transpose": lambda args, attrs: args[0].T,
    "sum": _sum,
    "expand": _expand,
    "broadcast": lambda args, attrs: args[0].expand(attrs["shape"]),
}
#: every op name of the IR, "input" included
OPS = ("input",) + tuple(KERNELS)


def topo_order(outputs) -> list:
    """The nodes ``outputs`` depend on (themselves included), each after all of its inputs.

    Depth-first search, a node emitted when its last input is done (post-order); iterative, so a
    deep chain does not hit Python's recursion limit. Ties keep the order of ``inputs``."""
    outputs = [outputs] if isinstance(outputs, Node) else list(outputs)
    order, done, on_path = [], set(), set()
    for root in outputs:
        if root in done:
            continue
        stack = [(root, iter(root.inputs))]
        on_path.add(root)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(node)
                done.add(node)
                order.append(node)
            elif child not in done:
                if child in on_path:  # impossible when built with Graph's methods
                    raise ValueError(f"topo_order: the graph has a cycle through {child!r}")
                on_path.add(child)
                stack.append((child, iter(child.inputs)))
    return order


def _as_node_list(fn: str, graph: Graph, outputs):
    """(list of nodes, repack function) for outputs given as None, a Node, a sequence or a dict."""
    if outputs is None:
        if not graph.outputs:
            raise ValueError(f"{fn}: the graph has no outputs; call graph.output(...) or pass outputs=")
        nodes, pack = list(graph.outputs), list
    elif isinstance(outputs, Node):
        nodes, pack = [outputs], lambda vals: vals[0]
    elif isinstance(outputs, dict):
        keys = list(outputs)
        nodes, pack = list(outputs.values()), lambda vals: dict(zip(keys, vals))
    elif isinstance(outputs, (list, tuple)):
        nodes, pack = list(outputs), list
    else:
        raise TypeError(f"{fn}: outputs must be a Node, a list or dict of Nodes, or None")
    for n in nodes:
        if not isinstance(n, Node) or n.graph is not graph:
            raise ValueError(f"{fn}: {n!r} is not a node of this graph")
    return nodes, pack


def _feed_tensor(fn: str, node: Node, feeds: dict) -> torch.Tensor:
    if node.name not in feeds:
        raise ValueError(f"{fn}: no value fed for input {node.name!r}")
    given = feeds[node.name]
    if getattr(given, "dtype", None) is not None and (torch.is_tensor(given) and given.is_complex() or
                                                      getattr(given.dtype, "kind", "") == "c"):
        raise TypeError(f"{fn}: input {node.name!r} is complex ({given.dtype}); the IR computes in real "
                        f"float64 and would drop the imaginary part")
    try:
        value = torch.as_tensor(given, dtype=DTYPE)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{fn}: input {node.name!r} must be a real tensor or (nested lists of) real numbers, "
                        f"got {type(given).__name__}") from None
    if tuple(value.shape) != node.shape:
        raise ValueError(f"{fn}: input {node.name!r} expects shape {_fmt_shape(node.shape)}, "
                         f"got {_fmt_shape(tuple(value.shape))}")
    return value


def _check_feeds(fn: str, graph: Graph, feeds) -> None:
    if not isinstance(feeds, dict):
        raise TypeError(f"{fn}: feeds must be a dict name -> tensor, got {type(feeds).__name__}")
    unknown = sorted(set(feeds) - set(graph.inputs))
    if unknown:
        raise ValueError(f"{fn}: feeds name unknown inputs {unknown}; inputs are {sorted(graph.inputs)}")


def run(graph: Graph, feeds: dict, outputs=None):
    """Evaluate ``outputs`` (default: ``graph.outputs``) given ``feeds`` {input name: tensor}.

    Only the nodes the outputs depend on are evaluated, in `topo_order`, each by its kernel in
    `KERNELS` on float64 tensors. Returns a list of tensors for a list (or the graph's outputs),
    one tensor for one Node, a dict for a dict of Nodes. Every fed value must have the input's
    shape; every result is checked against the shape inferred at build time."""
    _check_feeds("run", graph, feeds)
    nodes, pack = _as_node_list("run", graph, outputs)
    values: dict = {}
    for node in topo_order(nodes):
        if node.op == "input":
            values[node] = _feed_tensor("run", node, feeds)
            continue
        out = KERNELS[node.op]([values[i] for i in node.inputs], node.attrs)
        if tuple(out.shape) != node.shape:  # a kernel disagreeing with shape inference is a bug
            raise RuntimeError(f"run: {node.op} produced shape {tuple(out.shape)}, expected {node.shape}")
        values[node] = out
    # a constant's kernel returns the graph's own tensor: hand out copies, not the graph's state
    return pack([values[n].clone() if n.op == "constant" else values[n] for n in nodes])


# ---- one MLP, two ways --------------------------------------------------------------------------
MLP_INPUTS = ("x", "W1", "b1", "W2", "b2", "target")


def build_mlp(batch: int, d_in: int, d_hidden: int, d_out: int) -> tuple:
    """The MLP ``loss = mean((tanh(x·W1 + b1)·W2 + b2 − target)²)`` as a graph (define-and-run).

    Inputs: x (batch, d_in), W1 (d_in, d_hidden), b1 (d_hidden,), W2 (d_hidden, d_out),
    b2 (d_out,), target (batch, d_out). The biases are expanded over the batch explicitly.
    Returns ``(graph, loss, y)``: loss is a scalar (), y the prediction (batch, d_out); the
    graph's outputs are [loss, y]."""
    fn = "build_mlp"
    names = ("batch", "d_in", "d_hidden", "d_out")
    batch, d_in, d_hidden, d_out = (check_int(fn, n, v, minimum=1)
                                    for n, v in zip(names, (batch, d_in, d_hidden, d_out)))
    g = Graph()
    x = g.input("x", (batch, d_in))
    w1, b1 = g.input("W1", (d_in, d_hidden)), g.input("b1", (d_hidden,))
    w2, b2 = g.input("W2", (d_hidden, d_out)), g.input("b2", (d_out,))
    target = g.input("target", (batch, d_out))
    h = g.tanh(x @ w1 + g.expand(b1, 0, batch))            # (batch, d_hidden)
    y = h @ w2 + g.expand(b2, 0, batch)                    # (batch, d_out)
    err = y - target                                       # (batch, d_out)
    loss = g.sum(err * err) / float(batch * d_out)          # ()
    g.output(loss, y)
    return g, loss, y


def mlp_eager(x, W1, b1, W2, b2, target):  # noqa: N803  (the math's names)
    """The same MLP in plain eager PyTorch (define-by-run): each line runs as it is reached and,
    when inputs require grad, autograd records it. Returns ``(loss, y)``; the bias is broadcast
    implicitly by torch's broadcasting rules."""
    h = torch.tanh(x @ W1 + b1)                            # (batch, d_hidden)
    y = h @ W2 + b2                                        # (batch, d_out)
    err = y - target
    loss = (err * err).sum() / float(y.shape[0] * y.shape[1])
    return loss, y


def mlp_feeds(batch: int, d_in: int, d_hidden: int, d_out: int, seed: int = 0) -> dict:
    """Random float64 inputs for `build_mlp` / `mlp_eager` (weights scaled by 1/√fan-in)."""
    fn = "mlp_feeds"
    check_int(fn, "seed", seed, minimum=0)
    batch, d_in, d_hidden, d_out = (check_int(fn, n, v, minimum=1) for n, v in
                                    (("batch", batch), ("d_in", d_in), ("d_hidden", d_hidden), ("d_out", d_out)))
    check_numel(fn, "the largest input", max(batch * d_in, d_in * d_hidden, d_hidden * d_out, batch * d_out))
    gen = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=DTYPE)  # noqa: E731
    return {"x": r(batch, d_in), "W1": r(d_in, d_hidden) / math.sqrt(d_in), "b1": r(d_hidden),
            "W2": r(d_hidden, d_out) / math.sqrt(d_hidden), "b2": r(d_out), "target": r(batch, d_out)}
