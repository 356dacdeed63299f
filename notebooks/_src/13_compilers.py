# Source of notebooks/13_compilers.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 13 — ML compilers: graphs, automatic differentiation, rewrites, torch.compile, autotuning
#
# A deep-learning framework sees a model as a graph of tensor operations. Once it has the graph it
# can differentiate it, simplify it, fuse its pieces into fewer kernels, and tune each kernel for
# the machine. This lab builds each of those steps small enough to read — a graph IR with
# automatic differentiation, classic passes on PyTorch's `torch.fx` graphs, a rewrite search —
# and then looks inside the real thing, `torch.compile`, and at autotuning.
#
# **You will be able to**
# 1. build a model as a graph first (define-and-run) and as it runs (define-by-run);
# 2. differentiate a graph in reverse and forward mode, and tell AD from symbolic and numerical
#    differentiation;
# 3. write dead-code elimination, constant folding and common-subexpression elimination on
#    `torch.fx`, and prove each keeps the outputs;
# 4. read what `torch.compile` captured (Dynamo's FX graph and its guards), where it broke the
#    graph, what AOTAutograd made of it (the joint forward+backward graph, functionalized,
#    decomposed and partitioned), what code Inductor generated, and when it recompiles;
# 5. search a kernel's tile sizes exhaustively, at random and with a learned cost model, and tell
#    a real difference between searches from luck.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import contextlib
import logging
import os
import sys

import torch
from IPython.display import Markdown, display

import labkit
from labkit.claims import claim, claim_between, claim_close
from labkit.compiler import (aot, autotune, cuda_graphs, differentiation, fx_cases, inside_compile, landscape,
                             lab, rewrite_search)
from labkit.compiler.autodiff import jacobian_race, vjp
from labkit.compiler.fx_measure import count_launches
from labkit.compiler.fx_passes import dead_code_elimination
from labkit.grading.check import check_your_work
from labkit.show import show

torch._logging.set_logs(dynamo=logging.ERROR)   # Dynamo's warnings name each break; we print them below
print("labkit", labkit.__version__, "| torch", torch.__version__.split("+")[0])

# %% [markdown]
# ## 1. A model as a graph
#
# `labkit.compiler.ir` is a tiny graph IR: you first *build* a graph of operations on named inputs
# (shapes are checked as you build), then *run* it on values. This is define-and-run, as in
# TensorFlow 1 or JAX's traced programs. PyTorch runs each operation as Python reaches it
# (define-by-run); the graph exists only as autograd's record of what ran. The same MLP, as the IR
# prints it — one line per node, each naming the values it reads:

# %%
mlp = lab.mlp_both_ways()
print(mlp["listing"])
claim("the graph's loss equals eager PyTorch's, bit for bit", mlp["loss_equal"], "torch.equal")

# %% [markdown]
# ## 2. Automatic differentiation
#
# Reverse mode walks the graph backwards from the loss. Each operation has a *vector-Jacobian
# product* rule: given ∂L/∂output, the gradients of its inputs. `grad` applies those rules and
# builds the backward pass **as more nodes of the same graph**, which can be printed, optimised
# and run like the forward:

# %%
print(mlp["backward"])
claim_between("its gradients equal autograd's to about one rounding step", mlp["grad_diff"], 0, 2.3e-16)

# %% [markdown]
# Equal to autograd up to about one rounding step of float64 (PyTorch's fused `tanh_backward`
# rounds once where our graph rounds twice).
#
# **A common mistake** says automatic differentiation "uses symbolic differentiation". It is
# neither symbolic nor numerical. Symbolic differentiation manipulates formulas; numerical
# differentiation evaluates f at nearby points; AD applies the chain rule to the *values* flowing
# through the program.
#
# **Predict first:** which of the three gets the derivative of x·sin(x)·eˣ at 0.7 exactly right?

# %%
methods = differentiation.compare_methods()
print(methods)
err = dict(zip(methods.column("method"), methods.column("abs error")))
claim("symbolic and both AD modes are exact to rounding", max(err[m] for m in ("symbolic", "AD forward mode",
      "AD reverse mode")) < 1e-15, f"largest error {max(err[m] for m in err if 'difference' not in m):.1e}")
claim("finite differences lose about half the digits or more", min(err["forward difference"],
      err["central difference"]) > 1e-11, f"{err['central difference']:.1e} at best (central)")

# %% [markdown]
# Symbolic and AD are exact to rounding; finite differences lose half the digits or more. Their
# error has two parts — truncation, which shrinks with the step h, and rounding, which grows as
# ε/h — so there is a best h, about √ε for the forward difference and ε^(1/3) for the central one:

# %%
sweep = differentiation.fd_sweep()
print(sweep.table())
eps = 2.0 ** -52
claim_between("the best forward-difference step is near √ε", sweep.best_forward_h / eps ** 0.5, 0.1, 10)
claim_between("the best central-difference step is near ε^(1/3)", sweep.best_central_h / eps ** (1 / 3), 0.1, 10)

# %% [markdown]
# Symbolic differentiation has its own problem, *expression swell*: the derivative of a nested
# expression, written out as a tree, grows much faster than the expression. Counting shared
# sub-expressions once (as a graph does) it grows only linearly — which is what AD's graphs do:

# %%
swell = differentiation.swell_table()
print(swell)
ratio, distinct, bwd = swell.column("f'/f"), swell.column("f' distinct"), swell.column("AD bwd nodes")
claim("the derivative's tree grows faster than the function's at every depth",
      all(b > a for a, b in zip(ratio, ratio[1:])), f"f'/f from {ratio[0]:.1f} to {ratio[-1]:.1f}")
claim("counted once, sub-expressions and AD's nodes grow by a constant per level",
      len({b - a for a, b in zip(distinct, distinct[1:])}) == 1 and len({b - a for a, b in zip(bwd[1:], bwd[2:])}) == 1,
      f"+{distinct[1] - distinct[0]} and +{bwd[2] - bwd[1]} per level")

# %% [markdown]
# **Forward or reverse?** Forward mode carries a tangent along with each value (dual numbers): one
# pass gives the derivative of every output along one input direction. Reverse mode gives the
# gradient of one output with respect to every input. For f: ℝⁿ → ℝᵐ a full Jacobian costs n
# forward passes or m reverse passes — and a loss has m = 1.

# %% tags=["nbval-ignore-output"]
race = jacobian_race()
print(race)
claim("forward mode takes n passes, reverse mode m", race.column("fwd passes") == race.column("n")
      and race.column("rev passes") == race.column("m"), "n = 1, 100; m = 100, 1")
claim("the one-pass mode is the faster one in both cases", race.column("faster") == ["forward", "reverse"],
      f"{race.rows[0][5] / race.rows[0][4]:.0f}x and {race.rows[1][4] / race.rows[1][5]:.0f}x")

# %% [markdown]
# ### Exercise 1: `vjp`
#
# In `exercises/lab13_compilers.py`, write the backward rules of eight operations. Its docstring
# gives only each op's *forward* definition — `a / b`, `tanh a`, `a @ b`, a sum over one axis, ...
# — so each rule is yours to derive with the chain rule: for an elementwise op, ∂L/∂a is ∂L/∂out
# times the local derivative; for `a @ b`, write one element of the output as a sum and ask which
# elements of `a` and `b` it reads; for a sum, which output element each input element fed.
#
# The check below does not compare your rules with ours. It tests each against the definition of
# a derivative: for a random upstream gradient ḡ and a random direction v of one input,
# φ(s) = ⟨ḡ, f(x + s·v)⟩ has φ′(0) = ⟨∂L/∂x, v⟩ when the rule is right, and the central
# difference (φ(h) − φ(−h)) / 2h estimates φ′(0) in float64 with h = 10⁻⁵ (near the best step
# ε^(1/3) found above). That estimate is good to about 10⁻⁹ here (truncation ≈ h², rounding ≈ ε/h,
# times the size of f's derivatives), so the check accepts a relative difference below 10⁻⁶; a
# wrong rule — a lost sign, factor or transpose — is off by order 1. Then the grader compares your
# rules with ours to 10⁻¹² on its own inputs.

# %%
check_your_work("lab13_compilers", "vjp")
fd_ours = lab.vjp_picture(vjp)
worst = max(float(r[4]) for r in fd_ours.rows)
claim_between("our rules agree with central differences to about 1e-9", worst, 0, 1e-8)

# %% [markdown]
# ## 3. Graph rewrites on torch.fx
#
# `torch.fx.symbolic_trace` turns a module into a graph of nodes; a *pass* rewrites it. Each pass
# in `labkit.compiler.fx_passes` returns a new module, and each is checked by running both modules
# on the same inputs. Launches are counted with `torch.profiler` during one call: on a GPU, the
# CUDA kernels; on a CPU, the calls into PyTorch's kernel library (aten) from outside it, and the
# kernels a compiler generated. Fusion appears twice: the fused group's body run eagerly, and
# compiled by `torch.compile`. **Predict first:** which passes change the outputs at all? Which
# save launches?

# %%
passes = lab.pass_table()
print(passes)
row = {r[0]: r for r in passes.rows}
nodes = {n: tuple(map(int, r[1].split(" -> "))) for n, r in row.items()}
runs = {n: tuple(map(int, r[2].split(" -> "))) for n, r in row.items()}
delta = {n: float(r[3]) for n, r in row.items()}
exact = ("dead code elimination", "constant folding", "common subexpressions", "fusion, eager body")
claim("DCE, constant folding, CSE and eager fusion keep the outputs bit for bit",
      all(delta[n] == 0 for n in exact), "max |Δ| = 0 for each")
claim("DCE, constant folding and CSE run fewer launches", all(runs[n][1] < runs[n][0] for n in exact[:3]),
      ", ".join(f"{runs[n][0]} -> {runs[n][1]}" for n in exact[:3]))
claim("fused with an eager body: one node, and every launch still runs", nodes["fusion, eager body"][1] == 1
      and runs["fusion, eager body"][1] == runs["fusion, eager body"][0], f"{runs['fusion, eager body']}")
if "fusion, compiled body" in row:
    claim("fused with a compiled body: one kernel", runs["fusion, compiled body"][1] == 1,
          f"{runs['fusion, compiled body'][0]} -> 1, max |Δ| {delta['fusion, compiled body']:.1e}")
claim_between("folding BatchNorm into the conv changes the outputs by rounding",
              delta["conv + batch norm"], 1e-9, 1e-5)
claim("QKV concatenation: more nodes, fewer launches", nodes["QKV concatenation"][1] > nodes["QKV concatenation"][0]
      and runs["QKV concatenation"][1] < runs["QKV concatenation"][0], f"launches {runs['QKV concatenation']}")

# %% [markdown]
# Dead-code elimination, constant folding and CSE run the same kernels on the same values — fewer
# of them, or earlier — so the outputs are equal to the bit. Folding a BatchNorm into the
# convolution before it changes the order of the arithmetic: a few float32 ulps. Concatenating Q,
# K and V adds two nodes (a split) but runs one matrix multiply instead of three.
#
# **Fusion is two steps, and only the second saves anything.** Our pass collects each chain of
# elementwise ops into one node. With an eager body that node still runs every op of the chain —
# the same launches, the same passes over memory, plus one more Python call — as the profiler
# shows. Only a compiled body (`torch.compile` generating one loop, below) runs one kernel that
# reads the input once and writes the result once. A dispatch-level counter would have counted the
# fused node as one op: it cannot see inside its own handler, and is the wrong tool here.
#
# Times, measured in this run (they vary; one thread):

# %% tags=["nbval-ignore-output"]
timed = lab.pass_table(timed=True)
print(timed)

# %% [markdown]
# Read the fusion rows with the launch counts above: the eager body cannot be faster than the
# chain it wraps, and any gain of fusion is the compiled body's, measured in its row. At 64 k
# elements the saving is small and varies from run to run on a shared CPU; `benchmarks/compiler.py`
# measures it at larger sizes (see `benchmarks/results/compiler.md`).

# %% [markdown]
# **Side effects.** A node whose result nobody uses may still matter: `y.add_(1)` changes `y`.
# torch.fx's own `eliminate_dead_code` removes such in-place calls whose result is unused; ours
# keeps every node with side effects:

# %%
gm = fx_cases.build("in_place")
args = fx_cases.inputs("in_place", 0)
theirs = fx_cases.build("in_place")
theirs.graph.eliminate_dead_code()
theirs.recompile()
want = fx_cases.run(gm, args)[0]
theirs_ok = torch.equal(fx_cases.run(theirs, args)[0], want)
ours_ok = torch.equal(fx_cases.run(dead_code_elimination(gm), args)[0], want)
claim("fx's eliminate_dead_code drops the in-place op and changes the output", not theirs_ok, "torch.equal: False")
claim("ours keeps it, and the output", ours_ok, "torch.equal: True")

# %% [markdown]
# ### Exercise 2: `dead_code_elimination`
#
# Remove unused nodes — but not those with side effects.

# %%
check_your_work("lab13_compilers", "dead_code_elimination")

# %% [markdown]
# Ours, for comparison (after your check, not before):

# %%
show(dead_code_elimination)

# %% [markdown]
# ### Exercise 3: `constant_folding`
#
# Compute once what depends only on constants (buffers, not trainable parameters).

# %%
check_your_work("lab13_compilers", "constant_folding")

# %% [markdown]
# ### Exercise 4: `common_subexpression_elimination`
#
# Merge repeated computations — only when arguments, keyword arguments and literal types all match.

# %%
check_your_work("lab13_compilers", "common_subexpression_elimination")

# %% [markdown]
# **A rewrite search.** TASO (Jia et al., 2019) finds its rewrite rules in two steps. It enumerates
# small graphs of operators and groups those that compute the same *fingerprint* — their outputs
# on random inputs — into candidate rules; then it **verifies** every candidate formally, with an
# SMT solver (Z3) and a list of properties of each operator (associativity of matmul,
# distributivity, ...), and uses only the rules it proved. Random inputs can refute a rule but
# cannot prove one. Our search does the first step only: each rule is tested on random sizes and
# values, which is how a plausible but false rule — (AB)ᵀ → AᵀBᵀ — is caught at once:

# %%
print(lab.wrong_rule_verdict())
kept = rewrite_search.verified_rules()
claim("random testing keeps every true rule and rejects the false one", kept == rewrite_search.RULES,
      f"{len(kept)} of {len(rewrite_search.CANDIDATE_RULES)} candidates kept")

# %% [markdown]
# Greedy search applies the best improving rewrite until none is left. On (A·B)·C + A·D every single
# rewrite makes things slightly worse, so greedy stops at the start; a search that accepts steps up
# to 5% worse (TASO's α) finds A·(B·C + D), one matrix product fewer:

# %%
rewrites = lab.rewrite_table()
print(rewrites)
(g, *_), (r1, *_), (r2, *_) = [r[2:] for r in rewrites.rows]
claim("greedy, and relaxed search with α = 1, stay at the start", g == r1 == 1.0, "cost / start = 1.000")
claim("with α = 1.05 it ends cheaper, with one matrix product fewer", r2 < 1 and
      rewrites.rows[2][4].count("·") == rewrites.title.count("·") - 1, f"{r2:.3f} of the start's cost")

# %% [markdown] slide="slide"
# ## 4. Inside torch.compile
#
# `torch.compile` has two halves. **Dynamo** reads the function's Python bytecode as it runs and
# records the tensor operations into an FX graph, together with *guards*: the conditions (types,
# shapes, values of Python variables) under which the graph is valid. **Inductor** compiles the
# graph into code: C++ with OpenMP on a CPU, Triton kernels on a GPU.
#
# Here is what Dynamo captures from a small function, through a backend that only records the
# graph it is given (`inside_compile.Recorder`), and the guards it installs on the arguments:
#
# **Predict first:** the function takes a tensor and a Python float. Which of the two does the
# graph receive as an input, and what must hold for the compiled code to be reused?

# %% slide="subslide"
def scaled_relu_sum(x, scale: float):
    return torch.relu(x * scale + 1.0).sum()


(graph,) = inside_compile.captured_graphs(scaled_relu_sum, torch.randn(8), 2.0)
print(graph.printout)
static = lab.guard_lines(scaled_relu_sum, torch.randn(8), 2.0)
dynamic = lab.guard_lines(scaled_relu_sum, torch.randn(8), 2.0, dynamic=True)
print("guards on the arguments, default:", *static, sep="\n  ")
print("with dynamic=True:", *dynamic, sep="\n  ")
claim("one graph of four operations; the float is baked in as a constant", graph.nodes == 6
      and "L_x_" in graph.printout and "* 2.0" in graph.printout, f"{graph.nodes} nodes with input and output")
claim("the default guards the size 8 and the value 2.0", any("size=[8]" in g for g in static)
      and "EQUALS_MATCH: L['scale'] == 2.0" in static, f"{len(static)} guards on the arguments")
claim("dynamic=True: a symbolic size, guarded by a relation", any("size=[None]" in g for g in dynamic)
      and any("2 <= L['x'].size()[0]" in g for g in dynamic), "2 <= L['x'].size()[0]")

# %% [markdown]
# The float became part of the graph: a call with `scale=3.0` fails the `EQUALS_MATCH` guard and
# compiles again (pass such knobs as tensors when they change). The tensor is an input, guarded
# by its dtype, size and strides; with `dynamic=True` the size becomes a symbol, and the guard a
# relation.
#
# What Dynamo cannot put in a graph — a Python `if` on a tensor's value, a `print`, `.item()`
# turning a tensor into a Python number — *breaks* it: the graph ends, Python runs that part, and a
# new graph starts after it. `torch._dynamo.explain` counts the graphs and breaks; we run it with
# `x.sum()` positive and negative, and with output going to Jupyter's replaced `sys.stdout` (this
# notebook's) and to a plain file (`os.devnull` opened for writing):
#
# **Predict first:** does the `print` always break the graph?

# %%
show(inside_compile.breaking_fn)
SHORT = {"generic_jump": "if on a tensor", "builtin operator": "print", "item()": ".item()"}
found = {}
plain_file = open(os.devnull, "w")
for sign, x in (("x.sum() > 0", torch.ones(8)), ("x.sum() <= 0", -torch.ones(8))):
    for where, out in (("Jupyter's stdout", sys.stdout), ("a plain file", plain_file)):
        with contextlib.redirect_stdout(out):
            r = inside_compile.graph_breaks(inside_compile.breaking_fn, x)
        why = [next((v for k, v in SHORT.items() if k in reason), reason[:20]) for reason, _ in r.reasons]
        found[(sign, where)] = (r.graphs, r.breaks, why)
        print(f"{sign:12} | {where:16} | {r.graphs} graphs, {r.breaks} breaks: {', '.join(why)}")
plain_file.close()
claim("where output goes changes nothing", all(found[(s, "Jupyter's stdout")] == found[(s, "a plain file")]
      for s in ("x.sum() > 0", "x.sum() <= 0")), "same graphs, breaks and reasons")
claim("the print breaks a graph only when the branch ran before it",
      "print" in found[("x.sum() > 0", "a plain file")][2] and "print" not in found[("x.sum() <= 0", "a plain file")][2],
      "3 breaks vs 2")
for fixed in (inside_compile.fixed_fn, inside_compile.fixed_fn_cond):
    r = inside_compile.graph_breaks(fixed, torch.randn(8))
    claim(f"{fixed.__name__}: one graph, no break", (r.graphs, r.breaks) == (1, 0), f"{r.graphs} graph")

# %% [markdown]
# The `if` and the `.item()` break the graph on every input. The `print` never goes into a graph
# (Dynamo cannot trace it) wherever the output goes; whether it shows as a *break* depends on the
# data. After the `if` breaks the graph, Dynamo resumes tracing in the code that follows the
# branch. When the branch was taken, that code starts with `x + 1`, a graph is under way, and the
# print ends it: a break. When it was not, that code starts with the print itself: no graph is
# under way and nothing is broken; Python just runs it. The fixed versions compute both branches
# and select with `torch.where`, or keep the branch as a branch with `torch.cond`, and leave the
# print out; one graph each.

# %% [markdown]
# ### Exercise 5: `clip_without_breaks`
#
# `clip_by_norm` scales a tensor down to a given norm when it is larger (the rule of gradient
# clipping), logs the norm and centres the result, written as eager code is written:
#
# **Predict first:** how many graphs and breaks will `torch._dynamo.explain` report for it?

# %%
show(inside_compile.clip_by_norm)
with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):   # clip_by_norm logs the norm
    clip = inside_compile.graph_breaks(inside_compile.clip_by_norm, torch.randn(16) * 3, 1.0)
print(f"{clip.graphs} graphs, {clip.breaks} break: {clip.reasons[0][0][:60]}")
claim("clip_by_norm: two graphs and one break, at .item()", (clip.graphs, clip.breaks) == (2, 1)
      and "item" in clip.reasons[0][0], f"{clip.graphs} graphs")

# %% [markdown]
# One break, at `.item()`: the norm leaves the graph as a Python float, so the `print` and the `if`
# on that float run as plain Python, and a second graph starts at the multiply. In
# `exercises/lab13_compilers.py`, write `clip_without_breaks(x, max_norm)`: the same values, one
# graph, no break. The check shows what `explain` finds in your function; the grader also compiles
# it with `fullgraph=True` (which refuses any break) and compares both outputs with
# `clip_by_norm`'s on inputs above and below the norm, an all-zero one among them.

# %%
check_your_work("lab13_compilers", "clip_without_breaks")

# %% [markdown]
# ### AOTAutograd: one graph for forward and backward
#
# Dynamo hands its forward graph to AOTAutograd, which traces autograd's backward through it,
# *ahead of time*, into one **joint graph** of ATen operations, `forward(primals, tangents)`. On
# the way it **functionalizes** the graph — every in-place op replaced by its out-of-place
# version, so that each node is a pure function a compiler may reorder, fuse or recompute — and,
# given a decomposition table, rewrites composite ops into smaller ones. Then a **partitioner**
# cuts the joint graph into a forward and a backward graph: what crosses the cut is what the
# forward saves for the backward. We watch each step through `functorch.compile.aot_function` with
# compilers that only record the graphs (`labkit.compiler.aot`):

# %%
show(aot.example_fn)
x, w = aot.example_inputs()
from torch.fx.experimental.proxy_tensor import make_fx

traced = make_fx(aot.example_fn)(x.detach(), w.detach())          # ATen ops as they run, no AOT
plain = aot.aot_graphs(aot.example_fn, x, w)
print(plain.joint)
claim("the joint graph holds the forward and the backward", "tangents_1" in plain.joint
      and "gelu_backward" in plain.joint, f"{len(aot.op_names(plain.joint_gm))} ops")
claim("functionalized: the in-place mul_ is gone", aot.mutating_ops(traced) == ["aten.mul_.Tensor"]
      and aot.mutating_ops(plain.joint_gm) == [], "traced as it runs: aten.mul_; joint graph: no mutation")
x.grad = w.grad = None
aot.example_fn(x, w).sum().backward()
eager = (x.grad.clone(), w.grad.clone())                        # autograd's, for comparison
claim("its gradients are autograd's, bit for bit", all(torch.equal(a, b) for a, b in zip(plain.grads, eager)),
      "torch.equal for x and w")

# %% [markdown]
# With Inductor's decomposition table, GELU and its backward become their erf formulas, the
# transpose a `permute`, and the cast to float64 the primitive `prims.convert_element_type`:

# %%
dec = aot.aot_graphs(aot.example_fn, x, w, decompose=True)
ops = set(aot.op_names(dec.joint_gm))
print("ops after decomposition:", ", ".join(sorted(o.rsplit(".", 1)[0] for o in ops)[:6]))
print("                          ", ", ".join(sorted(o.rsplit(".", 1)[0] for o in ops)[6:]))
claim("gelu and gelu_backward are gone; erf, exp and a prims op appear", not any("gelu" in o for o in ops)
      and {"aten.erf.default", "aten.exp.default", "prims.convert_element_type.default"} <= ops,
      f"{len(ops)} distinct ops")
drift = max((a - b).abs().max().item() for a, b in zip(dec.grads, eager))
claim_between("the decomposed formulas round differently: float32 ulps", drift, 0, 1e-5)

# %% [markdown]
# **Predict first:** the default partitioner saves for the backward every intermediate the
# backward reads. Inductor's uses a min cut that may recompute instead. Which tensors does each
# save?

# %%
cuts = {p: aot.aot_graphs(aot.example_fn, x, w, partition=p) for p in aot.PARTITIONS}
for p, g in cuts.items():
    print(f"{p:8} saves {g.saved_activation_bytes} B of activations:\n    " + ", ".join(
        f"{t.name}{list(t.shape)}{' (input)' if t.from_input else ''}" for t in g.saved))
print("min-cut backward graph:")
print(cuts["min_cut"].backward)
claim("the min cut saves fewer activation bytes", cuts["min_cut"].saved_activation_bytes
      < cuts["default"].saved_activation_bytes, f"{cuts['min_cut'].saved_activation_bytes} B vs "
      f"{cuts['default'].saved_activation_bytes} B")
claim("... and recomputes gelu and sin in the backward", "aten.gelu" in cuts["min_cut"].backward
      and "aten.sin" in cuts["min_cut"].backward and "aten.gelu.default(" not in cuts["default"].backward,
      "the default's backward recomputes nothing")
claim("both cuts give the same gradients, bit for bit", all(torch.equal(a, b) for a, b in
      zip(cuts["default"].grads, cuts["min_cut"].grads)), "recomputation repeats the same ops")

# %% [markdown] slide="slide"
# The default partition saves the inputs and three activations (the matmul's output, the doubled
# GELU, its sine); the min cut saves only the matmul's output (the inputs cross as transposed
# views, free) and recomputes GELU, the doubling and the sine in the backward — cheap elementwise
# work for less memory, activation checkpointing chosen by the compiler (Lab 09 did it by hand).
# Inductor then compiles the forward and the backward graphs separately.
#
# ### Inductor's code
#
# **A common mistake** calls the compiler "TritonInductor". It is **TorchInductor**
# (`torch._inductor`, the backend named `"inductor"`); Triton is one of the languages it writes:
# Triton kernels on a GPU, C++ with OpenMP and vector intrinsics on a CPU.
#
# **Predict first:** five elementwise operations on one tensor. How many loops (kernels) will
# Inductor generate, and how many times will they read the input?

# %% tags=["nbval-ignore-output"] slide="subslide"
if lab.can_compile():
    dev = lab.compile_device()                       # "cuda" on a GPU box, else "cpu"
    code = inside_compile.inductor_code(inside_compile.elementwise_chain, torch.randn(1024, device=dev))
    print(lab.kernel_excerpt(code))
    names = inside_compile.kernel_names(code)
    loads, stores = lab.loads_and_stores(code)
    claim("the backend is TorchInductor", "inductor" in torch._dynamo.list_backends(), "backend 'inductor'")
    claim("it generated one kernel", len(names) == 1, names[0])
    claim("in C++ on a CPU, in Triton on a GPU", names[0].startswith("cpp_" if dev == "cpu" else "triton_"), dev)
    claim("which reads the input once and writes the result once", (loads, stores) == (1, 1),
          f"{loads} load, {stores} store")
else:
    print("no C++ compiler found: Inductor cannot generate CPU code here (install g++)")

# %% [markdown]
# One kernel (`cpp_fused_…` here, `triton_poi_fused_…` on a GPU): a single loop that reads the
# input once and writes the result once, where eager PyTorch makes five passes over memory (Lab
# 01's fusion, done by a compiler). The wrapper `call` allocates the output and calls it.
#
# ### Recompilation
#
# Guards include the input's shape. **A common mistake** says "torch.compile
# requires static shapes". Count the compiles over eight different lengths:

# %%
recompiles = lab.recompile_table()
print(recompiles)
claim("8 compiles with dynamic=False, 2 by default, 1 with dynamic=True",
      recompiles.column("compiles") == [8, 2, 1], "over 8 lengths")

# %% [markdown]
# With `dynamic=False` every new length fails a guard and compiles again (and after a limit, by
# default 8, Dynamo gives up and runs the function eagerly). By default the first call compiles
# for that exact shape; when a second shape fails the size guard, Dynamo recompiles with that size
# *symbolic* — and the third graph is never needed. `dynamic=True` starts symbolic. Padding inputs
# to the next power of two (bucketing) is the older workaround: at most ⌈log₂ L⌉ + 1 compiles,
# at the price of computing padding. Over 30 random lengths (graphs captured, no code generated:
# the counts are the point here; `benchmarks/compiler.py` times the same with Inductor):

# %%
lengths = [int(n) for n in torch.randint(2, 300, (30,), generator=torch.Generator().manual_seed(0))]
policies = {r.policy: r for r in inside_compile.bucketing_experiment(lengths, backend="eager", repeat=1, rounds=1)}
for r in policies.values():
    print(f"{r.policy:9} compiles {r.compiles:2}, max |compiled − eager| {r.max_error:.1e}")
claim("static stops at the limit of 8; the default needs 2; dynamic 1",
      [policies[p].compiles for p in ("static", "automatic", "dynamic")] == [8, 2, 1], "30 lengths")
claim("bucketing stays within ⌈log₂ L⌉ + 1 compiles",
      policies["bucketed"].compiles <= inside_compile.bucket_bound(lengths),
      f"{policies['bucketed'].compiles} <= {inside_compile.bucket_bound(lengths)}")
claim("every policy computes what eager computes", all(r.max_error == 0 for r in policies.values()), "max |Δ| = 0")

# %% [markdown]
# With the default, two compiles serve all 30 lengths. `benchmarks/compiler.py` times eager
# against compiled code (Inductor) on a few models here; its table is in
# `benchmarks/results/compiler.md`.
#
# ## 5. Autotuning
#
# A tiled kernel has a search space: Lab 03's blocked matmul has three tile sizes, 125 choices
# here. Exhaustive search times all of them. Random search times a few. AutoTVM's idea (Chen et
# al., 2018): fit a cheap model of time from the configurations measured so far, and measure next
# the ones it predicts fastest.
#
# One search is one draw of luck: the random start decides much. So each search runs from 100
# seeds, and the table gives the mean and its standard error (SE); model and random search start
# from the same random configurations for a given seed, so their difference is paired seed by
# seed, and the verdict says "better" only where the mean difference is more than 2 SE from 0.
# **Predict first:** after 10 measurements, how close does each get to the optimum? First on a
# synthetic cost surface (deterministic) whose optimum lies inside the space — tiles too small pay
# per-call overhead, tiles too large spill out of the cache:

# %%
tune = lab.autotune_table()
print(tune)
v = dict(zip(tune.data["ks"], tune.data["verdict"]))
mean = tune.data["mean"]
claim("after 5 evaluations model and random are the same search (the same random start)",
      mean["model - random"][0] == 0, "difference 0")
claim("from 10 evaluations on, the model is better beyond 2 SE", v[10] == v[20] == v[40] == "model better",
      f"{mean['model'][2]:.3f} vs {mean['random'][2]:.3f} at k=20")
best = tune.data["best_config"]
claim("the optimum is not a corner of the space", any(16 < t < 256 for t in best.values()),
      "optimum " + " ".join(f"{k}={t}" for k, t in best.items()))

# %% [markdown]
# Exhaustive search in a fixed order finds the optimum only when it gets to it; random search gets
# close fast because many configurations are nearly as good; the model gets closer still, by a
# margin the 100 seeds resolve from k = 10 on (at k = 5 the two have not diverged yet). The same on
# the real blocked matmul of 128 × 128 matrices, timed on this machine, with tiles of 8 to 64 —
# every tile smaller than the matrix, so that every configuration is a different computation (a
# tile of 128 or more would be the whole matrix, one call, whatever its size):

# %% tags=["nbval-ignore-output"]
real = lab.autotune_table(autotune.blocked_measure(n=128, repeat=1, min_time_s=0.0), budget=20,
                          space=autotune.blocked_space((8, 16, 32, 64)))
print(real)
claim("on the real kernel too the model beats random at k = 20", dict(zip(real.data["ks"], real.data["verdict"]))[20]
      == "model better", f"{real.data['mean']['model'][2]:.3f} vs {real.data['mean']['random'][2]:.3f}")

# %% [markdown]
# On a CPU this blocked matmul is bound by the cost of each small `addmm_` call, so the larger the
# tiles the faster, and the optimum sits at the corner of the space (64, 64, 64): a model that
# learns "bigger is faster" after a few measurements finds it at once, while random search has to
# stumble on it. On a GPU, `autotune.triton_space()` with `triton_measure` tunes Lab 04's Triton
# matmul, whose optimum lies inside its space (registers and shared memory limit large tiles).

# %% [markdown]
# ## 6. CUDA graphs, and who does what
#
# On a GPU, launching a kernel costs several microseconds of CPU time. A model made of many small
# kernels can spend more time launching than computing. A *CUDA graph* records a sequence of
# launches once and replays it with one call.

# %%
print(cuda_graphs.demo())
claim("the chain is one op per kernel: 30 ops, 30 launches", count_launches(cuda_graphs.small_kernels,
      torch.randn(1024), 30) == 30, "counted by the profiler (here on the CPU)")
if cuda_graphs.available():
    r = cuda_graphs.measure()
    claim("on the GPU: 200 kernels, and one replay beats launching them", r.launches == 200 and r.speedup > 1,
          f"{r.speedup:.1f}x")

# %% [markdown]
# Compilers for machine learning work at different levels — the whole graph, one operator, one
# tile — and search in different ways:

# %%
display(Markdown(landscape.table()))

# %% [markdown]
# ## 7. One more exercise, from Lab 03's GPU model
#
# ### Exercise 6: `transactions`
#
# The memory transactions of one warp's access (Lab 03's GPU execution model): what a compiler's
# choice of loop order and layout decides on a GPU.

# %%
check_your_work("lab13_compilers", "transactions")

# %% [markdown]
# ## 8. Worked problems
#
# **Problem 1.** f: ℝ¹⁰⁰⁰ → ℝ¹⁰. How many passes does the full Jacobian take in forward mode, and in
# reverse mode?
#
# <details><summary>Answer</summary>
#
# Forward: one per input, **1000**. Reverse: one per output, **10**.
#
# </details>
#
# **Problem 2.** With ε = 2.2·10⁻¹⁶, roughly what step h minimises the central difference's error,
# and how many correct digits does it leave?
#
# <details><summary>Answer</summary>
#
# h ≈ ε^(1/3) ≈ **6·10⁻⁶**, error about ε^(2/3) ≈ 4·10⁻¹¹ relative: about **10 digits** of 16.
#
# </details>
#
# **Problem 3.** A function is compiled with `dynamic=False` and called with 20 different lengths.
# How many compiles, with the default limit of 8?
#
# <details><summary>Answer</summary>
#
# **8**; then Dynamo stops compiling the function and the other lengths run eagerly.
#
# </details>
#
# **Problem 4.** A warp of 32 lanes reads 4-byte floats with a stride of 3 elements. How many
# 128-byte transactions?
#
# <details><summary>Answer</summary>
#
# The lanes span 31·3·4 + 4 = 376 bytes from an aligned start: ⌈376/128⌉ = **3** transactions.
#
# </details>

# %%
# The answers above, computed (the tests check the same numbers).
import math

from labkit.gpu_model.coalescing import strided_addresses, transactions

eps = 2.0 ** -52
twenty = inside_compile.count_compiles(lambda t: (t * 2).sum(), [(torch.randn(n, 4),) for n in range(2, 22)],
                                       dynamic=False).compiles
print(1000, 10, f"{eps ** (1 / 3):.1e}", f"{eps ** (2 / 3):.1e}", twenty, transactions(strided_addresses(3)))
claim_between("Problem 2: the best central step keeps at least the estimated 10 digits",
              -math.log10(sweep.best_central_error / abs(sweep.exact)), 10, 16)
claim("Problem 3: 20 lengths with dynamic=False compile 8 times", twenty == 8, f"{twenty} compiles")
claim("Problem 4: stride 3 needs 3 transactions of 128 B", transactions(strided_addresses(3)) == 3, "376 bytes")

# %% [markdown]
# ## Further reading
#
# * A. Griewank and A. Walther, *Evaluating Derivatives*, SIAM 2008; A. Baydin et al., *Automatic
#   Differentiation in Machine Learning: a Survey*, JMLR 2018.
# * J. Reed et al., *torch.fx: Practical Program Capture and Transformation for Deep Learning in
#   Python*, MLSys 2022.
# * Z. Jia et al., *TASO: Optimizing Deep Learning Computation with Automatic Generation of Graph
#   Substitutions*, SOSP 2019.
# * J. Ansel et al., *PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode
#   Transformation and Graph Compilation*, ASPLOS 2024.
# * T. Chen et al., *TVM*, OSDI 2018, and *Learning to Optimize Tensor Programs*, NeurIPS 2018.
#
# ## Summary
#
# * A graph can be built before it runs or recorded as it runs; either way, AD applies one
#   backward rule per operation, and its backward pass is another graph. AD is exact to rounding;
#   finite differences are not; symbolic derivatives swell.
# * Reverse mode costs one pass per output, forward mode one per input.
# * DCE, constant folding and CSE keep outputs bit for bit — if they respect side effects, trainable
#   parameters and literal types. Rewrite rules must be verified; greedy search gets stuck.
# * torch.compile = Dynamo (graphs + guards, breaks where Python must run) + AOTAutograd (one
#   functionalized joint graph, decomposed and cut into forward and backward, saving or
#   recomputing) + TorchInductor (fused kernels: C++ on a CPU, Triton on a GPU). It handles
#   changing shapes by recompiling once with symbolic sizes.
# * Fusing nodes in a graph saves nothing until a compiler emits one kernel for them: count
#   launches with a profiler.
# * Over 100 seeds, a learned cost model gets closer to the best tile sizes than random search
#   for the same number of measurements; one or a few seeds cannot show it.
#
# **Exercises** (in `exercises/lab13_compilers.py`): `vjp` (§2), `dead_code_elimination`,
# `constant_folding`, `common_subexpression_elimination` (§3), `clip_without_breaks` (§4),
# `transactions` (§7); grade them with
# `python -m labkit.grade --lab 13`.
