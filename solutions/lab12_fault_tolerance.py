"""Lab 12 reference answers: fault tolerance (see exercises/lab12_fault_tolerance.py)."""
import math
import os
import random
import tempfile

import numpy as np
import torch


def atomic_save(data, path):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".atomic-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def resume_state(sampler, state=None):
    if state is None:
        out = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
               "sampler": sampler.state_dict()}
        if torch.cuda.is_available():
            out["cuda"] = torch.cuda.get_rng_state_all()
        return out
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
    sampler.load_state_dict(state["sampler"])
    return None


def young_interval(checkpoint_s, mtbf_s):
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def simulate_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s, runs, seed):
    rng = np.random.default_rng(seed)
    n = math.ceil(work_s / interval_s)
    segments = [interval_s] * (n - 1) + [work_s - (n - 1) * interval_s]
    walls = np.empty(runs)
    for k in range(runs):
        wall = 0.0
        for work in segments:
            length = work + checkpoint_s
            while True:
                life = rng.exponential(mtbf_s)
                if life >= length:
                    wall += length
                    break
                wall += life                                   # the attempt is lost
                while True:                                   # restart, which may fail too
                    life = rng.exponential(mtbf_s)
                    if life >= restart_s:
                        wall += restart_s
                        break
                    wall += life
        walls[k] = wall
    return float(walls.mean()), float(walls.std(ddof=1) / math.sqrt(runs))


def abft_locate(full, tol):
    rows = full[:-1, :-1].sum(1) - full[:-1, -1]               # (m,)
    cols = full[:-1, :-1].sum(0) - full[-1, :-1]               # (n,)
    bad_rows = (rows.abs() > tol).nonzero().flatten().tolist()
    bad_cols = (cols.abs() > tol).nonzero().flatten().tolist()
    if not bad_rows and not bad_cols:
        return None
    return bad_rows[0], bad_cols[0]
