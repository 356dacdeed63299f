"""Input validation shared by the kernel wrappers.

Every wrapper checks its tensors (``check_tensor``, ``check_same``) and its block
sizes, tile sizes and other scalars (``check_block``, ``check_int``, ``check_real``)
here *before* launching anything, so bad input gets one clear ValueError/TypeError
instead of a crash deep inside Triton (or, worse, a silent out-of-bounds read on a GPU).

Device rule: under the interpreter (``TRITON_INTERPRET=1``, no GPU) kernels
read CPU tensors; when compiled they need CUDA tensors.
"""
from __future__ import annotations

import numbers
import os

import torch

from labkit.checks import check_int, check_real  # noqa: F401  (re-exported for the wrappers)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Largest number of elements Triton allows in one block (triton.TRITON_MAX_TENSOR_NUMEL).
MAX_BLOCK = 1 << 20
# tl.dot needs every tile dimension >= 16 when compiled; 256 is the largest tile the kernels use.
DOT_MIN, DOT_MAX = 16, 256


def interpreting() -> bool:
    """True when Triton runs kernels in its Python interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def expected_device_type() -> str:
    """"cpu" under the interpreter, "cuda" when kernels are compiled."""
    return "cpu" if interpreting() else "cuda"


def check_tensor(fn: str, name: str, t, *, ndim: int | tuple[int, ...] | None = None,
                 dtypes=FLOAT_DTYPES, contiguous: bool = True, nonempty: bool = True,
                 min_ndim: int | None = None) -> None:
    """Raise TypeError/ValueError (one line, naming ``fn`` and ``name``) if ``t`` is unusable.

    ``ndim``: the allowed numbers of dimensions; ``min_ndim``: the fewest allowed.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{fn}: {name} has dtype {t.dtype}; supported: {', '.join(map(str, dtypes))}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise ValueError(f"{fn}: {name} must have {' or '.join(map(str, allowed))} dimension(s), "
                             f"got shape {tuple(t.shape)}")
    if min_ndim is not None and t.dim() < min_ndim:
        raise ValueError(f"{fn}: {name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}"
                         + (" (a 0-d tensor)" if t.dim() == 0 else ""))
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


def shared_memory_limit(device=None) -> int | None:
    """Bytes of shared memory one program (a CUDA block) may use on ``device`` (the opt-in maximum:
    227 KiB on an H100, 163 KiB on an A100), or None where kernels are interpreted."""
    if interpreting() or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.device("cuda") if device is None else device)
    limit = getattr(props, "shared_memory_per_block_optin", 0)
    if not limit:                                   # an older torch: ask Triton's driver
        from triton.runtime import driver

        index = props.index if hasattr(props, "index") else torch.cuda.current_device()
        limit = driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return int(limit)


def pipelined_tile_bytes(loop_tiles: int, stages: int, resident: int = 0, itemsize: int = 4) -> int:
    """Shared memory a software-pipelined loop needs, bytes: each tile loaded in the loop is kept in
    max(1, stages - 1) buffers (the loads in flight), plus ``resident`` elements staged once (a tile
    loaded before the loop, an operand converted for a second ``tl.dot``). Elements in, bytes out.
    Triton's own count for Lab 04's fp32 attention at head dim 256 (tiles 128 x 32, 3 stages):
    4 * (2 * 2 * 32 * 256 + 128 * 256 + 128 * 32) = 278,528 bytes, as this gives."""
    return itemsize * (max(1, stages - 1) * loop_tiles + resident)


def check_shared_memory(fn: str, need: int, limit: int | None, what: str, fix: str) -> None:
    """One-line ValueError when ``need`` bytes of shared memory exceed the device's ``limit``."""
    if limit is not None and need > limit:
        raise ValueError(f"{fn}: {what} need {need / 1024:.0f} KiB of shared memory per program, this GPU "
                         f"allows {limit / 1024:.0f} KiB; {fix}")


def check_same(fn: str, **tensors) -> None:
    """Raise if the named tensors differ in device or dtype."""
    items = list(tensors.items())
    (n0, t0) = items[0]
    for n, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(f"{fn}: {n} is on {t.device} but {n0} is on {t0.device}; put them on one device")
        if t.dtype != t0.dtype:
            raise TypeError(f"{fn}: {n} has dtype {t.dtype} but {n0} has {t0.dtype}; use one dtype")


def check_block(fn: str, name: str, value, *, minimum: int = 1, maximum: int = MAX_BLOCK) -> int:
    """Return a block/tile size as an int; it must be a power of two in ``minimum``..``maximum``.

    TypeError for a non-int (a bool or a float such as 16.0 included), ValueError otherwise;
    one line naming ``fn`` and ``name``. ``tl.arange`` needs a power of two, ``tl.dot`` (when
    compiled) needs >= 16 (pass ``minimum=DOT_MIN``), and Triton caps a block at 2**20 elements.
    """
    want = f"a power of two in {minimum}..{maximum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int ({want}), got {type(value).__name__} {value!r}")
    value = int(value)
    if not (minimum <= value <= maximum) or value & (value - 1):
        raise ValueError(f"{fn}: {name} must be {want}, got {value}")
    return value
