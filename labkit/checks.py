"""Argument checks shared by every part of labkit: one line naming the function and the argument.

``check_int`` and ``check_real`` return the value converted; they raise TypeError for the wrong
kind of value (a bool is not an int, 16.0 is not an int) and ValueError for a value out of range.
Tensor checks for the Triton wrappers live in `labkit.kernels.checks`, which builds on these;
`check_same_on_ranks` checks that the ranks of a distributed wrapper were given the same tensors.
"""
from __future__ import annotations

import math
import numbers


def check_int(fn: str, name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int; TypeError unless it is an int (not bool, not float), ValueError
    (one line, naming ``fn`` and ``name``) if it lies outside ``minimum``..``maximum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        want = (f"in {minimum}..{maximum}" if minimum is not None and maximum is not None else
                f">= {minimum}" if minimum is not None else f"<= {maximum}")
        raise ValueError(f"{fn}: {name} must be an int {want}, got {value}")
    return value


def check_real(fn: str, name: str, value, *, positive: bool = False) -> float:
    """Return ``value`` as a float; it must be a finite real number (not bool), > 0 if ``positive``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{fn}: {name} must be a finite{' positive' if positive else ''} number, got {value!r}")
    return value


MAX_ENUMERATED = 1_000_000   # items (ranks, nodes, jobs, ...) a function lists one by one


def check_count(fn: str, what: str, count: int) -> int:
    """``count`` (a product of checked sizes: ranks = dp·tp·pp, nodes·per_node, ...) unless it is
    more than `MAX_ENUMERATED`: ValueError (one line) instead of a loop that would not end."""
    if count > MAX_ENUMERATED:
        raise ValueError(f"{fn}: {what} = {count} is more than {MAX_ENUMERATED}, the most this lists one by one")
    return count


MAX_ELEMENTS = 1 << 28       # elements of one tensor a lab function allocates (2 GiB of float64)


def check_numel(fn: str, what: str, numel: int) -> int:
    """``numel`` (elements a function is about to allocate) unless it is more than `MAX_ELEMENTS`:
    ValueError (one line) instead of torch's "Storage size calculation overflowed" or an OOM kill."""
    if numel > MAX_ELEMENTS:
        raise ValueError(f"{fn}: {what} = {numel} elements is more than {MAX_ELEMENTS} (2^28), the most "
                         f"a lab tensor may hold here")
    return numel


def check_sequence(fn: str, name: str, value, *, minimum: int = 1) -> tuple:
    """``value`` as a tuple; TypeError unless it is a list, tuple or other non-string iterable,
    ValueError if it has fewer than ``minimum`` items."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{fn}: {name} must be a sequence (a list or tuple), got {type(value).__name__} {value!r}")
    out = tuple(value)
    if len(out) < minimum:
        raise ValueError(f"{fn}: {name} must hold at least {minimum} item(s), got {len(out)}")
    return out


def module_tensors(module) -> list[tuple[str, object]]:
    """(name, tensor) of every parameter and buffer of a torch module, a frozen parameter marked as
    such: what the ranks of a data-parallel wrapper must agree on (`check_same_on_ranks`)."""
    return [(n if p.requires_grad else f"{n} (frozen)", p) for n, p in module.named_parameters()] + \
        list(module.named_buffers())


def check_same_on_ranks(fn: str, what: str, named_tensors, group=None) -> None:
    """Raise ValueError (one line, the same on every rank) unless every rank of ``group`` (None: the
    default group) passes the same list of (name, tensor) — same names, shapes and dtypes — as
    rank 0 of the group. One collective (an all-gather of the descriptions, not of the tensors):
    call it before a broadcast or a flat collective that would otherwise hang, abort, or silently
    overwrite rows when the shapes differ."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    if world == 1:
        return
    mine = [(str(name), tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in named_tensors]
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine, group=group)
    first = everyone[0]
    for r, theirs in enumerate(everyone):
        if theirs == first:
            continue
        rank = dist.get_global_rank(group, r) if group is not None else r
        head = dist.get_global_rank(group, 0) if group is not None else 0
        diff = next(((a, b) for a, b in zip(first, theirs) if a != b), None)
        if diff is None:
            detail = f"rank {head} has {len(first)}, rank {rank} has {len(theirs)}"
        else:
            (n0, s0, d0), (n1, s1, d1) = diff
            detail = (f"{n0} is {s0} {d0} on rank {head}, " +
                      (f"{n1} " if n1 != n0 else "") + f"{s1} {d1} on rank {rank}")
        raise ValueError(f"{fn}: {what} differ across ranks ({detail}); every rank must pass the same")


def check_port_free(fn: str, name: str, port, host: str = "127.0.0.1") -> int:
    """``port`` (an int in 1..65535) unless something already listens on ``host``:``port``: then
    ValueError (one line) before a server starts, instead of a server that dies or moves elsewhere."""
    import socket

    port = check_int(fn, name, port, minimum=1, maximum=65535)
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            raise ValueError(f"{fn}: {name}={port}: {host}:{port} is taken ({e.strerror.lower()}); "
                             f"pick another, e.g. {name}={port + 1}") from None
    return port
