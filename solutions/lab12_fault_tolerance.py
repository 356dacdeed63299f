"""Lab 12 exercises: fault tolerance.

Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.

- ``atomic_save``: write a file so that a crash at any moment leaves the old one or the new one;
- ``resume_state``: everything besides the weights that a bit-identical resume needs;
- ``young_interval``: how often to checkpoint, to first order;
- ``simulate_wall_time``: a Monte Carlo of a job that fails, checkpoints and restarts;
- ``abft_locate``: find the one wrong element of a matrix product from its checksums;
- ``peer_ranks``: where each rank's in-memory checkpoint copy goes, so that no node's loss loses one.
"""
import math
import os
import random
import tempfile

import numpy as np
import torch


def atomic_save(data, path):
    """Write the bytes ``data`` to the file ``path`` so that a crash at any moment — before,
    during or after the write — leaves at ``path`` either its old contents (or no file, if there
    was none) or exactly ``data``, never a part of it.

    Write to a new temporary file in the same folder (a rename works only within one file
    system), flush it and os.fsync it, then os.replace it onto ``path`` (atomic), and finally
    fsync the folder (open it with os.open(folder, os.O_RDONLY)) so the rename is durable.
    Never open ``path`` itself for writing. Returns None.

    The grader kills your save at each step (before the write, mid-write, before and after the
    rename) and checks what is found at ``path``, that the file was fsync-ed whole before the
    rename and the folder after it, and that ``path`` was never opened for writing. It does not
    check permission bits: a file made by tempfile.mkstemp is readable and writable by its owner
    only (mode 0o600), which suits a checkpoint, and is what ours leaves at ``path``.
    """
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
    """Capture (``state is None``) or restore (given a state) what an exact resume needs besides
    the weights, the optimizer and the learning-rate schedule.

    sampler: the run's data sampler, with ``sampler.state_dict()`` -> dict and
        ``sampler.load_state_dict(d)`` (its epoch and position in the shuffled data).
    Capture: return a dict holding the sampler's state and the state of every random-number
    generator the training uses: Python's ``random`` (random.getstate()), NumPy's global one
    (np.random.get_state()), torch's CPU generator (torch.get_rng_state()) and, when
    torch.cuda.is_available(), every CUDA device's (torch.cuda.get_rng_state_all()). The grader
    saves the dict with torch.save and, in a fresh, differently seeded process, loads it back
    with ``torch.load(path, weights_only=False)``: NumPy's state (a tuple holding an ndarray, which
    a ``weights_only=True`` load refuses) may stay as np.random.get_state() returns it.
    Restore (``state`` given): put every generator and the sampler back as captured; return None.
    """
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
    """Young's optimal checkpoint interval (seconds of work between checkpoints), to first order:
    minimise the wasted fraction C/τ + τ/(2M) — checkpoints, plus on average half an interval lost
    per failure — over τ. checkpoint_s: C, seconds one checkpoint takes; mtbf_s: M, the mean time
    between failures of the whole job (seconds). Returns a float."""
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def simulate_wall_time(work_s, interval_s, checkpoint_s, restart_s, mtbf_s, runs, seed):
    """Monte Carlo estimate of a job's expected wall time (seconds); returns (mean, standard error).

    The job needs ``work_s`` seconds of work, done in segments of ``interval_s`` seconds of work
    (the last one holds what is left) each followed by a checkpoint of ``checkpoint_s`` seconds.
    Failures arrive as a Poisson process in wall time with mean gap ``mtbf_s``: after each attempt
    starts, draw the time to the next failure from an exponential distribution (mean mtbf_s). An
    attempt at a segment (work plus its checkpoint) that a failure interrupts is lost entirely and
    is followed by a restart of ``restart_s`` seconds — which a failure can interrupt too (then the
    restart starts over) — and then the segment is tried again. Simulate ``runs`` jobs with
    ``np.random.default_rng(seed)``; return (the mean wall time, its standard error: sample
    standard deviation (ddof=1) / sqrt(runs)).
    """
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
    """The one corrupted element of an ABFT product, from its checksums.

    full: (m+1, n+1) float64 tensor, [[C, C·e], [eᵀ·C, eᵀ·C·e]]: the product C = A·B with a column
    of row sums and a row of column sums (computed alongside C), after at most one element of C
    (not of the checksums) was changed. tol: rounding allowance (a float).
    Row i (i < m) disagrees if |sum of full[i, :n] − full[i, n]| > tol; column j (j < n) disagrees
    if |sum of full[:m, j] − full[m, j]| > tol. Return (i, j) as ints when exactly one row and one
    column disagree — that element is the wrong one — and None when none disagrees.
    """
    rows = full[:-1, :-1].sum(1) - full[:-1, -1]               # (m,)
    cols = full[:-1, :-1].sum(0) - full[-1, :-1]               # (n,)
    bad_rows = (rows.abs() > tol).nonzero().flatten().tolist()
    bad_cols = (cols.abs() > tol).nonzero().flatten().tolist()
    if not bad_rows and not bad_cols:
        return None
    return bad_rows[0], bad_cols[0]


def peer_ranks(world, per_node):
    """Where each rank's in-memory checkpoint copy is kept, for hierarchical checkpoints.

    world ranks sit on world // per_node nodes of per_node consecutive ranks (node of rank r:
    r // per_node); world is a multiple of per_node with at least 2 nodes. Every rank keeps its
    own snapshot in its node's memory and sends a copy to another rank, so that losing one node
    (its memory) loses no checkpoint. Return a list peers of world ints, peers[r] = the rank that
    keeps rank r's copy, such that
    - peers[r] is on a different node than r (never r itself), and
    - every rank keeps exactly one copy (peers is a permutation of 0..world-1: equal memory).
    Example: world 4, per_node 2 -> [2, 3, 0, 1] is one answer.
    """
    return [(r + per_node) % world for r in range(world)]
