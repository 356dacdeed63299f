"""The picture `check_your_work(lab, exercise)` draws before it grades, found from the lab's name.

A lab's pictures are its topic's ``lab.py`` ``picture(exercise)``: a function of the learner's
function that runs it the way the notebook ran labkit's and draws what came out with the topic's
``draw.py``. Lab 03 has two such modules: the tiled loops (`labkit.matmul.lab`) and its CUDA
section (`labkit.gpu_model.cuda_lab`); Lab 11's are the planner's (`labkit.planner.lab`, which
draws the grid exercises with `labkit.parallel3d.lab`).

This module sits above the topics and below the grader (pyproject.toml's import contracts); it
imports a lab's module only when that lab's picture is asked for.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

LAB_MODULES = {
    "lab01_roofline": "labkit.roofline.lab",
    "lab02_strides": "labkit.strides.lab",
    "lab03_matmul": "labkit.matmul.lab",
    "lab04_triton": "labkit.kernels.lab",
    "lab05_collectives": "labkit.collectives.lab",
    "lab06_data_parallel": "labkit.data_parallel.lab",
    "lab07_tensor_parallel": "labkit.tensor_parallel.lab",
    "lab08_pipeline": "labkit.pipeline.lab",
    "lab09_memory": "labkit.memory.lab",
    "lab10_zero": "labkit.zero.lab",
    "lab11_parallel3d": "labkit.planner.lab",
    "lab12_fault_tolerance": "labkit.checkpoint.lab",
    "lab13_compilers": "labkit.compiler.lab",
    "lab14_long_context": "labkit.context_parallel.lab",
}
# exercises drawn by another module than their lab's: Lab 03's CUDA section
EXCEPTIONS = {("lab03_matmul", name): "labkit.gpu_model.cuda_lab"
              for name in ("tiled_matmul", "block_sum", "blocks_per_sm")}


def picture_module(lab: str, exercise: str) -> str:
    """The dotted name of the module whose ``picture(exercise)`` draws ``exercise`` of ``lab``."""
    if lab not in LAB_MODULES:
        raise ValueError(f"picture: no lab named {lab!r}; one of {', '.join(LAB_MODULES)}")
    return EXCEPTIONS.get((lab, exercise), LAB_MODULES[lab])


def picture(lab: str, exercise: str) -> Callable[[Callable], Any]:
    """``picture(fn)`` for `check_your_work`: the learner's ``fn`` run and drawn as the lab draws it."""
    return import_module(picture_module(lab, exercise)).picture(exercise)
