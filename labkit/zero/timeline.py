"""Who holds what, moment by moment, in one training step at each ZeRO stage (a pure model).

The model has U units (layers) of ``unit_numel`` parameters each, on N data-parallel ranks;
every unit is cut into N shards, rank r owning shard r. One step passes through these moments:
"start", forward through units 0..U−1, backward through units U−1..0, "step". At each one a
rank holds, per unit, of each state — parameters, gradients, optimizer states — the whole
unit, its own shard, or nothing:

    stage 0 (DDP)   parameters and optimizer states whole; a unit's gradient appears whole in
                    backward and is all-reduced there
    stage 1         optimizer states: own shard; gradients whole (kept until the next
                    zero_grad); the step reduce-scatters them, updates its shard and
                    all-gathers the parameters
    stage 2         as stage 1, but each unit's gradient is reduce-scattered in backward as soon
                    as it is complete: only the shard is kept
    stage 3         parameters too: own shard, except while a unit computes — all-gathered
                    before its forward and again before its backward, freed after each

Per moment: the bytes each rank holds (``param_bytes``, ``grad_bytes``, ``optimizer_bytes`` per
element; mixed-precision Adam: 2, 2, 12) and the bytes it has sent so far (ring collectives,
Lab 05). At the end the sent bytes are `formulas.comm_bytes_per_step` exactly, and what a rank
holds at the last moment is `formulas.model_state_bytes` (tests/test_zero_timeline.py); the
moments before show the transients on top (a gradient not yet reduced, a unit gathered).
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.checks import check_int, check_real

WHOLE, SHARD, NONE = "whole", "shard", "none"
STATES = ("parameters", "gradients", "optimizer")


@dataclass(frozen=True)
class Moment:
    """``label`` ("forward unit 1", ...), ``phase`` ("start", "forward", "backward", "step"),
    ``held[state][u]`` in (WHOLE, SHARD, NONE) — the same on every rank (each rank holds its own
    shard) — ``bytes_held`` per rank, ``bytes_sent`` per rank so far, ``comm`` what was sent at
    this moment (e.g. "all-gather unit 2")."""

    label: str
    phase: str
    held: dict
    bytes_held: float
    bytes_sent: float
    comm: str


def step_moments(stage: int, world: int, units: int = 3, unit_numel: float = 1.0, param_bytes: float = 2,
                 grad_bytes: float = 2, optimizer_bytes: float = 12) -> list[Moment]:
    """The moments of one step at ``stage`` on ``world`` ranks (module docstring)."""
    fn = "step_moments"
    stage = check_int(fn, "stage", stage, minimum=0, maximum=3)
    n = check_int(fn, "world", world, minimum=1)
    u_count = check_int(fn, "units", units, minimum=1)
    psi_u = check_real(fn, "unit_numel", unit_numel, positive=True)
    size = {"parameters": param_bytes, "gradients": grad_bytes, "optimizer": optimizer_bytes}
    ring = (n - 1) / n * psi_u                       # elements one rank sends in an all-gather / reduce-scatter
    rest = SHARD if stage == 3 else WHOLE
    held = {"parameters": [rest] * u_count, "gradients": [NONE] * u_count,
            "optimizer": [SHARD if stage >= 1 else WHOLE] * u_count}
    sent = 0.0
    out = []

    def snap(label, phase, comm=""):
        frac = {WHOLE: 1.0, SHARD: 1.0 / n, NONE: 0.0}
        total = sum(size[s] * psi_u * frac[h] for s in STATES for h in held[s])
        out.append(Moment(label, phase, {s: list(v) for s, v in held.items()}, total, sent, comm))

    snap("start", "start")
    for u in range(u_count):
        comm = ""
        if stage == 3:
            held["parameters"][u] = WHOLE
            sent += ring * param_bytes
            comm = f"all-gather unit {u}"
        snap(f"forward unit {u}", "forward", comm)
        if stage == 3:
            held["parameters"][u] = SHARD
    for u in reversed(range(u_count)):
        comm = ""
        if stage == 3:
            held["parameters"][u] = WHOLE
            sent += ring * param_bytes
            comm = f"all-gather unit {u}"
        held["gradients"][u] = WHOLE
        snap(f"backward unit {u}", "backward", comm)
        if stage == 0:
            sent += 2 * ring * grad_bytes
            snap(f"all-reduce unit {u}", "backward", f"all-reduce unit {u}")
        elif stage >= 2:
            held["gradients"][u] = SHARD
            sent += ring * grad_bytes
            if stage == 3:
                held["parameters"][u] = SHARD
            snap(f"reduce-scatter unit {u}", "backward", f"reduce-scatter unit {u}")
    if stage == 1:
        sent += u_count * ring * grad_bytes            # the whole gradients stay (until zero_grad)
        snap("step: reduce-scatter gradients", "step", "reduce-scatter all units")
    if stage in (1, 2):
        sent += u_count * ring * param_bytes
        snap("step: update shard, all-gather", "step", "all-gather all units")
    else:
        snap("step: update", "step")
    return out
