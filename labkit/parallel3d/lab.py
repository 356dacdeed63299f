"""The Lab 11 notebook's one-liners for real 3D-parallel training, and the grid exercises' pictures.

    run_grids(grids)                the real dp × tp × pp runs on 8 gloo ranks (one launch)
    equivalence_table(runs)         each grid vs one process; replicas and tied copies identical
    counted_bytes_table(run)        bytes counted per dimension on every rank vs the closed forms
    timeline_of(run)                a run's last step, for `labkit.viz.parallel3d.timeline_figure`
    coords_picture(fn), groups_picture(fn)
                                    a learner's rank_coords / group_ranks next to `grid`'s answers

Tables are `labkit.table.Table`s (aligned, lines <= 100 characters).
"""
from __future__ import annotations

from labkit.model import PARALLEL3D_GPT, GPTConfig, parameter_count
from labkit.parallel3d.comm_bytes import DIMENSIONS, bytes_per_step, rank_bytes_per_step
from labkit.parallel3d.grid import coords, groups, nodes_spanned
from labkit.parallel3d.train import Timeline3D, TrainSetup, max_abs_diff, reference_training, train_3d_many
from labkit.table import Table

GRIDS = ((2, 2, 2, 4, "1f1b", "sgd"), (1, 2, 4, 4, "gpipe", "adamw"), (4, 1, 2, 2, "1f1b", "adamw"),
         (2, 1, 4, 4, "1f1b", "sgd"), (1, 4, 2, 2, "gpipe", "sgd"))   # dp, tp, pp, micro-batches, schedule, optimizer


def run_grids(grids=GRIDS, cfg: GPTConfig = PARALLEL3D_GPT, global_batch: int = 16, steps: int = 3, world: int = 8):
    """Train ``cfg`` on every grid (dp, tp, pp, micro-batches, schedule, optimizer) of ``world`` gloo
    ranks, all in one launch, float64; returns the `Run3D`s (labkit.parallel3d.train)."""
    setups = [TrainSetup(dp, tp, pp, global_batch, m, steps=steps, schedule=s, optimizer=o)
              for dp, tp, pp, m, s, o in grids]
    return train_3d_many(cfg, setups, world)


def equivalence_table(runs, cfg: GPTConfig = PARALLEL3D_GPT) -> Table:
    """Each run's parameters vs one process on the whole batch (the same steps), the spread between
    copies that must be identical (dp replicas, the two copies of the tied weight), and whether the
    bytes counted on every rank equal the closed forms."""
    rows = []
    for run in runs:
        s = run.setup
        want, _ = reference_training(cfg, s)
        formula = bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8)
        exact = all(run.total_bytes[d] == formula[d] for d in DIMENSIONS)
        rows.append((f"{s.dp}×{s.tp}×{s.pp}", s.micro_batches, s.schedule, s.optimizer,
                     max_abs_diff(run.params, want), run.replica_spread, "yes" if exact else "NO"))
    return Table(["dp×tp×pp", "m", "schedule", "optimizer", "max |Δ| vs 1 process",
                  "copies differ by", "bytes = formula"], rows,
                 formats={"max |Δ| vs 1 process": ".0e", "copies differ by": ".0e"},
                 title=f"{runs[0].setup.steps} steps, float64, global batch {runs[0].setup.global_batch}; "
                       f"GPT with {parameter_count(cfg):,} parameters on 8 gloo ranks")


def counted_bytes_table(run, cfg: GPTConfig = PARALLEL3D_GPT) -> Table:
    """Bytes the run's ranks sent in its last step, per dimension: counted vs the closed forms (float64)."""
    s = run.setup
    formula = bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8)
    per0 = rank_bytes_per_step(cfg, s.dp, s.tp, s.pp, s.global_batch, s.micro_batches, 8, rank=0)
    rows = [(d, int(run.rank_bytes[0][d]), int(per0[d]), int(run.total_bytes[d]), int(formula[d]))
            for d in DIMENSIONS]
    return Table(["dimension", "rank 0 counted", "rank 0 formula", "all ranks counted", "all ranks formula"],
                 rows, title=f"bytes sent in one step, {s.dp}×{s.tp}×{s.pp}, {s.micro_batches} micro-batches")


def timeline_of(run) -> Timeline3D:
    """The run's last step as a `Timeline3D` (draw it with labkit.viz.parallel3d.timeline_figure)."""
    return Timeline3D(run.timeline, run.step_times[-1], run.coords, run.setup)


# ------------------------------------------------------------------------------------ pictures

def coords_picture(fn, dp: int = 2, tp: int = 2, pp: int = 2, gpus_per_node: int = 4) -> Table:
    """The learner's rank_coords on a 2×2×2 grid, next to ours, and how many nodes their tp groups span."""
    rows, tp_groups = [], {}
    for rank in range(dp * tp * pp):
        got = tuple(fn(rank, dp, tp, pp))
        want = coords(rank, dp, tp, pp)
        tp_groups.setdefault((got[0], got[2]), []).append(rank)
        rows.append((rank, rank // gpus_per_node, str(got), str(want), "yes" if got == want else "NO"))
    spans = max(nodes_spanned(g, gpus_per_node) for g in tp_groups.values())
    return Table(["rank", "node", "yours (dp, tp, pp)", "ours", "same"], rows,
                 title=f"dp={dp} tp={tp} pp={pp}, {gpus_per_node} GPUs per node: your tp groups span up to "
                       f"{spans} node{'s' if spans > 1 else ''}")


def groups_picture(fn, rank: int = 5, dp: int = 2, tp: int = 2, pp: int = 2) -> Table:
    ours = groups(dp, tp, pp)
    rows = []
    for kind in ("dp", "tp", "pp"):
        want = sorted(next(g for g in ours[kind] if rank in g))
        got = list(fn(rank, kind, dp, tp, pp))
        rows.append((kind, str(got), str(want), "yes" if got == want else "NO"))
    return Table(["kind", "yours", "ours", "same"], rows, title=f"the groups of rank {rank}, dp={dp} tp={tp} pp={pp}")


__all__ = ["GRIDS", "run_grids", "equivalence_table", "counted_bytes_table", "timeline_of", "coords_picture",
           "groups_picture"]
