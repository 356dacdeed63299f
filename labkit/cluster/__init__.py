"""Lab 11 (part): placement, topology and balance on a cluster.

    topology.py      ring / 2-D torus / hypercube / k-ary fat tree as graphs; diameter, degree and
                     bisection width computed from the graph, next to their closed forms
    hierarchical.py  two-level all-reduce (intra-node reduce-scatter, inter-node all-reduce,
                     intra-node all-gather) on real ranks, bytes per link class, α–β model vs a flat ring
    placement.py     ranks → nodes as graph partitioning: naive, random, Kernighan–Lin, exact optimum
    scheduler.py     a multi-node cluster receiving jobs: first-fit / best-fit / topology-aware,
                     fragmentation, utilisation, queueing delay (FIFO, head-of-line blocking); data
                     locality under delay scheduling
    balance.py       static vs greedy (Graham) vs work stealing (Blumofe–Leiserson); heterogeneous devices;
                     threshold rebalancing of drifting loads
    routing.py       shortest paths, ECMP hashing vs link balancing vs multi-path striping; store-and-
                     forward vs worm-hole latency (flit simulation); a topology with dead links
    packing.py       multi-resource bin packing: first fit, first-fit decreasing, exact optimum
    autoparallel.py  pipeline stage partitioning by DP (`partition_stages`), measured GPT layer costs,
                     per-layer sharding (replicate / column / row) by DP, as in Alpa's intra-op pass
"""
from labkit.cluster.autoparallel import (CHOICES, LayerCosts, ShardingPlan, ShardingProblem, StagePlan,
                                         brute_force_sharding, brute_force_stages, measure_layer_costs,
                                         megatron_rule, partition_stages, plan_sharding, plan_stages,
                                         sharding_cost)
from labkit.cluster.balance import (Assignment, BalanceComparison, ForkJoin, Imbalance, RebalanceRun, StealResult,
                                    compare_balancing, earliest_finish, fork_join, graham_bound, imbalance,
                                    list_schedule, lower_bound, optimal_makespan, proportional_split,
                                    simulate_work_stealing, skewed_times, static_assignment, threshold_rebalancing)
from labkit.cluster.hierarchical import (AllReduceComparison, HierarchyGroups, LinkBytes, compare_all_reduce,
                                         crossover_bytes, flat_ring_link_bytes, flat_ring_time,
                                         hierarchical_all_reduce, hierarchical_all_reduce_rings,
                                         hierarchical_bytes, hierarchical_time, make_groups, rank_groups)
from labkit.cluster.packing import (first_fit, first_fit_decreasing, nodes_used, optimal_bins, random_jobs,
                                    size_order, stranded)
from labkit.cluster.placement import (KLResult, PlacementComparison, compare_placements, cross_node_bytes,
                                      grid_coords, grid_graph, kernighan_lin, naive_placement, optimal_placement,
                                      random_placement)
from labkit.cluster.routing import (ROUTINGS, all_to_all_flows, dead_link_closed_form, link_loads, mean_hops,
                                    permutation_flows, saf_cycles, shortest_paths, simulate_flits, without_links,
                                    wormhole_cycles)
from labkit.cluster.scheduler import (POLICIES, ClusterResult, Job, JobRecord, compare_policies, job_stream,
                                      local_probability, place, simulate_cluster, simulate_locality)
from labkit.cluster.topology import (Topology, TopologyMetrics, bfs_distances, bisection_width, cut_size,
                                     degree_range, diameter, fat_tree, formulas, host_bisection_width, hypercube,
                                     measure, ring, torus2d)

__all__ = [
    # topology
    "Topology", "TopologyMetrics", "ring", "torus2d", "hypercube", "fat_tree", "bfs_distances", "diameter",
    "degree_range", "cut_size", "bisection_width", "host_bisection_width", "measure", "formulas",
    # hierarchical
    "rank_groups", "HierarchyGroups", "make_groups", "hierarchical_all_reduce", "LinkBytes",
    "hierarchical_all_reduce_rings", "flat_ring_link_bytes", "hierarchical_bytes", "hierarchical_time",
    "flat_ring_time", "AllReduceComparison", "compare_all_reduce", "crossover_bytes",
    # placement
    "grid_coords", "grid_graph", "cross_node_bytes", "naive_placement", "random_placement", "KLResult",
    "kernighan_lin", "optimal_placement", "PlacementComparison", "compare_placements",
    # scheduler
    "POLICIES", "Job", "job_stream", "place", "JobRecord", "ClusterResult", "simulate_cluster", "compare_policies",
    "local_probability", "simulate_locality",
    # balance
    "skewed_times", "Imbalance", "imbalance", "Assignment", "static_assignment", "list_schedule", "lower_bound",
    "graham_bound", "optimal_makespan", "proportional_split", "earliest_finish", "ForkJoin", "fork_join",
    "StealResult", "simulate_work_stealing", "BalanceComparison", "compare_balancing", "RebalanceRun",
    "threshold_rebalancing",
    # routing
    "ROUTINGS", "shortest_paths", "link_loads", "permutation_flows", "all_to_all_flows", "saf_cycles",
    "wormhole_cycles", "simulate_flits", "without_links", "dead_link_closed_form", "mean_hops",
    # packing (its lower_bound stays packing.lower_bound: balance's is exported)
    "size_order", "first_fit", "first_fit_decreasing", "nodes_used", "optimal_bins", "stranded", "random_jobs",
    # autoparallel
    "partition_stages", "brute_force_stages", "StagePlan", "plan_stages", "LayerCosts", "measure_layer_costs",
    "CHOICES", "ShardingProblem", "ShardingPlan", "sharding_cost", "plan_sharding", "brute_force_sharding",
    "megatron_rule",
]
