"""Lab 13 exercises: ML compilers.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

- ``vjp``: reverse-mode backward rules for eight ops, derived from their forward definitions;
- ``dead_code_elimination``, ``constant_folding``, ``common_subexpression_elimination``: three
  classic passes on torch.fx graphs;
- ``clip_without_breaks``: a function rewritten so that Dynamo captures it whole (no graph break);
- ``transactions``: how many memory transactions one warp's access needs (the GPU model).

The graph passes take a ``torch.fx.GraphModule`` and return a NEW one: start from
``gm = copy.deepcopy(gm)``, edit ``gm.graph`` (``graph.erase_node``, ``node.replace_all_uses_with``,
``graph.inserting_before``, ``graph.get_attr``), then ``gm.graph.lint(); gm.recompile()``. Use
``has_side_effects(node)`` and ``is_random(node)`` (imported below) to know which nodes must stay.
"""
import copy

import torch
from torch import fx

from labkit.compiler.fx_passes import has_side_effects, is_random


def vjp(op, inputs, output, grad_output, attrs=None):
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


def dead_code_elimination(gm):
    """Remove the nodes whose results are never used. Returns a new GraphModule (gm unchanged).

    A node is removed when it is a "get_attr", "call_function", "call_method" or "call_module"
    node, has no users (after the removals so far: a whole dead chain goes), and
    has_side_effects(node) is False. Placeholders (even unused ones), the output and every node
    with side effects (e.g. ``y.add_(1)``, whose result nobody reads but which changes y) stay, in
    their order. The result computes exactly the same outputs as gm.
    """
    gm = copy.deepcopy(gm)
    for node in reversed(list(gm.graph.nodes)):
        if node.op in ("placeholder", "output") or node.users or has_side_effects(node):
            continue
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm


def constant_folding(gm):
    """Compute once whatever depends only on constants. Returns a new GraphModule (gm unchanged).

    Constants: a "get_attr" node whose value is a tensor with requires_grad False (buffers;
    trainable parameters are NOT constants); a "call_function" or "call_method" node that is
    neither random nor has side effects and whose input nodes (``node.all_input_nodes``) are all
    constants — evaluate it on their values, under torch.no_grad(). With
    ``interp = fx.Interpreter(gm)``: ``interp.fetch_attr(node.target)`` is a get_attr's value, and
    ``interp.call_function(node.target, args, kwargs)`` / ``interp.call_method(...)`` evaluate a
    call on values (``fx.node.map_arg(node.args, values.__getitem__)`` turns its node arguments
    into values).
    Then each constant call node used by some non-constant node (or by the output) is replaced by
    a "get_attr" of a new buffer holding its value (``gm.register_buffer(name, value)`` with a
    fresh name, e.g. "_folded", "_folded_1", ...), and the constant nodes left without users are
    removed. The outputs stay exactly the same.
    """
    gm = copy.deepcopy(gm)
    graph = gm.graph
    interp = fx.Interpreter(gm)
    values = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            value = interp.fetch_attr(node.target)
            if isinstance(value, torch.Tensor) and not value.requires_grad:
                values[node] = value
        elif node.op in ("call_function", "call_method"):
            if has_side_effects(node) or is_random(node):
                continue
            if all(a in values for a in node.all_input_nodes):
                args = fx.node.map_arg(node.args, values.__getitem__)
                kwargs = fx.node.map_arg(node.kwargs, values.__getitem__)
                with torch.no_grad():
                    if node.op == "call_function":
                        values[node] = interp.call_function(node.target, args, kwargs)
                    else:
                        values[node] = interp.call_method(node.target, args, kwargs)
    count = 0
    for node in list(values):
        if node.op == "get_attr" or not isinstance(values[node], torch.Tensor):
            continue
        if all(user in values for user in node.users):
            continue
        name = "_folded" if count == 0 else f"_folded_{count}"
        while name in dict(gm.named_buffers()):
            count += 1
            name = f"_folded_{count}"
        count += 1
        gm.register_buffer(name, values[node].detach().clone(), persistent=False)
        with graph.inserting_before(node):
            fetched = graph.get_attr(name)
        node.replace_all_uses_with(fetched)
    for node in reversed(list(graph.nodes)):
        if node in values and not node.users:
            graph.erase_node(node)
    graph.lint()
    gm.recompile()
    return gm


def common_subexpression_elimination(gm):
    """Merge nodes that compute the same value. Returns a new GraphModule (gm unchanged).

    Two call nodes are the same when they have the same op, the same target, the same positional
    arguments and the same keyword arguments — node arguments must be the same node, literal
    arguments equal AND of the same type (x + 1 differs from x + 1.0; dim=0 differs from dim=1).
    Keep the first of them: every use of a later one is redirected to it, and the later one is
    erased. Never merge a random node (two torch.rand_like calls are two draws) or a node with
    side effects, and forget everything seen so far when you pass a node with side effects (what
    was computed before it may differ after it). Placeholders and the output are never merged.
    """
    gm = copy.deepcopy(gm)
    graph = gm.graph

    def key_of(value):
        if isinstance(value, fx.Node):
            return ("node", value)
        if isinstance(value, (list, tuple)):
            return (type(value), tuple(key_of(v) for v in value))
        if isinstance(value, dict):
            return (dict, tuple(sorted((k, key_of(v)) for k, v in value.items())))
        if isinstance(value, torch.Tensor):
            return (torch.Tensor, id(value))
        return (type(value), value)

    seen = {}
    for node in list(graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        if has_side_effects(node) or is_random(node):
            seen.clear()
            continue
        try:
            key = (node.op, node.target, key_of(node.args), key_of(dict(node.kwargs)))
            hash(key)
        except TypeError:
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
        else:
            seen[key] = node
    graph.lint()
    gm.recompile()
    return gm


def clip_without_breaks(x: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``labkit.compiler.inside_compile.clip_by_norm`` rewritten so that ``torch._dynamo.explain``
    finds one graph and no break in it.

    x: a float tensor of any shape; max_norm: a Python float > 0. Returns y − mean(y), where
    y = x·max_norm/‖x‖ when x's Euclidean norm ‖x‖ exceeds max_norm and y = x otherwise (an
    all-zero x included), with x's shape and dtype: what clip_by_norm returns, to float rounding
    (the grader allows 1e-5 relative, 1e-6 absolute), without printing.
    """
    norm = x.norm()
    x = torch.where(norm > max_norm, x * (max_norm / norm), x)
    return x - x.mean()


def transactions(addresses, segment_bytes=128):
    """The number of aligned memory segments one warp's access touches (its memory transactions).

    addresses: a list of at most 32 entries, one per lane in order: the byte address (an int >= 0)
    that lane reads, or None for an inactive lane. segment_bytes: a power of two (128 for a
    transaction, 32 for a sector). Return the number of distinct segments address //
    segment_bytes among the active lanes (0 if none is active).
    Example: 32 lanes reading consecutive 4-byte floats from address 0 -> 1; with a stride of 2
    floats -> 2.
    """
    return len({a // segment_bytes for a in addresses if a is not None})
