"""A pipeline's point-to-point messages: activations forward, gradients back, between neighbouring stages.

Stage s lives on rank s % world of the pipeline's group. F(s, i) sends activation (s, i) to the rank
of stage s+1; the backward of (s, i), s > 0, sends gradient (s-1, i) to the rank of stage s-1. Each
message has a tag per (boundary, microbatch, direction) (`act_tag`, `grad_tag`), which gloo matches.

NCCL ignores tags: it matches a pair's messages in the order they were posted. With
``order=message_order(schedule)`` a rank receives from each peer in the order that peer sends
(`Mailbox`): a message that arrives before it is needed waits in a stash. Activations travel in
``group`` and gradients in ``grad_group`` (a second group of the same ranks), so each pair's stream
carries one direction only. Every send is recorded through
`labkit.collectives.counting.record_send` (bytes per stage boundary).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.distributed as dist

from labkit.collectives.counting import record_send
from labkit.pipeline.schedules import Action, num_stages_of

__all__ = ["act_tag", "grad_tag", "message_order", "Mailbox", "StageLinks"]


def act_tag(boundary: int, microbatch: int, num_microbatches: int) -> int:
    """Tag of the activation stage ``boundary`` sends to stage boundary+1 for ``microbatch``."""
    return 2 * (boundary * num_microbatches + microbatch)


def grad_tag(boundary: int, microbatch: int, num_microbatches: int) -> int:
    """Tag of the gradient stage boundary+1 sends back to stage ``boundary`` for ``microbatch``."""
    return 2 * (boundary * num_microbatches + microbatch) + 1


def message_order(sched: dict[int, Sequence[Action]]) -> dict[tuple[int, int, str], list[tuple[int, int]]]:
    """{(sender rank, receiver rank, "act" | "grad"): [(boundary, microbatch), ...]} in the order the
    sender sends them (its actions' order; stage s lives on rank s % len(sched)). F(s, i) sends
    activation (s, i) to stage s+1; B or I of (s, i), s > 0, sends gradient (s-1, i) to stage s-1."""
    p = len(sched)
    S = num_stages_of(sched)
    out: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
    for rank in sorted(sched):
        for a in sched[rank]:
            s, i = a.stage, a.microbatch
            if a.kind == "F" and s < S - 1:
                out.setdefault((rank, (s + 1) % p, "act"), []).append((s, i))
            elif a.kind in ("B", "I") and s > 0:
                out.setdefault((rank, (s - 1) % p, "grad"), []).append((s - 1, i))
    return out


class Mailbox:
    """Receives each peer's messages in the order that peer sends them (``message_order``); one
    asked for out of that order is preceded by the earlier ones, which wait in a stash."""

    def __init__(self, order, me: int, receive: Callable):
        self.queues = {(src, kind): list(keys) for (src, dst, kind), keys in order.items() if dst == me}
        self.receive, self.stash = receive, {}

    def recv(self, t: torch.Tensor, src: int, kind: str, key: tuple[int, int]) -> None:
        if (kind, key) in self.stash:
            t.copy_(self.stash.pop((kind, key)))
            return
        queue = self.queues.get((src, kind), [])
        if key not in queue:
            raise RuntimeError(f"run_step: no {kind} message {key} is sent by rank {src} in this schedule")
        while True:
            nxt = queue.pop(0)
            if nxt == key:
                self.receive(t, src, kind, nxt)
                return
            early = torch.empty_like(t)
            self.receive(early, src, kind, nxt)
            self.stash[(kind, nxt)] = early


class StageLinks:
    """This rank's links to the ranks of its stages' neighbours, for one step of ``num_microbatches``.

    Sends are ``dist.isend`` (kept in ``sends``; `wait_sends` waits for them at the end of the step);
    receives are blocking ``dist.recv``, by tag, or in each sender's order when ``order`` is given.
    ``group``: the pipeline's process group (None: the default group); ``grad_group``: the group
    gradients travel in (None: ``group``)."""

    def __init__(self, num_microbatches: int, group=None, grad_group=None, order: dict | None = None):
        self.num_microbatches = num_microbatches
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.groups = {"act": group, "grad": group if grad_group is None else grad_group}
        self.mailbox = None if order is None else Mailbox(order, self.rank, lambda t, src, kind, key: self._receive(
            t, self.peer(src), kind, key))
        self.sends: list = []

    def peer(self, stage: int) -> int:
        """Global rank of the rank that owns ``stage``."""
        r = stage % self.world
        return r if self.group is None else dist.get_global_rank(self.group, r)

    def grad_tag(self, boundary: int, microbatch: int) -> int:
        return grad_tag(boundary, microbatch, self.num_microbatches)

    def _send(self, t: torch.Tensor, stage: int, tag: int, phase: str) -> None:
        dst = self.peer(stage)
        record_send(phase, t, dst)
        self.sends.append(dist.isend(t, dst=dst, tag=tag, group=self.groups["act" if phase == "forward" else "grad"]))

    def _receive(self, t: torch.Tensor, src: int, kind: str, key: tuple[int, int]) -> None:
        tag = (act_tag if kind == "act" else grad_tag)(key[0], key[1], self.num_microbatches)
        dist.recv(t, src=src, tag=tag, group=self.groups[kind])

    def _recv(self, t: torch.Tensor, stage: int, kind: str, key: tuple[int, int]) -> None:
        """Receive ``kind`` message ``key`` = (boundary, microbatch) from the rank of ``stage``."""
        if self.mailbox is None:
            self._receive(t, self.peer(stage), kind, key)
        else:
            self.mailbox.recv(t, stage % self.world, kind, key)

    def send_activation(self, out: torch.Tensor, stage: int, microbatch: int) -> None:
        """Send ``stage``'s output for ``microbatch`` to the rank of stage + 1."""
        self._send(out, stage + 1, act_tag(stage, microbatch, self.num_microbatches), "forward")

    def recv_activation(self, x: torch.Tensor, stage: int, microbatch: int) -> None:
        """Receive ``stage``'s input for ``microbatch`` (stage - 1's output) into ``x``."""
        self._recv(x, stage - 1, "act", (stage - 1, microbatch))

    def send_gradient(self, grad_input: torch.Tensor, stage: int, microbatch: int) -> None:
        """Send d(loss)/d(input of ``stage``) for ``microbatch`` back to the rank of stage - 1."""
        self._send(grad_input, stage - 1, grad_tag(stage - 1, microbatch, self.num_microbatches), "backward")

    def recv_gradient(self, grad: torch.Tensor, stage: int, microbatch: int) -> None:
        """Receive d(loss)/d(output of ``stage``) for ``microbatch`` from the rank of stage + 1."""
        self._recv(grad, stage + 1, "grad", (stage, microbatch))

    def wait_sends(self) -> None:
        for w in self.sends:
            w.wait()
