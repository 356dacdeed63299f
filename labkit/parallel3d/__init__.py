"""Lab 11: 3D parallelism — data × tensor × pipeline parallel training of `labkit.model.GPT` on real
ranks, composed from Labs 06 (data), 07 (tensor) and 08 (pipeline).

    grid.py         rank order (tp innermost, then dp, then pp), `coords`, `groups`, DeviceMesh groups
    stages.py       a pipeline stage of the GPT with tensor-parallel blocks; the tied embedding
    train.py        one training step on the grid; launching; the one-process reference; timings
    comm_bytes.py   bytes per step along each dimension, closed form and as recorded
    torchrun_3d.py  the same training under ``torchrun`` (several machines)
    lab.py          the notebook's one-liners (runs on grids, their tables) and the grid exercises' pictures

The planner (`labkit.planner`) imports this package's grid; nothing here imports the planner.
"""
from labkit.parallel3d.comm_bytes import bytes_per_step, rank_bytes_per_step
from labkit.parallel3d.grid import Coord, coords, embedding_groups, groups
from labkit.parallel3d.train import (Run3D, Timeline3D, TrainSetup, reference_training, time_grid, timeline_3d,
                                     train_3d, train_3d_many)

__all__ = ["Coord", "Run3D", "Timeline3D", "TrainSetup", "bytes_per_step", "coords", "embedding_groups", "groups",
           "rank_bytes_per_step", "reference_training", "time_grid", "timeline_3d", "train_3d", "train_3d_many"]
