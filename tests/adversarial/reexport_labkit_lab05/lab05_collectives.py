# Attack: re-export labkit's own collectives.
from labkit.collectives import (recursive_doubling_all_reduce, ring_all_gather_chunks,  # noqa: F401
                                ring_all_reduce, ring_reduce_scatter_chunks, tree_broadcast)
