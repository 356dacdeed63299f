"""Gradient buckets: which parameters' gradients are all-reduced together, as one flat tensor.

One all-reduce per parameter pays the per-message latency α once per parameter; one all-reduce
of everything cannot start before the whole backward is done. Buckets sit in between: PyTorch's
DDP fills them in the order gradients become ready in backward — about the reverse of the order
the parameters were registered — and closes a bucket once it holds at least ``cap_bytes``
(the parameter that crosses the cap stays in it). Parameters of different dtypes or devices
never share a bucket (a flat tensor has one dtype); each (dtype, device) fills its own.
"""
from __future__ import annotations

from typing import Sequence

import torch

from labkit.checks import check_real

MB = 1 << 20   # PyTorch's bucket_cap_mb counts MiB


def assign_buckets(params: Sequence[torch.Tensor], cap_bytes: int) -> list[list[int]]:
    """Buckets as lists of indices into ``params`` (registration order), filled in reverse order.

    Buckets are listed in the order they close. Equal to PyTorch's own rule,
    ``torch.distributed._compute_bucket_assignment_by_size(list(reversed(params)), [cap_bytes])``
    (with indices mapped back), which the tests check.
    """
    check_real("assign_buckets", "cap_bytes", cap_bytes, positive=True)
    done: list[list[int]] = []
    open_: dict[tuple, tuple[list[int], int]] = {}
    for i in reversed(range(len(params))):
        p = params[i]
        key = (p.dtype, p.device)
        members, size = open_.get(key, ([], 0))
        members, size = members + [i], size + p.numel() * p.element_size()
        if size >= cap_bytes:
            done.append(members)
            open_.pop(key, None)
        else:
            open_[key] = (members, size)
    done.extend(members for members, _ in open_.values() if members)
    return done


def cap_bytes_of(bucket_cap_mb: float, fn: str = "DDP") -> int:
    """PyTorch's conversion: int(bucket_cap_mb · 2^20) bytes; ``fn`` names the caller in errors.
    ValueError for a cap under one byte (2^-20 MiB): it would be 0."""
    cap = int(check_real(fn, "bucket_cap_mb", bucket_cap_mb, positive=True) * MB)
    if cap < 1:
        raise ValueError(f"{fn}: bucket_cap_mb must be at least one byte (2^-20 = {1 / MB:.3g} MiB), "
                         f"got {bucket_cap_mb!r}")
    return cap
