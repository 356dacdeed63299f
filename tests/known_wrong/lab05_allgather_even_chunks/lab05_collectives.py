"""Known-wrong: the all-gather assumes equal chunks (offset c * L // N), wrong for uneven sizes."""
from solutions.lab05_collectives import *  # noqa: F401,F403
from solutions.lab05_collectives import CommStats, dist, exchange


def ring_all_gather_chunks(buf, bounds):
    rank, n = dist.get_rank(), dist.get_world_size()
    stats = CommStats()
    size = buf.numel() // n  # BUG: ignores bounds; the last L mod N elements are never sent
    for s in range(n - 1):
        send_c, recv_c = (rank - s) % n, (rank - s - 1) % n
        exchange(stats, send=buf[send_c * size:(send_c + 1) * size], dst=(rank + 1) % n,
                 recv=buf[recv_c * size:(recv_c + 1) * size], src=(rank - 1) % n)
    return stats
