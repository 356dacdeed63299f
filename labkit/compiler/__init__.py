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
    fx_measure.py       what a pass buys: nodes, aten ops, time, change in outputs
"""
