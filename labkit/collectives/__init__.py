"""Lab 05: collectives built from point-to-point messages, their simulator and cost model.

Real implementations (run inside a process group, e.g. under labkit.dist.launch;
only isend/irecv are used, never torch.distributed's own collectives; in place,
sum reduction, each returns the calling rank's `CommStats`):

    ring_all_reduce(tensor)                 ring_reduce_scatter(output, input)
    ring_all_gather(output, input)          tree_broadcast(tensor, src)
    tree_reduce(tensor, dst)                recursive_doubling_all_reduce(tensor)
    ring_reduce_scatter_chunks(buf, bounds) ring_all_gather_chunks(buf, bounds)

Modules: stats (CommStats), chunking (the uneven-chunk rule), p2p (exchange:
the one isend/irecv round), ring, tree, recursive, formulas (bytes per rank),
simulate (pure trace), alpha_beta (cost model and fit), primitives (what the
seven primitives leave on each rank).
"""
from labkit.collectives.alpha_beta import coefficients, crossover_bytes, fit_alpha_beta, predict_time
from labkit.collectives.chunking import chunk_bounds, chunk_sizes
from labkit.collectives.p2p import exchange, recording
from labkit.collectives.primitives import PRIMITIVES, primitive_states
from labkit.collectives.recursive import recursive_doubling_all_reduce
from labkit.collectives.ring import (ring_all_gather, ring_all_gather_chunks, ring_all_reduce,
                                     ring_reduce_scatter, ring_reduce_scatter_chunks)
from labkit.collectives.simulate import trace_collective
from labkit.collectives.stats import CommStats
from labkit.collectives.tree import tree_broadcast, tree_reduce

__all__ = [
    "CommStats", "chunk_bounds", "chunk_sizes", "exchange", "recording",
    "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather",
    "ring_reduce_scatter_chunks", "ring_all_gather_chunks",
    "tree_broadcast", "tree_reduce", "recursive_doubling_all_reduce",
    "trace_collective", "PRIMITIVES", "primitive_states", "coefficients", "predict_time", "fit_alpha_beta",
    "crossover_bytes",
]
