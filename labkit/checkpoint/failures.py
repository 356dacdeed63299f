"""A rank dies mid-run; a supervisor restarts the job from its last checkpoint; the result is the
uninterrupted run's, bit for bit.

    result = supervise(4, RUN, steps=12, folder=folder, kill=(2, 7))

``supervise`` is the smallest useful job manager: it launches the training on ``world`` ranks
(`labkit.dist.launch`); when a rank dies — here killed with SIGKILL right after step 7, as a
crashed node would be — the launch ends with a `labkit.dist.RankError` naming the dead rank
(``exc_type == "RankDied"``) and every other rank is stopped. The supervisor then launches again,
and every rank resumes from its newest good checkpoint (step 6, with a checkpoint every 2 steps):
steps 7 and 8's work is done twice, and nothing else is lost. A run that keeps failing gives up
after ``max_restarts``. This is what torchrun's elastic agent does for real clusters
(`labkit.checkpoint.elastic` runs the same training under it).

``continue_on_fewer`` goes on with one rank less instead of waiting for a replacement (graceful
degradation): each remaining rank keeps its slice of the batch, so the global batch shrinks from
N·b to (N − 1)·b, and the learning rate is scaled by (N − 1)/N (the linear scaling rule, Lab 06).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from labkit.checkpoint.resume import RunConfig, train
from labkit.checks import check_int
from labkit.dist import RankError, launch


@dataclass(frozen=True)
class Supervised:
    """What a supervised run did: ``result`` (rank 0's `train` result), the ``attempts`` made,
    and a ``log`` of one line per attempt (lines <= 100 characters)."""

    result: dict
    attempts: int
    log: tuple


def supervise(world: int, run: RunConfig, steps: int, folder, kill: tuple | None = None, max_restarts: int = 3,
              timeout: float = 120.0) -> Supervised:
    """Train on ``world`` ranks with checkpoints in ``folder``, killing rank ``kill[0]`` after step
    ``kill[1]`` in the first attempt only; restart after each dead rank, up to ``max_restarts``."""
    check_int("supervise", "world", world, minimum=1)
    check_int("supervise", "max_restarts", max_restarts, minimum=0)
    log = []
    for attempt in range(max_restarts + 1):
        try:
            results = launch(train, world, run, steps, folder, True, None, kill if attempt == 0 else None,
                             backend="gloo", timeout=timeout, quiet=True)
        except RankError as e:
            if e.exc_type != "RankDied":
                raise
            log.append(f"attempt {attempt + 1}: rank {e.rank} died; restarting")
            continue
        log.append(f"attempt {attempt + 1}: resumed from step {results[0]['resumed_from']}, finished step "
                   f"{results[0]['step']}")
        return Supervised(results[0], attempt + 1, tuple(log))
    raise RuntimeError(f"supervise: the run failed {max_restarts + 1} times; giving up ({log[-1]})")


def smaller(run: RunConfig, world: int, fewer: int) -> RunConfig:
    """The run on ``fewer`` ranks instead of ``world``: per-rank batch kept, learning rate scaled."""
    per_rank = run.batch // world
    return dataclasses.replace(run, batch=per_rank * fewer, lr=run.lr * fewer / world)


def continue_on_fewer(world: int, run: RunConfig, steps: int, folder, kill: tuple,
                      timeout: float = 120.0) -> Supervised:
    """Train on ``world`` ranks until rank ``kill[0]`` dies after step ``kill[1]``; go on from the
    last checkpoint on ``world − 1`` ranks with `smaller`'s batch and learning rate."""
    check_int("continue_on_fewer", "world", world, minimum=2)
    log = []
    try:
        launch(train, world, run, steps, folder, True, None, kill, backend="gloo", timeout=timeout, quiet=True)
        raise RuntimeError("continue_on_fewer: no rank died; nothing to continue from")
    except RankError as e:
        if e.exc_type != "RankDied":
            raise
        log.append(f"{world} ranks: rank {e.rank} died after step {kill[1]}")
    less = smaller(run, world, world - 1)
    results = launch(train, world - 1, less, steps, folder, True, backend="gloo", timeout=timeout, quiet=True)
    log.append(f"{world - 1} ranks: resumed from step {results[0]['resumed_from']} with batch {less.batch}, "
               f"lr {less.lr:g}")
    return Supervised(results[0], 2, tuple(log))
