"""Asynchronous pipelines (PipeDream, PipeDream-2BW): how many weight versions each stage keeps.

Without a flush, a stage keeps starting forwards while earlier microbatches are
still in their backward. For the gradient of microbatch i to be correct, its
backward must use the weights its forward used ("weight stashing"), so a stage
keeps every version some in-flight microbatch still needs, plus the newest.

``weight_versions(policy, num_stages, num_microbatches)`` replays each stage's
non-flushed 1F1B order (the first `num_stages - s` forwards as warm-up, then
one backward, one forward; the same per-stage order as
``schedule("1f1b", ...)``) and counts versions:

- ``"pipedream"``: the weights change after every backward (one update per
  microbatch). Expected: stage s (0-indexed) keeps p - s versions.
- ``"pipedream_2bw"``: gradients accumulate over ``update_every`` microbatches
  (default: num_stages), and a new version is made after the last backward of
  each group; double buffering. Expected: at most 2 versions when
  update_every >= p - s (1 on the last stage, which never has two microbatches in flight).
- ``"gpipe"`` (for contrast): a flush after all microbatches; 1 version.

Version numbers count updates: version k exists after k updates.
"""
from __future__ import annotations

from dataclasses import dataclass

from labkit.pipeline.schedules import Action, _check_int, schedule

__all__ = ["VersionTrace", "weight_versions", "POLICIES"]

POLICIES = ("pipedream", "pipedream_2bw", "gpipe")


@dataclass
class VersionTrace:
    """Per stage: ``max_versions[s]`` (most weight versions held at once), ``used[s]`` =
    [(action, version used)] in the stage's order, and ``staleness[s]`` = largest number of
    updates between the version a microbatch used and the newest when its backward ran."""

    max_versions: list[int]
    used: list[list[tuple[Action, int]]]
    staleness: list[int]


def weight_versions(policy: str, num_stages: int, num_microbatches: int, update_every: int | None = None) -> VersionTrace:
    """Replay ``num_microbatches`` microbatches through ``num_stages`` stages under ``policy``.

    num_microbatches should be several times num_stages so the steady state is reached.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    _check_int("num_stages", num_stages, 1)
    _check_int("num_microbatches", num_microbatches, 1)
    if update_every is not None:
        _check_int("update_every", update_every, 1)
    if num_microbatches < num_stages:
        raise ValueError(f"need num_stages >= 1 and num_microbatches >= num_stages, got {num_stages}, {num_microbatches}")
    if update_every is not None and policy != "pipedream_2bw":
        raise ValueError("update_every applies to 'pipedream_2bw' only")
    k = update_every if update_every is not None else num_stages
    if k < 1:
        raise ValueError(f"update_every must be >= 1, got {k}")
    kind = "gpipe" if policy == "gpipe" else "1f1b"
    order = schedule(kind, num_stages, num_microbatches)  # one stage per rank: rank s runs stage s
    max_versions, used, staleness = [], [], []
    for s in range(num_stages):
        newest = 0
        stash: dict[int, int] = {}  # in-flight microbatch -> version its forward used
        backwards = 0
        best, worst_stale, trace = 1, 0, []
        for a in order[s]:
            if a.kind == "F":
                stash[a.microbatch] = newest
                trace.append((a, newest))
            else:
                v = stash.pop(a.microbatch)
                trace.append((a, v))
                worst_stale = max(worst_stale, newest - v)
                backwards += 1
                if policy == "pipedream" or (policy == "pipedream_2bw" and backwards % k == 0):
                    newest += 1
            held = set(stash.values()) | {newest}
            best = max(best, len(held))
        if policy == "gpipe":
            newest += 1  # the one update after the flush; nothing is in flight then
        max_versions.append(best)
        used.append(trace)
        staleness.append(worst_stale)
    return VersionTrace(max_versions, used, staleness)
