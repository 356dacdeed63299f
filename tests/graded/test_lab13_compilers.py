"""Graded tests for Lab 13 (exercises/lab13_compilers.py). Run: python -m labkit.grade --lab 13.

``vjp`` is compared with labkit's eager rules (`labkit.compiler.autodiff.vjp`) on float64 inputs
drawn from the grading seed: 1e-12 relative (a rule may group its products differently, e.g.
−g·a/b² as −g·(a/b)/b: a few ulps). The three graph passes run in the submission's sandboxed
worker on the graphs of `labkit.compiler.fx_cases` (labkit.grading.harness.lab13_fx_pass): the
judge applies labkit's own pass to the same graphs and compares the nodes left (op and target, in
order; constant folding's new buffers may have any names) and the outputs, bit for bit (these
passes run the same kernels on the same values). ``transactions`` is compared with
`labkit.gpu_model.coalescing.transactions` on unit, strided, random and partly inactive warps.

``clip_without_breaks`` runs in the worker (labkit.grading.harness.lab13_dynamo) on inputs whose
norms lie above and below max_norm (an all-zero one too): ``torch._dynamo.explain`` must find one
graph and no break on each (Dynamo reset before and after every run), ``torch.compile(...,
fullgraph=True)`` on the "eager" backend must accept it, and both its eager and compiled outputs
must equal labkit's `clip_by_norm` within 1e-5 relative, 1e-6 absolute: float32 roundings of the
scale (max_norm/‖x‖ in float32 or float64, x·s/n or x/n·s) differ by a few ulps. About 1 s a case.
"""
import contextlib
import io

import random

import pytest
import torch

from labkit.compiler import fx_cases, fx_passes, inside_compile
from labkit.compiler.autodiff import vjp
from labkit.gpu_model.coalescing import transactions
from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(labkit_allowed=frozenset({"labkit.compiler.fx_passes.has_side_effects",
                                          "labkit.compiler.fx_passes.is_random"}),
                references=references("lab13_compilers"))
TOL = 1e-12

# ---- vjp --------------------------------------------------------------------------------------


def _g(gen, *shape):
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64)


def _vjp_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    a, b = _g(gen, 3, 4), _g(gen, 3, 4)
    pos = a.abs() + 0.5
    cases = [("mul", [a, b], a * b, {}), ("div", [a, pos], a / pos, {}), ("tanh", [a], a.tanh(), {}),
             ("exp", [a], a.exp(), {}), ("log", [pos], pos.log(), {}), ("relu", [a], a.relu(), {})]
    m1, m2 = _g(gen, 3, 5), _g(gen, 5, 2)
    cases.append(("matmul", [m1, m2], m1 @ m2, {}))
    for axis in (None, 0, 1, -1):
        cases.append(("sum", [a], a.sum() if axis is None else a.sum(axis), {"axis": axis}))
    return [(op, ins, out, _g(gen, *out.shape), attrs) for op, ins, out, attrs in cases]


def _check_vjp(impl, cases):
    for op, ins, out, grad, attrs in cases:
        want = vjp(op, ins, out, grad, attrs)
        got = impl.vjp(op, ins, out, grad, attrs)
        assert len(got) == len(want), f"{op}: {len(got)} gradients for {len(want)} inputs"
        for i, (g, w) in enumerate(zip(got, want)):
            assert tuple(g.shape) == tuple(w.shape), f"{op} {attrs}: input {i}'s gradient has shape {tuple(g.shape)}, " \
                                                     f"want {tuple(w.shape)}"
            assert torch.allclose(g, w, rtol=TOL, atol=TOL), f"{op} {attrs}: input {i}'s gradient off by " \
                                                             f"{(g - w).abs().max().item():.3g}"


@pytest.mark.graded(points=2, exercise="vjp")
def test_vjp_elementwise(impl, seed):
    _check_vjp(impl, [c for c in _vjp_cases(seed) if c[0] in ("mul", "div", "tanh", "exp", "log", "relu")])


@pytest.mark.graded(points=2, exercise="vjp")
def test_vjp_matmul_and_sum(impl, seed):
    _check_vjp(impl, [c for c in _vjp_cases(seed) if c[0] in ("matmul", "sum")])


# ---- graph passes -----------------------------------------------------------------------------

def _strip_folded(nodes):
    """(op, target) with get_attr of constant-folding's new buffers reduced to one name."""
    return [(op, "<folded>" if op == "get_attr" and target.startswith("_folded") else target) for op, target in nodes]


def _check_pass(impl, name, seed, cases):
    got = impl.harness("lab13_fx_pass", name, list(cases), seed)
    for case, res in zip(cases, got):
        assert res["error"] is None, f"{name} on the '{case}' graph raised {res['error']}"
        assert res["unchanged"], f"{name} changed the GraphModule it was given ('{case}'): return a new one"
        ref = getattr(fx_passes, name)(fx_cases.build(case))
        want = fx_cases.run(ref, fx_cases.inputs(case, seed), seed)
        assert len(res["outputs"]) == len(want), f"'{case}': {len(res['outputs'])} outputs, want {len(want)}"
        for g, w in zip(res["outputs"], want):
            same = g.dtype == w.dtype and g.shape == w.shape and bool(torch.equal(g, w))
            assert same, f"'{case}': the outputs changed"
        mine, theirs = _strip_folded(res["nodes"]), _strip_folded(fx_cases.summary(ref))
        assert mine == theirs, (f"'{case}': nodes left {[t for _, t in mine]}, want {[t for _, t in theirs]}")


@pytest.mark.graded(points=3, exercise="dead_code_elimination")
def test_dead_code_elimination(impl, seed):
    _check_pass(impl, "dead_code_elimination", seed, fx_cases.FOR_PASS["dead_code_elimination"])


@pytest.mark.graded(points=3, exercise="constant_folding")
def test_constant_folding(impl, seed):
    _check_pass(impl, "constant_folding", seed, fx_cases.FOR_PASS["constant_folding"])


@pytest.mark.graded(points=3, exercise="common_subexpression_elimination")
def test_common_subexpression_elimination(impl, seed):
    _check_pass(impl, "common_subexpression_elimination", seed, fx_cases.FOR_PASS["common_subexpression_elimination"])


# ---- transactions -----------------------------------------------------------------------------

def _warps(seed):
    rng = random.Random(seed)
    warps = [[4 * i for i in range(32)], [8 * i for i in range(32)], [4 * 33 * i for i in range(32)]]
    base = 128 * rng.randint(0, 100) + 4 * rng.randint(0, 31)           # not aligned to a segment
    warps.append([base + 4 * i for i in range(32)])
    warps.append([rng.randrange(0, 1 << 20) * 4 for _ in range(32)])
    warps.append([4 * i if i % 3 else None for i in range(32)])
    warps.append([None] * 32)
    warps.append([8 * i for i in range(rng.randint(1, 32))])
    return warps


@pytest.mark.graded(points=2, exercise="transactions")
def test_transactions(impl, seed):
    for warp in _warps(seed):
        for segment in (128, 32):
            got = impl.transactions(warp, segment)
            want = transactions(warp, segment)
            assert got == want, f"{segment}-byte segments, lanes {warp[:4]}...: {got}, want {want}"


# ---- clip_without_breaks (Dynamo) ---------------------------------------------------------------

def _clip_cases(seed):
    gen = torch.Generator().manual_seed(seed)
    x1 = torch.randn(16, generator=gen) * 3                          # norm ~ 12: clipped
    x2 = torch.randn(4, 5, generator=gen) * 0.05                     # norm ~ 0.2: left alone
    x3 = torch.randn(2, 3, 4, generator=gen)                         # norm ~ 5
    x4 = torch.randn(6, generator=gen, dtype=torch.float64) * 4      # float64
    return [(x1, 1.0), (x2, 1.0), (x3, 0.3), (x3, 50.0), (x4, 2.5), (torch.zeros(5), 1.0)]


def _clip_want(x, max_norm):
    with contextlib.redirect_stdout(io.StringIO()):                # clip_by_norm logs; keep the report clean
        return inside_compile.clip_by_norm(x.clone(), max_norm)


def _same(got, want):
    return (isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
            and torch.allclose(got, want, rtol=1e-5, atol=1e-6))


def _clip_runs(impl, seed):
    cases = _clip_cases(seed)
    return cases, impl.harness("lab13_dynamo", "clip_without_breaks", cases)


@pytest.mark.graded(points=2, exercise="clip_without_breaks")
def test_clip_without_breaks_values(impl, seed):
    cases, runs = _clip_runs(impl, seed)
    for (x, m), res in zip(cases, runs):
        where = f"x of shape {tuple(x.shape)} ({x.dtype}, norm {x.double().norm().item():.3g}), max_norm={m}"
        assert res["eager"] is not None, f"{where}: raised {res['error']}"
        ok = _same(res["eager"], _clip_want(x, m))
        assert ok, f"{where}: not what clip_by_norm returns"


@pytest.mark.graded(points=3, exercise="clip_without_breaks")
def test_clip_without_breaks_one_graph(impl, seed):
    cases, runs = _clip_runs(impl, seed)
    for (x, m), res in zip(cases, runs):
        where = f"x of shape {tuple(x.shape)}, max_norm={m}"
        assert res["graphs"] is not None, f"{where}: raised {res['error']}"
        reasons = "; ".join(f"{r} ({at})" for r, at in res["reasons"])
        assert (res["graphs"], res["breaks"]) == (1, 0), \
            f"{where}: torch._dynamo.explain found {res['graphs']} graphs, {res['breaks']} breaks: {reasons}"
        assert res["compiled"] is not None, f"{where}: torch.compile(fullgraph=True) failed: {res['error']}"
        ok = _same(res["compiled"], _clip_want(x, m))
        assert ok, f"{where}: compiled, it is not what clip_by_norm returns"
