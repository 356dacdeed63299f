"""Graph rewrites on `torch.fx` graphs: the classic compiler passes, each a function ``gm -> gm``.

Every pass takes a `torch.fx.GraphModule` (as made by ``torch.fx.symbolic_trace(model)``) and
returns a **new** GraphModule computing the same outputs. The caller's module, its graph and its
tensors are never changed: each pass starts from ``copy.deepcopy(gm)``. A pass that creates
tensors (folded constants, folded convolution weights, concatenated projections) puts them on the
new module only.

    dead_code_elimination(gm)            remove nodes whose results nobody uses (unless they act)
    constant_folding(gm)                 compute what depends only on constants once, at fold time
    common_subexpression_elimination(gm) compute each distinct pure expression once
    fuse_elementwise(gm)                 one fused op for each group of elementwise ops
    fold_conv_bn(gm)                     Conv2d + eval-mode BatchNorm2d -> one Conv2d
    concat_qkv(gm)                       Linear projections of one input -> one Linear + split

**Purity.** Removing, merging or precomputing a node is only allowed when nothing but its result
can be observed. `has_side_effects` says when more can: torch.fx's own `Node.is_impure` (asserts,
``operator.setitem``, ``torch.ops.aten.copy_`` and other ops whose schema mutates an input, random
functions such as ``torch.rand``) misses in-place *method* calls (``x.add_(1)``), in-place
functions without a schema (``torch.relu_``, ``F.relu(x, inplace=True)``, ``x += y`` traced as
``operator.iadd``), ``print``, and BatchNorm in training mode (it updates running statistics).
`is_random` says when a node draws from the random number generator (two draws are never "the
same value", and skipping one would change every later draw).

Node counts, aten-op counts and timings of each pass are taken by `labkit.compiler.fx_measure`.
"""
from __future__ import annotations

import builtins
import copy
import inspect
import itertools
import operator

import torch
import torch.nn.functional as F
from torch import fx, nn

__all__ = ["has_side_effects", "mutates_inputs", "is_random", "dead_code_elimination",
           "constant_folding", "common_subexpression_elimination", "ELEMENTWISE_FUNCTIONS",
           "ELEMENTWISE_METHODS", "ELEMENTWISE_MODULES", "FusedElementwise", "fuse_elementwise",
           "fold_conv_bn", "concat_qkv"]


# ---- purity -------------------------------------------------------------------------------------
_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
                      operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift}
# Calls that act on the world without mutating a tensor: they must run, but nothing they read changes.
_EFFECTFUL_FUNCTIONS = {builtins.print, torch.manual_seed, torch.set_rng_state, torch.save}
_RANDOM_FUNCTIONS = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like,
                     torch.randn_like, torch.randint_like, torch.normal, torch.poisson,
                     torch.bernoulli, torch.multinomial, torch.dropout, torch.alpha_dropout,
                     torch.feature_alpha_dropout}
_DROPOUT_FUNCTIONS = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
                      F.feature_alpha_dropout}
_RANDOM_METHODS = {"bernoulli", "bernoulli_", "uniform_", "normal_", "random_", "exponential_",
                   "geometric_", "cauchy_", "log_normal_", "multinomial"}
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                    nn.FeatureAlphaDropout)


def _module(node: fx.Node) -> nn.Module:
    return node.graph.owning_module.get_submodule(node.target)


def _is_inplace_name(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__")


def _inplace_flag(node: fx.Node) -> bool:
    """True if the call passes ``inplace=True``, by keyword or by position (``F.relu(x, True)``)."""
    if node.kwargs.get("inplace") is True:
        return True
    try:
        bound = inspect.signature(node.target).bind_partial(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return False
    return bound.arguments.get("inplace") is True


def mutates_inputs(node: fx.Node) -> bool:
    """True if running ``node`` may write into one of its input tensors (an in-place op, or a
    call given ``out=``: ``torch.add(x, 1, out=buf)`` writes into ``buf``)."""
    if node.op in ("call_function", "call_method") and node.kwargs.get("out") is not None:
        return True
    if node.op == "call_method":
        return _is_inplace_name(node.target)
    if node.op == "call_function":
        target = node.target
        if target in _INPLACE_OPERATORS or target is operator.setitem or _inplace_flag(node):
            return True
        schema = getattr(target, "_schema", None)
        if schema is not None and schema.is_mutable:
            return True
        return _is_inplace_name(getattr(target, "__name__", ""))
    if node.op == "call_module":
        return getattr(_module(node), "inplace", False) is True
    return False


def is_random(node: fx.Node) -> bool:
    """True if ``node`` draws from a random number generator: rand/randn/bernoulli/..., dropout
    with ``training=True`` and p > 0 (functional or an ``nn.Dropout`` in training mode), random
    in-place methods (``uniform_``), aten ops tagged ``nondeterministic_seeded``."""
    if node.op == "call_method":
        return node.target in _RANDOM_METHODS
    if node.op == "call_function":
        target = node.target
        if target in _DROPOUT_FUNCTIONS:
            p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
            training = node.kwargs.get("training", node.args[2] if len(node.args) > 2 else True)
            return training is not False and p != 0
        if target in _RANDOM_FUNCTIONS or getattr(target, "_nondeterministic_seeded", False):
            return True
        return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())
    if node.op == "call_module":
        mod = _module(node)
        return isinstance(mod, _DROPOUT_MODULES) and mod.training and mod.p > 0
    return False


def has_side_effects(node: fx.Node) -> bool:
    """True if ``node`` must run even when its result is unused: it is a placeholder or the output,
    torch.fx calls it impure (`Node.is_impure`), it mutates an input (`mutates_inputs`), it is a
    call with an outside effect (``print``, ``torch.manual_seed``, ``torch.save``), it draws random
    numbers (`is_random`: skipping a draw changes all later ones), or it is a BatchNorm module in
    training mode that tracks running statistics (the call updates its buffers)."""
    if node.is_impure() or mutates_inputs(node) or is_random(node):
        return True
    if node.op == "call_function" and node.target in _EFFECTFUL_FUNCTIONS:
        return True
    if node.op == "call_module":
        mod = _module(node)
        return isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.training and mod.track_running_stats
    return False


# ---- shared helpers -----------------------------------------------------------------------------
def _start(fn: str, gm) -> fx.GraphModule:
    """A deep copy of ``gm`` for a pass to rewrite (TypeError, one line, if it is no GraphModule)."""
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"{fn}: gm must be a torch.fx.GraphModule (use torch.fx.symbolic_trace), "
                        f"got {type(gm).__name__}")
    return copy.deepcopy(gm)


def _finish(gm: fx.GraphModule) -> fx.GraphModule:
    gm.graph.lint()
    gm.recompile()
    return gm


def _fresh_attr(gm: nn.Module, base: str) -> str:
    for i in itertools.count():
        name = base if i == 0 else f"{base}_{i}"
        if not hasattr(gm, name):
            return name


def _fetch_attr(gm: nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _ancestors(nodes) -> set:
    """``nodes`` and every node they read from, transitively."""
    seen, stack = set(), list(nodes)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


# ---- dead code elimination ----------------------------------------------------------------------
# BEGIN SOLUTION (labkit's passes: they answer Lab 13's)
def dead_code_elimination(gm: fx.GraphModule) -> fx.GraphModule:
    """Remove every node whose result is not used, directly or through other nodes, by the output,
    unless it has side effects. Returns a new GraphModule; ``gm`` is not modified.

    Input: a GraphModule (e.g. from ``torch.fx.symbolic_trace``). Output: a GraphModule whose
    outputs equal ``gm``'s bit for bit (every kept node computes exactly what it did before).

    - **Gone:** each ``get_attr``, ``call_function``, ``call_method`` or ``call_module`` node with
      no side effects (`has_side_effects` is False) whose result is not needed — it has no users,
      or all its users are themselves removed (a whole dead chain goes, not only its last node).
    - **Stay:** all placeholders (the signature does not change, even for an unused input), the
      output node, every node with side effects (in-place ops such as ``x.add_(1)`` or
      ``torch.ops.aten.copy_``, ``print``, asserts, random draws, BatchNorm in training mode) and
      everything those nodes read. Kept nodes keep their order and names.
    - Submodules and attributes are not deleted from the module, only the nodes that used them.

    On a graph of pure ops this removes exactly what ``gm.graph.eliminate_dead_code()`` removes.
    """
    gm = _start("dead_code_elimination", gm)
    for node in reversed(list(gm.graph.nodes)):            # users come after their inputs
        if node.op in ("placeholder", "output") or node.users or has_side_effects(node):
            continue
        gm.graph.erase_node(node)
    return _finish(gm)


# ---- constant folding ---------------------------------------------------------------------------
# END SOLUTION


def _mutated_state(gm: fx.GraphModule) -> tuple[set, set]:
    """Nodes that may be written in place (everything an in-place node reads, transitively, since
    it may be a view of it) and the attribute names among them; plus names of called submodules."""
    mutating = [n for n in gm.graph.nodes if mutates_inputs(n)]
    touched = _ancestors(a for n in mutating for a in n.all_input_nodes)
    names = {n.target for n in touched if n.op == "get_attr"}
    return touched, names


# BEGIN SOLUTION (labkit's constant folding)
def constant_folding(gm: fx.GraphModule) -> fx.GraphModule:
    """Compute, once, every value that depends only on constants, and read it from a buffer.
    Returns a new GraphModule; ``gm`` is not modified.

    **Policy: a constant is a tensor that does not require grad.** A ``get_attr`` node is constant
    when it fetches a tensor with ``requires_grad=False`` — a buffer, or a frozen parameter — that no
    node of the graph mutates and that does not belong to a submodule the graph calls (a training
    BatchNorm updates its own buffers). Parameters that require grad are never read at fold time,
    so the folded module trains exactly like the original. (For an inference-only fold of
    everything, call ``model.requires_grad_(False)`` before tracing.)

    A ``call_function`` / ``call_method`` node is constant when it has no side effects, is not
    random, and every node it reads is constant; a call with only literal arguments
    (``torch.ones(3)``) is therefore constant. ``call_module`` nodes are never folded. Nodes that
    an in-place op reads (directly or through a chain, since it may write through a view) are
    never constant.

    - **Replaced:** each constant call node whose value is a tensor and that is read by at least
      one non-constant node (or by the output) becomes a ``get_attr`` of a new non-persistent buffer
      ``_folded``, ``_folded_1``, ... holding its value, computed once at fold time with no grad.
    - **Gone:** every constant node left without users: the interior of folded chains and the
      ``get_attr`` nodes only they read. (Attributes stay on the module.)
    - **Stay:** placeholders, output, every non-constant node, and constant nodes whose value is
      not a tensor (``buf.shape``) together with what they read.

    The result equals ``gm``'s outputs bit for bit (the same kernels run on the same values, just
    earlier), as long as the buffers are not changed after folding: folding takes a snapshot.
    """
    gm = _start("constant_folding", gm)
    graph = gm.graph
    mutated, mutated_attrs = _mutated_state(gm)
    called = [n.target + "." for n in graph.nodes if n.op == "call_module"]
    values: dict = {}
    for node in graph.nodes:
        if node in mutated:
            continue
        if node.op == "get_attr":
            if node.target in mutated_attrs or any(node.target.startswith(p) for p in called):
                continue
            value = _fetch_attr(gm, node.target)
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
                        values[node] = node.target(*args, **kwargs)
                    else:
                        values[node] = getattr(args[0], node.target)(*args[1:], **kwargs)
    for node in list(values):
        if node.op == "get_attr" or not isinstance(values[node], torch.Tensor):
            continue
        if all(user in values for user in node.users):
            continue                                         # interior: its users are folded too
        name = _fresh_attr(gm, "_folded")
        gm.register_buffer(name, values[node].detach().clone(), persistent=False)
        with graph.inserting_before(node):
            fetched = graph.get_attr(name)
        node.replace_all_uses_with(fetched)
    for node in reversed(list(graph.nodes)):
        if node in values and not node.users:
            graph.erase_node(node)
    return _finish(gm)


# ---- common subexpression elimination -----------------------------------------------------------
# END SOLUTION


class _NoKey(Exception):
    """A literal argument that cannot be compared safely (so its node is never merged)."""


def _literal_key(value):
    """A hashable key equal for two arguments only when they are interchangeable: nodes by
    identity; literals by type *and* value (1, 1.0 and True differ, as do [1] and (1,), 0.0 and
    -0.0); tensors by identity (the same object); anything unhashable raises `_NoKey`."""
    if isinstance(value, fx.Node):
        return ("node", value)
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value))
    if isinstance(value, float):
        return (float, repr(value))                         # -0.0 != 0.0 and nan == nan here
    if isinstance(value, complex):
        return (complex, repr(value))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_literal_key(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple(sorted((k, _literal_key(v)) for k, v in value.items())))
    if isinstance(value, slice):
        return (slice, _literal_key(value.start), _literal_key(value.stop), _literal_key(value.step))
    try:
        hash(value)
    except TypeError:
        raise _NoKey from None
    return (type(value), value)


# BEGIN SOLUTION (labkit's CSE)
def common_subexpression_elimination(gm: fx.GraphModule) -> fx.GraphModule:
    """Merge nodes that compute the same value. Returns a new GraphModule; ``gm`` is not modified.

    Two nodes are merged (every use of the later one reads the earlier one, and the later one is
    removed) when they have the same ``op`` and ``target``, the same positional arguments and the
    same keyword arguments (in any order), where node arguments must be the *same node* and literal
    arguments must be equal *and of the same type* (``x + 1`` and ``x + 1.0`` are different: on an
    integer tensor one is an int, the other a float; ``[2, 3]`` and ``(2, 3)`` are different).
    Tensor literals are equal only if they are the same object.

    Never merged: placeholders, the output, nodes with side effects (in-place ops, ``print``) and
    random nodes (two ``torch.rand`` calls are two different draws; so are two dropouts in
    training). A node with side effects also ends every match: nothing before it is merged with
    anything after it (``a = x + 1; x.add_(1); b = x + 1`` keeps both ``a`` and ``b``).

    The outputs equal ``gm``'s bit for bit.
    """
    gm = _start("common_subexpression_elimination", gm)
    graph = gm.graph
    seen: dict = {}
    for node in list(graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        if has_side_effects(node) or is_random(node):
            seen.clear()
            continue
        try:
            key = (node.op, node.target, _literal_key(node.args), _literal_key(dict(node.kwargs)))
            hash(key)
        except (_NoKey, TypeError):
            continue
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
        else:
            seen[key] = node
    return _finish(gm)


# ---- elementwise fusion -------------------------------------------------------------------------
# END SOLUTION


ELEMENTWISE_FUNCTIONS = frozenset({
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.relu, torch.sigmoid, torch.tanh,
    torch.exp, torch.log, torch.sin, torch.cos, torch.sqrt, torch.rsqrt, torch.abs, torch.square,
    F.relu, F.gelu, F.silu, F.sigmoid, F.tanh,
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg})
ELEMENTWISE_METHODS = frozenset({"add", "sub", "mul", "div", "neg", "relu", "sigmoid", "tanh", "exp",
                                 "log", "sin", "cos", "sqrt", "rsqrt", "abs", "square"})
ELEMENTWISE_MODULES = (nn.ReLU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh)


def _is_elementwise(node: fx.Node) -> bool:
    if has_side_effects(node) or is_random(node):
        return False
    if any(isinstance(a, (list, tuple, dict, slice)) for a in (*node.args, *node.kwargs.values())):
        return False                                          # flat arguments only
    if node.op == "call_function":
        return node.target in ELEMENTWISE_FUNCTIONS
    if node.op == "call_method":
        return node.target in ELEMENTWISE_METHODS
    if node.op == "call_module":
        return isinstance(_module(node), ELEMENTWISE_MODULES)
    return False


class _Slot:
    """A reference, inside a fused program, to its input ``i`` (i < n_inputs) or to the result
    of step ``i - n_inputs``."""
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"v{self.index}"


def _call_method(name: str):
    def call(self, *args, **kwargs):
        return getattr(self, name)(*args, **kwargs)
    call.__name__ = name
    return call


_PROGRAMS: dict = {}
_PROGRAM_IDS = itertools.count()


class FusedElementwise:
    """The target of one fused node: a straight-line program of elementwise ops.

    ``steps`` is a tuple of ``(callable, args, kwargs)`` whose arguments are literals or `_Slot`s.
    Calling it with tensors runs the whole program as **one** dispatcher op,
    ``torch.ops.labkit.fused_elementwise``. That alone fuses nothing: its body runs the steps
    eagerly, one aten op (one kernel, one pass over memory) per step, and a profiler
    (``fx_measure.count_launches``) counts every one of them. Only when the fusion pass was asked
    to compile does the body go through ``torch.compile``, which generates one loop: one kernel.
    If an input is not a tensor (an int from ``x.size(0)``), the steps simply run eagerly.
    """

    def __init__(self, steps: tuple, n_inputs: int, compile: bool = False):
        self.steps, self.n_inputs = steps, n_inputs
        last = {}                                             # intermediate slot -> last step using it
        for step, (_, args, kwargs) in enumerate(steps):
            for a in (*args, *kwargs.values()):
                if isinstance(a, _Slot) and a.index >= n_inputs:
                    last[a.index] = step
        self._last_uses = [[i for i, s in last.items() if s == step] for step in range(len(steps))]
        self.program_id = next(_PROGRAM_IDS)
        self.__name__ = self.__qualname__ = f"fused_elementwise_{self.program_id}"
        # cpp.enable_kernel_profile: the generated CPU kernel shows in torch.profiler (count_launches)
        self._compiled = (torch.compile(self.run, dynamic=False, options={"cpp.enable_kernel_profile": True})
                          if compile else None)
        _PROGRAMS[self.program_id] = self

    def run(self, *inputs):
        """Evaluate the steps eagerly on ``inputs``; return the last result. Each intermediate is
        dropped after its last use, as the unfused graph does (holding all of them would cost
        fresh memory, and page faults, on every call)."""
        values = list(inputs)
        fill = lambda a: values[a.index] if isinstance(a, _Slot) else a  # noqa: E731
        for (fn, args, kwargs), dead in zip(self.steps, self._last_uses):
            values.append(fn(*[fill(a) for a in args], **{k: fill(v) for k, v in kwargs.items()}))
            for i in dead:
                values[i] = None
        return values[-1]

    def body(self, *inputs):
        """The fused op's implementation: compiled when asked for, else `run`."""
        return (self._compiled or self.run)(*inputs)

    def __call__(self, *inputs):
        if all(isinstance(t, torch.Tensor) for t in inputs):
            return torch.ops.labkit.fused_elementwise(list(inputs), self.program_id)
        return self.run(*inputs)

    def __repr__(self):
        names = [getattr(fn, "__name__", type(fn).__name__) for fn, _, _ in self.steps]
        return f"{self.__name__}({' -> '.join(names)})"


def _register_fused_op() -> None:
    if hasattr(torch.ops.labkit, "fused_elementwise"):
        return

    @torch.library.custom_op("labkit::fused_elementwise", mutates_args=())
    def fused_elementwise(inputs: list[torch.Tensor], program: int) -> torch.Tensor:
        out = _PROGRAMS[program].body(*inputs)
        return out.clone() if any(out is t for t in inputs) else out

    @fused_elementwise.register_fake
    def _(inputs, program):
        return _PROGRAMS[program].run(*inputs)

    def setup_context(ctx, inputs, output):
        ctx.inputs, ctx.program = inputs

    def backward(ctx, grad):
        # Recompute the chain with autograd on (a fused kernel keeps no intermediates either).
        xs = [t.detach().requires_grad_(t.requires_grad) for t in ctx.inputs]
        need = [x for x in xs if x.requires_grad]
        with torch.enable_grad():
            out = _PROGRAMS[ctx.program].run(*xs)
        got = iter(torch.autograd.grad(out, need, grad, allow_unused=True)) if need else iter(())
        return [next(got) if x.requires_grad else None for x in xs], None

    fused_elementwise.register_autograd(backward, setup_context=setup_context)


_register_fused_op()


def _fusion_groups(graph: fx.Graph) -> list:
    """Groups of elementwise nodes to fuse, each in graph order ending with its root: a member
    other than the root has exactly one user, and that user is in the group."""
    assigned, groups = set(), []
    for root in reversed(list(graph.nodes)):
        if root in assigned or not _is_elementwise(root):
            continue
        group, stack = {root}, [root]
        while stack:
            for a in stack.pop().all_input_nodes:
                if a not in assigned and a not in group and len(a.users) == 1 and _is_elementwise(a):
                    group.add(a)
                    stack.append(a)
        if len(group) >= 2:
            assigned |= group
            groups.append([n for n in graph.nodes if n in group])
    return groups


def fuse_elementwise(gm: fx.GraphModule, compile: bool = False) -> fx.GraphModule:
    """Replace each group of two or more connected elementwise ops by one fused node.
    Returns a new GraphModule; ``gm`` is not modified.

    Elementwise ops: `ELEMENTWISE_FUNCTIONS` (``torch.add``, ``operator.mul``, ``F.gelu``, ...),
    `ELEMENTWISE_METHODS` (``x.relu()``, ...) and `ELEMENTWISE_MODULES` (``nn.ReLU``, ...) that
    are not in place. A group is a tree of them: every member but the last (the root) has a single
    user, inside the group, so no intermediate result is needed elsewhere and none must be kept in
    memory. The group becomes one ``call_function`` node whose target is a `FusedElementwise`
    (named ``fused_elementwise_<k>``), called with the group's inputs from outside (other nodes;
    literal arguments are baked into the program). Everything else is unchanged.

    Saving: a group of k ops is k aten ops (k kernel launches, k passes over memory, k - 1
    intermediate tensors). Fused but not compiled it is one node that still runs the k ops: fewer
    nodes, the same launches, and the cost of one more call. With ``compile=True`` each group's
    body is ``torch.compile``d (needs a C++ compiler on CPU, Triton on GPU), which generates one
    loop: one launch, one pass over memory.
    Outputs equal the original's bit for bit when not compiled (the same ops run in the same
    order); compiled code may reorder arithmetic (differences of a few ulps).
    """
    gm = _start("fuse_elementwise", gm)
    graph = gm.graph
    for group in _fusion_groups(graph):
        members = {n: i for i, n in enumerate(group)}
        inputs = []                                           # outside nodes, in first-use order
        for n in group:
            inputs += [a for a in n.all_input_nodes if a not in members and a not in inputs]

        def ref(a):
            return _Slot(len(inputs) + members[a]) if a in members else _Slot(inputs.index(a))

        steps = []
        for n in group:
            if n.op == "call_function":
                fn = n.target
            elif n.op == "call_method":
                fn = _call_method(n.target)
            else:
                fn = _module(n)
            steps.append((fn, tuple(fx.node.map_arg(n.args, ref)), dict(fx.node.map_arg(n.kwargs, ref))))
        fused = FusedElementwise(tuple(steps), len(inputs), compile=compile)
        root = group[-1]
        with graph.inserting_before(root):
            new = graph.call_function(fused, tuple(inputs))
        root.replace_all_uses_with(new)
        for n in reversed(group):
            graph.erase_node(n)
    gm.delete_all_unused_submodules()
    return _finish(gm)


# ---- Conv2d + BatchNorm2d folding ---------------------------------------------------------------
def _folded_conv(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    """A copy of ``conv`` with ``bn`` (eval mode) folded in, computed in float64, stored in the
    conv's dtype: W' = W·γ/√(var+ε), b' = (b − μ)·γ/√(var+ε) + β, per output channel."""
    fused = copy.deepcopy(conv)
    w = conv.weight.detach().double()                      # (out, in/groups, kh, kw)
    b = (conv.bias.detach().double() if conv.bias is not None
         else torch.zeros(w.shape[0], dtype=torch.float64, device=w.device))
    mean, var = bn.running_mean.double(), bn.running_var.double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)               # (out,)
    dtype = conv.weight.dtype
    fused.weight = nn.Parameter((w * scale.reshape(-1, 1, 1, 1)).to(dtype), conv.weight.requires_grad)
    fused.bias = nn.Parameter(((b - mean) * scale + beta).to(dtype), conv.weight.requires_grad)
    return fused


def fold_conv_bn(gm: fx.GraphModule) -> fx.GraphModule:
    """Fold each ``nn.BatchNorm2d`` in eval mode into the ``nn.Conv2d`` that feeds it.
    Returns a new GraphModule; ``gm`` is not modified.

    A pair is folded when a ``call_module`` Conv2d node's only user is a ``call_module``
    BatchNorm2d node that is in eval mode and has running statistics, taking it as its only
    argument. The pair becomes one Conv2d whose weight and bias absorb the normalisation: with
    s = γ/√(running_var + ε) per output channel, W' = W·s and b' = (b − running_mean)·s + β (a
    conv without bias gets one). The new conv replaces the old one under its name if that conv is
    called only once, else under a fresh name; unused BatchNorm modules are deleted.

    One op instead of two, and one pass over the activation instead of two. The result equals
    the original up to rounding, not bit for bit: the scale is applied to the weights before the
    sum instead of to the sum after it (about 1e-6 relative in float32, 1e-15 in float64).
    """
    gm = _start("fold_conv_bn", gm)
    graph = gm.graph
    calls: dict = {}
    for n in graph.nodes:
        if n.op == "call_module":
            calls[n.target] = calls.get(n.target, 0) + 1
    for bn_node in list(graph.nodes):
        if bn_node.op != "call_module" or len(bn_node.args) != 1 or bn_node.kwargs:
            continue
        conv_node = bn_node.args[0]
        bn = _module(bn_node)
        if not (type(bn) is nn.BatchNorm2d and not bn.training and bn.running_mean is not None):
            continue
        if not (isinstance(conv_node, fx.Node) and conv_node.op == "call_module"
                and type(_module(conv_node)) is nn.Conv2d and len(conv_node.users) == 1):
            continue
        fused = _folded_conv(_module(conv_node), bn)
        if calls[conv_node.target] == 1:
            gm.set_submodule(conv_node.target, fused)
        else:
            name = _fresh_attr(gm, conv_node.target.replace(".", "_") + "_bn_folded")
            gm.add_submodule(name, fused)
            conv_node.target = name
        bn_node.replace_all_uses_with(conv_node)
        graph.erase_node(bn_node)
    gm.delete_all_unused_submodules()
    return _finish(gm)


# ---- Q, K, V projections: one matmul ------------------------------------------------------------
def concat_qkv(gm: fx.GraphModule) -> fx.GraphModule:
    """Merge ``nn.Linear`` projections of the same input into one Linear followed by a split.
    Returns a new GraphModule; ``gm`` is not modified.

    Candidates: ``call_module`` nodes of distinct ``nn.Linear`` modules called with one positional
    argument, the same node ``x``, and equal ``in_features``, dtype and device (the query, key and
    value projections of attention are the usual case; any two or more are merged). They become
    ``torch.split(concat_linear(x), [out_1, out_2, ...], dim=-1)``, whose pieces replace the old
    results; the concatenated weight is ``cat([W_1, W_2, ...])`` along the output dimension, the
    bias likewise (zeros for a projection without bias). The new module is named after the old
    ones (``q_k_v``); the old modules are deleted when unused. Its parameters are new tensors, so
    an optimizer built on the old module does not see them.

    Three matrix multiplications (three reads of ``x``) become one bigger one. Outputs agree up to
    rounding: one GEMM may block the inner sum differently from three.
    """
    gm = _start("concat_qkv", gm)
    graph = gm.graph
    groups: dict = {}
    for n in graph.nodes:
        if n.op != "call_module" or len(n.args) != 1 or n.kwargs or not isinstance(n.args[0], fx.Node):
            continue
        mod = _module(n)
        if type(mod) is not nn.Linear:
            continue
        key = (n.args[0], mod.in_features, mod.weight.dtype, mod.weight.device)
        group = groups.setdefault(key, [])
        if all(other.target != n.target for other in group):
            group.append(n)
    for (x, _, _, _), group in groups.items():
        if len(group) < 2:
            continue
        mods = [_module(n) for n in group]
        fused = nn.Linear(mods[0].in_features, sum(m.out_features for m in mods),
                          bias=any(m.bias is not None for m in mods),
                          device=mods[0].weight.device, dtype=mods[0].weight.dtype)
        with torch.no_grad():
            fused.weight.copy_(torch.cat([m.weight for m in mods]))          # (sum out, in)
            if fused.bias is not None:
                fused.bias.copy_(torch.cat([m.bias if m.bias is not None else
                                            torch.zeros_like(m.weight[:, 0]) for m in mods]))
        name = _fresh_attr(gm, "_".join(n.target.replace(".", "_") for n in group))
        gm.add_submodule(name, fused)
        with graph.inserting_before(group[0]):
            y = graph.call_module(name, (x,))
            parts = graph.call_function(torch.split, (y, [m.out_features for m in mods]), {"dim": -1})
            pieces = [graph.call_function(operator.getitem, (parts, i)) for i in range(len(group))]
        for old, piece in zip(group, pieces):
            old.replace_all_uses_with(piece)
            graph.erase_node(old)
    gm.delete_all_unused_submodules()
    return _finish(gm)


def _dead_code_elimination(gm):
    """Remove the nodes whose results are never used. Returns a new GraphModule (gm unchanged).

    A node is removed when it is a "get_attr", "call_function", "call_method" or "call_module"
    node, has no users (after the removals so far: a whole dead chain goes), and
    has_side_effects(node) is False. Placeholders (even unused ones), the output and every node
    with side effects (e.g. ``y.add_(1)``, whose result nobody reads but which changes y) stay, in
    their order. The result computes exactly the same outputs as gm.
    """
    # BEGIN SOLUTION
    # HINT: walk gm.graph.nodes in reverse so users go first; graph.erase_node what nobody uses and
    # HINT: has_side_effects says is pure; never a placeholder or the output.
    gm = copy.deepcopy(gm)
    for node in reversed(list(gm.graph.nodes)):
        if node.op in ("placeholder", "output") or node.users or has_side_effects(node):
            continue
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    return gm
    # END SOLUTION


def _constant_folding(gm):
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
    # BEGIN SOLUTION
    # HINT: a node is constant when all its inputs are; evaluate such nodes once (node.target on
    # HINT: their values), register each result as an attribute and graph.get_attr it; keep random,
    # HINT: side-effecting and trainable ones.
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
    # END SOLUTION


def _common_subexpression_elimination(gm):
    """Merge nodes that compute the same value. Returns a new GraphModule (gm unchanged).

    Two call nodes are the same when they have the same op, the same target, the same positional
    arguments and the same keyword arguments — node arguments must be the same node, literal
    arguments equal AND of the same type (x + 1 differs from x + 1.0; dim=0 differs from dim=1).
    Keep the first of them: every use of a later one is redirected to it, and the later one is
    erased. Never merge a random node (two torch.rand_like calls are two draws) or a node with
    side effects, and forget everything seen so far when you pass a node with side effects (what
    was computed before it may differ after it). Placeholders and the output are never merged.
    """
    # BEGIN SOLUTION
    # HINT: key each pure node by (op, target, args, kwargs) with earlier duplicates replaced;
    # HINT: node.replace_all_uses_with the first node of each key, then erase the copy.
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
    # END SOLUTION
