"""The Lab 13 notebook's one-liners, and its "check your work" pictures.

    mlp_both_ways()                 the MLP as an IR graph and eagerly: listing, outputs, gradients
    pass_table(timed=False)         each torch.fx pass: nodes, launches (profiled), max |change|; µs if timed
    guard_lines(fn, *args)          Dynamo's guards on fn's arguments, shortened (no object ids)
    kernel_excerpt(code)            Inductor's generated kernels and call(), compacted for reading
    rewrite_table()                 greedy vs relaxed search on a graph where greedy is stuck
    recompile_table(lengths)        compiles over varying shapes: static, automatic, dynamic
    autotune_table(measure, ...)    exhaustive vs random vs cost-model search: best found vs evaluations
    picture(exercise)               a learner's function next to the lab's answer

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

import re
from functools import partial

import torch
from torch import nn

from labkit.compiler import autotune, differentiation, fx_cases, fx_passes, inside_compile, ir, rewrite_search
from labkit.compiler.autodiff import grad, vjp
from labkit.compiler.fx_measure import count_launches, count_nodes, max_abs_diff, measure_pass
from labkit.gpu_model.coalescing import strided_addresses, transactions
from labkit.table import Table


def mlp_both_ways(batch: int = 4, d_in: int = 3, d_hidden: int = 5, d_out: int = 2, seed: int = 0) -> dict:
    """The IR's MLP next to eager PyTorch: {"listing": forward listing, "backward": listing of the
    backward graph, "loss_equal": bool, "grad_diff": max |IR grad − autograd grad| over the weights}."""
    graph, loss, _ = ir.build_mlp(batch, d_in, d_hidden, d_out)
    feeds = ir.mlp_feeds(batch, d_in, d_hidden, d_out, seed)
    forward = graph.listing([loss])
    grads = grad(graph, loss, ["W1", "b1", "W2", "b2"])
    values = ir.run(graph, feeds, [loss, *grads.values()])
    leaves = {k: feeds[k].clone().requires_grad_(k in grads) for k in feeds}
    eager_loss, _ = ir.mlp_eager(leaves["x"], leaves["W1"], leaves["b1"], leaves["W2"], leaves["b2"], leaves["target"])
    eager_loss.backward()
    diff = max(float((v - leaves[k].grad).abs().max()) for k, v in zip(grads, values[1:]))
    return {"listing": forward, "backward": graph.listing(list(grads.values())),
            "loss_equal": bool(torch.equal(values[0], eager_loss.detach())), "grad_diff": diff}


class _ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        with torch.random.fork_rng(devices=[]):     # nn's own init draws from the global RNG
            torch.manual_seed(4)
            self.conv, self.bn = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)
        with torch.no_grad():
            self.bn.running_mean.copy_(torch.randn(8, generator=g))
            self.bn.running_var.copy_(torch.rand(8, generator=g) + 0.5)
        self.eval()

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class _QKV(nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.q(x) * self.k(x) + self.v(x)


class _Chain(nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.relu(x * 2 + 1) - 0.5) * x


def _pass_cases(compiled_fusion: bool = False):
    """(name, pass, GraphModule or module, inputs) for each pass, float64 inputs fixed by seed.
    Fusion twice: its fused bodies run eagerly, and (``compiled_fusion``) through torch.compile."""
    g = torch.Generator().manual_seed(6)
    chain_input = [torch.randn(256, 256, generator=g)]
    cases = [("dead code elimination", fx_passes.dead_code_elimination, fx_cases.build("dead_chain"),
              fx_cases.inputs("dead_chain", 0)),
             ("constant folding", fx_passes.constant_folding, fx_cases.build("frozen_adapter"),
              fx_cases.inputs("frozen_adapter", 0)),
             ("common subexpressions", fx_passes.common_subexpression_elimination, fx_cases.build("repeats"),
              fx_cases.inputs("repeats", 0)),
             ("fusion, eager body", fx_passes.fuse_elementwise, torch.fx.symbolic_trace(_Chain()), chain_input)]
    if compiled_fusion:
        cases.append(("fusion, compiled body", partial(fx_passes.fuse_elementwise, compile=True),
                      torch.fx.symbolic_trace(_Chain()), chain_input))
    return cases + [("conv + batch norm", fx_passes.fold_conv_bn, torch.fx.symbolic_trace(_ConvBN()),
                     [torch.randn(2, 3, 16, 16, generator=g)]),
                    ("QKV concatenation", fx_passes.concat_qkv, torch.fx.symbolic_trace(_QKV()),
                     [torch.randn(32, 64, generator=g)])]


def can_compile() -> bool:
    """Whether torch.compile can generate code here (a C++ compiler on a CPU, or a CUDA GPU)."""
    return torch.cuda.is_available() or inside_compile.cpp_compiler() is not None


def compile_device() -> str:
    """Where Inductor's demo runs: "cuda" (Triton kernels) when there is a GPU, else "cpu" (C++)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def pass_table(timed: bool = False, compiled_fusion: bool | None = None) -> Table:
    """Each pass on a small model: graph nodes and launches (`fx_measure.count_launches`: a
    profiler's count of kernels, or of calls into aten on a CPU) before -> after, and the largest
    change in the outputs; with ``timed``, microseconds before -> after (median, one thread).
    ``compiled_fusion`` (default: when `can_compile`) adds fusion with a compiled body."""
    compiled_fusion = can_compile() if compiled_fusion is None else compiled_fusion
    rows = []
    for name, fn, gm, args in _pass_cases(compiled_fusion):
        if timed:
            m = measure_pass(gm, fn, args, name=name)
            rows.append(m.row())
            continue
        after = fn(gm)
        with torch.no_grad():
            diff = max_abs_diff(gm(*args), after(*args))
        rows.append([name, f"{count_nodes(gm)} -> {count_nodes(after)}",
                     f"{count_launches(gm, *args)} -> {count_launches(after, *args)}", f"{diff:.1e}"])
    if timed:
        return Table(["pass", "nodes", "launches", "µs", "speed-up", "max |Δ|"], rows, title="each pass, timed")
    return Table(["pass", "nodes", "launches", "max |Δ output|"], rows,
                 title="each pass on a small model; launches counted by torch.profiler")


def rewrite_table(alphas=(1.0, 1.05)) -> Table:
    """Greedy vs TASO's relaxed search on `rewrite_search.stuck_example`: cost found (model seconds,
    relative to the start) and the rewrites applied."""
    e = rewrite_search.stuck_example()
    rows = []
    g = rewrite_search.greedy_search(e)
    rows.append(("greedy", "-", g.cost / g.start_cost, len(g.path), str(g.best)))
    for a in alphas:
        r = rewrite_search.backtracking_search(e, alpha=a)
        rows.append(("relaxed", a, r.cost / r.start_cost, len(r.path), str(r.best)))
    return Table(["search", "alpha", "cost / start", "rewrites", "result"], rows,
                 formats={"cost / start": ".3f"}, title=f"start: {e}")


def wrong_rule_verdict() -> str:
    """What random testing says of the deliberately wrong rule (AB)ᵀ -> AᵀBᵀ."""
    rule = rewrite_search.WRONG_RULES[0]
    verdict = rewrite_search.verify_rule(rule)
    return f"{rule.name}: {'kept' if verdict.ok else 'rejected'} ({verdict.reason})"


def recompile_table(lengths=(5, 9, 17, 33, 65, 12, 100, 7)) -> Table:
    """How many times torch.compile compiles a row-wise function over inputs (L, 16) of these
    lengths, per setting (eager backend: counts only, no code generated)."""
    def f(x):
        return torch.softmax(x * 2, dim=-1).sum(-1)

    inputs = [(torch.randn(n, 16),) for n in lengths]
    rows = []
    for name, kw in (("dynamic=False", {"dynamic": False, "recompile_limit": 64}),
                     ("default (automatic dynamic)", {"dynamic": None}),
                     ("dynamic=True", {"dynamic": True})):
        stats = inside_compile.count_compiles(f, inputs, backend="eager", **kw)
        rows.append((name, stats.compiles, str(stats.compiled_at)))
    return Table(["setting", "compiles", "at calls"], rows, title=f"{len(lengths)} calls, lengths {list(lengths)}")


def autotune_table(measure=None, budget: int = 40, seeds=range(100), space=None, marks=(5, 10, 20, 40)) -> Table:
    """Best-found / optimum after k evaluations, mean ± standard error over ``seeds``, for
    exhaustive, random and cost-model search over ``space`` (default: Lab 03's blocked-matmul tile
    sizes) with ``measure`` (default: the synthetic cost surface); then the paired difference
    model − random (both start from the same random configurations for a given seed) and whether
    it is more than 2 standard errors from 0. Each configuration is measured once (`compare`)."""
    space = space or autotune.blocked_space()
    seeds = list(seeds)
    result = autotune.compare(space, measure or autotune.synthetic_cost, budget, seeds)
    ks = [k for k in marks if k <= budget]
    runs = result["runs"]
    n = len(seeds)

    def mean_se(a):
        return float(a.mean()), float(a.std(ddof=1) / n ** 0.5) if n > 1 else float("nan")

    rows = []
    for m in ("exhaustive", "random", "model"):
        rows.append((m, *[mean_se(runs[m][:, k - 1]) for k in ks]))
    diffs = [mean_se(runs["model"][:, k - 1] - runs["random"][:, k - 1]) for k in ks]
    rows.append(("model - random", *diffs))
    verdict = ["too few seeds" if n < 2 else "model better" if d < -2 * se else "random better" if d > 2 * se
               else "no difference shown" for d, se in diffs]
    rows.append(("verdict (2 SE)", *verdict))
    table = Table(["search", *[f"k={k}" for k in ks]],
                  [[r[0]] + [c if isinstance(c, str) else f"{c[0]:+.3f} ± {c[1]:.3f}" if r[0].startswith("model -")
                             else f"{c[0]:.3f} ± {c[1]:.3f}" for c in r[1:]] for r in rows],
                  title=f"{len(space)} tile configs: best found / optimum after k evaluations, mean ± SE over "
                        f"{n} seeds")
    table.data = {"ks": ks, "mean": {r[0]: [c[0] for c in r[1:]] for r in rows[:4]},
                  "se": {r[0]: [c[1] for c in r[1:]] for r in rows[:4]}, "verdict": verdict,
                  "best_config": result["best_config"], "seeds": n}
    return table


_GUARD_KEEP = ("TENSOR_MATCH", "EQUALS_MATCH", "TYPE_MATCH", "LAMBDA_GUARD")


def guard_lines(fn, *args, dynamic: bool | None = None) -> list[str]:
    """Dynamo's guards on ``fn``'s own arguments (``L['...']``) after one call on ``args``
    (`inside_compile.guards_of`), shortened to read: a tensor's check keeps its dtype,
    requires_grad, size and stride; object ids are dropped. Global-state and module-identity
    guards are left out."""
    out = []
    for line in inside_compile.guards_of(fn, *args, dynamic=dynamic):
        kind = line.split(":", 1)[0]
        if kind not in _GUARD_KEEP or "L['" not in line:
            continue
        if kind == "TENSOR_MATCH":
            m = re.search(r"check_tensor\((L\['\w+'\]), Tensor, DispatchKeySet\([^)]*\), ([\w.]+), .*?"
                          r"(requires_grad=\w+), (size=\[[^\]]*\]), (stride=\[[^\]]*\])", line)
            if m:
                line = f"TENSOR_MATCH: {m.group(1)} is a {m.group(2)} tensor, " + ", ".join(m.groups()[2:])
        line = re.sub(r"___check_type_id\((L\['\w+'\]), \d+\)", r"type(\1) is the same", line)
        line = re.sub(r", type=<class '(\w+)'>", r" (\1)", line)
        out.append(line if len(line) <= 100 else line[:97] + "...")
    return out


_STATIC_CAST = re.compile(r"static_cast<int64_t>\((-?\w+?)L?\)")
_KERNEL_SRC = re.compile(r"^(\w+) = async_compile\.\w+\(.*?'''(.*?)'''", re.M | re.S)


def kernel_excerpt(code: str, width: int = 100) -> str:
    """The kernels of Inductor's generated module (`inside_compile.inductor_code`) and its
    ``call`` function, for reading: C++'s ``static_cast<int64_t>(16L)`` shown as 16, boilerplate
    lines left out, lines cut at ``width`` characters."""
    parts = []
    for m in _KERNEL_SRC.finditer(code):
        parts.append(f"# kernel {m.group(1)}")
        parts += [line for line in m.group(2).splitlines()
                  if line.strip() and "cpp_prefix" not in line and "integer_div_error" not in line
                  and not line.strip().startswith(("@triton_heuristics", "@triton.jit"))]
    call = re.search(r"^    def call\(self, args\):\n(.*?)(?=^\S|^    def |\Z)", code, re.M | re.S)
    if call:
        parts += ["# the wrapper that runs them: call(args)"] + [line for line in call.group(1).splitlines()
                                                               if line.strip()]
    text = _STATIC_CAST.sub(r"\1", "\n".join(parts))
    return "\n".join(line if len(line) <= width else line[:width - 3] + "..." for line in text.splitlines())


def loads_and_stores(code: str) -> tuple[int, int]:
    """How many loads and stores of memory the generated kernels contain (C++ ``loadu``/``store``
    or indexed pointers on a CPU, ``tl.load``/``tl.store`` in Triton), counted in the source."""
    body = "\n".join(m.group(2) for m in _KERNEL_SRC.finditer(code))
    loads = len(re.findall(r"tl\.load\(|::loadu\(|\bin_ptr\d+\[", body))
    stores = len(re.findall(r"tl\.store\(|\.store\(out_ptr|\bout_ptr\d+\[[^\]]*\]\s*=", body))
    return loads, stores


# ------------------------------------------------------------------------------------ pictures

def vjp_picture(fn) -> Table:
    """The learner's rules against central differences (`differentiation.fd_check_vjp`), not
    against ours: a derived rule is checked by the definition of a derivative."""
    return differentiation.fd_check_vjp(fn)


def clip_picture(fn) -> Table:
    """The learner's `clip_without_breaks` under ``torch._dynamo.explain`` next to `clip_by_norm`:
    graphs, breaks (the first reason) and the largest difference of the outputs, per input."""
    import contextlib
    import io

    g = torch.Generator().manual_seed(0)
    rows = []
    for x, m in ((torch.randn(16, generator=g) * 3, 1.0), (torch.randn(4, 5, generator=g) * 0.05, 1.0),
                 (torch.zeros(5), 1.0)):
        with contextlib.redirect_stdout(io.StringIO()):
            want = inside_compile.clip_by_norm(x.clone(), m)
        got = fn(x.clone(), m)
        r = inside_compile.graph_breaks(fn, x.clone(), m)
        diff = float((got - want).abs().max())
        why = r.reasons[0][0][:34] if r.reasons else "-"
        ok = (r.graphs, r.breaks) == (1, 0) and diff <= 1e-6 + 1e-5 * float(want.abs().max())
        rows.append((f"‖x‖ = {float(x.norm()):.3g}", r.graphs, r.breaks, why, f"{diff:.1e}", "yes" if ok else "NO"))
    return Table(["input (max_norm 1)", "graphs", "breaks", "first break", "max |yours − clip_by_norm|", "right"],
                 rows, title="your clip_without_breaks under torch._dynamo.explain")


def pass_picture(name: str):
    def draw(fn) -> Table:
        rows = []
        for case in fx_cases.FOR_PASS[name]:
            gm = fx_cases.build(case)
            mine, ours = fn(gm), getattr(fx_passes, name)(gm)
            args = fx_cases.inputs(case, 0)
            same = all(torch.equal(x, y) for x, y in zip(fx_cases.run(mine, args), fx_cases.run(ours, args)))
            rows.append((case, count_nodes(gm), count_nodes(mine), count_nodes(ours), "yes" if same else "NO"))
        return Table(["graph", "nodes", "yours leaves", "ours leaves", "same outputs"], rows, title=name)
    return draw


def transactions_picture(fn) -> Table:
    rows = []
    for stride in (1, 2, 4, 8, 32, 64):
        addresses = strided_addresses(stride)
        rows.append((stride, fn(addresses, 128), transactions(addresses, 128), fn(addresses, 32),
                     transactions(addresses, 32)))
    return Table(["stride (floats)", "yours, 128 B", "ours, 128 B", "yours, 32 B", "ours, 32 B"], rows,
                 title="one warp of 32 lanes reading 4-byte floats")


def picture(exercise: str):
    """The ``picture(fn)`` for `check_your_work` of one exercise of exercises/lab13_compilers.py."""
    draw = {"vjp": vjp_picture, "transactions": transactions_picture, "clip_without_breaks": clip_picture,
            "dead_code_elimination": pass_picture("dead_code_elimination"),
            "constant_folding": pass_picture("constant_folding"),
            "common_subexpression_elimination": pass_picture("common_subexpression_elimination")}[exercise]
    return lambda fn: print(draw(fn))
