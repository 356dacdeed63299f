# Source of notebooks/00_welcome.ipynb, in jupytext's percent format; build: make notebooks

# %% [markdown]
# # Lab 00 — Welcome to MLSys Labs
#
# **By the end of this lab you will be able to**
# - check what this machine offers: device, cores or SMs, torch and Triton versions;
# - start several real `torch.distributed` processes ("ranks") from a notebook and get their results back;
# - read what happens when a rank fails or hangs;
# - find an exercise, fill it in, and grade it.
#
# Every lab follows the same pattern: a claim in prose, then a cell that measures it.

# %% [markdown] slide="slide"
# ## 1. What machine is this?
#
# `labkit.env.report()` is the first cell of every lab. Besides describing the machine, it makes sure
# Triton kernels run in *interpreter mode* (`TRITON_INTERPRET=1`) when no GPU is present — that has to
# happen before any kernel is defined, which is why `import labkit` already does it.

# %% tags=["nbval-ignore-output"] slide="subslide"
import labkit
from labkit import env

info = env.report()

# %% slide="fragment"
import os

print("device kind:", info.device)
print("Triton mode:", "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled")

# %% [markdown] slide="slide"
# ## 2. Launching ranks
#
# Distributed training runs one process per device. Each process is a *rank*, numbered 0..N−1, and
# all of them belong to a *process group* through which they exchange tensors. On a CPU the transport
# is **gloo** (TCP over loopback); on GPUs it is **NCCL**.
#
# `labkit.dist.launch(fn, world_size, *args)` starts `world_size` processes, initialises the group
# in each, calls `fn(rank, world_size, *args)`, and returns the list of return values, index = rank.
# Whatever a rank prints comes back prefixed with its rank, in rank order.

# %% slide="subslide"
import torch
import torch.distributed as dist
from labkit.dist import launch


def hello(rank, world_size):
    print(f"hello from rank {rank} of {world_size}, backend {dist.get_backend()}")
    return rank * rank


print("returned:", launch(hello, 4))

# %% [markdown]
# These are real processes with real communication. Here every rank contributes `rank + 1` and
# `all_reduce` sums the contributions, so each rank ends with 1 + 2 + … + N = N(N+1)/2:

# %% slide="subslide"
def sum_of_ranks(rank, world_size):
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)  # default reduction: sum
    return t.item()


for n in (1, 2, 3, 4):
    got = launch(sum_of_ranks, n)
    print(f"N={n}: every rank holds {got[0]:g}; formula N(N+1)/2 = {n * (n + 1) // 2}; all equal: {len(set(got)) == 1}")

# %% [markdown]
# The ranks of a launch find each other through a file in a private temporary folder and then talk
# over loopback (`127.0.0.1`) on ports the operating system picks, so launches never collide. On a
# CPU the ranks are *forked* copies of this kernel, and each computes with one thread: torch's CPU
# thread pool (GNU OpenMP) hangs in a forked child once the parent has used it, as this notebook
# has. Ranks that are spawned instead (NCCL on GPUs) get `cores // world_size` threads each.

# %%
print("threads per rank with 1, 2, 4 ranks:",
      [launch(lambda r, w: torch.get_num_threads(), n)[0] for n in (1, 2, 4)],
      f"(this machine has {os.cpu_count()} cores)")

# %% [markdown] slide="slide"
# ## 3. When a rank fails
#
# Distributed bugs usually show up as hangs: one rank waits for a message that never comes. The
# launcher bounds every launch by `timeout` seconds, so a mistake costs seconds, not a frozen
# notebook. A rank that raises ends the launch at once with a `RankError` naming the rank and
# carrying its traceback:

# %% slide="subslide"
from labkit.dist import RankError


def rank_two_fails(rank, world_size):
    if rank == 2:
        raise ValueError("bad shard size")
    t = torch.zeros(1)
    dist.recv(t, src=2)  # the others wait for rank 2, which never sends


try:
    launch(rank_two_fails, 3, timeout=20)
except RankError as err:
    print(f"RankError: rank={err.rank}, exception={err.exc_type}")
    print("last line of its traceback:", err.remote_traceback.strip().splitlines()[-1])

# %% [markdown] slide="slide"
# A rank that never returns gives a `TimeoutError` naming the stuck ranks and the line each was on:

# %% slide="subslide"
import re


def rank_one_forgets_to_send(rank, world_size):
    t = torch.zeros(1)
    if rank == 0:
        dist.recv(t, src=1)  # rank 1 never sends: rank 0 waits
    return t.item()


try:
    launch(rank_one_forgets_to_send, 2, timeout=3)
except TimeoutError as err:
    msg = str(err)
    print(msg.split(" (rank")[0])
    line, func = re.search(r"line (\d+) in (\w+)", msg).groups()
    print(f"rank 0 was waiting in {func}(), line {line} of its cell")

# %% [markdown] slide="slide"
# ## 4. Exercises and grading
#
# Each lab has exercises in `exercises/labNN_topic.py`: functions whose docstring is the
# specification and whose body raises `NotImplementedError` with a hint. The reference answers sit
# in `solutions/` with the same signatures. Fill in a stub, then grade it from a terminal:
#
# ```bash
# make grade LAB=05                                   # or: .venv/bin/python -m labkit.grade --lab 05
# .venv/bin/python -m labkit.grade --lab 05 --gradescope results.json
# ```
#
# The grader runs your file in a separate, sandboxed process, feeds it inputs drawn at random when
# grading starts, and checks what comes back against its own reference answers. It prints a score per
# exercise and one line for every point lost. Each exercise has a time budget, so a hang or crash
# costs only that exercise. Here is the grade of the untouched stubs of Lab 02 (all zero), then of
# the reference solutions (full marks):

# %% slide="subslide"
from labkit.grading.run import format_table, run_graded_tests, score_table

for which in ("exercises", "solutions"):
    rows = score_table(run_graded_tests(which, lab="02"))
    print(f"--- {which}")
    print(format_table(rows))

# %% [markdown] slide="slide"
# ## 5. The syllabus
#
# | lab | topic |
# |---|---|
# | 01 | arithmetic intensity, roofline, MFU/HFU, fusion |
# | 02 | tensors in memory: strides, views, contiguity |
# | 03 | tiled matmul: cache and register tiling, GPU traffic models |
# | 04 | Triton kernels: add, fused softmax, tiled matmul, layer norm, fused attention |
# | 05 | collectives: the seven primitives, ring / tree / recursive doubling, α–β model |
# | 06 | data parallelism: DDP from scratch, buckets, overlap, the parameter server |
# | 06b | data parallelism, part 2: scaling laws, large batches, compression, convergence |
# | 07 | tensor parallelism: Megatron layers, vocabulary-parallel loss, sequence and expert parallelism |
# | 08 | pipeline parallelism: GPipe, 1F1B, interleaving, simulator and real executor |
# | 09 | memory: where a step's bytes go, checkpointing, accumulation, mixed precision, offload, quantization |
# | 10 | ZeRO-1/2/3 and FSDP: sharded optimizer states, gradients and parameters |
# | 11 | 3D parallelism: dp × tp × pp on real ranks, a planner checked against Megatron-LM, placement |
# | 12 | fault tolerance: atomic checkpoints, exact resume, killed ranks survived, Young/Daly, ABFT |
# | 13 | ML compilers: graphs and autodiff, torch.fx passes, inside torch.compile, autotuning |
# | 14 | long sequences (ring attention, Ulysses), sharding specs on a device mesh, MoE router balance |
#
# A good order: 00–05, then 13 (it builds on Labs 01–04), then 06, 06b, 07–10, then 14 (it builds on Labs
# 05, 07 and 10), then 11–12.
#
# **Summary.** `labkit.env.report()` tells you what you are running on; `labkit.dist.launch` runs
# real ranks with bounded time and clear errors; `python -m labkit.grade` scores your exercises.
# Next: Lab 01, where we measure this machine's roofline.
