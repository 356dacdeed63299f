"""Hierarchical (two-level) all-reduce, on real ranks and in the α–β model.

Ranks are grouped into ``nodes`` machines of ``per_node`` = g consecutive ranks (rank r lives on
node r // g at local index r % g). The all-reduce runs in three phases:

    1. intra-node reduce-scatter   node i's g ranks each end up with one summed shard (n/g bytes)
    2. inter-node all-reduce        the N ranks holding the same shard (one per node, same local
                                    index) sum it across nodes: g of these run side by side
    3. intra-node all-gather        every rank collects the g summed shards again

This is the decomposition NCCL and Horovod use across machines ("hierarchical all-reduce";
also a 2-D ring, Jia et al. 2018; Mikami et al. 2018).

Two real versions, both inside an initialised process group (e.g. under `labkit.dist.launch`):
- `hierarchical_all_reduce(tensor, groups)`: PyTorch's own collectives on sub-groups made by
  `make_groups` (``dist.new_group``; the same groups as ``init_device_mesh("cpu", (N, g))``).
- `hierarchical_all_reduce_rings(tensor, per_node)`: the same three phases as explicit rings of
  isend/irecv, counting the bytes each rank sends on intra-node and on inter-node links.

Bytes each rank sends (S bytes in the buffer, rings in every phase, p = N·g):

    hierarchical   intra 2(g−1)/g · S          inter 2(N−1)/N · S/g
    flat ring      a rank whose right neighbour is on another node sends all its
                   2(p−1)/p · S on an inter-node link; the others send only intra-node

so the bytes that cross machines drop by a factor of about g per rank.

Time in the α–β model, intra links (α₁, β₁), inter links (α₂, β₂) (seconds, seconds per byte):

    hierarchical = 2·[(g−1)α₁ + (g−1)/g·S·β₁] + 2(N−1)α₂ + 2(N−1)/N·(S/g)·β₂'
    flat ring    = 2(p−1)·max(α + (S/p)·β) over the link classes the ring uses

β₂' = β₂·max(1, g/nics) when the g concurrent inter-node all-reduces of phase 2 share ``nics``
network cards per node (default: one card per GPU, as on rail-optimised clusters, β₂' = β₂).
Every ring step waits for its slowest link, so a flat ring that crosses machines runs at the
inter-node link's speed on every one of its 2(p−1) steps.

**A flat ring is not one ring.** NCCL splits a large all-reduce over several rings (channels) that
run at once, each leaving every node through a different card; with C rings a card carries 1/C
of the bytes, so the inter-node class has β₂/C, while each GPU's NVLink still carries all of its
2(p−1)/p·S. ``flat_ring_time(..., rings=C)`` models that; `compare_all_reduce` and
`crossover_bytes` give the flat ring one ring per card (C = nics, NCCL's choice). Then, when the
inter-node class is the slower one in α:

    C = 1 (one card per node)   hierarchical − flat = 2(g−1)·[α₁ − N·α₂ + S·(β₁ − β₂/N)/g]
                                  (with β₂/1 slower than β₁; ring and phase 2 both on the one card)
    C = g (a card per GPU)      hierarchical − flat = 2(g−1)·(α₁ − N·α₂)
                                  + 2·S·[(g−1)/g·β₁ + (N−1)/N·β₂/g − (p−1)/p·max(β₁, β₂/g)]

With a card per GPU the hierarchical algorithm has fewer slow latency steps, so it wins for small
buffers; but its three phases run one after another, while the flat rings keep NVLink and every
card busy at once, so for large buffers the flat rings win (on a DGX A100, NVLink 300 GB/s and
8 × 25 GB/s cards, by up to ~1.6×). With one card per node the flat ring crosses that one card
with all its bytes and the hierarchical algorithm wins until very large buffers on many nodes.
`crossover_bytes` solves for the size where the winner changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.checks import MAX_ENUMERATED, check_count, check_int, check_real
from labkit.collectives.alpha_beta import coefficients, predict_time
from labkit.collectives.chunking import chunk_bounds, chunk_sizes

# ---------------------------------------------------------------- rank layout


def rank_groups(nodes: int, per_node: int) -> tuple[list[list[int]], list[list[int]]]:
    """(intra, inter) rank lists: intra[i] = node i's ranks [i·g, …, i·g + g − 1]; inter[j] = the
    ranks at local index j on every node [j, g + j, 2g + j, …]."""
    nodes = check_int("rank_groups", "nodes", nodes, minimum=1)
    g = check_int("rank_groups", "per_node", per_node, minimum=1)
    check_count("rank_groups", "nodes·per_node", nodes * g)
    intra = [[i * g + j for j in range(g)] for i in range(nodes)]
    inter = [[i * g + j for i in range(nodes)] for j in range(g)]
    return intra, inter


@dataclass
class HierarchyGroups:
    """The calling rank's two sub-groups: ``intra`` (its node) and ``inter`` (same local index on
    every node), with their rank lists."""

    per_node: int
    intra: object
    inter: object
    intra_ranks: list
    inter_ranks: list


def make_groups(per_node: int) -> HierarchyGroups:
    """Create the intra- and inter-node sub-groups with ``dist.new_group`` (call on every rank:
    each rank must create every group, in the same order). world_size must divide by per_node."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    g = check_int("make_groups", "per_node", per_node, minimum=1)
    if world % g:
        raise ValueError(f"make_groups: world_size {world} is not a multiple of per_node {g}")
    intra, inter = rank_groups(world // g, g)
    intra_groups = [dist.new_group(r) for r in intra]
    inter_groups = [dist.new_group(r) for r in inter]
    return HierarchyGroups(g, intra_groups[rank // g], inter_groups[rank % g], intra[rank // g], inter[rank % g])


def hierarchical_all_reduce(tensor, groups: HierarchyGroups):
    """Sum ``tensor`` over all ranks, in place, in three phases on the sub-groups of `make_groups`:
    ``reduce_scatter_single`` on the node, ``all_reduce`` across nodes, ``all_gather_single`` on
    the node (torch 2.13's names for reduce_scatter_tensor / all_gather_into_tensor). The
    flattened tensor is zero-padded to a multiple of g elements (torch's collectives need equal
    shards). Returns ``tensor``."""
    import torch
    import torch.distributed as dist

    g = groups.per_node
    flat = tensor.reshape(-1)
    m = -(-flat.numel() // g)                                   # shard length, rounded up
    buf = torch.zeros(g * m, dtype=tensor.dtype, device=tensor.device)   # (g·m,)
    buf[:flat.numel()] = flat
    shard = torch.empty(m, dtype=tensor.dtype, device=tensor.device)     # (m,)
    dist.reduce_scatter_single(shard, buf, group=groups.intra)            # 1. within the node
    dist.all_reduce(shard, group=groups.inter)                            # 2. across nodes
    dist.all_gather_single(buf, shard, group=groups.intra)                # 3. within the node
    tensor.copy_(buf[:flat.numel()].view_as(tensor))
    return tensor


# ---------------------------------------------------------------- explicit rings, counted


@dataclass
class LinkBytes:
    """Bytes one rank sent, by link class: ``intra`` (same node) and ``inter`` (another node)."""

    intra: int = 0
    inter: int = 0


def _ring_step(buf, send_span, recv_span, tmp, right, left, counter: LinkBytes, per_node: int, me: int,
               accumulate: bool):
    import torch.distributed as dist

    send = buf[send_span[0]:send_span[1]]
    size = recv_span[1] - recv_span[0]
    reqs = []
    if send.numel():
        reqs.append(dist.isend(send.contiguous(), right))
        nbytes = send.numel() * send.element_size()
        if right // per_node == me // per_node:
            counter.intra += nbytes
        else:
            counter.inter += nbytes
    if size:
        reqs.append(dist.irecv(tmp[:size], left))
    for r in reqs:
        r.wait()
    if size:
        target = buf[recv_span[0]:recv_span[1]]
        if accumulate:
            target.add_(tmp[:size])
        else:
            target.copy_(tmp[:size])


def _ring(buf, lo: int, hi: int, ranks: list, me: int, counter: LinkBytes, per_node: int, phase: str):
    """One ring phase over ``ranks`` (global ranks, in ring order) on buf[lo:hi], cut into len(ranks)
    chunks by `chunk_bounds`: "rs" (reduce-scatter: position i ends holding the sum of chunk i),
    "ag" (all-gather: chunk i comes from position i), or "ar" (both)."""
    import torch

    n = len(ranks)
    if n == 1:
        return
    i = ranks.index(me)
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    b = [lo + x for x in chunk_bounds(hi - lo, n)]
    span = lambda c: (b[c], b[c + 1])                               # noqa: E731
    tmp = torch.empty(max(b[c + 1] - b[c] for c in range(n)), dtype=buf.dtype, device=buf.device)
    if phase in ("rs", "ar"):
        for s in range(n - 1):
            _ring_step(buf, span((i - s - 1) % n), span((i - s - 2) % n), tmp, right, left, counter,
                       per_node, me, accumulate=True)
    if phase in ("ag", "ar"):
        for s in range(n - 1):
            _ring_step(buf, span((i - s) % n), span((i - s - 1) % n), tmp, right, left, counter,
                       per_node, me, accumulate=False)


def hierarchical_all_reduce_rings(tensor, per_node: int) -> LinkBytes:
    """The three phases as explicit rings of isend/irecv (sum, in place, any length: chunks follow
    `chunk_bounds` and travel unpadded). Returns the bytes this rank sent on each link class,
    counted as they are sent. All ranks of the default group take part; world_size must divide
    by per_node."""
    import torch.distributed as dist

    world, me = dist.get_world_size(), dist.get_rank()
    g = check_int("hierarchical_all_reduce_rings", "per_node", per_node, minimum=1)
    if world % g:
        raise ValueError(f"hierarchical_all_reduce_rings: world_size {world} is not a multiple of per_node {g}")
    intra, inter = rank_groups(world // g, g)
    node, local = divmod(me, g)
    contiguous = tensor.is_contiguous()
    buf = tensor.view(-1) if contiguous else tensor.reshape(-1)   # a view, or a copy to write back
    counter = LinkBytes()
    bounds = chunk_bounds(buf.numel(), g)
    _ring(buf, 0, buf.numel(), intra[node], me, counter, g, "rs")                       # 1. shard `local`
    _ring(buf, bounds[local], bounds[local + 1], inter[local], me, counter, g, "ar")    # 2. across nodes
    _ring(buf, 0, buf.numel(), intra[node], me, counter, g, "ag")                       # 3. gather shards
    if not contiguous:
        tensor.copy_(buf.view(tensor.shape))
    return counter


def flat_ring_link_bytes(sent: int, rank: int, world_size: int, per_node: int) -> LinkBytes:
    """Classify a flat ring's bytes: rank r sends everything to (r + 1) mod p, an inter-node link
    exactly when that neighbour is on another node."""
    fn = "flat_ring_link_bytes"
    world_size = check_int(fn, "world_size", world_size, minimum=1)
    per_node = check_int(fn, "per_node", per_node, minimum=1)
    rank = check_int(fn, "rank", rank, minimum=0, maximum=world_size - 1)
    right = (rank + 1) % world_size
    same = right // per_node == rank // per_node
    return LinkBytes(intra=sent if same else 0, inter=0 if same else sent)


# ---------------------------------------------------------------- exact byte counts


def _ring_sent(chunks: list[int], i: int, phase: str) -> int:
    """Elements sent by ring position i: a reduce-scatter sends every chunk but i, an all-gather
    every chunk but i + 1."""
    n, total = len(chunks), sum(chunks)
    if n == 1:
        return 0
    out = 0
    if phase in ("rs", "ar"):
        out += total - chunks[i]
    if phase in ("ag", "ar"):
        out += total - chunks[(i + 1) % n]
    return out


def hierarchical_bytes(rank: int, nodes: int, per_node: int, n_elements: int, itemsize: int) -> LinkBytes:
    """Bytes ``rank`` sends in `hierarchical_all_reduce_rings` on each link class (exact, uneven
    chunks included). When g divides L and N divides the shard: intra 2(g−1)/g·S, inter
    2(N−1)/N·S/g, with S = n_elements·itemsize."""
    g, nodes = check_int("hierarchical_bytes", "per_node", per_node, minimum=1, maximum=MAX_ENUMERATED), \
        check_int("hierarchical_bytes", "nodes", nodes, minimum=1, maximum=MAX_ENUMERATED)
    check_int("hierarchical_bytes", "rank", rank, minimum=0, maximum=nodes * g - 1)
    check_int("hierarchical_bytes", "n_elements", n_elements, minimum=0)
    node, local = divmod(rank, g)
    shards = chunk_sizes(n_elements, g)
    intra = _ring_sent(shards, local, "rs") + _ring_sent(shards, local, "ag")
    inter = _ring_sent(chunk_sizes(shards[local], nodes), node, "ar")
    return LinkBytes(intra * itemsize, inter * itemsize)


# ---------------------------------------------------------------- α–β time model


def _link(fn: str, name: str, pair) -> tuple[float, float]:
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{fn}: {name} must be a pair (alpha seconds, beta seconds/byte), got {pair!r}")
    a, b = check_real(fn, f"{name}[0] (alpha)", pair[0]), check_real(fn, f"{name}[1] (beta)", pair[1])
    if a < 0 or b < 0:
        raise ValueError(f"{fn}: {name} must have alpha, beta >= 0, got {pair!r}")
    return a, b


def _sizes(fn, n_bytes, nodes, per_node, nics_per_node):
    n = check_real(fn, "n_bytes", n_bytes)
    if n < 0:
        raise ValueError(f"{fn}: n_bytes must be >= 0, got {n}")
    nodes = check_int(fn, "nodes", nodes, minimum=1)
    g = check_int(fn, "per_node", per_node, minimum=1)
    nics = g if nics_per_node is None else check_int(fn, "nics_per_node", nics_per_node, minimum=1)
    return n, nodes, g, nics


def hierarchical_time(n_bytes: float, nodes: int, per_node: int, intra, inter,
                      nics_per_node: int | None = None) -> float:
    """Model time (s) of the three-phase all-reduce of an n_bytes buffer: ring reduce-scatter and
    all-gather inside each node on (α₁, β₁) = ``intra``, a ring all-reduce of an n/g-byte shard
    across the N nodes on (α₂, β₂) = ``inter``, with β₂ scaled by max(1, g/nics_per_node) when
    the g shard all-reduces share fewer network cards than there are GPUs (default: one each)."""
    n, nodes, g, nics = _sizes("hierarchical_time", n_bytes, nodes, per_node, nics_per_node)
    a1, b1 = _link("hierarchical_time", "intra", intra)
    a2, b2 = _link("hierarchical_time", "inter", inter)
    share = max(1.0, g / nics)
    return (predict_time("ring_reduce_scatter", g, n, a1, b1) + predict_time("ring_all_gather", g, n, a1, b1)
            + predict_time("ring_all_reduce", nodes, n / g, a2, b2 * share))


def flat_ring_time(n_bytes: float, nodes: int, per_node: int, intra, inter, rings: int = 1) -> float:
    """Model time (s) of a ring all-reduce over all p = N·g ranks in rank order: 2(p−1) steps,
    each as long as its slowest link, 2(p−1)·max(α + (n/p)·β) over the link classes present
    (inter-node when N > 1, intra-node when g > 1). ``rings`` rings run at once, each through its
    own network card (NCCL's channels): the inter-node class then has β₂/rings (module docstring).
    With one ring and the inter-node link the slower, that is 2(p−1)α₂ + 2(p−1)/p·n·β₂."""
    n, nodes, g, _ = _sizes("flat_ring_time", n_bytes, nodes, per_node, None)
    c = check_int("flat_ring_time", "rings", rings, minimum=1)
    p = nodes * g
    return max((predict_time("ring_all_reduce", p, n, a, b) for a, b in _flat_lines(intra, inter, nodes, g, c)),
               default=0.0)


def _flat_lines(intra, inter, nodes: int, g: int, rings: int) -> list:
    """(α, β) of each link class a flat ring of ``rings`` rings uses: NVLink carries every ring's
    bytes; each card carries one ring's."""
    a1, b1 = _link("flat_ring_time", "intra", intra)
    a2, b2 = _link("flat_ring_time", "inter", inter)
    return ([(a1, b1)] if g > 1 else []) + ([(a2, b2 / rings)] if nodes > 1 else [])


@dataclass(frozen=True)
class AllReduceComparison:
    """Model times (s) of both algorithms for one buffer size; winner: "hierarchical", "flat" or
    "tie"; speedup = flat_s / hierarchical_s."""

    n_bytes: float
    hierarchical_s: float
    flat_s: float
    winner: str
    speedup: float


def compare_all_reduce(n_bytes: float, nodes: int, per_node: int, intra, inter,
                       nics_per_node: int | None = None) -> AllReduceComparison:
    """`hierarchical_time` against `flat_ring_time` with one ring per network card (NCCL's rings,
    min(nics, g) of them) for one n_bytes buffer."""
    h = hierarchical_time(n_bytes, nodes, per_node, intra, inter, nics_per_node)
    f = flat_ring_time(n_bytes, nodes, per_node, intra, inter, _rings(per_node, nics_per_node))
    winner = "hierarchical" if h < f else "flat" if f < h else "tie"
    return AllReduceComparison(float(n_bytes), h, f, winner, f / h if h > 0 else math.inf)


def _rings(per_node: int, nics_per_node: int | None) -> int:
    """Rings NCCL runs across nodes: one per network card a node's GPUs use, min(nics, g)."""
    return per_node if nics_per_node is None else max(1, min(nics_per_node, per_node))


def crossover_bytes(nodes: int, per_node: int, intra, inter, nics_per_node: int | None = None) -> float:
    """The smallest buffer size n > 0 (bytes) at which the faster of hierarchical and flat (one ring
    per card) changes; math.inf if one of them is never slower for any n > 0.

    Each model time is a line a + b·n (a = rounds·α, b = bytes coefficient·β, from
    `labkit.collectives.alpha_beta.coefficients`), except that the flat ring takes the max of one
    line per link class; so the difference is the minimum of (at most) two lines, whose roots
    are checked one by one.
    """
    _, nodes, g, nics = _sizes("crossover_bytes", 0.0, nodes, per_node, nics_per_node)
    a1, b1 = _link("crossover_bytes", "intra", intra)
    a2, b2 = _link("crossover_bytes", "inter", inter)
    rs_a, rs_b = coefficients("ring_reduce_scatter", g, 1.0)
    ar_a, ar_b = coefficients("ring_all_reduce", nodes, 1.0 / g)
    h_a = 2 * rs_a * a1 + ar_a * a2
    h_b = 2 * rs_b * b1 + ar_b * b2 * max(1.0, g / nics)
    fa, fb = coefficients("ring_all_reduce", nodes * g, 1.0)
    lines = [(fa * a, fb * b) for a, b in _flat_lines(intra, inter, nodes, g, _rings(g, nics))]
    if not lines:
        return math.inf

    def diff(n: float) -> float:
        return (h_a + h_b * n) - max(a + b * n for a, b in lines)

    roots = sorted((a - h_a) / (h_b - b) for a, b in lines if h_b != b and (a - h_a) / (h_b - b) > 0)
    for r in roots:
        if (diff(r * (1 - 1e-9)) < 0) != (diff(r * (1 + 1e-9)) < 0):
            return r
    return math.inf
