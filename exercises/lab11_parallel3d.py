"""Lab 11 exercises: 3D parallelism.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``rank_coords``: where a rank sits on a dp × tp × pp grid;
- ``group_ranks``: which ranks share its data-, tensor- or pipeline-parallel group;
- ``fits_in_memory``: does a plan fit in one GPU's memory;
- ``flops_per_iteration``: the FLOPs of one training iteration of a GPT (Narayanan et al. 2021);
- ``partition_stages``: cut a chain of layers into pipeline stages, slowest stage as fast as possible.

The rank order of the whole lab: tp innermost, then dp, then pp outermost,

    rank = pp_index·(dp·tp) + dp_index·tp + tp_index,

as ``init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))`` numbers them.
"""
import math  # noqa: F401


def rank_coords(rank, dp, tp, pp):
    """(dp_index, tp_index, pp_index) of ``rank`` on a dp × tp × pp grid, in the rank order above.

    rank: int in 0 .. dp·tp·pp − 1; dp, tp, pp: ints >= 1. Returns a tuple of three ints.
    Example: dp=2, tp=2, pp=2: rank 5 -> (0, 1, 1) (5 = 1·4 + 0·2 + 1).
    """
    raise NotImplementedError("hint: peel the coordinates off with divmod, innermost first: tp varies fastest, then dp, and pp slowest.")


def group_ranks(rank, kind, dp, tp, pp):
    """The ranks of ``rank``'s ``kind`` group, in increasing order (``rank`` itself included).

    kind: "dp" (the ranks that differ from ``rank`` only in dp_index: they hold the same
    parameters and all-reduce their gradients), "tp" (differ only in tp_index: they split each
    layer's matrices) or "pp" (differ only in pp_index: the stages of one pipeline).
    Returns a list of ints. Example: dp=2, tp=2, pp=2, rank 5: "dp" -> [5, 7], "tp" -> [4, 5],
    "pp" -> [1, 5].
    """
    raise NotImplementedError("hint: find the rank's coordinates, then vary only the one its group spans (range over that dimension) and map each coordinate back to a rank with the order above.")


def fits_in_memory(num_params, layers, activation_bytes_per_layer, dp, tp, pp, micro_batches, zero_stage,
                   memory_bytes):
    """Does a plan fit on its first pipeline stage's GPUs? Returns (fits: bool, needed_bytes: float).

    num_params: Ψ, parameters of the whole model; layers: l transformer layers (pp divides l);
    activation_bytes_per_layer: bytes one layer keeps for backward for ONE micro-batch on one
    GPU (already divided by tp where tensor parallelism splits it); dp, tp, pp: the grid;
    micro_batches: m per iteration (per pipeline); zero_stage: 0-3 over the dp group;
    memory_bytes: what one GPU has.

    needed_bytes = model states + activations, where
    - model states: mixed-precision Adam, 2 + 2 + 12 bytes per parameter, of the Ψ/(tp·pp)
      parameters one GPU holds (tensor parallelism splits each layer, the pipeline splits the
      layers), with ZeRO ``zero_stage`` dividing by dp what it shards (stage 1: the 12 bytes,
      stage 2: 2 + 12, stage 3: all 16);
    - activations: under 1F1B the first stage runs min(m, pp) forwards before its first
      backward, each keeping l/pp layers' activations.
    fits = needed_bytes <= memory_bytes.
    Example: Ψ=1e9, l=24, 1e8 bytes per layer, dp=tp=pp=2, m=8, ZeRO-1, 8e9 bytes:
    states 16·2.5e8 − 12·2.5e8/2 = 2.5e9, activations 2·12·1e8 = 2.4e9 -> (True, 4.9e9).
    """
    raise NotImplementedError("hint: add up what one GPU of the grid holds: its share of the model states (which of tp, pp and ZeRO divide them?) and the activations its pipeline stage keeps in flight under 1F1B.")


def flops_per_iteration(layers, hidden, seq_len, vocab, global_batch, recompute):
    """Matrix-multiplication FLOPs of one training iteration of a GPT, forward + backward.

    layers l, hidden h, seq_len s, vocab V, global_batch B sequences; MLP width 4h; attention
    scores are the full s × s matrix. recompute: True (full activation recomputation: every
    transformer layer's forward runs twice, the logit layer's once) or False.
    Per sequence, forward: each layer 24·s·h² (QKV 6sh², output 2sh², MLP 16sh²) + 4·s²·h
    (scores and their product with V); the logit layer 2·s·h·V. Backward costs twice the
    forward. Returns an int.
    With recompute this is Narayanan et al.'s 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
    """
    raise NotImplementedError("hint: count one forward per sequence (every layer's matmuls, its attention, the logit layer); backward costs two forwards; full recomputation adds one more forward of the layers, not of the logits.")


def partition_stages(costs, stages):
    """Cut a chain of layers into ``stages`` contiguous pipeline stages so that the slowest stage
    (the sum of its layers' costs) is as fast as possible.

    costs: a non-empty list of positive floats, costs[i] = seconds of layer i; stages: an int,
    1 <= stages <= len(costs) (every stage gets at least one layer).
    Returns (sizes, bottleneck): sizes — a list of ``stages`` positive ints summing to
    len(costs), the number of layers of each stage in order; bottleneck — the cost of the
    slowest stage (a float), the smallest any partition can achieve. Sum a stage's costs with
    math.fsum. Ties: among the partitions with that bottleneck return the one whose sizes list
    is lexicographically largest (earlier stages as long as possible; 5 equal layers on 2
    stages give [3, 2]).
    Dynamic programming: best(k, i) = the smallest bottleneck of layers i..n−1 on k stages
    = min over the first stage's end j of max(cost(i..j−1), best(k−1, j)).
    """
    raise NotImplementedError("hint: the best split of the remaining layers into the remaining stages does not depend on how the first layers were split: dynamic programming, then a walk that reconstructs one optimal split (ties go to the longest first stage).")
