"""The machine, and the predicted time of one training iteration under a 3D-parallel plan.

A `Cluster` is nodes of ``gpus_per_node`` GPUs. Bandwidths are bytes/s per GPU per direction:
``intra_node_bandwidth`` over NVLink/NVSwitch, ``inter_node_bandwidth`` through the GPU's own
network card (on a DGX A100, 8 × 200 Gb/s HDR InfiniBand per node = 25 GB/s per GPU — 200 Gb/s
is 25 GB/s, not 200 GB/s). ``latency`` (s) is the α of one message between nodes,
``intra_node_latency`` inside a node (default: the same).

**Collectives** use the ring model of `labkit.collectives.alpha_beta` (all-reduce on n ranks of
an S-byte buffer: 2(n−1)·α + 2(n−1)/n·S·β). A group on one node runs at NVLink speed; a group
spread over several nodes is modelled at ``inter_node_bandwidth`` — the ring crosses the network
and each GPU drives it through its own card. (NCCL can do better for a group with several members
per node by running one ring per card; we keep the simpler bound and say so.)

**One iteration** with l layers, global batch B, micro-batch b, m = B/(dp·b) micro-batches per
pipeline, v model chunks per pipeline rank (`predict`, each part in seconds):

    compute   m × FLOPs of one micro-batch on the busiest GPU / (peak_flops · flops_efficiency);
              the busiest GPU is on the last stage, which also runs the logit layer:
              ((l/pp)·(3·F_layer + F_recompute) + 3·F_logit) / tp   (`labkit.planner.model`)
    tp        m · (l/pp) · k all-reduces of b·s·h elements of w bytes (``bytes_per_element``: 2 for
              16-bit activations) over the tp group, where k = 4 (Megatron's f and g operators:
              2 in forward, 2 in backward) + 2 with full recomputation (the forward runs again);
              not overlapped with compute
    pp        m · 2v point-to-point messages (activation forward, gradient backward, at each of
              the v chunk boundaries) of b·s·h·w/tp bytes each — Megatron's scatter/gather sends
              1/tp of the tensor from each tp rank
    bubble    (pp − 1)/(v·m) × (compute + tp): the pipeline's fill and drain (1F1B: (p−1)/m of the
              ideal time; interleaved: (p−1)/(v·m); `labkit.pipeline.simulate` gives the same)
    dp        gradient synchronisation over the dp group, after the pipeline drains (not overlapped,
              as in Megatron-LM 2021): a ring all-reduce of the busiest stage's gradients,
              params/(tp·pp) elements at ``grad_bytes`` (2) each. ZeRO-1 does a reduce-scatter plus an
              all-gather instead: the same time in this model. ZeRO-2 reduce-scatters every micro-batch
              (m reduce-scatters + 1 all-gather); ZeRO-3 gathers the parameters for every forward and
              backward (2m all-gathers + m reduce-scatters) — both upper bounds (no prefetch/overlap).

``flops_efficiency`` is the fraction of peak the matrix multiplications reach; it is the model's
only fitted constant (`labkit.planner.published.fit_efficiency`, on Narayanan et al.'s Table 1).
Not modelled: LayerNorm/softmax/GELU time (folded into the efficiency), the embedding and
cross-entropy all-reduces, the optimizer step, data loading.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from labkit.checks import check_int, check_real
from labkit.collectives.alpha_beta import predict_time
from labkit.planner.grid import Plan, problems, worst_span
from labkit.planner.memory import GiB, MemoryEstimate, memory_per_gpu, stage_params
from labkit.planner.model import (Model, _check_model, flops_per_iteration, layer_forward_flops,
                                  logit_forward_flops, recompute_forward_flops)


@dataclass(frozen=True)
class Cluster:
    """``gpus`` GPUs in nodes of ``gpus_per_node``; per GPU: ``peak_flops`` (FLOP/s, dense 16-bit
    matmul), ``memory_bytes`` (bytes), bandwidths in bytes/s per direction (module docstring),
    latencies in seconds; ``flops_efficiency`` = fraction of peak that matmuls achieve (0 < e ≤ 1)."""

    gpus: int
    gpus_per_node: int
    peak_flops: float
    memory_bytes: float
    intra_node_bandwidth: float
    inter_node_bandwidth: float
    latency: float = 5e-6
    intra_node_latency: float | None = None
    flops_efficiency: float = 0.5
    name: str = ""

    def __post_init__(self):
        fn = "Cluster"
        g = check_int(fn, "gpus", self.gpus, minimum=1)
        n = check_int(fn, "gpus_per_node", self.gpus_per_node, minimum=1)
        if g > n and g % n:
            raise ValueError(f"{fn}: gpus ({g}) must be a multiple of gpus_per_node ({n})")
        for name in ("peak_flops", "memory_bytes", "intra_node_bandwidth", "inter_node_bandwidth"):
            check_real(fn, name, getattr(self, name), positive=True)
        if check_real(fn, "latency", self.latency) < 0:
            raise ValueError(f"{fn}: latency must be >= 0 s, got {self.latency}")
        if self.intra_node_latency is not None and check_real(fn, "intra_node_latency", self.intra_node_latency) < 0:
            raise ValueError(f"{fn}: intra_node_latency must be >= 0 s, got {self.intra_node_latency}")
        e = check_real(fn, "flops_efficiency", self.flops_efficiency, positive=True)
        if e > 1:
            raise ValueError(f"{fn}: flops_efficiency must be in (0, 1], got {e}")

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.gpus_per_node)

    def with_gpus(self, gpus: int) -> "Cluster":
        """The same machine with ``gpus`` GPUs."""
        return dataclasses.replace(self, gpus=gpus)

    def link(self, nodes_spanned: int) -> tuple[float, float]:
        """(α in s, bandwidth in bytes/s per GPU) of a group spread over ``nodes_spanned`` nodes."""
        if nodes_spanned <= 1:
            alpha = self.latency if self.intra_node_latency is None else self.intra_node_latency
            return alpha, self.intra_node_bandwidth
        return self.latency, self.inter_node_bandwidth


# NVIDIA Selene, the machine of Narayanan et al. 2021: DGX A100 nodes, 8 A100-SXM4-80GB each
# (312 TFLOP/s dense bf16/fp16; NVLink 3 through NVSwitch, 600 GB/s both ways = 300 GB/s per
# direction per GPU); 8 HDR InfiniBand cards of 200 Gb/s per node = 25 GB/s per GPU per direction.
# flops_efficiency is the one constant fitted to the paper's Table 1 (the test
# tests/test_planner_published.py checks that the fit still gives this value).
A100_80GB_SELENE = Cluster(gpus=3072, gpus_per_node=8, peak_flops=312e12, memory_bytes=80 * GiB,
                           intra_node_bandwidth=300e9, inter_node_bandwidth=25e9, latency=5e-6,
                           intra_node_latency=2e-6, flops_efficiency=0.54, name="A100-80GB (Selene)")

# A DGX H100 node for comparison (efficiency not fitted: the A100 value is carried over):
# 989 TFLOP/s dense bf16, NVLink 4 = 450 GB/s per direction, 8 × 400 Gb/s NDR = 50 GB/s per GPU.
H100_80GB_DGX = dataclasses.replace(A100_80GB_SELENE, gpus=1024, peak_flops=989e12, intra_node_bandwidth=450e9,
                                    inter_node_bandwidth=50e9, name="H100-80GB (DGX H100)")


def selene(gpus: int) -> Cluster:
    """`A100_80GB_SELENE` with ``gpus`` GPUs (a multiple of 8, or at most 8)."""
    return A100_80GB_SELENE.with_gpus(gpus)


@dataclass(frozen=True)
class Prediction:
    """Predicted iteration of ``plan`` (times in seconds; module docstring for each part).

    flops        FLOPs executed per iteration, recomputation included (Narayanan et al.'s convention
                 for "achieved teraFLOP/s": with full recomputation this is their eq. 3)
    model_flops  FLOPs without recomputation (what MFU counts)
    memory       `MemoryEstimate` of the most loaded GPU; ``fits`` if its total ≤ memory_limit bytes
    """

    plan: Plan
    global_batch: int
    micro_batches: int
    compute: float
    bubble: float
    tp_comm: float
    pp_comm: float
    dp_comm: float
    flops: float
    model_flops: float
    gpus: int
    peak_flops: float
    memory: MemoryEstimate
    memory_limit: float

    @property
    def parts(self) -> dict[str, float]:
        """Seconds per part: compute, bubble, tp, pp, dp (they add up to `step_time`)."""
        return {"compute": self.compute, "bubble": self.bubble, "tp": self.tp_comm, "pp": self.pp_comm,
                "dp": self.dp_comm}

    @property
    def step_time(self) -> float:
        """Seconds per iteration: the sum of `parts`."""
        return self.compute + self.bubble + self.tp_comm + self.pp_comm + self.dp_comm

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
        return (f"{self.plan}: {self.step_time:.3g} s/iteration, {self.tflops_per_gpu:.0f} TFLOP/s, "
                f"MFU {self.mfu:.1%}, {self.memory.total / GiB:.1f} GiB")


def all_reduce_time(cluster: Cluster, n: int, nbytes: float, nodes_spanned: int) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` ranks spread over ``nodes_spanned`` nodes (s)."""
    if n == 1:
        return 0.0
    alpha, bw = cluster.link(nodes_spanned)
    return predict_time("ring_all_reduce", n, nbytes, alpha, 1 / bw)


def _ring_half_time(cluster: Cluster, n: int, nbytes: float, nodes_spanned: int) -> float:
    """One ring reduce-scatter (or all-gather) of an ``nbytes`` buffer: half an all-reduce (s)."""
    if n == 1:
        return 0.0
    alpha, bw = cluster.link(nodes_spanned)
    return predict_time("ring_reduce_scatter", n, nbytes, alpha, 1 / bw)


def predict(model: Model, cluster: Cluster, plan: Plan, global_batch: int, *, sequence_parallel: bool = False,
            grad_bytes: float = 2, bytes_per_element: float = 2) -> Prediction:
    """Predicted time, FLOP rates and memory of one iteration of ``plan`` (module docstring).
    The plan must use all of ``cluster.gpus`` and satisfy `labkit.planner.grid.problems`
    (tensor-parallel groups may cross nodes here: they are just slow). ``grad_bytes``: bytes per
    gradient element in the dp all-reduce; ``bytes_per_element``: bytes per activation element in
    the tp all-reduces and pp messages (2 for 16-bit training; 4 or 8 for a float32/float64 run)."""
    fn = "predict"
    _check_model(fn, model)
    if not isinstance(cluster, Cluster):
        raise TypeError(f"{fn}: cluster must be a labkit.planner.Cluster, got {type(cluster).__name__}")
    if not isinstance(plan, Plan):
        raise TypeError(f"{fn}: plan must be a labkit.planner.Plan, got {type(plan).__name__}")
    B = check_int(fn, "global_batch", global_batch, minimum=1)
    check_real(fn, "grad_bytes", grad_bytes, positive=True)
    check_real(fn, "bytes_per_element", bytes_per_element, positive=True)
    wrong = problems(model, plan, B, cluster.gpus)
    if wrong:
        raise ValueError(f"{fn}: {wrong[0]}")
    return _predict(model, cluster, plan, B, sequence_parallel, grad_bytes,
                    bytes_per_element=bytes_per_element)


def _predict(model: Model, cluster: Cluster, plan: Plan, B: int, sequence_parallel: bool = False,
             grad_bytes: float = 2, memory: MemoryEstimate | None = None,
             bytes_per_element: float = 2) -> Prediction:
    """`predict` without the argument checks (the search calls it for thousands of plans)."""
    t, p, d, b, v = plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.virtual_stages
    g = cluster.gpus_per_node
    m = B // (d * b)
    s, h = model.seq_len, model.hidden
    w = bytes_per_element
    rate = cluster.peak_flops * cluster.flops_efficiency

    layer = 3 * layer_forward_flops(model, b) + recompute_forward_flops(model, b, plan.recompute)
    busiest = (model.layers // p * layer + 3 * logit_forward_flops(model, b)) / t
    compute = m * busiest / rate

    tp_nodes = worst_span("tp", d, t, p, g)
    per_layer = 6 if plan.recompute == "full" else 4
    tp_comm = m * (model.layers // p) * per_layer * all_reduce_time(cluster, t, w * b * s * h, tp_nodes)

    pp_comm = 0.0
    if p > 1:
        alpha, bw = cluster.link(worst_span("pp", d, t, p, g))
        pp_comm = m * 2 * v * (alpha + w * b * s * h / t / bw)

    bubble = (p - 1) / (v * m) * (compute + tp_comm)

    stage = "only" if p == 1 else "last"
    grads = grad_bytes * max(stage_params(model, t, p, stage), stage_params(model, t, p, "first"))
    dp_nodes = worst_span("dp", d, t, p, g)
    if plan.zero_stage <= 1:
        dp_comm = all_reduce_time(cluster, d, grads, dp_nodes)
    else:
        half = _ring_half_time(cluster, d, grads, dp_nodes)
        dp_comm = (m + 1) * half if plan.zero_stage == 2 else 3 * m * half

    if memory is None:
        memory = memory_per_gpu(model, plan, B, sequence_parallel and t > 1)
    return Prediction(plan, B, m, compute, bubble, tp_comm, pp_comm, dp_comm,
                      flops_per_iteration(model, B, plan.recompute), flops_per_iteration(model, B, False),
                      cluster.gpus, cluster.peak_flops, memory, cluster.memory_bytes)
