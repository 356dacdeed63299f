"""The machine, the software, and the predicted time of one training iteration under a 3D plan.

A `Cluster` is ``gpus`` GPUs of one `labkit.planner.device.Device` on a
`labkit.planner.network.Network` of nodes, with a stated memory headroom. A `Software` names
what the training code overlaps (Megatron-LM 2021 did not overlap its tensor-parallel
all-reduces; from late 2021 it hides the backward ones behind the weight-gradient GEMMs; PyTorch
DDP hides the data-parallel all-reduce behind the last micro-batch's backward).

**One iteration** with m = B/(dp·b) micro-batches of b sequences (`predict`; every part in s):

1. Each piece's time for one micro-batch on one GPU (`labkit.planner.layer`): a transformer layer
   (GEMMs from their shapes, memory-bound kernels from their bytes, the exposed tensor-parallel
   all-reduces), the embedding (first stage) and the head (logits and loss, last stage).
2. The layers split over the pp stages (`labkit.planner.pipeline`: l/pp each when pp divides l,
   else by cost with Lab 11's partition DP); a stage's time t_i = its pieces plus its two
   point-to-point sends per micro-batch and chunk (activation forward, gradient backward; with
   Megatron's scatter/gather each tp rank sends 1/tp of the tensor over its own network card and
   the receivers all-gather it over NVLink).
3. The pipeline: 1F1B Σt_i + (m−1)·max t_i, or interleaved (`pipeline_time`); what exceeds m times
   the slowest stage is the bubble.
4. The data-parallel gradient reduction of the fullest stage (`labkit.planner.network`; ZeRO-1
   reduce-scatters and all-gathers instead — the same time in a ring; ZeRO-2 reduce-scatters every
   micro-batch; ZeRO-3 also all-gathers the parameters before every forward and backward), all of
   it exposed where the software does not overlap it; where it does (PyTorch DDP), its 25 MiB
   buckets run during the last micro-batch's backward and Lab 06's bound gives the exposed part,
   max(T_bwd, T_comm − t_last) + t_last − T_bwd; the tied embedding's gradient all-reduce between
   the first and last stage (pp > 1).
5. The optimizer step (memory-bound, `labkit.planner.layer.optimizer_time`).

The parts (`Prediction.parts`): gemm, elementwise, tp (the slowest stage's, × m), pp (its sends,
× m), bubble, dp, optimizer — they add up to `Prediction.step_time`. Two constants are fitted,
both of the device (`labkit.planner.device`); everything else is a data sheet, a published
measurement, or a stated assumption (`labkit.planner.published`).

**Memory headroom.** A plan fits when its bytes per GPU (`labkit.planner.memory`) are at most
``usable_memory`` = memory · (1 − fragmentation) − reserved: ``reserved_bytes`` (default 2 GiB) for
the CUDA context and cuBLAS workspace (~0.5 GiB) and NCCL's buffers (4 MiB per channel and peer,
~0.3 GiB for each of the tp, dp, pp and embedding communicators), and ``fragmentation`` (default
5 %) that PyTorch's caching allocator cannot hand out. On an 80 GiB A100: 74 GiB usable.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from labkit.checks import check_int, check_real
from labkit.planner.device import A100_80GB, H100_80GB, Device, GiB
from labkit.planner.grid import Plan, problems, worst_span
from labkit.planner.layer import PassTime, PieceTime, embedding_time, head_time, layer_time, optimizer_time
from labkit.planner.memory import MemoryEstimate, memory_per_gpu, params_of_stage
from labkit.planner.model import Model, _check_model, flops_per_iteration
from labkit.planner.network import DGX_A100, DGX_H100, Network, _all_reduce, _p2p, _ring
from labkit.planner.pipeline import balanced_split, even_split, pipeline_time


@dataclass(frozen=True)
class Software:
    """What the training code does that the cost model must know (module docstring).

    tp_overlap       backward tp all-reduces hidden behind the dW GEMMs (Megatron-LM >= late 2021)
    dp_overlap       the dp gradient reduction overlaps the last micro-batch's backward (PyTorch
                     DDP; Megatron's --overlap-grad-reduce); else it runs after the pipeline drains
    scatter_gather   pp sends split over the tp ranks and all-gathered (Megatron-LM 2021)
    grad_bytes       bytes per gradient element in the dp reduction (2: 16-bit; 4: fp32 buffers)
    optimizer_bytes  bytes moved per parameter by the optimizer step
    bucket_bytes     gradient bucket of the overlapped reduction (PyTorch DDP: 25 MiB)
    element_bytes    bytes per activation and weight element (2: 16-bit mixed precision)
    """

    name: str = "Megatron-LM 2021"
    tp_overlap: bool = False
    dp_overlap: bool = False
    scatter_gather: bool = True
    grad_bytes: float = 2.0
    optimizer_bytes: float = 40.0
    bucket_bytes: int = 25 * 2 ** 20
    element_bytes: int = 2

    def __post_init__(self):
        check_real("Software", "grad_bytes", self.grad_bytes, positive=True)
        check_real("Software", "optimizer_bytes", self.optimizer_bytes, positive=True)
        check_int("Software", "bucket_bytes", self.bucket_bytes, minimum=1)
        check_int("Software", "element_bytes", self.element_bytes, minimum=1)


# Narayanan et al. 2021 (Megatron-LM at SC21, examples/sc21 scripts): no tp overlap; "DDP=local" for
# pp > 1 runs (gradients all-reduced after the pipeline drains), "DDP=torch" for pp = 1 (PyTorch DDP
# overlaps it with the backward).
MEGATRON_2021 = Software()
MEGATRON_2021_TORCH_DDP = Software("Megatron-LM 2021, PyTorch DDP", dp_overlap=True)
# Korthikanti et al. 2022: the backward tp all-reduce overlaps the weight-gradient GEMM (their Table 4
# explains full recomputation's 39 % rather than 50 % overhead by it).
MEGATRON_2022 = Software("Megatron-LM 2022", tp_overlap=True)
# BLOOM-176B's Megatron-DeepSpeed: DeepSpeed's pipeline engine reduces gradients after the pipeline
# drains, its bf16 optimizer keeps fp32 gradient buffers (4-byte reduction), whole-tensor p2p sends.
MEGATRON_DEEPSPEED_BF16 = Software("Megatron-DeepSpeed (bf16)", scatter_gather=False, grad_bytes=4.0)


@dataclass(frozen=True)
class Cluster:
    """``gpus`` GPUs of ``device`` on ``network``; memory headroom ``reserved_bytes`` (bytes) and
    ``fragmentation`` (a share of memory), module docstring."""

    gpus: int
    device: Device = A100_80GB
    network: Network = DGX_A100
    name: str = ""
    reserved_bytes: float = 2 * GiB
    fragmentation: float = 0.05

    def __post_init__(self):
        fn = "Cluster"
        if not isinstance(self.device, Device):
            raise TypeError(f"{fn}: device must be a labkit.planner.Device, got {type(self.device).__name__}")
        if not isinstance(self.network, Network):
            raise TypeError(f"{fn}: network must be a labkit.planner.Network, got {type(self.network).__name__}")
        g = check_int(fn, "gpus", self.gpus, minimum=1)
        n = self.network.gpus_per_node
        if g > n and g % n:
            raise ValueError(f"{fn}: gpus ({g}) must be a multiple of gpus_per_node ({n})")
        if check_real(fn, "reserved_bytes", self.reserved_bytes) < 0:
            raise ValueError(f"{fn}: reserved_bytes must be >= 0, got {self.reserved_bytes}")
        f = check_real(fn, "fragmentation", self.fragmentation)
        if not 0 <= f < 1:
            raise ValueError(f"{fn}: fragmentation must be in [0, 1), got {f}")
        if self.usable_memory <= 0:
            raise ValueError(f"{fn}: no memory left after the headroom ({self.reserved_bytes / GiB:.1f} GiB "
                             f"reserved, {f:.0%} fragmentation of {self.memory_bytes / GiB:.1f} GiB)")

    @property
    def gpus_per_node(self) -> int:
        return self.network.gpus_per_node

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    @property
    def peak_flops(self) -> float:
        return self.device.peak_flops

    @property
    def memory_bytes(self) -> float:
        return self.device.memory_bytes

    @property
    def usable_memory(self) -> float:
        """Bytes a plan may use per GPU: memory · (1 − fragmentation) − reserved_bytes."""
        return self.device.memory_bytes * (1 - self.fragmentation) - self.reserved_bytes

    def with_gpus(self, gpus: int) -> "Cluster":
        """The same machine with ``gpus`` GPUs."""
        return dataclasses.replace(self, gpus=gpus)

    def with_device(self, device: Device) -> "Cluster":
        return dataclasses.replace(self, device=device)


# NVIDIA Selene, the machine of Narayanan et al. 2021 and Korthikanti et al. 2022: DGX A100 nodes.
A100_80GB_SELENE = Cluster(gpus=3072, device=A100_80GB, network=DGX_A100, name="A100-80GB (Selene)")
# A DGX H100 cluster, not validated against any run (the A100's fitted efficiencies carried over).
H100_80GB_DGX = Cluster(gpus=1024, device=H100_80GB, network=DGX_H100, name="H100-80GB (DGX H100)")


def selene(gpus: int) -> Cluster:
    """`A100_80GB_SELENE` with ``gpus`` GPUs (a multiple of 8, or at most 8)."""
    return A100_80GB_SELENE.with_gpus(gpus)


@dataclass(frozen=True)
class Prediction:
    """Predicted iteration of ``plan`` (its ``stage_layers`` filled in): seconds per part (module
    docstring), ``stage_times`` (seconds per micro-batch of each pipeline stage, chunk order when
    interleaved), ``flops`` executed per iteration (recomputation included: Narayanan et al.'s
    convention for "achieved teraFLOP/s"), ``model_flops`` (without recomputation: MFU's),
    ``memory`` of the fullest GPU, which ``fits`` when its total <= memory_limit (usable bytes)."""

    plan: Plan
    global_batch: int
    micro_batches: int
    gemm: float
    elementwise: float
    tp_comm: float
    pp_comm: float
    bubble: float
    dp_comm: float
    optimizer: float
    stage_times: tuple
    flops: float
    model_flops: float
    gpus: int
    peak_flops: float
    memory: MemoryEstimate
    memory_limit: float
    software: str = MEGATRON_2021.name

    @property
    def compute(self) -> float:
        """GEMM and memory-bound kernels of the slowest stage, × m (seconds)."""
        return self.gemm + self.elementwise

    @property
    def parts(self) -> dict[str, float]:
        """Seconds per part; they add up to `step_time`."""
        return {"gemm": self.gemm, "elementwise": self.elementwise, "tp": self.tp_comm, "pp": self.pp_comm,
                "bubble": self.bubble, "dp": self.dp_comm, "optimizer": self.optimizer}

    @property
    def step_time(self) -> float:
        """Seconds per iteration: the sum of `parts`."""
        return (self.gemm + self.elementwise + self.tp_comm + self.pp_comm + self.bubble + self.dp_comm
                + self.optimizer)

    @property
    def tflops_per_gpu(self) -> float:
        """Executed FLOPs (recomputation included) per second per GPU, in TFLOP/s."""
        return self.flops / self.step_time / self.gpus / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: FLOPs without recomputation / (time · gpus · peak_flops)."""
        return self.model_flops / (self.step_time * self.gpus * self.peak_flops)

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.memory_limit

    def __str__(self) -> str:
        return (f"{self.plan}: {self.step_time:.3g} s/it, {self.tflops_per_gpu:.0f} TFLOP/s, "
                f"MFU {self.mfu:.0%}, {self.memory.total / GiB:.1f} GiB")


# ----------------------------------------------------------------------------------- the pieces

@dataclass(frozen=True)
class Pieces:
    """One micro-batch through each kind of piece on one GPU of ``plan`` (`piece_times`)."""

    layer: PieceTime
    embedding: PieceTime
    head: PieceTime
    p2p: float                   # seconds of one pp send (activation or gradient) incl. the all-gather


def piece_times(model: Model, cluster: Cluster, plan: Plan, software: Software = MEGATRON_2021) -> Pieces:
    """The `Pieces` of ``plan`` on ``cluster`` (module docstring, steps 1-2)."""
    net, dev = cluster.network, cluster.device
    t, b = plan.tp, plan.micro_batch
    g = net.gpus_per_node
    T, h, w = b * model.seq_len, model.hidden, software.element_bytes
    act = float(w * T * h)                              # bytes of one micro-batch's hidden states
    tp_nodes = worst_span("tp", plan.dp, t, plan.pp, g) if t > 1 else 1
    tp_ar = _all_reduce(net, t, act, tp_nodes) if t > 1 else 0.0
    layer = layer_time(model, dev, b, t, plan.recompute, plan.sequence_parallel, tp_ar, software.tp_overlap, w)
    embedding = embedding_time(model, dev, b, tp_ar, w)
    head = head_time(model, dev, b, t, plan.sequence_parallel, w)
    p2p = 0.0
    if plan.pp > 1:
        same = worst_span("pp", plan.dp, t, plan.pp, g) == 1
        if software.scatter_gather and t > 1:
            p2p = _p2p(net, act / t, same) + _ring(net, t, act, tp_nodes) / 2   # send 1/t, all-gather
        else:
            p2p = _p2p(net, act, same)
    return Pieces(layer, embedding, head, p2p)


def stage_split(model: Model, plan: Plan, cluster: Cluster | None = None, software: Software = MEGATRON_2021,
                pieces: Pieces | None = None) -> tuple[int, ...]:
    """Layers per pipeline stage: ``plan.stage_layers`` when given; l/pp each when pp divides l;
    else balanced by each piece's time (`labkit.planner.pipeline.balanced_split`) on ``cluster``
    (default `A100_80GB_SELENE`)."""
    if plan.stage_layers is not None:
        return plan.stage_layers
    if model.layers % plan.pp == 0:
        return even_split(model.layers, plan.pp)
    if pieces is None:
        c = A100_80GB_SELENE.with_gpus(plan.gpus) if cluster is None else cluster
        pieces = piece_times(model, c, plan, software)
    return balanced_split(model.layers, plan.pp, pieces.layer.seconds, pieces.embedding.seconds,
                          pieces.head.seconds)


def _stage_parts(plan: Plan, split, pieces: Pieces) -> list[PassTime]:
    """Per pipeline stage (chunk order when interleaved: chunk c of rank r is stage c·p + r): its
    `PassTime` for one micro-batch — its layers, the embedding on the first, the head on the last."""
    p, v = plan.pp, plan.virtual_stages
    layer = pieces.layer.total
    if v == 1:
        layers = list(split)
    else:
        layers = [split[0] // v] * (p * v)
    out = []
    for i, n in enumerate(layers):
        part = layer.scaled(n)
        if i == 0:
            part = part + pieces.embedding.total
        if i == len(layers) - 1:
            part = part + pieces.head.total
        out.append(part)
    return out


# ----------------------------------------------------------------------------------- predict

def predict(model: Model, cluster: Cluster, plan: Plan, global_batch: int, *,
            software: Software = MEGATRON_2021) -> Prediction:
    """Predicted time, FLOP rates and memory of one iteration of ``plan`` (module docstring). The
    plan must use all of ``cluster.gpus`` and satisfy `labkit.planner.grid.problems`
    (tensor-parallel groups may cross nodes here: they are just slower)."""
    fn = "predict"
    _check_model(fn, model)
    if not isinstance(cluster, Cluster):
        raise TypeError(f"{fn}: cluster must be a labkit.planner.Cluster, got {type(cluster).__name__}")
    if not isinstance(plan, Plan):
        raise TypeError(f"{fn}: plan must be a labkit.planner.Plan, got {type(plan).__name__}")
    if not isinstance(software, Software):
        raise TypeError(f"{fn}: software must be a labkit.planner.Software, got {type(software).__name__}")
    B = check_int(fn, "global_batch", global_batch, minimum=1)
    wrong = problems(model, plan, B, cluster.gpus)
    if wrong:
        raise ValueError(f"{fn}: {wrong[0]}")
    return _predict(model, cluster, plan, B, software)


def _predict(model: Model, cluster: Cluster, plan: Plan, B: int, software: Software = MEGATRON_2021,
             memory: MemoryEstimate | None = None, pieces: Pieces | None = None) -> Prediction:
    """`predict` without the argument checks (the search calls it for thousands of plans)."""
    t, p, d, b, v = plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.virtual_stages
    net = cluster.network
    g = net.gpus_per_node
    m = B // (d * b)
    if pieces is None:
        pieces = piece_times(model, cluster, plan, software)
    split = stage_split(model, plan, cluster, software, pieces)
    if plan.stage_layers is None and p > 1:
        plan = dataclasses.replace(plan, stage_layers=split)
    stages = _stage_parts(plan, split, pieces)
    send = 2 * pieces.p2p if p > 1 else 0.0             # activation out, gradient back
    times = tuple(s.total + send for s in stages)
    pipe = pipeline_time(times, m, v)

    # the slowest rank's parts, × m; the rest of the pipeline time is bubble
    if v == 1:
        k = max(range(p), key=lambda i: times[i])
        rank = stages[k]
        chunks = 1
    else:
        per_rank = [sum(times[c * p + r] for c in range(v)) for r in range(p)]
        k = max(range(p), key=lambda r: per_rank[r])
        rank = PassTime()
        for c in range(v):
            rank = rank + stages[c * p + k]
        chunks = v
    gemm, elementwise, tp_comm = m * rank.gemm, m * rank.elementwise, m * rank.tp
    pp_comm = m * chunks * send
    bubble = max(0.0, pipe - (gemm + elementwise + tp_comm + pp_comm))

    # data parallelism: the fullest stage's gradients (first and last hold the embedding copies)
    first, last = split[0], split[-1]
    params = max(params_of_stage(model, t, first, True, p == 1), params_of_stage(model, t, last, p == 1, True))
    dp_comm = 0.0
    if d > 1:
        nodes = worst_span("dp", d, t, p, g)
        grads = software.grad_bytes * params
        if plan.zero_stage <= 1:
            dp_comm = _all_reduce(net, d, grads, nodes)
        else:
            half = _ring(net, d, grads, nodes) / 2
            dp_comm = (m + 1) * half if plan.zero_stage == 2 else 3 * m * half
        if software.dp_overlap and plan.zero_stage <= 1:
            # Lab 06's bound: buckets reduced one after another while the last micro-batch's backward
            # runs; only the last bucket, and what does not fit in the backward, is exposed
            t_bwd = pieces.layer.backward.total * max(split) + (pieces.head.backward.total if p == 1 else 0)
            buckets = -(-int(grads) // software.bucket_bytes)
            per = _all_reduce(net, d, grads / buckets, nodes)
            dp_comm = max(t_bwd, (buckets - 1) * per) + per - t_bwd
    if p > 1:                                           # tied word embedding: first <-> last stage
        word = -(-model.vocab // t) * model.hidden * software.grad_bytes
        dp_comm += _ring(net, 2, word, 1 if worst_span("pp", d, t, p, g) == 1 else 2)
    optimizer = optimizer_time(cluster.device, params / (d if plan.zero_stage >= 1 else 1), software.optimizer_bytes)

    if memory is None:
        memory = memory_per_gpu(model, plan, B)
    return Prediction(plan, B, m, gemm, elementwise, tp_comm, pp_comm, bubble, dp_comm, optimizer, times,
                      flops_per_iteration(model, B, plan.recompute), flops_per_iteration(model, B, False),
                      cluster.gpus, cluster.peak_flops, memory, cluster.usable_memory, software.name)


__all__ = ["Software", "MEGATRON_2021", "MEGATRON_2021_TORCH_DDP", "MEGATRON_2022", "MEGATRON_DEEPSPEED_BF16",
           "Cluster", "A100_80GB_SELENE", "H100_80GB_DGX", "selene", "Prediction", "Pieces", "piece_times",
           "stage_split", "predict"]
