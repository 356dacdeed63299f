"""The Lab 11 notebook's one-liners for placement, topology and balance.

    topology_table()                    ring, 2-D torus, hypercube, fat tree: metrics from the graph
                                        next to the closed forms (a ring's bisection is 2 links)
    hierarchical_table(nodes, per_node) a real two-level all-reduce on gloo ranks: equal to
                                        dist.all_reduce, bytes per link class counted vs formula
    all_reduce_model_table(...)         α–β times, hierarchical vs flat ring, a NIC per GPU or per
                                        node, and where the winner changes
    placement_table(dp, tp, pp, ...)    cross-node bytes: naive (each rank order), random, KL, optimum
    scheduler_table(...)                first-fit / best-fit / topology-aware on one seeded job stream
    balance_table(...)                  static, greedy, LPT, work stealing vs T₁/P and Graham's bound
    measured_layer_costs(...)           forward + backward seconds of a small GPT's pieces (timed)
    stage_partition_table(costs, ...)   pipeline stages by DP vs equal layer counts
    sharding_table(...)                 per-layer sharding by DP vs brute force vs column/row rule
    striping_table(k)                   ECMP hashing vs link balancing vs striping on a fat tree
    flit_table(hops, flits)             store-and-forward vs worm-hole latency, simulated vs formula
    dead_link_table()                   a ring, a torus, a fat tree with one link dead
    packing_table(jobs)                 multi-resource bin packing: first fit, FFD vs the optimum;
                                        also the share of each resource FFD leaves free
    rebalance_table(thresholds)         threshold rebalancing of drifting loads
    locality_table(...)                 delay scheduling: locality after waiting, formula vs Monte Carlo

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters). Everything is seeded and
rounded, so the printed numbers repeat from run to run; the one exception is
`measured_layer_costs` (wall-clock times), which is why it is a function of its own: the
notebook times in one cell and partitions (deterministically, from given costs) in another.
"""
from __future__ import annotations

import itertools
import math

from labkit.checks import check_int
from labkit.cluster import autoparallel as A
from labkit.cluster import balance as B
from labkit.cluster import hierarchical as H
from labkit.cluster import packing as P
from labkit.cluster import placement as PL
from labkit.cluster import routing as R
from labkit.cluster import scheduler as S
from labkit.cluster import topology as T
from labkit.collectives.chunking import chunk_sizes
from labkit.table import Table

# Example links, stated as (alpha seconds, beta seconds per byte).
NVLINK = (2e-6, 1 / 232.5e9)    # NVLink3 through NVSwitch as NCCL measures it on 8 A100s: 232.5 GB/s, 2 µs
IB_HDR = (10e-6, 1 / 24e9)      # HDR InfiniBand across nodes: 200 Gb/s = 25 GB/s per card (NCCL: 24), 10 µs


# ---------------------------------------------------------------- topology


def _label(topo: T.Topology) -> str:
    p = dict(topo.params)
    return {"ring": lambda: f"ring({p.get('n')})",
            "torus2d": lambda: f"torus {p.get('rows')}×{p.get('cols')}",
            "hypercube": lambda: f"hypercube d={p.get('dim')}",
            "fat_tree": lambda: f"fat tree k={p.get('k')}"}[topo.kind]()


_BISECTION_RULE = {"ring": "2", "torus2d": "2·min(r,c)", "hypercube": "n/2", "fat_tree": "k³/8 = n/2"}


def default_topologies() -> list:
    """The topologies `topology_table` shows: small enough for the brute-force bisection."""
    return [T.ring(4), T.ring(8), T.ring(16), T.torus2d(4, 4), T.torus2d(2, 8), T.hypercube(3),
            T.hypercube(4), T.fat_tree(2), T.fat_tree(4)]


def topology_table(topologies=None) -> Table:
    """For each topology: nodes (hosts and switches), hosts, degree, and the diameter and the
    bisection width both computed from the graph (BFS from every host; brute force over every
    split into halves) and from the closed form (`formulas`). The ring rows show a ring's
    bisection is 2 links, not 1: any cut of a cycle into two arcs crosses it twice. Fat tree:
    degree of its switches (all k ports), diameter in hops between hosts."""
    topos = default_topologies() if topologies is None else list(topologies)
    rows = []
    for t in topos:
        m, f = T.measure(t), T.formulas(t)
        deg = str(m.min_degree) if m.min_degree == m.max_degree else f"{m.min_degree}-{m.max_degree}"
        rows.append((_label(t), t.n, len(t.hosts), deg, m.diameter, f.diameter, m.bisection, f.bisection,
                     _BISECTION_RULE[t.kind]))
    return Table(["topology", "nodes", "hosts", "degree", "diameter", "formula", "bisection", "closed form", "rule"],
                 rows, title="measured on the graph, next to the closed forms (\"formula\", \"closed form\")")


# ---------------------------------------------------------------- hierarchical all-reduce, real ranks


def _hierarchical_rank(rank, world, per_node, n_elements, seed):
    """One rank: dist.all_reduce as the reference; both hierarchical versions (torch sub-groups,
    counted rings) and labkit's flat ring on copies of the same input."""
    import torch
    import torch.distributed as dist

    from labkit.collectives import ring_all_reduce

    gen = torch.Generator().manual_seed(1000 * seed + rank)
    # multiples of 1/8: every order of summation gives the same bits, so "equal" means diff 0
    x = torch.randint(-4000, 4000, (n_elements,), generator=gen).double() / 8       # (L,)
    ref = x.clone()
    dist.all_reduce(ref)
    groups = H.make_groups(per_node)
    a, b, c = x.clone(), x.clone(), x.clone()
    H.hierarchical_all_reduce(a, groups)
    counted = H.hierarchical_all_reduce_rings(b, per_node)
    flat = ring_all_reduce(c)
    diff = lambda y: float((y - ref).abs().max()) if n_elements else 0.0      # noqa: E731
    return {"groups": diff(a), "rings": diff(b), "flat": diff(c), "intra": counted.intra, "inter": counted.inter,
            "flat_sent": int(flat.bytes_sent), "itemsize": x.element_size()}


def hierarchical_table(nodes: int = 2, per_node: int = 2, n_elements: int = 1000, seed: int = 0,
                       timeout: float = 60.0) -> Table:
    """Run one launch of nodes·per_node gloo ranks (rank r on "node" r // per_node) summing a
    float64 buffer of n_elements three ways: the hierarchical all-reduce on torch sub-groups, the
    same as explicit rings that count the bytes each rank sends on intra- and inter-node links,
    and a flat ring over all ranks. max |diff| is against dist.all_reduce (for hierarchical: the
    larger of its two versions). Formulas (S bytes, p = N·g): hierarchical intra 2(g−1)/g·S,
    inter 2(N−1)/N·S/g; a flat ring sends 2(p−1)/p·S to its right neighbour, across nodes when
    that neighbour is on another node."""
    from labkit.dist import launch

    nodes = check_int("hierarchical_table", "nodes", nodes, minimum=1)
    g = check_int("hierarchical_table", "per_node", per_node, minimum=1)
    n_elements = check_int("hierarchical_table", "n_elements", n_elements, minimum=0)
    seed = check_int("hierarchical_table", "seed", seed, minimum=0)
    p = nodes * g
    runs = launch(_hierarchical_rank, p, g, n_elements, seed, backend="gloo", timeout=timeout, quiet=True)
    S_ = n_elements * runs[0]["itemsize"]
    h_intra, h_inter = 2 * (g - 1) / g * S_, 2 * (nodes - 1) / nodes * S_ / g
    flat_total = 2 * (p - 1) / p * S_
    rows = []
    for r, run in enumerate(runs):
        rows.append(("hierarchical", r, r // g, max(run["groups"], run["rings"]), run["intra"], run["inter"],
                     h_intra, h_inter))
    for r, run in enumerate(runs):
        lb = H.flat_ring_link_bytes(run["flat_sent"], r, p, g)
        crosses = (r + 1) % p // g != r // g
        rows.append(("flat ring", r, r // g, run["flat"], lb.intra, lb.inter,
                     0.0 if crosses else flat_total, flat_total if crosses else 0.0))
    return Table(["algorithm", "rank", "node", "max |diff|", "intra sent", "inter sent", "intra formula",
                  "inter formula"], rows,
                 formats={"max |diff|": ".1e", "intra formula": ".0f", "inter formula": ".0f"},
                 title=f"{p} gloo ranks as {nodes} nodes × {g}, {n_elements} float64 (S = {S_} B); "
                       "bytes sent per rank")


# ---------------------------------------------------------------- hierarchical all-reduce, α–β model


def _size_label(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def all_reduce_model_table(sizes=(64e3, 16e6, 1e9), shapes=((2, 8), (8, 8), (32, 8)), intra=NVLINK,
                           inter=IB_HDR) -> Table:
    """Model times (ms) of the hierarchical all-reduce and a flat ring over all nodes × GPUs, for
    each cluster shape, with a network card per GPU (rail-optimised) and with one card per node
    shared by the node's GPUs; "crossover" is the buffer size above which the winner changes
    (`crossover_bytes`), "never" when one side wins at every size. Default links: NVLink-class
    inside a node (150 GB/s, 2 µs), HDR InfiniBand across (200 Gb/s = 25 GB/s per card, 10 µs)."""
    rows = []
    for nodes, g in shapes:
        for nics in dict.fromkeys((g, 1)):         # a card per GPU, then one per node
            cross = H.crossover_bytes(nodes, g, intra, inter, nics_per_node=nics)
            label = "never" if math.isinf(cross) else _size_label(float(f"{cross:.3g}"))
            for n in sizes:
                c = H.compare_all_reduce(n, nodes, g, intra, inter, nics_per_node=nics)
                rows.append((f"{nodes} × {g}", "per GPU" if nics == g else "per node", _size_label(n),
                             c.hierarchical_s * 1e3, c.flat_s * 1e3, c.speedup, c.winner, label))
    a1, b1 = intra
    a2, b2 = inter
    return Table(["nodes × GPUs", "NIC", "message", "hier ms", "flat ms", "flat/hier", "faster", "crossover"],
                 rows, formats={"hier ms": ".3f", "flat ms": ".3f", "flat/hier": ".2f"},
                 title=f"α–β model: intra {1 / b1 / 1e9:g} GB/s, {a1 * 1e6:g} µs; inter {1 / b2 / 1e9:g} GB/s "
                       f"per card, {a2 * 1e6:g} µs")


# ---------------------------------------------------------------- placement


def placement_table(dp: int = 3, tp: int = 2, pp: int = 2, capacity: int = 4, seeds=range(5),
                    tp_bytes: float = 8.0, dp_bytes: float = 2.0, pp_bytes: float = 1.0) -> Table:
    """Cross-node bytes of a dp × tp × pp job's communication graph (`grid_graph`: each TP pair
    tp_bytes, each DP pair dp_bytes, neighbouring stages pp_bytes) on nodes of ``capacity`` GPUs,
    for each of the six rank orders (innermost axis first): ranks in order (naive), KL started
    there, random placements (mean over ``seeds``), KL from each of those (mean), and the exact
    optimum by enumeration ("-" when there are too many placements)."""
    seeds = list(seeds)
    rows = []
    for axes in itertools.permutations(PL.ORDERS):
        order = ",".join(axes)
        c = PL.compare_placements(PL.grid_graph(dp, tp, pp, tp_bytes, dp_bytes, pp_bytes, order), capacity, seeds)
        rows.append((order, c.naive, c.kl_from_naive, c.random_mean, c.kl_from_random_mean,
                     "-" if c.optimum is None else c.optimum, c.total))
    return Table(["rank order", "naive", "KL from naive", "random", "KL from random", "optimum", "all bytes"],
                 rows, formats={"naive": ".1f", "KL from naive": ".1f", "random": ".1f", "KL from random": ".1f",
                                "optimum": ".1f", "all bytes": ".1f"},
                 title=f"dp={dp} tp={tp} pp={pp} on {capacity}-GPU nodes: bytes crossing nodes (TP pair "
                       f"{tp_bytes:g}, DP {dp_bytes:g}, PP {pp_bytes:g}); random: mean of {len(seeds)}")


# ---------------------------------------------------------------- scheduler


def scheduler_table(n_jobs: int = 300, nodes: int = 8, gpus_per_node: int = 8, seed: int = 0,
                    mean_interarrival: float = 30.0, span_penalties=(0.0, 0.25)) -> Table:
    """One seeded `job_stream` (sizes 1–32 GPUs, lognormal durations, mean 600 s) through a FIFO
    queue on nodes × gpus_per_node under each placement policy, for each span penalty (a job
    spread over m nodes when ⌈k/G⌉ would do runs 1 + penalty·(m − ⌈k/G⌉) times longer): mean
    wait (s), stranded GPUs (time-average of the free GPUs the head job cannot use only
    because of where they are), utilisation, makespan (s), and the mean extra nodes per job."""
    jobs = S.job_stream(n_jobs, seed, mean_interarrival=mean_interarrival)
    rows = []
    for penalty in span_penalties:
        for p, r in S.compare_policies(jobs, nodes, gpus_per_node, penalty).items():
            rows.append((p, penalty, r.mean_wait_s, r.stranded_gpus, r.utilisation, r.makespan, r.mean_span_excess))
    return Table(["policy", "penalty", "mean wait s", "stranded GPUs", "utilisation", "makespan s", "extra nodes"],
                 rows, formats={"penalty": "g", "mean wait s": ".0f", "stranded GPUs": ".2f", "utilisation": ".3f",
                                "makespan s": ".0f", "extra nodes": ".3f"},
                 title=f"{n_jobs} jobs (seed {seed}, one per {mean_interarrival:g} s on average) on {nodes} nodes "
                       f"× {gpus_per_node} GPUs, FIFO queue")


# ---------------------------------------------------------------- load balancing


def balance_table(n_tasks: int = 64, workers: int = 8, seed: int = 0, sigma: float = 1.5,
                  steal_s: float = 0.01, steal_seeds=range(5)) -> Table:
    """``n_tasks`` lognormal task times (mean 1 s, log-std ``sigma``, seeded) on ``workers``
    workers: makespans of static round-robin and block splits, greedy list scheduling in the
    given order, LPT (longest first) and work stealing (a fork-join over the tasks, ``steal_s``
    per steal attempt, mean over ``steal_seeds``), next to the bounds: T₁/P, the lower bound
    max(T₁/P, longest task), and Graham's T₁/P + (1 − 1/P)·longest that greedy never exceeds."""
    t = B.skewed_times(n_tasks, seed, "lognormal", sigma=sigma)
    P = check_int("balance_table", "workers", workers, minimum=1)
    c = B.compare_balancing(t, P, steal_s, steal_seeds)
    rows = [("round-robin", "static", c.round_robin), ("block", "static", c.block),
            ("greedy, given order", "dynamic", c.greedy), ("LPT, longest first", "dynamic", c.lpt),
            ("work stealing", "dynamic", c.stealing), ("T₁/P", "bound", c.t1_over_p),
            ("max(T₁/P, longest)", "lower bound", c.lower_bound),
            ("Graham: T₁/P + (1−1/P)·longest", "greedy <=", B.graham_bound(t, P))]
    rows = [(name, kind, x, x / c.lower_bound) for name, kind, x in rows]
    return Table(["schedule", "kind", "makespan s", "÷ lower bound"], rows,
                 formats={"makespan s": ".3f", "÷ lower bound": ".3f"},
                 title=f"{n_tasks} tasks (lognormal, σ = {sigma:g}, seed {seed}; longest {t.max():.3f} s, "
                       f"T₁ = {t.sum():.3f} s) on P = {P} workers")


# ---------------------------------------------------------------- pipeline stages


def measured_layer_costs(cfg=None, batch_size: int = 8, repeats: int = 5, seed: int = 0) -> A.LayerCosts:
    """Forward + backward seconds of each piece of a small `labkit.model.GPT` on this machine
    (`measure_layer_costs`; default 4 blocks, hidden 64). Timings: they differ from run to run."""
    return A.measure_layer_costs(cfg, batch_size=batch_size, repeats=repeats, seed=seed)


def _span(names: list, lo: int, hi: int) -> str:
    return names[lo] if hi - lo == 1 else f"{names[lo]}..{names[hi - 1]}"


def stage_partition_table(costs=None, stages: int = 4, names=None) -> Table:
    """Pipeline stages for a chain of layer costs (seconds; a `LayerCosts`, a sequence, or None to
    measure with `measured_layer_costs`): the DP's partition (`plan_stages`, the smallest
    possible slowest stage) next to equal layer counts per stage (the first len % stages stages
    one layer longer), each stage's layers and cost (ms), and a last row with each one's
    bottleneck (its slowest stage)."""
    if costs is None:
        costs = measured_layer_costs()
    if isinstance(costs, A.LayerCosts):
        names = costs.names if names is None else names
        costs = costs.seconds
    costs = list(costs)
    names = [f"layer{i}" for i in range(len(costs))] if names is None else list(names)
    if len(names) != len(costs):
        raise ValueError(f"stage_partition_table: {len(names)} names for {len(costs)} costs")
    p = check_int("stage_partition_table", "stages", stages, minimum=1, maximum=len(costs))
    plan = A.plan_stages(costs, p)
    even_bounds = [0]
    for s in chunk_sizes(len(costs), p):
        even_bounds.append(even_bounds[-1] + s)
    even = [math.fsum(costs[even_bounds[k]:even_bounds[k + 1]]) for k in range(p)]
    rows = [(f"stage {k}", _span(names, plan.bounds[k], plan.bounds[k + 1]), plan.stage_costs[k] * 1e3,
             _span(names, even_bounds[k], even_bounds[k + 1]), even[k] * 1e3) for k in range(p)]
    rows.append(("bottleneck", "", plan.bottleneck * 1e3, "", max(even) * 1e3))
    return Table(["stage", "DP layers", "DP ms", "equal-count layers", "equal ms"], rows,
                 formats={"DP ms": ".3f", "equal ms": ".3f"},
                 title=f"{len(costs)} pieces on {p} stages: the slowest stage sets the pipeline's pace "
                       f"(equal counts {max(even) / plan.bottleneck:.2f}× slower)")


# ---------------------------------------------------------------- per-layer sharding


_SHORT = {"replicate": "rep", "column": "col", "row": "row"}
_OPS = {"all_reduce": "AR", "all_gather": "AG", "reduce_scatter": "RS"}


def _ops(plan: A.ShardingPlan) -> str:
    ops = [_OPS[op] for _, op, _, _ in plan.collectives if op != "compute"]
    return ",".join(ops) if ops else "none"


def sharding_chains(h: int = 1024) -> dict:
    """The chains `sharding_table` shows: a Megatron MLP, a deeper chain with an odd number of
    layers, and a tiny chain where communication costs more than it saves."""
    return {"h→4h→h": (h, 4 * h, h), "h→4h→4h→h": (h, 4 * h, 4 * h, h), "64→64→64": (64, 64, 64)}


def sharding_table(h: int = 1024, tokens: int = 4096, devices: int = 8, link=NVLINK,
                   flops_per_s: float = 100e12, training: bool = True) -> Table:
    """Per-layer sharding (replicate / column / row) of linear chains on ``devices`` devices of
    one node (``link`` = (α, β), default NVLink-class 150 GB/s, 2 µs; ``flops_per_s`` each;
    bf16 activations of ``tokens`` rows; forward + backward when ``training``): the DP's choice
    (`plan_sharding`), brute force over all 3ⁿ choices, and the simple column/row rule, with the
    collectives each needs in order (AR all-reduce, AG all-gather, RS reduce-scatter), the
    communication and compute time and the total (ms)."""
    h = check_int("sharding_table", "h", h, minimum=1)
    alpha, beta = link
    rows = []
    for name, dims in sharding_chains(h).items():
        prob = A.ShardingProblem(dims, tokens, devices, alpha, beta, flops_per_s, 2, training)
        plans = (("DP", A.plan_sharding(prob)), ("brute force", A.brute_force_sharding(prob)),
                 ("column/row rule", A.sharding_cost(prob, A.megatron_rule(prob.layers))))
        for method, plan in plans:
            rows.append((name, method, ",".join(_SHORT[c] for c in plan.choices), _ops(plan), plan.comm_s * 1e3,
                         plan.compute_s * 1e3, plan.cost_s * 1e3))
    return Table(["chain", "method", "choices", "collectives", "comm ms", "compute ms", "total ms"], rows,
                 formats={"comm ms": ".4f", "compute ms": ".4f", "total ms": ".4f"},
                 title=f"h = {h}, {tokens} tokens, t = {devices}, {1 / beta / 1e9:g} GB/s, {alpha * 1e6:g} µs, "
                       f"{flops_per_s / 1e12:g} TFLOP/s, {'training' if training else 'forward only'}")


__all__ = ["NVLINK", "IB_HDR", "topology_table", "default_topologies", "hierarchical_table",
           "all_reduce_model_table", "placement_table", "scheduler_table", "balance_table",
           "measured_layer_costs", "stage_partition_table", "sharding_chains", "sharding_table"]


# ---------------------------------------------------------------- routing, dead links, packing, rebalancing


def striping_table(k: int = 4, seeds=range(200)) -> Table:
    """Random permutations (every host sends 1 unit to one other host, seeded) on a k-ary fat tree,
    routed by ECMP hashing, link balancing (least-loaded path first) and striping over every
    shortest path (`routing.link_loads`): the bottleneck link's load — the transfer's time in units
    of one unit over one link — its mean and worst over the permutations, and how often it
    exceeds 1 (some link carries two flows' worth while others idle)."""
    topo = T.fat_tree(k)
    rows = []
    for routing in R.ROUTINGS:
        worst = [max(R.link_loads(topo, R.permutation_flows(topo.hosts, s), routing, seed=s).values()) for s in seeds]
        rows.append((routing, sum(worst) / len(worst), max(worst), 100 * sum(w > 1 + 1e-9 for w in worst) / len(worst)))
    paths = [len(R.shortest_paths(topo, 0, h)) for h in (1, k // 2, k ** 3 // 4 - 1)]
    return Table(["routing", "mean bottleneck", "worst", "% above 1"], rows,
                 formats={"mean bottleneck": ".3f", "worst": ".2f", "% above 1": ".1f"},
                 title=f"fat tree k={k} ({len(topo.hosts)} hosts), {len(list(seeds))} permutations; paths per pair: "
                       f"{paths[0]} same edge, {paths[1]} same pod, {paths[2]} across pods")


def flit_table(hops=(1, 2, 4, 8), flits: int = 32, router_cycles: int = 1) -> Table:
    """One message of ``flits`` flits over each number of hops, simulated cycle by cycle
    (`routing.simulate_flits`) with store-and-forward and worm-hole routing, next to the closed
    forms h·(r + L) and h·(r + 1) + L − 1."""
    rows = []
    for h in hops:
        saf = R.simulate_flits(h, flits, "store_and_forward", router_cycles)["cycles"]
        wh = R.simulate_flits(h, flits, "wormhole", router_cycles)["cycles"]
        rows.append((h, saf, R.saf_cycles(h, flits, router_cycles), wh, R.wormhole_cycles(h, flits, router_cycles),
                     saf / wh))
    return Table(["hops", "store-and-forward", "h(r+L)", "worm-hole", "h(r+1)+L-1", "ratio"], rows,
                 formats={"ratio": ".2f"},
                 title=f"{flits} flits, {router_cycles} cycle(s) to route the head at each hop; cycles")


def dead_link_table(topologies=None) -> Table:
    """Each topology whole and with one link dead (for the fat tree, an aggregation–core link):
    diameter and bisection width from the graph (`topology`), and the bottleneck load
    of an all-to-all (every host 1 unit to every other, striped over the shortest paths that are
    left: `routing.link_loads`) — its growth is the all-to-all's slow-down."""
    topos = [T.ring(8), T.torus2d(4, 4), T.fat_tree(4)] if topologies is None else list(topologies)
    rows = []
    for t in topos:
        inner = [l for l in t.links() if t.roles[l[0]] != "host" and t.roles[l[1]] != "host"]
        dead = R.without_links(t, [inner[-1] if t.kind == "fat_tree" else t.links()[0]])
        flows = R.all_to_all_flows(t.hosts)
        b0, b1 = T.bisection_width(t), T.bisection_width(dead)
        l0, l1 = max(R.link_loads(t, flows).values()), max(R.link_loads(dead, flows).values())
        rows.append((_label(t), T.diameter(t), T.diameter(dead), b0, b1, 100 * (b0 - b1) / b0, l1 / l0))
    return Table(["topology", "diameter", "diam., dead", "bisection", "bisec., dead", "lost %", "all-to-all x"],
                 rows, formats={"lost %": ".1f", "all-to-all x": ".3f"},
                 title="one link dead, traffic re-routed on the shortest paths that remain")


PACK_NODE = (8, 64, 512)   # GPUs, CPU cores, GB of memory per node


def packing_table(jobs: int = 12, seeds=range(200), capacity=PACK_NODE) -> tuple:
    """``jobs`` random jobs (`packing.random_jobs`, seeded) on nodes of ``capacity`` (GPUs, cores,
    GB): nodes used by first fit in arrival order, first-fit decreasing (by largest share and by
    sum of shares) and the exact optimum, with every resource and with the GPUs alone; the mean
    over the seeds, how often each rule needs more nodes than the optimum, its worst ratio, and
    "% not optimal": how often the rule's count differs from the optimum (above it; the lower
    bound: below), "worst ratio" the largest factor between them. Returns (Table, {resource: the
    mean free share of it on the nodes FFD uses})."""
    cap = tuple(capacity)
    res = {name: [] for name in ("lower bound", "first fit", "FFD, largest share", "FFD, sum of shares", "optimum",
                                 "GPUs only: FFD", "GPUs only: optimum")}
    free = []
    for s in seeds:
        d = P.random_jobs(jobs, s, cap)
        opt = P.optimal_bins(d, cap)[0]
        ffd = P.first_fit_decreasing(d, cap, "max")
        free.append(P.stranded(d, cap, ffd))
        g = d[:, :1]
        got = {"lower bound": P.lower_bound(d, cap), "first fit": P.nodes_used(P.first_fit(d, cap)),
               "FFD, largest share": P.nodes_used(ffd),
               "FFD, sum of shares": P.nodes_used(P.first_fit_decreasing(d, cap, "sum")), "optimum": opt,
               "GPUs only: FFD": P.nodes_used(P.first_fit_decreasing(g, cap[:1])),
               "GPUs only: optimum": P.optimal_bins(g, cap[:1])[0]}
        for name, n in got.items():
            res[name].append((n, got["GPUs only: optimum"] if name.startswith("GPUs") else opt))
    rows = []
    for name, pairs in res.items():
        n = len(pairs)
        rows.append((name, sum(a for a, _ in pairs) / n, 100 * sum(a != b for a, b in pairs) / n,
                     max(max(a / b, b / a) for a, b in pairs)))
    mean_free = {name: sum(f[i] for f in free) / len(free) for i, name in enumerate(("GPUs", "cores", "memory"))}
    table = Table(["rule", "mean nodes", "% not optimal", "worst ratio"], rows,
                  formats={"mean nodes": ".3f", "% not optimal": ".1f", "worst ratio": ".3f"},
                  title=f"{jobs} jobs on nodes of {cap[0]} GPUs, {cap[1]} cores, {cap[2]} GB; {len(free)} seeds")
    return table, mean_free


def rebalance_table(thresholds=(0.0, 0.1, 0.2, 0.3, 0.5, 1.0, math.inf), workers: int = 16, steps: int = 500,
                    rebalance_s: float = 0.5, sigma: float = 0.1, seed: int = 0) -> Table:
    """`balance.threshold_rebalancing` at each threshold (the same drift): rebalances, seconds of
    steps, of rebalancing and in all, the worst max/mean load a step ran with (never above
    1 + threshold), and the total over the best threshold's."""
    runs = {th: B.threshold_rebalancing(workers, steps, th, rebalance_s, sigma, seed) for th in thresholds}
    best = min(r.total_s for r in runs.values())
    rows = [("never" if th == math.inf else f"{th:g}", r.rebalances, r.steps_s, r.rebalances * rebalance_s, r.total_s,
             float(r.max_over_mean.max()), r.total_s / best) for th, r in runs.items()]
    return Table(["threshold", "rebalances", "steps s", "rebalancing s", "total s", "worst max/mean", "÷ best"], rows,
                 formats={"steps s": ".1f", "rebalancing s": ".1f", "total s": ".1f", "worst max/mean": ".3f",
                          "÷ best": ".2f"},
                 title=f"{workers} workers, {steps} steps, loads drifting (log-std {sigma:g} a step); "
                       f"a rebalance costs {rebalance_s:g} s")


def locality_table(nodes: int = 100, replicas: int = 3, free: int = 5, waits=(0, 5, 10, 20, 40),
                   trials: int = 20000, seed: int = 0) -> Table:
    """Delay scheduling (`scheduler.local_probability`): the chance a job runs beside its data after
    waiting for up to D node releases, closed form next to a Monte Carlo of ``trials`` (with its
    standard error), the mean releases waited, and what that wait is in seconds when the ``nodes``
    busy nodes run jobs of 1 minute and of 1 hour (one release every duration / nodes on average)."""
    rows = []
    for d in waits:
        p = S.local_probability(nodes, replicas, free, d)
        sim = S.simulate_locality(nodes, replicas, free, d, trials, seed + d)
        se = math.sqrt(max(p * (1 - p), 1e-12) / trials)
        rows.append((d, p, sim["local"], se, sim["waited"], sim["waited"] * 60 / nodes, sim["waited"] * 3600 / nodes))
    return Table(["wait D", "local", "simulated", "+-", "releases waited", "1-min jobs s", "1-h jobs s"], rows,
                 formats={"local": ".3f", "simulated": ".3f", "+-": ".3f", "releases waited": ".2f",
                          "1-min jobs s": ".1f", "1-h jobs s": ".0f"},
                 title=f"{nodes} nodes, {replicas} copies of the input, {free} nodes free; {trials} trials each")
