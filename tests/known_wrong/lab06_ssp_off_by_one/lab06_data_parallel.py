"""Known-wrong: SSP waits for the slowest to finish c - s + 1 iterations (one clock too strict)."""
from solutions.lab06_data_parallel import *  # noqa: F401,F403


def ssp_start_times(durations, staleness):
    workers, n = len(durations), len(durations[0])
    start = [[0] * n for _ in range(workers)]
    finish = [[0] * n for _ in range(workers)]
    for c in range(n):
        gate = 0
        if staleness is not None and c - staleness >= 1:
            gate = max(finish[j][c - staleness] for j in range(workers))  # BUG: index c - s, not c - s - 1
        for k in range(workers):
            start[k][c] = max(finish[k][c - 1] if c else 0, gate)
            finish[k][c] = start[k][c] + durations[k][c]
    return start
