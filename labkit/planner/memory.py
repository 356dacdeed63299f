"""Bytes one GPU holds under a 3D-parallel plan: model states plus activations.

**Model states.** The parameters are split over tp·pp: each pipeline stage holds l/pp layers,
and tensor parallelism splits each layer's weight matrices (and the column-parallel biases) tp
ways, as Megatron does; the row-parallel biases and the LayerNorms are replicated. The first stage
also holds its 1/tp of the word embedding (vocab-parallel) and the position embedding; the last
stage holds the logit layer's copy of the word embedding (for pp > 1 it is a separate copy kept
in sync, for pp = 1 the same tensor) and the final LayerNorm. Bytes come from
`labkit.zero.formulas.model_state_bytes` with mixed-precision Adam (2 + 2 + 12 bytes per
parameter) and ZeRO over the data-parallel group.

(Dividing the parameters by tp alone — "M_model/tp + M_act/pp ≤ M_device" — is a common mistake:
pipeline stages hold different layers, so parameters shrink by tp·pp.)

**Activations** (16-bit, `labkit.memory.estimate.activation_bytes_per_layer`, Korthikanti et al.
2022). Under 1F1B the first stage starts pp micro-batches before the first backward, each
holding its l/pp layers, so it keeps about l layers' activations *whatever pp is* — pipelining
does not shrink activation memory by 1/pp. With m < pp micro-batches it keeps m. Rank i keeps
min(m, pp − i) micro-batches, so the last stage holds one. The interleaved
schedule (v chunks of l/(pp·v) layers per rank) keeps (v−1)·pp + 2(pp−1) + 1 chunks on the first
rank, i.e. l·(1 + (pp−1)/(pp·v)) layers (Korthikanti et al. 2022, §4.2.3); `labkit.pipeline.simulate`
counts the same numbers, rank by rank (tests/test_planner.py).

Smaller terms, as Korthikanti et al. count them: the first stage's embedding-dropout mask s·b·h
bytes per micro-batch in flight; the last stage's final LayerNorm input and logit-layer input
(2 + 2)·s·b·h bytes and the fp32 logits 4·s·b·V/tp bytes; and with recomputation, one layer's
rematerialised activations during its backward (the "none" bytes minus the kept bytes).
Not modelled here: temporary buffers, communication buffers, allocator fragmentation, the CUDA
context — the `labkit.planner.cost.Cluster`'s stated headroom (2 GiB reserved, 5 % fragmentation)
stands for them when a plan is checked against a GPU's memory.

**Uneven stages** (pp does not divide l, or ``Plan.stage_layers`` is given): stage i holds its own
L_i layers and min(m, pp − i) micro-batches of them under 1F1B, so `memory_per_gpu` looks at the
first and the last stage and at the earliest stage of each layer count — the fullest is one of them.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.checks import check_int, check_real
from labkit.memory.estimate import activation_bytes_per_layer
from labkit.planner.grid import Plan, problems
from labkit.planner.model import Model, _check_model
from labkit.zero.formulas import model_state_bytes

GiB = 2 ** 30


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one GPU of pipeline ``stage`` ("first", "last" or "only" when pp = 1) holds.

    params           parameters (elements) this GPU owns before ZeRO sharding
    model_states     bytes of parameters + gradients + optimizer states (after ZeRO)
    activations      bytes of the transformer layers' activations in flight
    layers_in_flight how many layers' activations (of one micro-batch) that is
    other            embedding / logit-layer activations and the recompute workspace, bytes
    total            model_states + activations + other, bytes
    """

    stage: str
    params: int
    model_states: float
    activations: float
    layers_in_flight: float
    other: float

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.other


def params_of_stage(model: Model, tp: int, layers: int, first: bool, last: bool) -> int:
    """Parameters (elements) one tensor-parallel rank of a pipeline stage with ``layers`` layers holds
    (module docstring); ``first``/``last``: whether it is the first / last stage (both when pp = 1).
    Needs tp | hidden and tp | ffn (so each weight matrix splits evenly)."""
    h, f = model.hidden, model.ffn
    per_layer = (4 * h * h + 2 * h * f) // tp + (3 * h + f) // tp + 2 * h + 4 * h
    n = layers * per_layer
    word = -(-model.vocab // tp) * h                         # vocab-parallel word embedding
    if first:
        n += word + model.seq_len * h                        # + position embedding
    if last and not first:
        n += word                                            # the logit layer's copy
    if last:
        n += 2 * h                                           # final LayerNorm
    return n


def stage_params(model: Model, tp: int, pp: int, stage: str) -> int:
    """`params_of_stage` of the ``stage`` ("first", "last" or "only") of an even split, l/pp layers.
    Needs pp | layers."""
    return params_of_stage(model, tp, model.layers // pp, stage in ("first", "only"), stage in ("last", "only"))


def micro_batches_in_flight(pp: int, micro_batches: int, virtual_stages: int = 1, rank: int = 0) -> int:
    """Most (chunk, micro-batch) activation sets pipeline rank ``rank`` holds at once: min(m, pp − rank)
    under 1F1B (v = 1); min(m·v, (v−1)·pp + 2(pp−1−rank) + 1) under interleaved 1F1B with v chunks
    per rank (its warm-up forwards, plus the one whose backward comes next)."""
    fn = "micro_batches_in_flight"
    p, m, v = (check_int(fn, n, x, minimum=1) for n, x in (("pp", pp), ("micro_batches", micro_batches),
                                                          ("virtual_stages", virtual_stages)))
    rank = check_int(fn, "rank", rank, minimum=0, maximum=p - 1)
    if v == 1:
        return min(m, p - rank)
    return min(m * v, (v - 1) * p + 2 * (p - 1 - rank) + 1)


def layers_in_flight(layers: int, pp: int, micro_batches: int, virtual_stages: int = 1, rank: int = 0) -> float:
    """Layers' activations (each for one micro-batch) pipeline rank ``rank`` holds at its peak: chunks
    in flight × l/(pp·v). On the first rank with m ≥ pp: l under 1F1B — whatever pp is — and
    l·(1 + (pp−1)/(pp·v)) interleaved."""
    return micro_batches_in_flight(pp, micro_batches, virtual_stages, rank) * layers / (pp * virtual_stages)


def _stage_name(i: int, pp: int) -> str:
    if pp == 1:
        return "only"
    return "first" if i == 0 else "last" if i == pp - 1 else f"stage {i}"


def stage_memory_at(model: Model, plan: Plan, global_batch: int, index: int, layers: int,
                    sequence_parallel: bool = False) -> MemoryEstimate:
    """`MemoryEstimate` of one GPU of pipeline stage ``index`` holding ``layers`` layers."""
    s, b, h, a, V = model.seq_len, plan.micro_batch, model.hidden, model.heads, model.vocab
    t, p, v = plan.tp, plan.pp, plan.virtual_stages
    m = global_batch // (plan.dp * b)
    first, last = index == 0, index == p - 1
    params = params_of_stage(model, t, layers, first, last)
    states = model_state_bytes(params, plan.dp, plan.zero_stage)
    sequence_parallel = sequence_parallel and t > 1
    per_layer = activation_bytes_per_layer(s, b, h, a, t, sequence_parallel, plan.recompute)
    other = 0.0
    if plan.recompute != "none":     # one layer rematerialised during its own backward
        other += activation_bytes_per_layer(s, b, h, a, t, sequence_parallel, "none") - per_layer
    held = micro_batches_in_flight(p, m, v, index) * layers / v
    if first and not last or p == 1:
        other += micro_batches_in_flight(p, m, v) * s * b * h   # embedding dropout masks (1 byte)
    if last:
        other += 4 * s * b * h + 4 * s * b * -(-V // t)     # final LN + logit inputs, fp32 logits
    return MemoryEstimate(_stage_name(index, p), params, states, held * per_layer, held, other)


def stage_memory(model: Model, plan: Plan, global_batch: int, stage: str,
                 sequence_parallel: bool = False) -> MemoryEstimate:
    """`MemoryEstimate` of one GPU of the ``stage`` ("first", "last" or, for pp = 1, "only") of an
    even split (l/pp layers per stage)."""
    index = plan.pp - 1 if stage == "last" else 0
    return stage_memory_at(model, plan, global_batch, index, model.layers // plan.pp, sequence_parallel)


# BEGIN SOLUTION (labkit's estimate: it answers fits_in_memory (lab11_parallel3d))
def memory_per_gpu(model: Model, plan: Plan, global_batch: int, sequence_parallel: bool = False) -> MemoryEstimate:
    """The fullest pipeline stage's `MemoryEstimate`: the bytes the plan needs on its most loaded GPU.
    ``global_batch`` sets m = B/(dp·micro_batch). Sequence parallelism is on when
    ``plan.sequence_parallel`` (or ``sequence_parallel``) says so. Stages hold ``plan.stage_layers``,
    else l/pp layers each, else (pp does not divide l) the split `labkit.planner.cost.stage_split`
    balances on an A100 cluster."""
    fn = "memory_per_gpu"
    _check_model(fn, model)
    if not isinstance(plan, Plan):
        raise TypeError(f"{fn}: plan must be a labkit.planner.Plan, got {type(plan).__name__}")
    check_int(fn, "global_batch", global_batch, minimum=1)
    wrong = problems(model, plan, global_batch)
    if wrong:
        raise ValueError(f"{fn}: {wrong[0]}")
    return _memory_per_gpu(model, plan, global_batch, sequence_parallel or plan.sequence_parallel)
# END SOLUTION


def _memory_per_gpu(model: Model, plan: Plan, global_batch: int, sequence_parallel: bool,
                    split: tuple | None = None) -> MemoryEstimate:
    p = plan.pp
    if split is None:
        split = plan.stage_layers
    if split is None:
        if model.layers % p == 0:
            split = (model.layers // p,) * p
        else:
            from labkit.planner.cost import stage_split
            split = stage_split(model, plan)
    # a stage's bytes grow with its layers and with the micro-batches in flight, which fall with its
    # index: among stages with the same layer count the earliest holds the most — so the fullest is
    # the first, the last (logits, the head's copy of the embedding) or the earliest of some count
    idx = {0, p - 1}
    for n in set(split):
        idx.add(split.index(n))
    best = None
    for i in sorted(idx):
        est = stage_memory_at(model, plan, global_batch, i, split[i], sequence_parallel)
        if best is None or est.total > best.total:
            best = est
    return best


# BEGIN SOLUTION (lab11_parallel3d)
def first_stage_bytes(num_params: float, layers: int, activation_bytes_per_layer: float, dp: int, tp: int, pp: int,
                      micro_batches: int, zero_stage: int) -> float:
    """The back-of-envelope bytes of a first-stage GPU (Lab 11's exercise ``fits_in_memory``):
    mixed-precision model states of Ψ/(tp·pp) parameters with ZeRO ``zero_stage`` over dp, plus
    min(m, pp) micro-batches × l/pp layers × ``activation_bytes_per_layer`` (one micro-batch,
    already per tensor-parallel rank). `memory_per_gpu` adds what this leaves out: the embeddings'
    exact share, the logits, recompute workspace, dropout masks."""
    fn = "first_stage_bytes"
    psi = check_real(fn, "num_params", num_params, positive=True)
    layers = check_int(fn, "layers", layers, minimum=1)
    act = check_real(fn, "activation_bytes_per_layer", activation_bytes_per_layer)
    dp, tp, pp = (check_int(fn, n, v, minimum=1) for n, v in (("dp", dp), ("tp", tp), ("pp", pp)))
    m = check_int(fn, "micro_batches", micro_batches, minimum=1)
    if layers % pp:
        raise ValueError(f"{fn}: pp ({pp}) must divide layers ({layers})")
    if act < 0:
        raise ValueError(f"{fn}: activation_bytes_per_layer must be >= 0, got {act}")
    states = model_state_bytes(psi / (tp * pp), dp, zero_stage)
    return states + min(m, pp) * (layers // pp) * act
# END SOLUTION


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
    # BEGIN SOLUTION
    # HINT: add up what one GPU of the grid holds: its share of the model states (which of tp, pp
    # HINT: and ZeRO divide them?) and the activations its pipeline stage keeps in flight under
    # HINT: 1F1B.
    psi = num_params / (tp * pp)
    sharded = {0: 0, 1: 12, 2: 2 + 12, 3: 16}[zero_stage]
    states = (16 - sharded) * psi + sharded * psi / dp
    activations = min(micro_batches, pp) * (layers // pp) * activation_bytes_per_layer
    needed = states + activations
    return needed <= memory_bytes, float(needed)
    # END SOLUTION
