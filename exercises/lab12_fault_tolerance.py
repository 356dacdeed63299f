"""Lab 12 exercises: fault tolerance.

Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API).

- ``atomic_save``: write a file so that a crash at any moment leaves the old one or the new one;
- ``resume_state``: everything besides the weights that a bit-identical resume needs;
- ``young_interval``: how often to checkpoint, to first order;
- ``simulate_wall_time``: a Monte Carlo of a job that fails, checkpoints and restarts;
- ``abft_locate``: find the one wrong element of a matrix product from its checksums;
- ``peer_ranks``: where each rank's in-memory checkpoint copy goes, so that no node's loss loses one.
"""
import math  # noqa: F401
import os  # noqa: F401
import random  # noqa: F401
import tempfile  # noqa: F401

import numpy as np  # noqa: F401
import torch  # noqa: F401


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
    raise NotImplementedError("hint: never let the target hold a half-written file: build the new contents elsewhere on the same file system and swap them in with one atomic step; then ask: which of your steps could a power cut still undo (os.fsync)?")


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
    raise NotImplementedError("hint: an exact resume replays the same random draws and the same data order: list every source of randomness the training loop uses, and the sampler's position.")


def young_interval(checkpoint_s, mtbf_s):
    """Young's optimal checkpoint interval (seconds of work between checkpoints), to first order:
    minimise the wasted fraction C/τ + τ/(2M) — checkpoints, plus on average half an interval lost
    per failure — over τ. checkpoint_s: C, seconds one checkpoint takes; mtbf_s: M, the mean time
    between failures of the whole job (seconds). Returns a float."""
    raise NotImplementedError("hint: balance the time spent writing checkpoints against the work lost at a failure (half an interval on average); math.sqrt of the optimum.")


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
    raise NotImplementedError("hint: one numpy Generator; each segment of work plus its checkpoint is retried until an exponential lifetime outlasts it, and a restart can fail too; mean and standard error over runs.")


def abft_locate(full, tol):
    """The one corrupted element of an ABFT product, from its checksums.

    full: (m+1, n+1) float64 tensor, [[C, C·e], [eᵀ·C, eᵀ·C·e]]: the product C = A·B with a column
    of row sums and a row of column sums (computed alongside C), after at most one element of C
    (not of the checksums) was changed. tol: rounding allowance (a float).
    Row i (i < m) disagrees if |sum of full[i, :n] − full[i, n]| > tol; column j (j < n) disagrees
    if |sum of full[:m, j] − full[m, j]| > tol. Return (i, j) as ints when exactly one row and one
    column disagree — that element is the wrong one — and None when none disagrees.
    """
    raise NotImplementedError("hint: compare the stored checksum row and column with fresh sums of the product; the one wrong element sits where the bad row and the bad column cross.")


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
    raise NotImplementedError("hint: find a rule that moves every rank off its node and is one-to-one: think of the nodes as a ring.")
