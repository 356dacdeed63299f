"""Pipeline step time: labkit's gloo executor vs PyTorch's torch.distributed.pipelining, same config.

For each (schedule, ranks, microbatches, stages per rank) both run the same
seeded MLP (float32, matmul-heavy stages) on real gloo ranks; each side's step
time is rank 0's median wall time between barriers over the steps after each
run's first (warm-up); the two sides alternate run by run. Also reports the
bubble measured on our last run next to the simulator's prediction from the
measured per-stage F/B times.

    .venv/bin/python benchmarks/pipeline.py [--quick]

Writes benchmarks/results/pipeline.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from labkit.bench import write_results  # noqa: E402
from labkit.pipeline import schedule, time_schedule  # noqa: E402
from labkit.pipeline.executor import MLPConfig, measured_bubble, run_pipeline  # noqa: E402
from labkit.pipeline.torch_ref import torch_step  # noqa: E402


def per_stage_times(run, num_stages):
    """Median measured seconds per stage from a recorded timeline: (forward, full backward, weight
    part of a split backward or None). A split backward's full time is median I + median W."""
    def med(s, kind):
        xs = [e - b for tl in run.timeline.values() for a, b, e in tl if a.stage == s and a.kind == kind]
        return statistics.median(xs) if xs else None

    tf = [med(s, "F") for s in range(num_stages)]
    if med(0, "W") is None:
        return tf, [med(s, "B") for s in range(num_stages)], None
    tw = [med(s, "W") for s in range(num_stages)]
    return tf, [med(s, "I") + w for s, w in enumerate(tw)], tw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller model, fewer configs and repeats")
    a = ap.parse_args(argv)
    width, rows, repeats, rounds = (256, 64, 3, 1) if a.quick else (512, 256, 4, 3)
    configs = [("gpipe", 2, 8, 1), ("1f1b", 2, 8, 1), ("interleaved_1f1b", 2, 8, 2)]
    if not a.quick:
        configs += [("interleaved_zb", 2, 8, 2), ("1f1b", 4, 8, 1), ("interleaved_1f1b", 4, 8, 2)]
    rows_out = []
    for kind, p, m, v in configs:
        cfg = MLPConfig(num_stages=p * v, num_microbatches=m, width=width, layers_per_stage=max(1, 4 // v),
                        batch=rows * m, dtype=torch.float32)
        # alternate the two sides so that drifting machine load hits both alike
        ours_t, torch_t = [], []
        for _ in range(rounds):
            ours = run_pipeline(schedule(kind, p, m, v), cfg, repeats=repeats, timeout=300)
            _, _, theirs_times = torch_step(kind, cfg, repeats=repeats, num_ranks=p)
            ours_t += ours.step_times[1:]
            torch_t += theirs_times[1:]
        t_ours = statistics.median(ours_t)
        t_torch = statistics.median(torch_t)
        tf, tb, tw = per_stage_times(ours, cfg.num_stages)
        predicted = float(time_schedule(schedule(kind, p, m, v), tf, tb, weight_time=tw).bubble_fraction)
        rows_out.append([kind, p, m, v, t_ours * 1e3, t_torch * 1e3, t_ours / t_torch,
                         measured_bubble(ours.timeline), predicted, (p - 1) / (v * m + p - 1)])
        print(f"{kind:17s} p={p} m={m} v={v}: ours {t_ours * 1e3:7.1f} ms, torch {t_torch * 1e3:7.1f} ms, "
              f"ratio {t_ours / t_torch:.2f}; bubble measured {rows_out[-1][7]:.3f}, "
              f"simulated from measured times {predicted:.3f}, uniform formula {rows_out[-1][9]:.3f}")
    header = ["schedule", "p", "m", "v", "ours ms", "torch ms", "ours/torch", "bubble measured",
              "bubble simulated", "(p-1)/(vm+p-1)"]
    notes = (f"MLP of Linear({width},{width})+tanh blocks, 4 per rank (split over v stages), {rows} rows per "
             f"microbatch, float32, gloo on CPU, one torch thread per rank. Step time: rank 0, barrier to barrier, "
             f"median of {rounds} x {repeats - 1} steps, each run of {repeats} steps starting with a warm-up step, "
             f"our runs and PyTorch's alternating. 'bubble measured' = 1 - busy/(p x makespan) of our "
             "last step (busy = compute intervals, receive waits excluded); 'bubble simulated' = the simulator fed "
             "the measured median per-stage F/B (or F/I/W) times (no communication cost); the last column is the "
             "uniform-stage formula of the non-split schedules (zero bubble does better in the simulator). With more ranks than cores, ranks "
             "share cores and both numbers say more about the machine than about the schedule.")
    path = write_results("pipeline", "Pipeline parallelism: labkit executor vs torch.distributed.pipelining",
                         header, rows_out, notes, ran_on="cpu (gloo ranks)")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
