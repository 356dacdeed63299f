"""Memory coalescing: how many memory transactions one warp's load or store needs.

When the 32 lanes of a warp execute one load, the hardware merges their addresses: every
aligned 128-byte *segment* that at least one active lane touches is one transaction, and
DRAM moves data in aligned 32-byte *sectors*. So a warp reading 32 consecutive 4-byte floats
needs 1 transaction (4 sectors, 128 bytes, all useful), while 32 lanes reading every 32nd
float need 32 transactions (32 sectors: 1024 bytes moved for 128 used).

The function a learner writes (and is graded on) is `transactions`:

    transactions(addresses, segment_bytes=128) -> int

    addresses      a list, tuple or 1-D numpy array of at most 32 entries, one per lane of one
                   warp, in lane order; entry i is lane i's byte address (an int >= 0; numpy ints
                   allowed; bools and floats raise TypeError) or None when lane i is inactive
                   (masked off). More than 32 entries or a negative address raise ValueError. Each access is taken
                   to lie inside the segment holding its first byte (naturally aligned elements
                   no bigger than a segment never straddle two).
    segment_bytes  the segment size in bytes: an int, a power of two >= 1 (128: transactions;
                   32: sectors); anything else raises TypeError/ValueError.
    returns        the number of distinct aligned segments touched, that is the number of
                   distinct values ``address // segment_bytes`` over the active lanes (0 if no
                   lane is active).

Closed forms (tests/test_gpu_model_coalescing.py checks them against `transactions`):
- stride s elements of e bytes, 32 lanes, segment-aligned start:
  ``min(32, floor(31·s·e / S) + 1)`` segments of S bytes (s >= 1; s = 0 is a broadcast: 1).
  For 4-byte elements and S = 128 this is ``min(32, ceil(32·4·s / 128)) = min(32, s)``;
- lanes reading random addresses in an array of M segments: M·(1 − (1 − 1/M)^32) on
  average, which is ≈ 32 when M ≫ 32.

From real Triton programs: `record_warps()` wraps Lab 04's access recorder
(`labkit.kernels.record`) and keeps, for each recorded `tl.load`/`tl.store`, every lane's
byte address in block order. The mapping from Triton's block to warps is a *model*: the
block's elements are flattened in row-major (C) order and element k goes to lane k % 32 of
warp k // 32, one element per lane per instruction. Compiled Triton usually gives each thread
several neighbouring elements (up to 16 bytes, e.g. 4 floats, for one vector load), so a real
warp covers more elements per instruction; for contiguous data the segments a whole block
touches, summed over its warps, are the same either way. Addresses are byte offsets from the tensor's first
element, whose address is taken to be 128-byte aligned (cudaMalloc aligns to 256 bytes).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import triton
import triton.language as tl

from labkit.checks import check_int
from labkit.kernels.checks import check_block, check_tensor
from labkit.table import Table

__all__ = ["transactions", "sectors", "WarpAccess", "analyze_warp", "strided_addresses",
           "strided_transactions", "expected_random_transactions", "record_warps", "WarpRecording",
           "RecordedWarp", "coalescing_table", "strided_read", "strided_read_kernel", "transpose",
           "transpose_kernel", "WARP_SIZE", "SEGMENT_BYTES", "SECTOR_BYTES"]

WARP_SIZE = 32
SEGMENT_BYTES = 128     # one memory transaction
SECTOR_BYTES = 32       # the unit DRAM moves


# ---------------------------------------------------------------------------- one warp
def _lanes(fn: str, addresses) -> list:
    if isinstance(addresses, (str, bytes)) or not isinstance(addresses, (list, tuple, np.ndarray)):
        raise TypeError(f"{fn}: addresses must be a list of ints or None (one per lane), "
                        f"got {type(addresses).__name__}")
    addresses = list(addresses)
    if len(addresses) > WARP_SIZE:
        raise ValueError(f"{fn}: a warp has at most {WARP_SIZE} lanes, got {len(addresses)} addresses")
    out = []
    for i, a in enumerate(addresses):
        out.append(None if a is None else check_int(fn, f"addresses[{i}]", a, minimum=0))
    return out


def _power_of_two(fn: str, name: str, value) -> int:
    value = check_int(fn, name, value, minimum=1)
    if value & (value - 1):
        raise ValueError(f"{fn}: {name} must be a power of two, got {value}")
    return value


def transactions(addresses, segment_bytes: int = SEGMENT_BYTES) -> int:
    """Distinct aligned ``segment_bytes`` segments that one warp's active lanes touch (see the
    module docstring for the exact contract). ``addresses``: byte addresses, None = inactive lane."""
    lanes = _lanes("transactions", addresses)
    return _transactions(lanes, _power_of_two("transactions", "segment_bytes", segment_bytes))


def _transactions(addresses, segment_bytes=128):
    """The number of aligned memory segments one warp's access touches (its memory transactions).

    addresses: a list of at most 32 entries, one per lane in order: the byte address (an int >= 0)
    that lane reads, or None for an inactive lane. segment_bytes: a power of two (128 for a
    transaction, 32 for a sector). Return the number of distinct segments address //
    segment_bytes among the active lanes (0 if none is active).
    Example: 32 lanes reading consecutive 4-byte floats from address 0 -> 1; with a stride of 2
    floats -> 2.
    """
    # BEGIN SOLUTION
    # HINT: lanes whose addresses fall in the same aligned segment share one transaction, and an
    # HINT: inactive lane costs nothing: which segment does each lane fall in? (a Python set de-duplicates)
    return len({a // segment_bytes for a in addresses if a is not None})
    # END SOLUTION


def sectors(addresses) -> int:
    """Distinct aligned 32-byte sectors one warp's active lanes touch: ``transactions(addresses, 32)``."""
    return transactions(addresses, SECTOR_BYTES)


@dataclass(frozen=True)
class WarpAccess:
    """One warp instruction's memory cost.

    ``active``: lanes that access memory; ``transactions``: 128-byte segments; ``sectors``:
    32-byte sectors; ``bytes_requested`` = active · element_bytes; ``bytes_moved`` = 32 · sectors;
    ``efficiency`` = requested / moved (1.0 when nothing moves).
    """
    active: int
    transactions: int
    sectors: int
    element_bytes: int

    @property
    def bytes_requested(self) -> int:
        return self.active * self.element_bytes

    @property
    def bytes_moved(self) -> int:
        return self.sectors * SECTOR_BYTES

    @property
    def efficiency(self) -> float:
        return self.bytes_requested / self.bytes_moved if self.sectors else 1.0


def analyze_warp(addresses, element_bytes: int = 4) -> WarpAccess:
    """Transactions, sectors and bytes for one warp's byte ``addresses`` (None = inactive) of
    ``element_bytes``-byte elements (a power of two <= 32, each address a multiple of it)."""
    fn = "analyze_warp"
    e = _power_of_two(fn, "element_bytes", element_bytes)
    if e > SECTOR_BYTES:
        raise ValueError(f"{fn}: element_bytes must be <= {SECTOR_BYTES}, got {e}")
    lanes = _lanes(fn, addresses)
    bad = [a for a in lanes if a is not None and a % e]
    if bad:
        raise ValueError(f"{fn}: address {bad[0]} is not a multiple of element_bytes={e} (unaligned element)")
    return WarpAccess(sum(a is not None for a in lanes), transactions(lanes), sectors(lanes), e)


def strided_addresses(stride: int, element_bytes: int = 4, base: int = 0, lanes: int = WARP_SIZE) -> list[int]:
    """Byte addresses of lanes 0..lanes-1 reading element ``i · stride`` of an array at ``base``."""
    fn = "strided_addresses"
    stride = check_int(fn, "stride", stride, minimum=0)
    e = check_int(fn, "element_bytes", element_bytes, minimum=1)
    base = check_int(fn, "base", base, minimum=0)
    lanes = check_int(fn, "lanes", lanes, minimum=1, maximum=WARP_SIZE)
    return [base + i * stride * e for i in range(lanes)]


def strided_transactions(stride: int, element_bytes: int = 4, segment_bytes: int = SEGMENT_BYTES,
                         lanes: int = WARP_SIZE) -> int:
    """Closed form: segments touched by ``lanes`` lanes reading every ``stride``-th element
    (``element_bytes`` each) from a segment-aligned start: min(lanes, floor((lanes−1)·s·e / S) + 1);
    1 for stride 0 (every lane reads the same element)."""
    fn = "strided_transactions"
    s = check_int(fn, "stride", stride, minimum=0)
    e = check_int(fn, "element_bytes", element_bytes, minimum=1)
    seg = _power_of_two(fn, "segment_bytes", segment_bytes)
    lanes = check_int(fn, "lanes", lanes, minimum=1, maximum=WARP_SIZE)
    if s == 0:
        return 1
    return min(lanes, (lanes - 1) * s * e // seg + 1)


def expected_random_transactions(n_segments: int, lanes: int = WARP_SIZE) -> float:
    """Mean segments touched when each of ``lanes`` lanes picks one of ``n_segments`` segments
    uniformly at random: M·(1 − (1 − 1/M)^lanes)."""
    m = check_int("expected_random_transactions", "n_segments", n_segments, minimum=1)
    lanes = check_int("expected_random_transactions", "lanes", lanes, minimum=1, maximum=WARP_SIZE)
    return m * (1.0 - (1.0 - 1.0 / m) ** lanes)


# ---------------------------------------------------------------------------- from Triton programs
@dataclass(frozen=True)
class RecordedWarp:
    """Warp ``warp`` of program ``pid`` in one recorded ``tl.load``/``tl.store`` (``kind``) on
    kernel argument ``tensor``: ``addresses`` are byte offsets from the tensor's start, one per
    lane (None: masked off or out of bounds). ``access`` is the `WarpAccess` they cost."""
    launch: int
    pid: tuple
    kind: str
    tensor: str
    warp: int
    addresses: tuple
    access: WarpAccess


@dataclass
class WarpRecording:
    """What `record_warps` saw: ``recorder`` (Lab 04's AccessRecorder) and ``warps``."""
    recorder: object
    warps: list

    def select(self, kind: str | None = None, tensor: str | None = None) -> list[RecordedWarp]:
        return [w for w in self.warps if (kind is None or w.kind == kind) and (tensor is None or w.tensor == tensor)]

    def transactions_per_warp(self, kind: str | None = None, tensor: str | None = None) -> list[int]:
        return [w.access.transactions for w in self.select(kind, tensor)]


@contextlib.contextmanager
def record_warps() -> Iterator[WarpRecording]:
    """Record every interpreted Triton launch inside the block and cut each load/store into
    warps of 32 consecutive block elements (row-major flattening; see the module docstring).

    It wraps the recorder's per-call hook on this one recorder, where the lanes' raw pointers
    and mask are still in block order (Lab 04's `Access` keeps only the active lanes' offsets).
    """
    from labkit.kernels.record import record

    with record() as rec:
        out = WarpRecording(rec, [])
        hook = rec._classify

        def classify(kind, ptrs, mask, pid, *rest, **kw):
            keep = hook(kind, ptrs, mask, pid, *rest, **kw)
            acc = rec.accesses[-1]
            info = rec.launches[acc.launch].tensors.get(acc.tensor)
            if info is not None:
                addr = np.asarray(ptrs, dtype=np.uint64).astype(np.int64).ravel() - info.ptr
                live = np.asarray(keep, dtype=bool).ravel()
                for w, k0 in enumerate(range(0, addr.size, WARP_SIZE)):
                    lanes = tuple(int(a) if ok else None for a, ok in zip(addr[k0:k0 + WARP_SIZE],
                                                                        live[k0:k0 + WARP_SIZE]))
                    out.warps.append(RecordedWarp(acc.launch, acc.pid, kind, acc.tensor, w, lanes,
                                                  analyze_warp(lanes, info.element_size)))
            return keep

        rec._classify = classify
        try:
            yield out
        finally:
            del rec._classify


def coalescing_table(recording: WarpRecording, title: str = "") -> Table:
    """Per (tensor, kind): warps, transactions (total and per warp), sectors, bytes requested
    and moved, and efficiency = requested / moved."""
    groups: dict[tuple, list[RecordedWarp]] = {}
    for w in recording.warps:
        groups.setdefault((w.tensor, w.kind), []).append(w)
    rows = []
    for (tensor, kind), ws in groups.items():
        tr = sum(w.access.transactions for w in ws)
        sec = sum(w.access.sectors for w in ws)
        req = sum(w.access.bytes_requested for w in ws)
        moved = sec * SECTOR_BYTES
        rows.append([tensor, kind, len(ws), tr, tr / len(ws), sec, req, moved, req / moved if moved else 1.0])
    return Table(["tensor", "kind", "warps", "transactions", "per warp", "sectors", "bytes used", "bytes moved",
                  "efficiency"], rows, {"per warp": ".2f", "efficiency": ".3f"}, title)


# ---------------------------------------------------------------------------- two access patterns
@triton.jit
def strided_read_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)        # output element indices
    mask = offs < n
    v = tl.load(x_ptr + offs * stride, mask=mask)   # lane k reads x[k * stride]: strided
    tl.store(out_ptr + offs, v, mask=mask)          # and writes out[k]: contiguous


def strided_read(x: torch.Tensor, stride: int, block_size: int = 128) -> torch.Tensor:
    """``x[::stride]`` (1-D, contiguous ``x``) copied by a Triton kernel: loads jump ``stride``
    elements between lanes, stores are contiguous."""
    fn = "strided_read"
    check_tensor(fn, "x", x, ndim=1, dtypes=(torch.float32, torch.float16, torch.bfloat16, torch.int32))
    stride = check_int(fn, "stride", stride, minimum=1)
    block_size = check_block(fn, "block_size", block_size)
    n = math.ceil(x.numel() / stride)
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    strided_read_kernel[(triton.cdiv(n, block_size),)](x, out, n, stride, BLOCK=block_size)
    return out


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    rm = pid_m * BM + tl.arange(0, BM)                       # rows of x
    rn = pid_n * BN + tl.arange(0, BN)                       # columns of x
    mask = (rm[:, None] < M) & (rn[None, :] < N)             # (BM, BN)
    tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask)   # along a row of x: contiguous
    tl.store(out_ptr + rn[None, :] * M + rm[:, None], tile, mask=mask)  # out[rn, rm]: M elements apart


def transpose(x: torch.Tensor, block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """``x.T`` (2-D, contiguous, shape (M, N)) written to a new contiguous (N, M) tensor, tile by
    tile, without shared memory: reads are coalesced, writes are strided by M elements."""
    fn = "transpose"
    check_tensor(fn, "x", x, ndim=2, dtypes=(torch.float32, torch.float16, torch.bfloat16, torch.int32))
    block_m = check_block(fn, "block_m", block_m)
    block_n = check_block(fn, "block_n", block_n)
    M, N = x.shape
    out = torch.empty((N, M), dtype=x.dtype, device=x.device)
    transpose_kernel[(triton.cdiv(M, block_m), triton.cdiv(N, block_n))](x, out, M, N, BM=block_m, BN=block_n)
    return out
