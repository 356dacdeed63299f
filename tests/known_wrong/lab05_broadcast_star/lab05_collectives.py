"""Known-wrong: broadcast as a star (root sends to everyone) — right values, but N-1 messages from the root."""
from solutions.lab05_collectives import *  # noqa: F401,F403
from solutions.lab05_collectives import CommStats, dist, exchange


def tree_broadcast(tensor, src):
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    if rank == src:
        for other in range(n):
            if other != src:
                exchange(stats, send=tensor, dst=other)
    else:
        exchange(stats, recv=tensor, src=src)
    return stats
