"""Known-wrong: a failure is charged a whole segment, not the time the attempt had run."""
from solutions.lab12_fault_tolerance import math, np


def simulate_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s, runs, seed):
    rng = np.random.default_rng(seed)
    n = math.ceil(work_s / interval_s)
    segments = [interval_s] * (n - 1) + [work_s - (n - 1) * interval_s]
    walls = np.empty(runs)
    for k in range(runs):
        wall = 0.0
        for work in segments:
            length = work + checkpoint_s
            while rng.exponential(mtbf_s) < length:
                wall += length + restart_s                     # BUG: the whole segment, not the time run
            wall += length
        walls[k] = wall
    return float(walls.mean()), float(walls.std(ddof=1) / math.sqrt(runs))
