"""What each lab's ``exercises/`` and ``solutions/`` file is made of (see `labkit.grading.generate`).

One `Lab` per graded module: the generated module docstring (``title`` and ``doc``), its imports
(the same lines in both files) and, in order, the dotted paths of the labkit definitions it holds.
The answers themselves live in labkit between solution markers; nothing here is code to grade.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lab:
    """One lab's generated module: ``title`` (the docstring's first line without its ending, e.g.
    "Lab 07 exercises: tensor parallelism"), ``doc`` (the docstring's other paragraphs), ``imports``
    (import lines, in order), ``items`` (dotted paths of labkit functions/classes, in order;
    ``"labkit.x._name as name"`` gives a definition another name in the generated files, as when
    labkit's public ``name`` is the checked wrapper around the marked ``_name``)."""

    title: str
    doc: str
    imports: tuple[str, ...]
    items: tuple[str, ...]


LABS: dict[str, Lab] = {}

LABS["lab01_roofline"] = Lab(
    title="Lab 01 exercises: arithmetic intensity, the roofline, MFU/HFU",
    doc="""
Conventions (as in the notebook): one FLOP per add/multiply; bytes moved are
the compulsory traffic (each operand read once, each result written once per
kernel); arithmetic intensity = FLOPs / bytes.
""",
    imports=(),
    items=("labkit.roofline.model.matmul_intensity", "labkit.roofline.model.chain_intensity",
           "labkit.roofline.model._attainable_flops as attainable_flops", "labkit.roofline.model.mfu_hfu"),
)

LABS["lab02_strides"] = Lab(
    title="Lab 02 exercises: strided views as (shape, strides, offset), all counted in elements",
    doc="""
Element [i0, i1, ...] of a view is at storage position offset + sum(i_d * strides[d]).
Shapes and strides are tuples of ints; the functions return tuples.
""",
    imports=(),
    items=("labkit.strides.slice_view", "labkit.strides.permute_view",
           "labkit.strides._is_contiguous as is_contiguous", "labkit.strides._view_strides as view_strides"),
)

LABS["lab03_matmul"] = Lab(
    title="Lab 03 exercises: tiled matrix multiplication with load counting",
    doc="""
Conventions (the same as labkit.matmul): A is M x K, B is K x N, C = A @ B is M x N.
Tile sizes need not divide the matrix sizes: the last tile along a dimension is
smaller, and you count only the elements really loaded. Traffic is counted in
elements with `labkit.matmul.Traffic(a_reads, b_reads, c_writes)`.
Section 11's CUDA exercises (the kernels tiled_matmul and block_sum, and blocks_per_sm) are at the end:
kernels in numba's CUDA dialect, run thread by thread by labkit.gpu_model.cuda_sim, which checks every
access (a race, a barrier not all threads reach, or an index out of range is an error). TILE = 8 is
tiled_matmul's tile (its blocks are TILE x TILE threads); block_sum is launched with 32, 64 or 128
threads per block, at most BLOCK = 128.
Grade with ``python -m labkit.grade --lab 03`` (or ``make grade LAB=03``).
""",
    imports=("import numpy as np", "", "from labkit.gpu_model.cuda_kernels import BLOCK, TILE",
             "from labkit.gpu_model.cuda_sim import cuda", "from labkit.matmul import Traffic, TwoLevelTraffic"),
    items=("labkit.matmul.traffic._cache_tiled as cache_tiled", "labkit.matmul.traffic._register_tiled as register_tiled",
           "labkit.matmul.traffic._tiled as tiled", "labkit.gpu_model.cuda_kernels.matmul_tiled as tiled_matmul",
           "labkit.gpu_model.cuda_kernels.block_sum", "labkit.gpu_model.occupancy.blocks_per_sm"),
)

LABS["lab04_triton"] = Lab(
    title="Lab 04 exercises: write the bodies of four Triton kernels",
    doc="""
Each exercise is a ``@triton.jit`` kernel; the Python wrapper below it (already
complete) checks the inputs, allocates the output, picks the block size and
launches the grid. Your kernels run in Triton's interpreter on a CPU
(``import labkit`` sets TRITON_INTERPRET=1 before any kernel is defined) and
compile unchanged on a GPU.

Rules of thumb: every program computes its element indices from
``tl.program_id``; any block that can run past the end of the data needs a
mask on its loads *and* stores; reductions over masked lanes need a neutral
``other=`` (0 for sums, -inf for maxima). The graded tests use sizes that are
not block multiples and record every access: an out-of-bounds lane loses points
even when the numbers come out right.

Grade: ``python -m labkit.grade --lab 04`` (or ``make grade LAB=04``).
""",
    imports=("import labkit", "", "import torch", "import triton", "import triton.language as tl", "",
             "from labkit.kernels.checks import check_same, check_tensor"),
    items=tuple(f"labkit.kernels.simple.{n}" for n in (
        "add_kernel", "add", "softmax_kernel", "softmax", "matmul_kernel", "matmul", "layernorm_kernel", "layernorm")),
)

LABS["lab05_collectives"] = Lab(
    title="Lab 05 exercises: collectives from point-to-point messages",
    doc="""
Rules for every function here:
- it runs on every rank of an initialised process group (e.g. under
  ``labkit.dist.launch``); get ``rank``/``world_size`` from torch.distributed;
- move data only with ``labkit.collectives.exchange`` (isend/irecv underneath)
  or ``dist.isend``/``dist.irecv`` — never ``dist.all_reduce``, ``dist.broadcast``
  or any other built-in collective (the grader disables them);
- the reduction is a sum, done in place in the tensor you are given;
- return a ``CommStats`` for the calling rank (``exchange`` fills it in for you:
  bytes_sent, bytes_received, messages, steps).
""",
    imports=("import torch", "import torch.distributed as dist", "",
             "from labkit.collectives import CommStats, chunk_bounds, exchange"),
    items=("labkit.collectives.ring._ring_reduce_scatter_chunks as ring_reduce_scatter_chunks",
           "labkit.collectives.ring._ring_all_gather_chunks as ring_all_gather_chunks",
           "labkit.collectives.ring._ring_all_reduce as ring_all_reduce",
           "labkit.collectives.tree._tree_broadcast as tree_broadcast",
           "labkit.collectives.recursive._recursive_doubling_all_reduce as recursive_doubling_all_reduce"),
)

LABS["lab06_data_parallel"] = Lab(
    title="Lab 06 exercises: data parallelism",
    doc="""
- ``bucket_indices``: which gradients travel together (PyTorch DDP's bucketing rule);
- ``data_parallel_hooks``: DDP from backward hooks, one asynchronous all-reduce per parameter;
- ``bucketed_ddp_hooks``: the same with gradient buckets, one asynchronous all-reduce per bucket;
- ``ssp_start_times``: the clock rule of a stale-synchronous parameter server;
- ``noise_scale``: the gradient noise scale from the two gradients a data-parallel step has.
""",
    imports=("import torch", "import torch.distributed as dist"),
    items=("labkit.data_parallel.buckets.bucket_indices", "labkit.data_parallel.ddp.data_parallel_hooks",
           "labkit.data_parallel.ddp.bucketed_ddp_hooks",
           "labkit.data_parallel.ssp._ssp_start_times as ssp_start_times",
           "labkit.data_parallel.noise_scale._noise_scale as noise_scale"),
)

LABS["lab07_tensor_parallel"] = Lab(
    title="Lab 07 exercises: tensor parallelism",
    doc="""
Every function runs on every rank of an initialised process group (e.g. under
``labkit.dist.launch``); use ``dist.all_reduce`` for communication (sum unless stated), and make
the backward pass right as well as the forward: the grader checks gradients.

- ``copy_to_tp`` / ``reduce_from_tp``: Megatron's conjugate operators f and g;
- ``column_parallel_linear`` / ``row_parallel_linear``: a linear layer split by output / input
  features;
- ``vocab_parallel_cross_entropy``: the loss over logits split by vocabulary, never gathered;
- ``halo_bytes_per_rank`` (section 8, a plain function): what a row-split convolution's halo
  exchange sends.
""",
    imports=("import torch", "import torch.distributed as dist"),
    items=("labkit.tensor_parallel.comm._PlainCopyToTP", "labkit.tensor_parallel.comm._PlainReduceFromTP",
           "labkit.tensor_parallel.comm._copy_to_tp as copy_to_tp",
           "labkit.tensor_parallel.comm._reduce_from_tp as reduce_from_tp",
           "labkit.tensor_parallel.layers.column_parallel_linear", "labkit.tensor_parallel.layers.row_parallel_linear",
           "labkit.tensor_parallel.vocab._PlainVocabCE",
           "labkit.tensor_parallel.vocab._vocab_parallel_cross_entropy as vocab_parallel_cross_entropy",
           "labkit.tensor_parallel.conv.halo_bytes_per_rank"),
)

LABS["lab08_pipeline"] = Lab(
    title="Lab 08 exercises: pipeline parallelism",
    doc="""
Four pieces of the lab, each graded on its own:
- `schedule_1f1b`: the 1F1B schedule generator;
- `bubble_fraction`: the pipeline bubble under uniform stage times;
- `stage_backward`: a stage's backward with its real receive and send (runs on gloo ranks);
- `optimal_slicing` (section 8.3): TeraPipe's choice of token slices for one long sequence.
""",
    imports=("from __future__ import annotations", "", "from fractions import Fraction", "", "import torch",
             "import torch.distributed as dist", "", "from labkit.pipeline.schedules import Action"),
    items=("labkit.pipeline.schedules._one_f_one_b", "labkit.pipeline.schedules.schedule_1f1b",
           "labkit.pipeline.simulate.bubble_fraction", "labkit.pipeline.executor.stage_backward",
           "labkit.pipeline.terapipe._optimal_slicing as optimal_slicing"),
)

LABS["lab09_memory"] = Lab(
    title="Lab 09 exercises: memory",
    doc="""
- ``checkpointed_forward``: activation checkpointing of a chain of layers, written by hand;
- ``checkpoint_policy``: which activations to keep under a memory budget, recomputing the least;
- ``forward_only_peak``: the activation peak of a chain run without autograd (inference);
- ``kv_cache_bytes``: the bytes of a decoder's key/value cache (section 12).
""",
    imports=("from __future__ import annotations", "", "import itertools", "import math", "", "import torch"),
    items=("labkit.memory.activation_checkpointing._run", "labkit.memory.activation_checkpointing._Segment",
           "labkit.memory.activation_checkpointing.checkpointed_forward", "labkit.memory.policy._checkpoint_policy as checkpoint_policy",
           "labkit.memory.inference._forward_only_peak as forward_only_peak", "labkit.memory.inference.kv_cache_bytes"),
)

LABS["lab10_zero"] = Lab(
    title="Lab 10 exercises: ZeRO and FSDP",
    doc="""
- ``model_state_bytes``: what one rank holds at each ZeRO stage;
- ``zero1_step``: a ZeRO-1 step — your rank keeps and updates only its shard of the optimizer
  state, then the updated shards are all-gathered;
- ``fsdp_linear``: FSDP's gather → compute → free for one linear layer, forward and backward.

``zero1_step`` and ``fsdp_linear`` run on every rank of an initialised process group (e.g. under
``labkit.dist.launch``). Use ``dist.reduce_scatter_single(out, inp)`` (sum) and
``dist.all_gather_single(out, inp)`` (their older names, reduce_scatter_tensor and
all_gather_into_tensor, work too); the grader logs every collective you call.
""",
    imports=("import math", "", "import torch", "import torch.distributed as dist"),
    items=("labkit.zero.formulas._model_state_bytes as model_state_bytes", "labkit.zero.optimizer._padded",
           "labkit.zero.optimizer.zero1_step", "labkit.zero.fsdp._gather_weight", "labkit.zero.fsdp._FSDPLinear",
           "labkit.zero.fsdp.fsdp_linear"),
)

LABS["lab11_parallel3d"] = Lab(
    title="Lab 11 exercises: 3D parallelism",
    doc="""- ``rank_coords``: where a rank sits on a dp × tp × pp grid;
- ``group_ranks``: which ranks share its data-, tensor- or pipeline-parallel group;
- ``fits_in_memory``: does a plan fit in one GPU's memory;
- ``flops_per_iteration``: the FLOPs of one training iteration of a GPT (Narayanan et al. 2021);
- ``partition_stages``: cut a chain of layers into pipeline stages, slowest stage as fast as possible.

The rank order of the whole lab: tp innermost, then dp, then pp outermost,

    rank = pp_index·(dp·tp) + dp_index·tp + tp_index,

as ``init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))`` numbers them.
""",
    imports=("import math",),
    items=("labkit.parallel3d.grid.rank_coords", "labkit.parallel3d.grid.group_ranks",
           "labkit.planner.memory.fits_in_memory", "labkit.planner.model._flops_per_iteration as flops_per_iteration",
           "labkit.cluster.autoparallel._partition_stages as partition_stages"),
)

LABS["lab12_fault_tolerance"] = Lab(
    title="Lab 12 exercises: fault tolerance",
    doc="""- ``atomic_save``: write a file so that a crash at any moment leaves the old one or the new one;
- ``resume_state``: everything besides the weights that a bit-identical resume needs;
- ``young_interval``: how often to checkpoint, to first order;
- ``simulate_wall_time``: a Monte Carlo of a job that fails, checkpoints and restarts;
- ``abft_locate``: find the one wrong element of a matrix product from its checksums;
- ``peer_ranks``: where each rank's in-memory checkpoint copy goes, so that no node's loss loses one.
""",
    imports=("import math", "import os", "import random", "import tempfile", "", "import numpy as np", "import torch"),
    items=("labkit.checkpoint.io.atomic_save", "labkit.checkpoint.state.resume_state",
           "labkit.checkpoint.interval._young_interval as young_interval", "labkit.checkpoint.interval.simulate_wall_time",
           "labkit.checkpoint.abft.abft_locate", "labkit.checkpoint.hierarchical._peer_ranks as peer_ranks"),
)

LABS["lab13_compilers"] = Lab(
    title="Lab 13 exercises: ML compilers",
    doc="""- ``vjp``: reverse-mode backward rules for eight ops, derived from their forward definitions;
- ``dead_code_elimination``, ``constant_folding``, ``common_subexpression_elimination``: three
  classic passes on torch.fx graphs;
- ``clip_without_breaks``: a function rewritten so that Dynamo captures it whole (no graph break);
- ``transactions``: how many memory transactions one warp's access needs (the GPU model).

The graph passes take a ``torch.fx.GraphModule`` and return a NEW one: start from
``gm = copy.deepcopy(gm)``, edit ``gm.graph`` (``graph.erase_node``, ``node.replace_all_uses_with``,
``graph.inserting_before``, ``graph.get_attr``), then ``gm.graph.lint(); gm.recompile()``. Use
``has_side_effects(node)`` and ``is_random(node)`` (imported below) to know which nodes must stay.
""",
    imports=("import copy", "", "import torch", "from torch import fx", "",
             "from labkit.compiler.fx_passes import has_side_effects, is_random"),
    items=("labkit.compiler.autodiff._vjp as vjp",
           "labkit.compiler.fx_passes._dead_code_elimination as dead_code_elimination",
           "labkit.compiler.fx_passes._constant_folding as constant_folding",
           "labkit.compiler.fx_passes._common_subexpression_elimination as common_subexpression_elimination",
           "labkit.compiler.inside_compile.clip_without_breaks",
           "labkit.gpu_model.coalescing._transactions as transactions"),
)

LABS["lab14_long_context"] = Lab(
    title="Lab 14 exercises: long sequences, sharding specs and experts",
    doc="""- ``softmax_step``: one block of the online softmax, the arithmetic of every ring attention step;
- ``all_to_all_4d``: DeepSpeed-Ulysses' exchange between sequence-split and head-split tensors;
- ``einsum_placement``: the output placement of an einsum on one mesh dimension, as DTensor does it;
- ``load_balancing_loss``: Switch Transformer's auxiliary loss that keeps a router balanced.
""",
    imports=("import torch", "import torch.distributed as dist"),
    items=("labkit.context_parallel.attention.softmax_step",
           "labkit.context_parallel.ulysses._all_to_all_4d as all_to_all_4d",
           "labkit.sharding.rules._einsum_placement as einsum_placement",
           "labkit.tensor_parallel.experts._load_balancing_loss as load_balancing_loss"),
)
