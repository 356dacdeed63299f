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

    Buckets are listed in the order they close (`bucket_indices`, a bucket per dtype and device).
    Equal to PyTorch's own rule,
    ``torch.distributed._compute_bucket_assignment_by_size(list(reversed(params)), [cap_bytes])``
    (with indices mapped back), which the tests check.
    """
    check_real("assign_buckets", "cap_bytes", cap_bytes, positive=True)
    return bucket_indices([p.numel() * p.element_size() for p in params], [(p.dtype, p.device) for p in params],
                          cap_bytes)


def bucket_indices(param_bytes, param_dtypes, cap_bytes):
    """Group parameters into gradient buckets the way PyTorch's DDP does.

    param_bytes: list of ints, the gradient size in bytes of each parameter, in registration
    order (the order of ``module.parameters()``); param_dtypes: list of str, each parameter's
    dtype name (parameters of different dtypes never share a bucket); cap_bytes: int > 0.
    Walk the parameters in REVERSE registration order (about the order backward produces
    their gradients). Each dtype fills its own open bucket; add the parameter, and if the
    bucket now holds >= cap_bytes, close it (the parameter that crosses the cap stays in it).
    Return the buckets as lists of parameter indices (in the order they were added), listed
    in the order they closed, followed by the buckets still open at the end in the order
    they were opened.
    Example: bytes [4, 4, 4], one dtype, cap 8 -> [[2, 1], [0]].
    """
    # BEGIN SOLUTION
    # HINT: one open bucket per dtype at any moment, each knowing its bytes so far; reversed() walks in
    # HINT: backward's order, and a dict remembers the order its keys were first added.
    closed, open_ = [], {}
    for i in reversed(range(len(param_bytes))):
        members, size = open_.get(param_dtypes[i], ([], 0))
        members, size = members + [i], size + param_bytes[i]
        if size >= cap_bytes:
            closed.append(members)
            open_.pop(param_dtypes[i], None)
        else:
            open_[param_dtypes[i]] = (members, size)
    return closed + [members for members, _ in open_.values()]
    # END SOLUTION


def cap_bytes_of(bucket_cap_mb: float, fn: str = "DDP") -> int:
    """PyTorch's conversion: int(bucket_cap_mb · 2^20) bytes; ``fn`` names the caller in errors.
    ValueError for a cap under one byte (2^-20 MiB): it would be 0."""
    cap = int(check_real(fn, "bucket_cap_mb", bucket_cap_mb, positive=True) * MB)
    if cap < 1:
        raise ValueError(f"{fn}: bucket_cap_mb must be at least one byte (2^-20 = {1 / MB:.3g} MiB), "
                         f"got {bucket_cap_mb!r}")
    return cap
