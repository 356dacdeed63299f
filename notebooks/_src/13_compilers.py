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
# 4. read what `torch.compile` captured, where it broke the graph, what code Inductor generated,
#    and when it recompiles;
# 5. search a kernel's tile sizes exhaustively, at random and with a learned cost model.
#
# Whenever you see **Predict first**, write your guess down before running the next cell.

# %%
import logging

import torch
from IPython.display import Markdown, display

import labkit
from labkit.compiler import autotune, cuda_graphs, differentiation, fx_cases, inside_compile, landscape, lab
from labkit.compiler.autodiff import jacobian_race
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
print("loss equal to eager PyTorch, bit for bit:", mlp["loss_equal"])

# %% [markdown]
# ## 2. Automatic differentiation
#
# Reverse mode walks the graph backwards from the loss. Each operation has a *vector-Jacobian
# product* rule: given ∂L/∂output, the gradients of its inputs. `grad` applies those rules and
# builds the backward pass **as more nodes of the same graph**, which can be printed, optimised
# and run like the forward:

# %%
print(mlp["backward"])
print(f"max |gradient − torch.autograd|: {mlp['grad_diff']:.1e}")

# %% [markdown]
# Equal to autograd up to one rounding step (PyTorch's fused `tanh_backward` rounds once where
# our graph rounds twice).
#
# **A common mistake** says automatic differentiation "uses symbolic differentiation". It is
# neither symbolic nor numerical. Symbolic differentiation manipulates formulas; numerical
# differentiation evaluates f at nearby points; AD applies the chain rule to the *values* flowing
# through the program.
#
# **Predict first:** which of the three gets the derivative of x·sin(x)·eˣ at 0.7 exactly right?

# %%
print(differentiation.compare_methods())

# %% [markdown]
# Symbolic and AD are exact to rounding; finite differences lose half the digits or more. Their
# error has two parts — truncation, which shrinks with the step h, and rounding, which grows as
# ε/h — so there is a best h, about √ε for the forward difference and ε^(1/3) for the central one:

# %%
print(differentiation.fd_sweep().table())

# %% [markdown]
# Symbolic differentiation has its own problem, *expression swell*: the derivative of a nested
# expression, written out as a tree, grows much faster than the expression. Counting shared
# sub-expressions once (as a graph does) it grows only linearly — which is what AD's graphs do:

# %%
print(differentiation.swell_table())

# %% [markdown]
# **Forward or reverse?** Forward mode carries a tangent along with each value (dual numbers): one
# pass gives the derivative of every output along one input direction. Reverse mode gives the
# gradient of one output with respect to every input. For f: ℝⁿ → ℝᵐ a full Jacobian costs n
# forward passes or m reverse passes — and a loss has m = 1.

# %% tags=["nbval-ignore-output"]
print(jacobian_race())

# %% [markdown]
# ## 3. Graph rewrites on torch.fx
#
# `torch.fx.symbolic_trace` turns a module into a graph of nodes; a *pass* rewrites it. Each pass
# in `labkit.compiler.fx_passes` returns a new module, and each is checked by running both modules
# on the same inputs. **Predict first:** which passes change the outputs at all?

# %%
print(lab.pass_table())

# %% [markdown]
# Dead-code elimination, constant folding and CSE run the same kernels on the same values — fewer
# of them, or earlier — so the outputs are equal to the bit. Folding a BatchNorm into the
# convolution before it changes the order of the arithmetic: a few float32 ulps. Fusion turns a
# chain of elementwise ops into one call; on its own that saves launches, not time, since the same
# loops still run (`torch.compile` below generates the single loop). Concatenating Q, K and V
# adds two nodes (a split) but runs one matrix multiply instead of three.

# %% tags=["nbval-ignore-output"]
print(lab.pass_table(timed=True))

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
print("fx's eliminate_dead_code keeps the output:", torch.equal(fx_cases.run(theirs, args)[0], want))
print("ours keeps the output:", torch.equal(fx_cases.run(dead_code_elimination(gm), args)[0], want))
show(dead_code_elimination)

# %% [markdown]
# **A rewrite search.** TASO (Jia et al., 2019) generates algebraic rewrite rules, keeps those that
# survive tests on random inputs, and searches for the cheapest graph. A rule that looks plausible
# — (AB)ᵀ → AᵀBᵀ — is caught at once:

# %%
print(lab.wrong_rule_verdict())

# %% [markdown]
# Greedy search applies the best improving rewrite until none is left. On (A·B)·C + A·D every single
# rewrite makes things slightly worse, so greedy stops at the start; a search that accepts steps up
# to 5% worse (TASO's α) finds A·(B·C + D), one matrix product fewer:

# %%
print(lab.rewrite_table())

# %% [markdown]
# ## 4. Inside torch.compile
#
# `torch.compile` has two halves. **Dynamo** reads the function's Python bytecode as it runs and
# records the tensor operations into an FX graph, together with *guards*: the conditions (types,
# shapes, values of Python variables) under which the graph is valid. **Inductor** compiles the
# graph into code: C++ with OpenMP on a CPU, Triton kernels on a GPU.
#
# What Dynamo cannot put in a graph — a Python `if` on a tensor's value, a `print`, `.item()`
# turning a tensor into a Python number — *breaks* it: the graph ends, Python runs that part, and a
# new graph starts after it.

# %%
show(inside_compile.breaking_fn)
report = inside_compile.graph_breaks(inside_compile.breaking_fn, torch.randn(8))
for reason, where in report.reasons:
    if "print" not in reason.lower() and "builtin" not in reason.lower():   # see the next paragraph
        print(f"graph break: {reason[:80]}")
for fixed in (inside_compile.fixed_fn, inside_compile.fixed_fn_cond):
    r = inside_compile.graph_breaks(fixed, torch.randn(8))
    print(f"{fixed.__name__}: {r.graphs} graph, {r.breaks} breaks")

# %% [markdown]
# The `if` and the `.item()` break the graph wherever the code runs; whether the `print` does
# depends on where output goes (in a terminal it breaks; Jupyter replaces `sys.stdout`). The fixed
# versions compute both branches and select with `torch.where`, or keep the branch as a branch with
# `torch.cond`; one graph each.
#
# **Predict first:** five elementwise operations on one tensor. How many loops (kernels) will
# Inductor generate?

# %% tags=["nbval-ignore-output"]
if inside_compile.cpp_compiler():
    code = inside_compile.inductor_code(inside_compile.elementwise_chain, torch.randn(1024))
    print("kernels:", inside_compile.kernel_names(code))
else:
    print("no C++ compiler found: Inductor cannot generate CPU code here (install g++)")

# %% [markdown]
# One: `cpp_fused_…`, a single loop that reads the input once and writes the result once, where
# eager PyTorch makes five passes over memory (Lab 01's fusion, done by a compiler).
#
# **Recompilation.** Guards include the input's shape. **A common mistake** says "torch.compile
# requires static shapes". Count the compiles over eight different lengths:

# %%
print(lab.recompile_table())

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
for r in inside_compile.bucketing_experiment(lengths, backend="eager", repeat=1, rounds=1):
    print(f"{r.policy:9} compiles {r.compiles:2}, max |compiled − eager| {r.max_error:.1e}")

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
# the ones it predicts fastest. **Predict first:** after 10 measurements, how close does each get
# to the optimum? First on a synthetic cost surface (deterministic):

# %%
print(lab.autotune_table())

# %% [markdown]
# Exhaustive search in a fixed order finds the optimum only when it gets to it; random search gets
# close fast because many configurations are nearly as good; the model gets closer still. The same
# on the real blocked matmul, timed on this machine:

# %% tags=["nbval-ignore-output"]
print(lab.autotune_table(autotune.blocked_measure(n=128, repeat=1, min_time_s=0.0), budget=20, seeds=range(5)))

# %% [markdown]
# ## 6. CUDA graphs, and who does what
#
# On a GPU, launching a kernel costs several microseconds of CPU time. A model made of many small
# kernels can spend more time launching than computing. A *CUDA graph* records a sequence of
# launches once and replays it with one call.

# %%
print(cuda_graphs.demo())

# %% [markdown]
# Compilers for machine learning work at different levels — the whole graph, one operator, one
# tile — and search in different ways:

# %%
display(Markdown(landscape.table()))

# %% [markdown]
# ## 7. Exercises
#
# ### Exercise 1: `vjp`
#
# In `exercises/lab13_compilers.py`, the backward rules of eight operations.

# %%
check_your_work("lab13_compilers", "vjp", picture=lab.picture("vjp"))

# %% [markdown]
# ### Exercise 2: `dead_code_elimination`
#
# Remove unused nodes — but not those with side effects.

# %%
check_your_work("lab13_compilers", "dead_code_elimination", picture=lab.picture("dead_code_elimination"))

# %% [markdown]
# ### Exercise 3: `constant_folding`
#
# Compute once what depends only on constants (buffers, not trainable parameters).

# %%
check_your_work("lab13_compilers", "constant_folding", picture=lab.picture("constant_folding"))

# %% [markdown]
# ### Exercise 4: `common_subexpression_elimination`
#
# Merge repeated computations — only when arguments, keyword arguments and literal types all match.

# %%
check_your_work("lab13_compilers", "common_subexpression_elimination",
                picture=lab.picture("common_subexpression_elimination"))

# %% [markdown]
# ### Exercise 5: `transactions`
#
# The memory transactions of one warp's access (Lab 03's GPU execution model).

# %%
check_your_work("lab13_compilers", "transactions", picture=lab.picture("transactions"))

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
from labkit.gpu_model.coalescing import strided_addresses, transactions

eps = 2.0 ** -52
print(1000, 10, f"{eps ** (1 / 3):.1e}", f"{eps ** (2 / 3):.1e}", min(20, 8), transactions(strided_addresses(3)))

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
# * torch.compile = Dynamo (graphs + guards, breaks where Python must run) + Inductor (fused
#   kernels). It handles changing shapes by recompiling once with symbolic sizes.
# * A learned cost model finds a good tile size in far fewer measurements than random search.
#
# **Exercises** (in `exercises/lab13_compilers.py`): `vjp`, `dead_code_elimination`,
# `constant_folding`, `common_subexpression_elimination`, `transactions`; grade them with
# `python -m labkit.grade --lab 13`.
