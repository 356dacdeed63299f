"""AOTAutograd: the step of torch.compile between Dynamo's graph and Inductor's code.

Dynamo captures the *forward* of the user's code as an FX graph of torch functions. Before
Inductor sees it, AOTAutograd (``torch._functorch.aot_autograd``, public as
``functorch.compile.aot_function``) turns it into what a compiler can work on:

1. **a joint graph**: it traces the forward and autograd's backward together, ahead of time, into
   one FX graph of ATen ops, ``forward(primals, tangents)`` -> (outputs, gradients);
2. **functionalization**: in-place and aliasing ops (``y.mul_(2)``) become their out-of-place
   versions, so that every node is a pure function of its inputs and may be reordered, fused or
   recomputed;
3. **decomposition**: with a decomposition table, composite ops are rewritten into a smaller set
   — the core ATen opset and, for a few, ``torch.ops.prims`` (Inductor's own table turns
   ``gelu`` into its erf formula, ``t`` into ``permute``, a dtype cast into
   ``prims.convert_element_type``);
4. **partitioning**: the joint graph is cut into a forward and a backward graph. What crosses the
   cut is what the forward saves for the backward. ``default_partition`` saves every
   intermediate the backward reads; ``min_cut_rematerialization_partition`` (Inductor's choice)
   solves a min cut that saves less and recomputes cheap elementwise ops in the backward instead
   — activation checkpointing chosen by the compiler.

    graphs = aot_graphs(example_fn, *example_inputs(), partition="min_cut", decompose=True)
    graphs.joint, graphs.forward, graphs.backward     # readable code of each graph
    graphs.saved                                      # [SavedTensor] crossing the cut

Everything here uses public ``functorch.compile`` entry points with "print compilers" that record
each graph and run it unchanged (``make_boxed_func``), so no code is generated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

__all__ = ["example_fn", "example_inputs", "SavedTensor", "AOTGraphs", "aot_graphs", "mutating_ops",
           "op_names", "PARTITIONS"]


def example_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A small function with a matmul, a composite op (GELU), an in-place op and a dtype cast:
    x (B, D), w (D, H) -> a float64 scalar."""
    y = torch.nn.functional.gelu(x @ w)           # (B, H)
    y.mul_(2)                                     # in place: functionalization removes it
    return (y.sin() * y).double().sum()


def example_inputs(batch: int = 4, d: int = 3, h: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (batch, d) and w (d, h), float32, requiring grad, from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, d, generator=g).requires_grad_(), torch.randn(d, h, generator=g).requires_grad_())


@dataclass(frozen=True)
class SavedTensor:
    """One value the forward graph hands to the backward graph: its node name, shape, bytes, and
    whether it is a graph input (or a view of one: no extra memory) rather than an activation."""

    name: str
    shape: tuple
    bytes: int
    from_input: bool


@dataclass
class AOTGraphs:
    """What AOTAutograd produced for one function: readable code of the joint, forward and
    backward graphs, the GraphModules themselves, and the tensors saved for the backward."""

    joint: str
    forward: str
    backward: str
    joint_gm: torch.fx.GraphModule
    forward_gm: torch.fx.GraphModule
    backward_gm: torch.fx.GraphModule
    saved: list
    outputs: tuple
    grads: tuple

    @property
    def saved_activation_bytes(self) -> int:
        """Bytes of the saved tensors that are not inputs (or views of inputs)."""
        return sum(s.bytes for s in self.saved if not s.from_input)


PARTITIONS = ("default", "min_cut")


def _code(gm: torch.fx.GraphModule, width: int = 100) -> str:
    """``gm``'s code, for reading: ``torch.ops.aten.mm`` as ``aten.mm``, the ``x = None`` that free
    memory left out, lines wrapped at ``width`` characters."""
    import textwrap

    out = []
    for line in gm.code.strip().splitlines():
        line = re.sub(r";\s+[\w\s=,]*= None$", "", line.rstrip()).replace("torch.ops.", "")
        if line.strip():
            out += textwrap.wrap(line, width, subsequent_indent=" " * 12, break_long_words=False,
                                 break_on_hyphens=False, drop_whitespace=False) if len(line) > width else [line]
    return "\n".join(out)


def op_names(gm: torch.fx.GraphModule) -> list[str]:
    """The targets of ``gm``'s call_function nodes, in order ("aten.mm.default", ...)."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def mutating_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The ops of ``gm`` whose schema mutates an argument (in-place or out= ops)."""
    out = []
    for n in gm.graph.nodes:
        schema = getattr(n.target, "_schema", None)
        if n.op == "call_function" and schema is not None and schema.is_mutable:
            out.append(str(n.target))
    return out


def _saved(fw: torch.fx.GraphModule, n_outputs: int) -> list[SavedTensor]:
    """The forward graph's outputs after the first ``n_outputs`` (the user's): what it saves."""
    output = next(n for n in fw.graph.nodes if n.op == "output")
    values = output.args[0][n_outputs:]
    placeholders = {n for n in fw.graph.nodes if n.op == "placeholder"}
    saved = []
    for v in values:
        val = v.meta.get("val")
        base = v
        while base not in placeholders and base.op == "call_function" and \
                getattr(getattr(base.target, "_schema", None), "name", "") in ("aten::t", "aten::permute",
                                                                              "aten::view", "aten::expand"):
            base = base.args[0]
        nbytes = val.numel() * val.element_size() if isinstance(val, torch.Tensor) else 0
        shape = tuple(val.shape) if isinstance(val, torch.Tensor) else ()
        saved.append(SavedTensor(v.name, shape, nbytes, base in placeholders))
    return saved


def aot_graphs(fn, *args, partition: str = "default", decompose: bool = False) -> AOTGraphs:
    """Run ``fn(*args)`` forward and backward (of the sum of its output) through AOTAutograd with
    recording compilers; ``partition``: "default" (`default_partition`) or "min_cut"
    (`min_cut_rematerialization_partition`); ``decompose``: use Inductor's decomposition table.
    ``args`` are leaf tensors; their gradients are returned in ``grads`` (and reset)."""
    from functorch.compile import (aot_function, default_partition, make_boxed_func,
                                   min_cut_rematerialization_partition)

    if partition not in PARTITIONS:
        raise ValueError(f"aot_graphs: partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    cut = default_partition if partition == "default" else min_cut_rematerialization_partition
    got: dict = {}

    def recorder(kind):
        def compiler(gm, example_inputs):
            got[kind] = gm
            return make_boxed_func(gm.forward)
        return compiler

    def partition_fn(joint, joint_inputs, **kwargs):
        got["joint"] = joint
        got["n_outputs"] = kwargs.get("num_fwd_outputs")
        return cut(joint, joint_inputs, **kwargs)

    decompositions = None
    if decompose:
        from torch._inductor.decomposition import select_decomp_table

        decompositions = select_decomp_table()
    compiled = aot_function(fn, fw_compiler=recorder("forward"), bw_compiler=recorder("backward"),
                            partition_fn=partition_fn, decompositions=decompositions)
    for a in args:
        a.grad = None
    out = compiled(*args)
    out.sum().backward()
    grads = tuple(a.grad.detach().clone() for a in args)
    for a in args:
        a.grad = None
    n_outputs = got["n_outputs"] if got.get("n_outputs") is not None else 1
    return AOTGraphs(_code(got["joint"]), _code(got["forward"]), _code(got["backward"]), got["joint"],
                     got["forward"], got["backward"], _saved(got["forward"], n_outputs),
                     (out.detach(),), grads)
