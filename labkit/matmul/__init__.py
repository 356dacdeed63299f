"""Lab 03: tiled matrix multiplication.

- `labkit.matmul.traffic`: counted CPU loops (naive, cache-tiled, register-tiled, both)
  returning (C, Traffic) and their closed-form traffic formulas.
- `labkit.matmul.thread_model`: thread-level simulator of GPU kernels v1, v1.5, v2, v3
  counting global- and shared-memory loads, with closed forms.
- `labkit.matmul.blocked`: a real-speed blocked matmul in torch timed against BLAS.
Drawing lives in `labkit.viz.matmul`.
"""
from labkit.matmul.traffic import (Step, Traffic, TwoLevelTraffic, cache_tiled, cache_tiled_formula, cdiv,
                                   naive, naive_formula, register_tiled, register_tiled_formula, tiled,
                                   tiled_formula)
from labkit.matmul.thread_model import GpuTraffic, gpu_formula, run_thread_model

__all__ = ["Traffic", "TwoLevelTraffic", "Step", "cdiv", "naive", "cache_tiled", "register_tiled", "tiled",
           "naive_formula", "cache_tiled_formula", "register_tiled_formula", "tiled_formula",
           "GpuTraffic", "run_thread_model", "gpu_formula"]
