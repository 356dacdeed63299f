"""Lab 08: pipeline parallelism.

- `schedules`: `Action`, `schedule(kind, p, m, v)` for gpipe / 1f1b / interleaved_1f1b / interleaved_zb,
  `check_schedule` (names the first violated dependency)
- `simulate`: `time_schedule`, event-driven timing -> makespan, bubble fraction, activation memory in flight
- `async_sim`: PipeDream / PipeDream-2BW weight versions (asynchronous schedules)
- `executor`: runs any valid schedule on real gloo ranks for an MLP split into stages
- `comm`: the point-to-point messages between stages (tags, NCCL's send order, `StageLinks`)
- `torch_ref`: the same things through PyTorch's torch.distributed.pipelining, for cross-checks
- `chimera`: explicit stage placement (two pipelines in opposite directions) and its simulator
- `dualpipe`: DeepSeek-V3's DualPipe schedule, compared with 1F1B, ZB1P and Chimera
- `terapipe`: token-level pipelining within a sequence; slicing by dynamic programming
- `staleness`: weight staleness per stage of asynchronous pipelines (AMPNet, PipeMare)
"""
from labkit.pipeline.schedules import (Action, ScheduleError, check_schedule, dependencies, is_valid,
                                       schedule, KINDS)
from labkit.pipeline.simulate import Interval, SimResult, time_schedule

__all__ = ["Action", "ScheduleError", "check_schedule", "dependencies", "is_valid", "schedule", "KINDS",
           "Interval", "SimResult", "time_schedule"]
