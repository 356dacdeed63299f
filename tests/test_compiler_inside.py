"""Lab 13 part 3: what torch.compile does inside (Dynamo graphs, guards, breaks, Inductor, recompiles).

Counts below are exact for torch 2.13 with the Dynamo settings each test sets explicitly. The
ones that decide them: ``torch._dynamo.config.automatic_dynamic_shapes`` (default True: after a
size guard fails once, recompile with that size symbolic), ``recompile_limit`` (default 8: then
Dynamo stops compiling the function and runs new shapes eagerly), and ``torch.compile(dynamic=)``.
Most tests use the cheap counting `Recorder` backend; only the Inductor test generates code.
"""
from __future__ import annotations

import contextlib
import inspect
import random

import pytest
import torch

from labkit.compiler import inside_compile as ic


def _line_of(fn, text: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if text in line)


def test_captured_graph_of_elementwise_chain():
    graphs = ic.captured_graphs(ic.elementwise_chain, torch.randn(8))
    assert len(graphs) == 1
    printout, nodes = graphs[0]
    assert nodes == 7                    # 1 placeholder + 5 ops (mul, add, relu, sin, sigmoid) + output
    for op in ("mul", "add", "relu", "sin", "sigmoid"):
        assert op in printout
    assert 'f32[8]' in printout and "# File:" not in printout


@pytest.mark.parametrize("sign, breaks", [(1.0, 3), (-1.0, 2)])
def test_graph_breaks_and_their_reasons(sign, breaks, tmp_path):
    """The print breaks a graph only when the taken branch left a graph under way before it; where
    sys.stdout points (pytest's capture, a plain file) changes nothing."""
    x = sign * torch.ones(8)
    with open(tmp_path / "out.txt", "w") as plain, contextlib.redirect_stdout(plain):
        in_file = ic.graph_breaks(ic.breaking_fn, x)
    rep = ic.graph_breaks(ic.breaking_fn, x)
    assert (rep.graphs, rep.breaks, rep.reasons) == (in_file.graphs, in_file.breaks, in_file.reasons)
    assert rep.breaks == breaks and rep.graphs == rep.breaks + 1
    where = {int(w.rsplit(":", 1)[1]): r.lower() for r, w in rep.reasons}
    branch, item = _line_of(ic.breaking_fn, "if x.sum() > 0"), _line_of(ic.breaking_fn, "= x.abs().max().item()")
    printed = _line_of(ic.breaking_fn, "print(")
    assert "jump" in where[branch] or "data" in where[branch]        # a branch on a tensor's value
    assert "item" in where[item]
    assert (printed in where) == (breaks == 3)
    if breaks == 3:
        assert "builtin" in where[printed] or "print" in where[printed]
    # the captured pieces: Dynamo resumes after each break
    assert len(ic.captured_graphs(ic.breaking_fn, x)) == breaks + 1


@pytest.mark.parametrize("fixed", [ic.fixed_fn, ic.fixed_fn_cond])
def test_fixed_versions_have_no_breaks_and_same_values(fixed):
    for sign in (1.0, -1.0):                 # both sides of the branch
        x = sign * (torch.rand(8) + 0.1)
        rep = ic.graph_breaks(fixed, x)
        assert (rep.graphs, rep.breaks, rep.reasons) == (1, 0, [])
        torch.testing.assert_close(fixed(x), ic.breaking_fn(x))
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(fixed, backend=ic.Recorder())(x), ic.breaking_fn(x))
    torch._dynamo.reset()


def test_guards_static_and_dynamic():
    x = torch.randn(8)
    try:
        static = ic.guards_of(ic.elementwise_chain, x)
        dynamic = ic.guards_of(ic.elementwise_chain, x, dynamic=True)
    except ic.GuardsUnavailable as e:
        pytest.skip(str(e))
    assert any(g.startswith("TENSOR_MATCH") and "size=[8]" in g and "torch.float32" in g for g in static)
    assert any(g.startswith("TENSOR_MATCH") and "size=[None]" in g for g in dynamic)
    assert any("L['x'].size()[0]" in g for g in dynamic)          # e.g. 2 <= L['x'].size()[0]
    assert not any("L['x'].size()[0]" in g for g in static)


def test_inductor_fuses_an_elementwise_chain_into_one_kernel():
    if ic.cpp_compiler() is None:
        pytest.skip("no C++ compiler: Inductor's CPU backend cannot build kernels here")
    x = torch.randn(1000)
    code = ic.inductor_code(ic.elementwise_chain, x)
    names = ic.kernel_names(code)
    assert len(names) == 1, names                  # five ops, one loop
    assert "fused" in names[0] and "sin" in names[0] and "sigmoid" in names[0]
    assert 'extern "C"' in code                     # C++ on a CPU


def _inputs(sizes):
    return [(torch.randn(n),) for n in sizes]


def test_recompile_counts_under_each_setting():
    xs = _inputs(range(4, 16))                                  # 12 different lengths
    # default: automatic_dynamic_shapes=True -> static for 4, fails at 5, recompiles symbolic, done
    auto = ic.count_compiles(ic.elementwise_chain, xs, dynamic=None, automatic_dynamic=True)
    assert (auto.compiles, auto.compiled_at, auto.dynamic_graphs) == (2, [0, 1], 1)
    if auto.reasons:             # read from a private Dynamo table; empty if it ever goes away
        assert "size mismatch at index 0. expected 4, actual 5" in auto.reasons[0]
    # automatic dynamic off: every new length is a new static graph (limit raised to see them all)
    off = ic.count_compiles(ic.elementwise_chain, xs, dynamic=None, automatic_dynamic=False,
                            recompile_limit=64)
    assert off.compiles == 12 and off.dynamic_graphs == 0
    # dynamic=False: one compile per shape ... until recompile_limit, then eager for new shapes
    static = ic.count_compiles(ic.elementwise_chain, xs, dynamic=False, recompile_limit=64)
    assert static.compiles == 12 and len(static.reasons) in (0, 11)      # one reason per recompile
    capped = ic.count_compiles(ic.elementwise_chain, xs, dynamic=False, recompile_limit=8)
    assert capped.compiles == 8 and capped.compiled_at == list(range(8))
    # dynamic=True: symbolic from the first call
    dyn = ic.count_compiles(ic.elementwise_chain, xs, dynamic=True)
    assert (dyn.compiles, dyn.dynamic_graphs) == (1, 1)
    # ... except that sizes 0 and 1 are specialised: length 1 gets its own graph
    one = ic.count_compiles(ic.elementwise_chain, _inputs([1, 2, 3, 4]), dynamic=True)
    assert one.compiles == 2


def test_padding_helpers():
    assert [ic.next_pow2(n) for n in (1, 2, 3, 4, 5, 17, 64, 65)] == [1, 2, 4, 4, 8, 32, 64, 128]
    with pytest.raises(ValueError):
        ic.next_pow2(0)
    x = torch.randn(5, 3)
    padded, mask = ic.pad_to_bucket(x)
    assert padded.shape == (8, 3) and mask.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    torch.testing.assert_close(padded[:5], x)
    torch.testing.assert_close(ic.bucketed_call(ic.masked_rowwise, x), ic.masked_rowwise(x, torch.ones(5)))


def test_bucketing_compiles_at_most_log2_plus_one():
    rng = random.Random(0)
    lengths = [rng.randint(2, 300) for _ in range(30)]
    res = {r.policy: r for r in ic.bucketing_experiment(lengths, features=8, backend=None, repeat=1, rounds=1)}
    buckets = {ic.next_pow2(n) for n in lengths}
    assert res["bucketed"].compiles == len(buckets) <= ic.bucket_bound(lengths) == 10
    assert res["eager"].compiles == 0
    assert res["static"].compiles == min(len(set(lengths)), 8)        # recompile_limit = 8
    assert res["automatic"].compiles == 2
    assert res["dynamic"].compiles == 1
    assert all(r.max_error < 1e-5 for r in res.values())
