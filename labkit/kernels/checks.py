"""Input validation shared by the kernel wrappers.

Every wrapper checks its tensors here *before* launching anything, so bad
input gets one clear ValueError/TypeError instead of a crash deep inside
Triton (or, worse, a silent out-of-bounds read on a GPU).

Device rule: under the interpreter (``TRITON_INTERPRET=1``, no GPU) kernels
read CPU tensors; when compiled they need CUDA tensors.
"""
from __future__ import annotations

import os

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def interpreting() -> bool:
    """True when Triton runs kernels in its Python interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def expected_device_type() -> str:
    """"cpu" under the interpreter, "cuda" when kernels are compiled."""
    return "cpu" if interpreting() else "cuda"


def check_tensor(fn: str, name: str, t, *, ndim: int | tuple[int, ...] | None = None,
                 dtypes=FLOAT_DTYPES, contiguous: bool = True, nonempty: bool = True) -> None:
    """Raise TypeError/ValueError (one line, naming ``fn`` and ``name``) if ``t`` is unusable."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype}; supported: {', '.join(map(str, dtypes))}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise ValueError(f"{fn}: {name} must have {' or '.join(map(str, allowed))} dimension(s), "
                             f"got shape {tuple(t.shape)}")
    want = expected_device_type()
    if t.device.type != want:
        why = "Triton's interpreter (no GPU) runs on CPU tensors" if want == "cpu" else \
            "compiled Triton kernels need CUDA tensors"
        raise ValueError(f"{fn}: {name} is on {t.device}, expected a {want} tensor ({why})")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{fn}: {name} must be contiguous (strides {tuple(t.stride())} for shape "
                         f"{tuple(t.shape)}); call .contiguous() first")
    if nonempty and t.numel() == 0:
        raise ValueError(f"{fn}: {name} is empty (shape {tuple(t.shape)}); nothing to launch")


def check_same(fn: str, **tensors) -> None:
    """Raise if the named tensors differ in device or dtype."""
    items = list(tensors.items())
    (n0, t0) = items[0]
    for n, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(f"{fn}: {n} is on {t.device} but {n0} is on {t0.device}; put them on one device")
        if t.dtype != t0.dtype:
            raise TypeError(f"{fn}: {n} has dtype {t.dtype} but {n0} has {t0.dtype}; use one dtype")
