"""Lab 03's GPU execution model: warps, coalescing, banks, tiling, host/device, and the CPU's side.

One module per idea, each counted like Lab 03's traffic (pure functions returning result
dataclasses, each closed form checked against a simulation or a measurement by a test):

- `labkit.gpu_model.warps`: SIMT divergence; a 32-lane warp runs a tiny branchy kernel and
  reports issued slots, active lanes per slot and active-lane efficiency.
- `labkit.gpu_model.coalescing`: 32-byte sectors (and 128-byte segments) per warp request;
  per-warp counts from real Triton programs recorded under the interpreter (Lab 04), under a
  thread model of one element per lane.
- `labkit.gpu_model.compiled`: what compiled Triton does instead — a kernel compiled for an NVIDIA
  target on any machine, the layouts its coalescing pass chose, and their sectors.
- `labkit.gpu_model.occupancy`: resident warps per SM from threads, registers and shared memory
  per block; waves of blocks; Little's law.
- `labkit.gpu_model.banks`: shared-memory bank conflicts (32 banks of 4-byte words).
- `labkit.gpu_model.stencil`: global loads of a 1-D / 2-D stencil without and with tiling.
- `labkit.gpu_model.host_device`: asynchronous launches, implicit synchronisation, pinned vs
  pageable host-to-device copies (CUDA only; a `NeedsCuda` result elsewhere).
- `labkit.gpu_model.cpu_simd`: contiguous vs gathered access and access order, timed on this CPU.
- `labkit.gpu_model.cuda_sim`: a CUDA simulator that runs every thread of a kernel written in numba's
  CUDA dialect (threadIdx, blockIdx, shared arrays, syncthreads, atomics), deterministically, with
  races, barrier divergence and bad indices reported as errors; `cuda_kernels`: vector add, a
  shared-memory tiled matmul and a block reduction in that dialect; `cuda_gpu`: the same kernels
  under numba's own simulator and compiled by numba.cuda.jit on a GPU.
"""
from labkit.gpu_model.banks import BankAccess, bank_access, conflict_degree, strided_conflict_degree
from labkit.gpu_model.coalescing import (WarpAccess, analyze_warp, coalescing_table, record_warps, sectors,
                                         strided_transactions, transactions)
from labkit.gpu_model.compiled import BlockedLayout, CompiledKernel, compile_for_gpu, warp_cost
from labkit.gpu_model.occupancy import (Occupancy, Schedule, SMLimits, bytes_in_flight, schedule,  # not occupancy():
                                        waves)  # a submodule
from labkit.gpu_model.cpu_simd import access_order, simd_vs_gather
from labkit.gpu_model.cuda_sim import (BarrierDivergence, KernelError, LaunchRun, OutOfBounds, RaceError, cuda,
                                       launch)
from labkit.gpu_model.host_device import NeedsCuda, find_implicit_syncs, h2d_bandwidth, launch_vs_completion
from labkit.gpu_model.stencil import stencil1d_formula, stencil1d_tiled, stencil2d_formula, stencil2d_tiled
from labkit.gpu_model.warps import If, Loop, Op, WarpRun, branch_formula, loop_formula, simulate_warp

__all__ = ["Op", "If", "Loop", "WarpRun", "simulate_warp", "branch_formula", "loop_formula",
           "transactions", "sectors", "WarpAccess", "analyze_warp", "strided_transactions", "record_warps",
           "coalescing_table", "BlockedLayout", "CompiledKernel", "compile_for_gpu", "warp_cost",
           "Occupancy", "SMLimits", "waves", "bytes_in_flight", "BankAccess", "bank_access", "conflict_degree",
           "strided_conflict_degree",
           "stencil1d_tiled", "stencil1d_formula", "stencil2d_tiled", "stencil2d_formula",
           "NeedsCuda", "launch_vs_completion", "find_implicit_syncs", "h2d_bandwidth",
           "simd_vs_gather", "access_order", "cuda", "launch", "LaunchRun", "KernelError", "RaceError",
           "BarrierDivergence", "OutOfBounds", "Schedule", "schedule"]
