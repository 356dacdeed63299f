"""The only wire labkit's collectives use: torch.distributed isend/irecv.

``exchange(stats, send=..., dst=..., recv=..., src=...)`` is one communication
round for the calling rank: it posts a non-blocking send and/or receive,
waits for both, and counts them in ``stats``. Posting both before waiting is
what keeps a ring deadlock-free (every rank sends right and receives left at
the same time).

``recording()`` captures every exchange made inside it (for replaying a real
run against the simulator's trace).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist

from labkit.collectives.stats import CommStats

SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)

_RECORDERS: list[list] = []


@dataclass(frozen=True)
class Event:
    """One recorded transfer seen by the calling rank.

    step: index (0-based) of the `exchange` call within the ``recording()`` block; op: "send" or "recv"; peer: the
    other rank; data_ptr: address of the first element sent/received into;
    numel: elements moved.
    """

    step: int
    op: str
    peer: int
    data_ptr: int
    numel: int


@contextlib.contextmanager
def recording():
    """Collect the `Event`s of every `exchange` made inside the ``with`` block (a list)."""
    events: list[Event] = []
    entry = [events, 0]  # the list and the number of exchange calls seen so far
    _RECORDERS.append(entry)
    try:
        yield events
    finally:
        _RECORDERS.remove(entry)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def exchange(stats: CommStats, send: torch.Tensor | None = None, dst: int | None = None,
             recv: torch.Tensor | None = None, src: int | None = None) -> None:
    """One round: isend ``send`` to ``dst``, irecv into ``recv`` from ``src``; wait for both.

    Either half may be omitted (None). Empty tensors are skipped on both sides
    (both sides know the sizes, so they agree). ``send`` and ``recv`` must be
    contiguous. Counts bytes, messages and one step in ``stats``. ``dst`` and ``src``
    must be other ranks of the group (a ring's neighbours are ``(rank ± 1) % world_size``).
    """
    _check_peers("exchange", send, dst, recv, src)
    requests = []
    if send is not None and send.numel() > 0:
        if not send.is_contiguous():
            raise ValueError("exchange: send tensor must be contiguous")
        requests.append(dist.isend(send, dst))
        stats.bytes_sent += _nbytes(send)
        stats.messages += 1
        for events, step in _RECORDERS:
            events.append(Event(step, "send", dst, send.data_ptr(), send.numel()))
    if recv is not None and recv.numel() > 0:
        if not recv.is_contiguous():
            raise ValueError("exchange: recv tensor must be contiguous")
        requests.append(dist.irecv(recv, src))
        stats.bytes_received += _nbytes(recv)
        for events, step in _RECORDERS:
            events.append(Event(step, "recv", src, recv.data_ptr(), recv.numel()))
    for req in requests:
        req.wait()
    stats.steps += 1
    for entry in _RECORDERS:
        entry[1] += 1


def exchange_pipelined(stats: CommStats, send: torch.Tensor, dst: int, recv: torch.Tensor, src: int,
                       segment: int, on_received) -> None:
    """One round like `exchange`, but both tensors travel as segments of at most ``segment`` elements.

    ``on_received(start, stop)`` is called as soon as elements start:stop of
    ``recv`` have arrived, while later segments are still in flight — so a
    reduce-scatter can add segment j while segment j+1 is on the wire. Both
    sides must use the same ``segment``. Each segment is one message.
    """
    if isinstance(segment, bool) or not isinstance(segment, int) or segment < 1:
        raise ValueError(f"exchange_pipelined: segment must be an int >= 1 element, got {segment!r}")
    _check_peers("exchange_pipelined", send, dst, recv, src)
    sends, recvs = [], []
    for a in range(0, send.numel(), segment):
        piece = send[a:a + segment]
        sends.append(dist.isend(piece, dst))
        stats.bytes_sent += _nbytes(piece)
        stats.messages += 1
        for events, step in _RECORDERS:
            events.append(Event(step, "send", dst, piece.data_ptr(), piece.numel()))
    for a in range(0, recv.numel(), segment):
        piece = recv[a:a + segment]
        recvs.append((a, a + piece.numel(), dist.irecv(piece, src)))
        stats.bytes_received += _nbytes(piece)
        for events, step in _RECORDERS:
            events.append(Event(step, "recv", src, piece.data_ptr(), piece.numel()))
    for a, z, req in recvs:
        req.wait()
        on_received(a, z)
    for req in sends:
        req.wait()
    stats.steps += 1
    for entry in _RECORDERS:
        entry[1] += 1


def group_info(where: str) -> tuple[int, int]:
    """(rank, world_size) of the default group, or a clear error if there is none."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{where}: no process group; call it on ranks started by labkit.dist.launch "
                           "(or after dist.init_process_group)")
    return dist.get_rank(), dist.get_world_size()


def check_tensor(t, where: str, name: str = "tensor") -> None:
    """TypeError unless ``t`` is a torch.Tensor of a supported floating dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{where}: {name} has dtype {t.dtype}; expected one of "
                        f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")


def _check_peers(where: str, send, dst, recv, src) -> None:
    """One-line errors for peers that would segfault gloo (out of range) or hang (yourself, missing)."""
    rank, n = group_info(where)
    for tensor, peer, t_name, p_name in ((send, dst, "send", "dst"), (recv, src, "recv", "src")):
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{where}: {t_name} must be a torch.Tensor or None, got {type(tensor).__name__}")
        check_rank(peer, n, where, p_name)
        if peer == rank:
            raise ValueError(f"{where}: {p_name}={peer} is this rank itself; exchange with another rank")


def check_rank(r, world_size: int, where: str, name: str) -> None:
    """ValueError unless ``r`` is an int rank in [0, world_size)."""
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world_size:
        hint = " (use % world_size for ring neighbours)" if isinstance(r, int) and r in (-1, world_size) else ""
        raise ValueError(f"{where}: {name} must be an int rank in [0, {world_size}), got {r!r}{hint}")


@contextlib.contextmanager
def flat_view(tensor: torch.Tensor):
    """Yield a contiguous 1-D view of ``tensor``; copies back at exit if a copy was needed."""
    if tensor.is_contiguous():
        yield tensor.view(-1)
    else:
        flat = tensor.reshape(-1).clone()
        yield flat
        tensor.copy_(flat.view(tensor.shape))
