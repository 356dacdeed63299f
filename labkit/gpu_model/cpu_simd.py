"""The CPU's side of coalescing, measured here: SIMD over contiguous data, and access order.

A CPU core has no warps, but the same rule holds: memory moves in whole cache lines (64 bytes)
and the fastest code reads neighbouring elements together. Two measurements on this machine:

1. `simd_vs_gather`: copy m float32 elements out of a large array
   - contiguously (``out.copy_(x[:m])``: wide SIMD loads and stores),
   - through an index list that happens to be sequential (``index_select`` with ``arange``:
     the same elements, one at a time through an index),
   - with a stride (every s-th element: each 64-byte line read for 64/s useful bytes when s ≤ 16),
   - through random indices (a gather: a cache miss per element once the array is out of cache).
   The contiguous copy touches only m·4 bytes (which may fit in the last-level cache); the
   strided and random ones sweep the whole n-element array: that waste is part of the lesson.
2. `access_order`: sum all n elements of one array through an index, once in order and once
   in a random permutation. The instructions are identical; only the order differs, so the
   gap is what the hardware prefetcher and the caches buy for sequential access.

Throughput is *useful* bytes per second (GB/s, 1 GB = 1e9 bytes): element bytes read plus
written; index arrays and wasted parts of cache lines are not counted, so a pattern that
wastes bandwidth shows a lower number. Times come from `labkit.bench.median_time`, on one
thread by default (``threads=1``), so that the numbers measure the access pattern of one core
rather than how busy the machine's other cores are.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch

from labkit.bench import median_time
from labkit.checks import check_int
from labkit.table import Table

__all__ = ["Throughput", "SimdResult", "OrderResult", "simd_vs_gather", "access_order"]


@dataclass(frozen=True)
class Throughput:
    """One access pattern: ``seconds`` per pass (median) moving ``useful_bytes`` bytes."""
    name: str
    seconds: float
    useful_bytes: int

    @property
    def gbps(self) -> float:
        return self.useful_bytes / self.seconds / 1e9


@dataclass(frozen=True)
class SimdResult:
    """Copies of ``m`` float32 elements out of an array of ``n``: ``rows`` in the order above."""
    n: int
    m: int
    stride: int
    rows: tuple   # Throughput: contiguous, gather (sequential indices), strided, gather (random indices)

    def by_name(self, name: str) -> Throughput:
        return next(r for r in self.rows if r.name == name)

    def ratio(self, slow: str, fast: str = "contiguous") -> float:
        """How many times slower ``slow`` is than ``fast`` (a time ratio)."""
        return self.by_name(slow).seconds / self.by_name(fast).seconds

    def table(self) -> Table:
        c = self.by_name("contiguous").seconds
        return Table(["pattern", "ms", "GB/s", "× contiguous time"],
                     [[r.name, r.seconds * 1e3, r.gbps, r.seconds / c] for r in self.rows],
                     {"ms": ".2f", "GB/s": ".2f", "× contiguous time": ".1f"},
                     f"copy {self.m} float32 of {self.n} (stride {self.stride})")


@dataclass(frozen=True)
class OrderResult:
    """Summing ``n`` float32 through an index: in order vs a random permutation (and ``x.sum()``)."""
    n: int
    sequential: Throughput
    random: Throughput
    direct: Throughput      # x.sum(): no index at all

    @property
    def ratio(self) -> float:
        """random / sequential time: what access order alone costs."""
        return self.random.seconds / self.sequential.seconds

    def table(self) -> Table:
        rows = [[t.name, t.seconds * 1e3, t.gbps] for t in (self.direct, self.sequential, self.random)]
        return Table(["traversal", "ms", "GB/s"], rows, {"ms": ".2f", "GB/s": ".2f"}, f"sum of {self.n} float32")


@contextlib.contextmanager
def _threads(fn: str, threads: int) -> Iterator[None]:
    threads = check_int(fn, "threads", threads, minimum=1)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def simd_vs_gather(n: int = 1 << 24, stride: int = 8, repeat: int = 3, seed: int = 0,
                   threads: int = 1) -> SimdResult:
    """Time four ways of copying m = n // stride float32 elements out of an ``n``-element array
    (about a second for the default n on one thread)."""
    fn = "simd_vs_gather"
    n = check_int(fn, "n", n, minimum=1024)
    stride = check_int(fn, "stride", stride, minimum=2, maximum=n // 2)
    repeat = check_int(fn, "repeat", repeat, minimum=1)
    with _threads(fn, threads):
        return _simd_vs_gather(n, stride, repeat, seed)


def _simd_vs_gather(n: int, stride: int, repeat: int, seed: int) -> SimdResult:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g)                                  # (n,) float32
    m = n // stride
    out = torch.empty(m)                                            # (m,)
    seq = torch.arange(m)
    rnd = torch.randint(0, n, (m,), generator=g)
    patterns = {
        "contiguous": lambda: out.copy_(x[:m]),
        "gather, sequential indices": lambda: torch.index_select(x, 0, seq, out=out),
        f"strided (every {stride}th)": lambda: out.copy_(x[::stride][:m]),
        "gather, random indices": lambda: torch.index_select(x, 0, rnd, out=out),
    }
    useful = 2 * m * x.element_size()                               # read + write, bytes
    rows = tuple(Throughput(name, median_time(f, repeat=repeat), useful) for name, f in patterns.items())
    return SimdResult(n, m, stride, rows)


def access_order(n: int = 1 << 23, repeat: int = 3, seed: int = 0, threads: int = 1) -> OrderResult:
    """Sum ``n`` float32 through an index (``index_select`` into a buffer, then ``sum``) with the
    index in order vs a random permutation (a few seconds for the default n on one thread)."""
    fn = "access_order"
    n = check_int(fn, "n", n, minimum=1024)
    repeat = check_int(fn, "repeat", repeat, minimum=1)
    with _threads(fn, threads):
        return _access_order(n, repeat, seed)


def _access_order(n: int, repeat: int, seed: int) -> OrderResult:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g)                                  # (n,) float32
    buf = torch.empty(n)
    order = {"in order": torch.arange(n), "random permutation": torch.randperm(n, generator=g)}
    useful = n * x.element_size()                                   # each element read once, bytes
    t = {k: Throughput(k, median_time(lambda i=i: torch.index_select(x, 0, i, out=buf).sum(), repeat=repeat),
                       useful) for k, i in order.items()}
    direct = Throughput("x.sum()", median_time(lambda: x.sum(), repeat=repeat), useful)
    return OrderResult(n, t["in order"], t["random permutation"], direct)
