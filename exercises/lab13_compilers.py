"""Lab 13 exercises: ML compilers.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

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
import copy  # noqa: F401

import torch  # noqa: F401
from torch import fx  # noqa: F401

from labkit.compiler.fx_passes import has_side_effects, is_random  # noqa: F401


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
    raise NotImplementedError("hint: the chain rule, op by op: an elementwise op multiplies ∂L/∂out by its local derivative (work it out on paper; some are cheapest written with out); for matmul, write one output element as a sum and ask which a and b elements it touches (match the shapes with .T); each summed element receives the gradient of the output it fed (unsqueeze, expand).")


def dead_code_elimination(gm):
    """Remove the nodes whose results are never used. Returns a new GraphModule (gm unchanged).

    A node is removed when it is a "get_attr", "call_function", "call_method" or "call_module"
    node, has no users (after the removals so far: a whole dead chain goes), and
    has_side_effects(node) is False. Placeholders (even unused ones), the output and every node
    with side effects (e.g. ``y.add_(1)``, whose result nobody reads but which changes y) stay, in
    their order. The result computes exactly the same outputs as gm.
    """
    raise NotImplementedError("hint: walk gm.graph.nodes in reverse so users go first; graph.erase_node what nobody uses and has_side_effects says is pure; never a placeholder or the output.")


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
    raise NotImplementedError("hint: a node is constant when all its inputs are; evaluate such nodes once (node.target on their values), register each result as an attribute and graph.get_attr it; keep random, side-effecting and trainable ones.")


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
    raise NotImplementedError("hint: key each pure node by (op, target, args, kwargs) with earlier duplicates replaced; node.replace_all_uses_with the first node of each key, then erase the copy.")


def clip_without_breaks(x: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``labkit.compiler.inside_compile.clip_by_norm`` rewritten so that ``torch._dynamo.explain``
    finds one graph and no break in it.

    x: a float tensor of any shape; max_norm: a Python float > 0. Returns y − mean(y), where
    y = x·max_norm/‖x‖ when x's Euclidean norm ‖x‖ exceeds max_norm and y = x otherwise (an
    all-zero x included), with x's shape and dtype: what clip_by_norm returns, to float rounding
    (the grader allows 1e-5 relative, 1e-6 absolute), without printing.
    """
    raise NotImplementedError("hint: keep every value a tensor (no .item(), no Python number from data), compute both sides and select with torch.where (or torch.cond), and leave the logging out of the function.")


def transactions(addresses, segment_bytes=128):
    """The number of aligned memory segments one warp's access touches (its memory transactions).

    addresses: a list of at most 32 entries, one per lane in order: the byte address (an int >= 0)
    that lane reads, or None for an inactive lane. segment_bytes: a power of two (128 for a
    transaction, 32 for a sector). Return the number of distinct segments address //
    segment_bytes among the active lanes (0 if none is active).
    Example: 32 lanes reading consecutive 4-byte floats from address 0 -> 1; with a stride of 2
    floats -> 2.
    """
    raise NotImplementedError("hint: lanes whose addresses fall in the same aligned segment share one transaction, and an inactive lane costs nothing: which segment does each lane fall in? (a Python set de-duplicates)")
