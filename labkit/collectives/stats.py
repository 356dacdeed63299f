"""CommStats: what one rank's collective call put on (and took off) the wire."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CommStats:
    """Per-rank communication counters of one collective call.

    bytes_sent / bytes_received: payload bytes (numel * element_size) this rank
    sent / received. messages: point-to-point sends this rank posted (empty
    chunks are not sent and not counted). steps: communication rounds this rank
    took part in (one round = at most one send and one receive posted together).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    messages: int = 0
    steps: int = 0

    def __add__(self, other: "CommStats") -> "CommStats":
        if not isinstance(other, CommStats):
            return NotImplemented
        return CommStats(self.bytes_sent + other.bytes_sent, self.bytes_received + other.bytes_received,
                         self.messages + other.messages, self.steps + other.steps)
