"""labkit.compiler.aot: AOTAutograd's joint graph, functionalization, decomposition and the
partitioners' choice of what to save, read through recording compilers."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from labkit.compiler import aot


@pytest.fixture(scope="module")
def inputs():
    return aot.example_inputs()


def _autograd(x, w):
    x.grad = w.grad = None
    aot.example_fn(x, w).sum().backward()
    out = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    return out


def test_joint_graph_is_functional_and_gives_autograds_gradients(inputs):
    x, w = inputs
    g = aot.aot_graphs(aot.example_fn, x, w)
    assert aot.mutating_ops(make_fx(aot.example_fn)(x.detach(), w.detach())) == ["aten.mul_.Tensor"]
    assert aot.mutating_ops(g.joint_gm) == [] and "tangents_1" in g.joint and "gelu_backward" in g.joint
    assert all(torch.equal(a, b) for a, b in zip(g.grads, _autograd(x, w)))
    assert all(len(line) <= 100 for text in (g.joint, g.forward, g.backward) for line in text.splitlines())


def test_decomposition_reaches_erf_and_prims(inputs):
    x, w = inputs
    ops = set(aot.op_names(aot.aot_graphs(aot.example_fn, x, w, decompose=True).joint_gm))
    assert not any("gelu" in o for o in ops) and "aten.erf.default" in ops
    assert "prims.convert_element_type.default" in ops and "aten.t.default" not in ops


def test_min_cut_saves_less_and_recomputes(inputs):
    x, w = inputs
    d, m = (aot.aot_graphs(aot.example_fn, x, w, partition=p) for p in aot.PARTITIONS)
    assert [t.name for t in d.saved] == ["primals_1", "primals_2", "mm", "mul", "sin"]
    assert d.saved_activation_bytes == 3 * 4 * 5 * 4                     # three (4, 5) float32 tensors
    assert [(t.name, t.from_input) for t in m.saved] == [("mm", False), ("t", True), ("t_1", True)]
    assert m.saved_activation_bytes == 4 * 5 * 4
    assert "aten.gelu.default(mm)" in m.backward and "aten.gelu.default(" not in d.backward
    assert all(torch.equal(a, b) for a, b in zip(d.grads, m.grads))


def test_bad_partition_is_refused(inputs):
    with pytest.raises(ValueError, match="partition must be one of default, min_cut"):
        aot.aot_graphs(aot.example_fn, *inputs, partition="greedy")
