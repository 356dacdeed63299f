"""ML compilers (Lab 13): dataflow graphs, automatic differentiation, graph rewrites and more.

Import the submodule you need (``from labkit.compiler import ir``); this file imports none of them.

    ir.py               a tiny dataflow-graph IR: build a graph first (define-and-run), shapes
                        inferred at build time, an interpreter in topological order (torch float64),
                        an SSA-style listing; the same MLP built in the IR and in eager PyTorch
    autodiff.py         reverse mode: vector-Jacobian product rules that build the backward graph in
                        the same IR (`grad`), and their eager twin `vjp`; forward mode with dual
                        numbers (`jvp`); Jacobians both ways, passes counted and timed
    differentiation.py  three ways to differentiate one function: symbolic (and expression swell),
                        finite differences (error against step size), automatic
    fx_passes.py        graph rewrites on torch.fx graphs, each pass a function gm -> gm
    fx_measure.py       what a pass buys: nodes, launches (torch.profiler), time, change in outputs
    rewrite_search.py   TASO-style rewrite rules verified by random testing; greedy vs relaxed
                        (backtracking) search under a cost model
    inside_compile.py   torch.compile from the inside: Dynamo's graphs, guards, graph breaks,
                        Inductor's generated code, recompilation and shape bucketing
    aot.py              AOTAutograd: the joint forward+backward graph, functionalization,
                        decomposition to core ATen/prims, and what each partitioner saves
    autotune.py         a tiled kernel's search space: exhaustive, random, learned-cost-model search
    cuda_graphs.py      launch overhead with and without a captured CUDA graph (GPU only)
    landscape.py        XLA, TVM, Triton, TorchInductor and hand-written kernels compared
"""
