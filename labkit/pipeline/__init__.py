"""Lab 08: pipeline parallelism.

- `schedules`: `Action`, `schedule(kind, p, m, v)` for gpipe / 1f1b / interleaved_1f1b / interleaved_zb,
  `check_schedule` (names the first violated dependency)
- `simulate`: event-driven timing -> makespan, bubble fraction, activation memory in flight
- `async_sim`: PipeDream / PipeDream-2BW weight versions (asynchronous schedules)
- `executor`: runs any valid schedule on real gloo ranks for an MLP split into stages
- `torch_ref`: the same things through PyTorch's torch.distributed.pipelining, for cross-checks
"""
from labkit.pipeline.schedules import (Action, ScheduleError, check_schedule, dependencies, is_valid,
                                       schedule, KINDS)
from labkit.pipeline.simulate import Interval, SimResult, simulate

__all__ = ["Action", "ScheduleError", "check_schedule", "dependencies", "is_valid", "schedule", "KINDS",
           "Interval", "SimResult", "simulate"]
