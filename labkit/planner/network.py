"""The network between GPUs as NCCL uses it: bus bandwidth inside a node and across nodes, ring and
tree all-reduce, reduce-scatter, all-gather and point-to-point sends.

**Bus bandwidth.** nccl-tests report a collective's *bus bandwidth*: for an all-reduce of S bytes on
n ranks that took T seconds, busBW = 2(n−1)/n · S / T — the rate at which each rank's busiest link
moved data. The model turns that around: T = 2(n−1)/n · S / busBW + latency.

* Inside one node (NVLink through NVSwitch) every GPU has ``nvlink_bandwidth`` bytes/s each way
  (A100: 12 NVLink3 links, 300 GB/s per direction); NCCL reaches ``nvlink_efficiency`` of it.
* Across nodes NCCL runs several rings (channels) at once, each leaving a node through a different
  network card: a ring over n ranks sends 2(n−1)/n · S bytes out of every node in all, spread over
  the cards its channels use. A DGX A100 has one 200 Gb/s (25 GB/s) HDR card per GPU, "rail
  aligned" (GPU i of every node on switch rail i); a group with k members on each node of g GPUs
  shares the node's ``nics_per_node`` cards with the g/k other groups of its kind that run at the
  same time, so it drives nics·k/g of them:

      busBW = min(NVLink busBW,  nics_per_node · k/g · nic_bandwidth · nic_efficiency)

  A tensor-parallel group of 16 on nodes of 8 (k = 8) drives all 8 cards: 8 × 24 = 192 GB/s, not the
  25 GB/s of one card. A data-parallel group with one member per node (k = 1) gets its own card.

**Latency.** Each ring step waits for its slowest link: ``inter_latency`` once the ring leaves a
node, else ``intra_latency``. A ring all-reduce has 2(n−1) steps. NCCL's tree all-reduce (a double
binary tree between nodes, a chain inside each) has 2·(⌈log₂ N⌉ · inter + (k − 1) · intra) latency
on N nodes and sends 2·S bytes out of each node (reduce up, broadcast down) against the ring's
2(n−1)/n · S; NCCL picks whichever is faster for the size (`all_reduce_time(..., "auto")`), so trees
win for small messages on many nodes and rings for large ones. Inside one node NCCL uses rings.

Reduce-scatter and all-gather are the two halves of the ring all-reduce (half its bytes and steps).
A point-to-point send of S bytes costs latency + S / bandwidth of the link it crosses: NVLink
inside a node, one card per GPU (its rail) across nodes.

Published figures this is checked against (tests/test_planner_network.py): on one node of 8
A100-SXM4-80GB, nccl-tests all-reduce reaches 232.5 GB/s bus bandwidth (NVIDIA/nccl issue #1048),
so nvlink_efficiency = 232.5/300; an HDR card reaches ~24 of its 25 GB/s (NCCL maintainer, NVIDIA/nccl
issue #412), so nic_efficiency = 0.96; two nodes with 4 HDR cards each reach 86 GB/s (issue #1048)
and three nodes 84.8-96 GB/s (NVIDIA/nccl-tests issue #119), against the model's 96 GB/s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.checks import check_int, check_real

ALGORITHMS = ("auto", "ring", "tree")


@dataclass(frozen=True)
class Network:
    """Links of a cluster of nodes with ``gpus_per_node`` GPUs (bytes/s per direction, seconds).

    nvlink_bandwidth   per GPU inside a node, each way
    nvlink_efficiency  NCCL's bus bandwidth inside a node / nvlink_bandwidth
    nics_per_node      network cards per node (rail aligned: card i serves GPU i·nics/g ...)
    nic_bandwidth      per card, each way (HDR InfiniBand 200 Gb/s = 25e9 bytes/s)
    nic_efficiency     share of nic_bandwidth NCCL reaches through one card
    intra_latency      seconds per ring step inside a node
    inter_latency      seconds per ring step across nodes
    """

    gpus_per_node: int
    nvlink_bandwidth: float
    nics_per_node: int
    nic_bandwidth: float
    nvlink_efficiency: float = 1.0
    nic_efficiency: float = 1.0
    intra_latency: float = 2e-6
    inter_latency: float = 5e-6

    def __post_init__(self):
        fn = "Network"
        check_int(fn, "gpus_per_node", self.gpus_per_node, minimum=1)
        check_int(fn, "nics_per_node", self.nics_per_node, minimum=1)
        for name in ("nvlink_bandwidth", "nic_bandwidth"):
            check_real(fn, name, getattr(self, name), positive=True)
        for name in ("nvlink_efficiency", "nic_efficiency"):
            e = check_real(fn, name, getattr(self, name), positive=True)
            if e > 1:
                raise ValueError(f"{fn}: {name} must be in (0, 1], got {e}")
        for name in ("intra_latency", "inter_latency"):
            if check_real(fn, name, getattr(self, name)) < 0:
                raise ValueError(f"{fn}: {name} must be >= 0 s, got {getattr(self, name)}")

    @property
    def nvlink_bus(self) -> float:
        """NCCL's bus bandwidth inside one node, bytes/s."""
        return self.nvlink_bandwidth * self.nvlink_efficiency

    @property
    def nic_rate(self) -> float:
        """What NCCL moves through one card, bytes/s."""
        return self.nic_bandwidth * self.nic_efficiency

    def bus_bandwidth(self, per_node: int, nodes: int) -> float:
        """Bus bandwidth (bytes/s) of a group with ``per_node`` members on each of ``nodes`` nodes,
        while every GPU of those nodes runs a group of the same kind (module docstring)."""
        if nodes <= 1:
            return self.nvlink_bus
        cards = self.nics_per_node * min(per_node, self.gpus_per_node) / self.gpus_per_node
        return min(self.nvlink_bus, cards * self.nic_rate)

    def p2p_bandwidth(self, same_node: bool) -> float:
        """Bytes/s of one GPU's send to a GPU on the same node (NVLink) or another node (its card's
        share: all GPUs of a node send at once)."""
        if same_node:
            return self.nvlink_bus
        return self.nic_rate * min(1.0, self.nics_per_node / self.gpus_per_node)


def _group(fn: str, net, n, nbytes, nodes):
    if not isinstance(net, Network):
        raise TypeError(f"{fn}: net must be a labkit.planner.Network, got {type(net).__name__}")
    n = check_int(fn, "n", n, minimum=1)
    nodes = check_int(fn, "nodes", nodes, minimum=1, maximum=n)
    if n % nodes:
        raise ValueError(f"{fn}: n ({n}) must be a multiple of nodes ({nodes}): the same members on each node")
    s = check_real(fn, "nbytes", nbytes)
    if s < 0:
        raise ValueError(f"{fn}: nbytes must be >= 0, got {s}")
    return n, s, nodes


def ring_all_reduce_time(net: Network, n: int, nbytes: float, nodes: int = 1) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``n`` ranks on ``nodes`` nodes:
    2(n−1)·α + 2(n−1)/n · S / busBW."""
    n, s, nodes = _group("ring_all_reduce_time", net, n, nbytes, nodes)
    return _ring(net, n, s, nodes)


def _ring(net: Network, n: int, s: float, nodes: int) -> float:
    if n == 1:
        return 0.0
    alpha = net.inter_latency if nodes > 1 else net.intra_latency
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * s / net.bus_bandwidth(n // nodes, nodes)


def tree_all_reduce_time(net: Network, n: int, nbytes: float, nodes: int = 1) -> float:
    """Seconds of NCCL's tree all-reduce: 2·(⌈log₂ N⌉·α_inter + (k−1)·α_intra) + 2·S / busBW for
    N > 1 nodes of k members; on one node NCCL uses the ring (this returns the ring's time)."""
    n, s, nodes = _group("tree_all_reduce_time", net, n, nbytes, nodes)
    return _tree(net, n, s, nodes)


def _tree(net: Network, n: int, s: float, nodes: int) -> float:
    if nodes <= 1:
        return _ring(net, n, s, nodes)
    k = n // nodes
    latency = 2 * (math.ceil(math.log2(nodes)) * net.inter_latency + (k - 1) * net.intra_latency)
    return latency + 2 * s / net.bus_bandwidth(k, nodes)


def all_reduce_time(net: Network, n: int, nbytes: float, nodes: int = 1, algorithm: str = "auto") -> float:
    """Seconds of an all-reduce: "ring", "tree", or "auto" (the faster, as NCCL's tuner picks)."""
    fn = "all_reduce_time"
    if algorithm not in ALGORITHMS:
        raise ValueError(f"{fn}: algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    n, s, nodes = _group(fn, net, n, nbytes, nodes)
    return _all_reduce(net, n, s, nodes, algorithm)


def _all_reduce(net: Network, n: int, s: float, nodes: int, algorithm: str = "auto") -> float:
    if algorithm == "ring":
        return _ring(net, n, s, nodes)
    if algorithm == "tree":
        return _tree(net, n, s, nodes)
    return min(_ring(net, n, s, nodes), _tree(net, n, s, nodes))


def reduce_scatter_time(net: Network, n: int, nbytes: float, nodes: int = 1) -> float:
    """Seconds of a ring reduce-scatter (or all-gather) of an ``nbytes`` buffer: half a ring
    all-reduce, (n−1)·α + (n−1)/n · S / busBW."""
    n, s, nodes = _group("reduce_scatter_time", net, n, nbytes, nodes)
    return _ring(net, n, s, nodes) / 2


def p2p_time(net: Network, nbytes: float, same_node: bool) -> float:
    """Seconds of one send of ``nbytes`` from a GPU to a GPU on the same node or another node."""
    s = check_real("p2p_time", "nbytes", nbytes)
    if s < 0:
        raise ValueError(f"p2p_time: nbytes must be >= 0, got {s}")
    return _p2p(net, s, same_node)


def _p2p(net: Network, s: float, same_node: bool) -> float:
    alpha = net.intra_latency if same_node else net.inter_latency
    return alpha + s / net.p2p_bandwidth(same_node)


def bus_bandwidth_of(n: int, nbytes: float, seconds: float) -> float:
    """nccl-tests' bus bandwidth of an all-reduce that took ``seconds``: 2(n−1)/n · S / T (bytes/s)."""
    return 2 * (n - 1) / n * nbytes / seconds


# A DGX A100 node (Selene, the machine of Narayanan et al. 2021 and Korthikanti et al. 2022): 8
# A100-SXM4 on NVSwitch, NVLink3 300 GB/s per direction per GPU; 8 HDR InfiniBand cards of 200 Gb/s.
DGX_A100 = Network(gpus_per_node=8, nvlink_bandwidth=300e9, nics_per_node=8, nic_bandwidth=25e9,
                   nvlink_efficiency=232.5 / 300, nic_efficiency=0.96)
# Jean Zay's A100 partition (BLOOM-176B, BigScience tr11 README): 8 A100-80GB per node with NVLink,
# 4 Omni-Path 100 Gb/s (12.5 GB/s) links per node.
JEAN_ZAY_A100 = Network(gpus_per_node=8, nvlink_bandwidth=300e9, nics_per_node=4, nic_bandwidth=12.5e9,
                        nvlink_efficiency=232.5 / 300, nic_efficiency=0.96)
# A DGX H100 node: NVLink4 450 GB/s per direction per GPU, 8 NDR cards of 400 Gb/s (50 GB/s); the
# A100's NCCL efficiencies carried over (not measured here).
DGX_H100 = Network(gpus_per_node=8, nvlink_bandwidth=450e9, nics_per_node=8, nic_bandwidth=50e9,
                   nvlink_efficiency=232.5 / 300, nic_efficiency=0.96)

__all__ = ["Network", "ALGORITHMS", "ring_all_reduce_time", "tree_all_reduce_time", "all_reduce_time",
           "reduce_scatter_time", "p2p_time", "bus_bandwidth_of", "DGX_A100", "JEAN_ZAY_A100", "DGX_H100"]
