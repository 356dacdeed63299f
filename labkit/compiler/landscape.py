"""Where ML compilers sit: XLA, TVM, Triton, TorchInductor and hand-written kernel libraries.

A short, conservative comparison. Each row says what a system optimises and at which level:

- **graph**: the whole dataflow graph of a model (fusion, layout, memory planning);
- **operator**: the loop nest of one (possibly fused) operator (tiling, loop order, vectorising);
- **tile**: the program of one block of work, with the hardware mapping inside the block left to
  the compiler (Triton's level);

how it chooses among options (hand-written rules and heuristics, measuring candidates, a learned
cost model), what it takes in and what it runs on, one source (paper or documentation, with its
year), and what this course measures about it. Claims stay at what the cited source says;
versions move, so "targets" lists main ones, not every one.

    ROWS            the table as `Compiler` records
    table()         a Markdown table (for a notebook or a results file)
"""
from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Compiler", "ROWS", "table", "COLUMNS"]


@dataclass(frozen=True)
class Compiler:
    name: str
    level: str
    optimises: str
    search: str
    inputs: str
    targets: str
    source: str
    measured_here: str


ROWS: tuple[Compiler, ...] = (
    Compiler(
        name="XLA",
        level="graph (HLO), then per-fusion code generation",
        optimises="op fusion, layout and buffer assignment over a whole HLO graph",
        search="mostly rules and heuristics; on GPUs some GEMM/convolution choices are timed "
               "(autotuned) at compile time",
        inputs="HLO / StableHLO from JAX, TensorFlow, PyTorch/XLA",
        targets="CPU, GPU, TPU",
        source="OpenXLA documentation, 'XLA architecture' (2023); JAX docs, 'GPU performance tips' (2023)",
        measured_here="not installed; Lab 13's IR (ir.py) borrows HLO's explicit-broadcast rule",
    ),
    Compiler(
        name="TVM",
        level="graph (Relay: fusion) and operator (tensor-expression schedules)",
        optimises="tiling, loop order, vectorisation, thread binding of each operator",
        search="AutoTVM: hand-written schedule templates, a learned cost model (boosted trees) "
               "choosing what to measure; Ansor: generated sketches + learned model",
        inputs="models imported from the major frameworks (e.g. ONNX, PyTorch, TensorFlow)",
        targets="CPUs, GPUs, mobile and accelerator back ends",
        source="Chen et al., 'TVM' (OSDI 2018); Chen et al., 'Learning to Optimize Tensor "
               "Programs' (NeurIPS 2018); Zheng et al., 'Ansor' (OSDI 2020)",
        measured_here="not installed; autotune.py reruns the AutoTVM idea (a ridge cost model "
                      "steering which tile sizes to measure) on Lab 03's blocked matmul",
    ),
    Compiler(
        name="Triton",
        level="tile (one block program; the compiler maps it onto threads and memory)",
        optimises="coalescing, shared-memory use and pipelining inside a block; the block "
                  "sizes are the programmer's",
        search="compiler heuristics; autotuning is opt-in: triton.autotune times a config list "
               "someone wrote",
        inputs="Python kernels in the triton.language DSL",
        targets="NVIDIA and AMD GPUs (an interpreter on CPU for debugging)",
        source="Tillet, Kung, Cox, 'Triton: an intermediate language and compiler for tiled "
               "neural network computations' (MAPL 2019)",
        measured_here="Lab 04's kernels (labkit.kernels); autotune.triton_space / "
                      "triton_measure on a GPU",
    ),
    Compiler(
        name="TorchInductor",
        level="graph captured by TorchDynamo (FX), lowered to a loop-level IR",
        optimises="fusion of pointwise and reduction loops, memory planning; calls vendor "
                  "libraries for matmul/convolution by default",
        search="rules and heuristics; mode='max-autotune' times Triton templates against the "
               "library kernels",
        inputs="PyTorch programs (Python) via torch.compile",
        targets="CPU (C++/OpenMP), NVIDIA and AMD GPUs (Triton)",
        source="Ansel et al., 'PyTorch 2: Faster Machine Learning Through Dynamic Python "
               "Bytecode Transformation and Graph Compilation' (ASPLOS 2024)",
        measured_here="inside_compile.py: captured graphs, guards, one fused C++ kernel; "
                      "benchmarks/compiler.py: eager vs compiled speed-ups",
    ),
    Compiler(
        name="Hand-written kernels (cuBLAS, cuDNN, FlashAttention)",
        level="operator",
        optimises="one operator for one hardware family, by experts",
        search="human design; libraries pick among pre-built kernels per shape with heuristics",
        inputs="library calls (e.g. torch.matmul dispatches to BLAS)",
        targets="the vendor's own hardware",
        source="NVIDIA, 'cuBLAS documentation' (2024); Dao et al., 'FlashAttention' (NeurIPS 2022)",
        measured_here="Lab 03: blocked matmul vs BLAS (torch.matmul); Lab 04: Triton vs "
                      "torch.softmax / torch.matmul",
    ),
)

COLUMNS = tuple(f.name for f in fields(Compiler))


def table(columns=COLUMNS) -> str:
    """The comparison as a Markdown table with the chosen ``columns`` (names of `Compiler` fields)."""
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise ValueError(f"table: unknown column(s) {unknown}; choose from {COLUMNS}")
    head = "| " + " | ".join(c.replace("_", " ") for c in columns) + " |"
    rule = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(getattr(r, c).replace("|", "/") for c in columns) + " |" for r in ROWS]
    return "\n".join([head, rule, *body])
