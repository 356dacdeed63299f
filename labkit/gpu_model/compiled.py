"""What compiled Triton does with a kernel's loads and stores — no GPU needed to find out.

The interpreter (`record_warps`) records every lane's address under a *thread model*: one block
element per lane, lanes in row-major order. Compiled Triton decides otherwise. Its coalescing
pass gives each `tl.load` and `tl.store` a *blocked layout* (elements per thread, threads per
warp along each dimension, and which dimension is fastest) chosen from the contiguity of that
operation's own pointers; where a value travels between two layouts, the compiler inserts a
`ttg.convert_layout`, which it lowers through shared memory.

Triton compiles for an NVIDIA target on any Linux machine: its wheel carries the CUDA backend
and `ptxas`. `compile_for_gpu` does that and reads the result:

    k = compile_for_gpu(transpose_kernel, {"x_ptr": "*fp32", ...}, {"BM": 32, "BN": 32})
    k.accesses          # [("load", BlockedLayout(...)), ("store", BlockedLayout(...))]
    k.conversions       # ttg.convert_layout operations in the TTGIR
    k.shared_bytes      # shared memory the kernel allocates (the staging buffer)
    k.ptx_ops           # {"ld.global": n, "st.global": n, "ld.shared": n, "st.shared": n}

`BlockedLayout.warp_elements()` lists the tile elements warp 0 touches in one instruction (each
lane a vector of ``size_per_thread`` elements along the fastest dimension); `warp_cost` turns
them into bytes used, 32-byte sectors and 128-byte segments with an address function.
Integer arguments get Triton's divisibility-by-16 specialisation (``divisible=True``), as a
launch with 16-byte-aligned tensors and sizes that are multiples of 16 would.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Callable

from labkit.checks import check_int
from labkit.gpu_model.coalescing import SECTOR_BYTES, SEGMENT_BYTES, WARP_SIZE

__all__ = ["BlockedLayout", "CompiledKernel", "compile_for_gpu", "WarpCost", "warp_cost"]

_FIELDS = {"sizePerThread": "size_per_thread", "threadsPerWarp": "threads_per_warp",
           "warpsPerCTA": "warps_per_cta", "order": "order"}


@dataclass(frozen=True)
class BlockedLayout:
    """Triton's ``#ttg.blocked`` layout: per dimension, elements per thread, threads per warp and
    warps per block; ``order`` lists the dimensions fastest first."""

    size_per_thread: tuple
    threads_per_warp: tuple
    warps_per_cta: tuple
    order: tuple

    @classmethod
    def parse(cls, text: str) -> "BlockedLayout":
        """From a TTGIR attribute such as ``#ttg.blocked<{sizePerThread = [1, 4], ...}>``."""
        found = {}
        for key, name in _FIELDS.items():
            m = re.search(key + r"\s*=\s*\[([\d,\s]*)\]", text)
            if m is None:
                raise ValueError(f"BlockedLayout.parse: no {key} in {text!r}")
            found[name] = tuple(int(v) for v in m.group(1).split(",") if v.strip())
        if len({len(v) for v in found.values()}) != 1 or sorted(found["order"]) != list(range(len(found["order"]))):
            raise ValueError(f"BlockedLayout.parse: inconsistent layout {text!r}")
        if _prod(found["threads_per_warp"]) != WARP_SIZE:
            raise ValueError(f"BlockedLayout.parse: threadsPerWarp must multiply to {WARP_SIZE}: {text!r}")
        return cls(**found)

    def warp_elements(self) -> list[list[tuple]]:
        """Per lane of warp 0, the tile coordinates of the elements its first memory instruction
        reaches: the lane's vector of ``size_per_thread[fastest]`` contiguous elements."""
        fast = self.order[0]
        lanes = []
        for lane in range(WARP_SIZE):
            base, rest = [0] * len(self.order), lane
            for d in self.order:
                base[d] = (rest % self.threads_per_warp[d]) * self.size_per_thread[d]
                rest //= self.threads_per_warp[d]
            vector = []
            for k in range(self.size_per_thread[fast]):
                c = list(base)
                c[fast] += k
                vector.append(tuple(c))
            lanes.append(vector)
        return lanes

    def describe(self) -> str:
        """e.g. ``4x8 lanes of 1x4``: a warp's lanes per dimension, and the elements each holds."""
        return f"{'x'.join(map(str, self.threads_per_warp))} lanes of {'x'.join(map(str, self.size_per_thread))}"


@dataclass(frozen=True)
class WarpCost:
    """One warp instruction: ``bytes_used`` by its lanes, the aligned 32-byte ``sectors`` and
    128-byte ``segments`` those bytes lie in, and ``efficiency`` = used / (32 · sectors)."""

    bytes_used: int
    sectors: int
    segments: int

    @property
    def efficiency(self) -> float:
        return self.bytes_used / (SECTOR_BYTES * self.sectors)


def warp_cost(lanes: list[list[tuple]], address: Callable[..., int], element_bytes: int = 4) -> WarpCost:
    """Cost of one warp instruction whose lanes reach the elements ``lanes`` (tile coordinates,
    as `BlockedLayout.warp_elements` gives them); ``address(*coords)`` is an element's index in
    its tensor (times ``element_bytes`` gives bytes from a segment-aligned start)."""
    e = check_int("warp_cost", "element_bytes", element_bytes, minimum=1)
    starts = [address(*c) * e for vector in lanes for c in vector]
    if any(not isinstance(a, int) or a < 0 for a in starts):
        raise ValueError("warp_cost: address() must give non-negative integer element indices")
    touched = {a + b for a in starts for b in range(e)}
    return WarpCost(len(starts) * e, len({b // SECTOR_BYTES for b in touched}),
                    len({b // SEGMENT_BYTES for b in touched}))


@dataclass(frozen=True)
class CompiledKernel:
    """What `compile_for_gpu` read from Triton's output: ``accesses`` — (kind, layout) for every
    ``tt.load`` / ``tt.store`` in program order; ``conversions`` — ``ttg.convert_layout`` count;
    ``shared_bytes`` — the shared memory the kernel allocates; ``ptx_ops`` — global and shared
    load/store instructions in the PTX; ``target`` — e.g. ``cuda sm_90``."""

    target: str
    num_warps: int
    accesses: list
    conversions: int
    shared_bytes: int
    ptx_ops: dict
    ttgir: str


def compile_for_gpu(kernel, signature: dict, constexprs: dict, arch: int = 90, num_warps: int = 4,
                    divisible: bool = True) -> CompiledKernel:
    """Compile a ``@triton.jit`` kernel for NVIDIA ``sm_<arch>`` (no GPU needed); read its layouts.

    ``signature`` maps every parameter to a Triton type (``"*fp32"``, ``"i32"``, ``"constexpr"``);
    ``constexprs`` gives the constexpr values. ``divisible=True`` tells the compiler that pointers
    are 16-byte aligned and integers multiples of 16, as Triton specialises a real launch whose
    arguments are. Raises RuntimeError (one line) when this Triton has no CUDA backend.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    fn = "compile_for_gpu"
    arch = check_int(fn, "arch", arch, minimum=70)
    num_warps = check_int(fn, "num_warps", num_warps, minimum=1, maximum=32)
    if not isinstance(signature, dict) or not isinstance(constexprs, dict):
        raise TypeError(f"{fn}: signature and constexprs must be dicts")
    py = getattr(kernel, "fn", None)
    if py is None:
        raise TypeError(f"{fn}: kernel must be a @triton.jit function, got {type(kernel).__name__}")
    jit = kernel if isinstance(kernel, JITFunction) else JITFunction(py)   # interpreter: unwrap
    attrs = {}
    if divisible:
        attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values())
                 if t.startswith("*") or t in ("i32", "i64")}
    try:
        src = triton.compiler.ASTSource(fn=jit, signature=signature, constexprs=constexprs,
                                        attrs=attrs)
        target = GPUTarget("cuda", arch, WARP_SIZE)
        with warnings.catch_warnings():      # Triton 3.9 warns that a default will change
            warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
            out = triton.compile(src, target=target, options={"num_warps": num_warps})
    except (ImportError, KeyError, FileNotFoundError) as e:   # pragma: no cover - no CUDA back end
        raise RuntimeError(f"{fn}: this Triton cannot compile for CUDA here "
                           f"({type(e).__name__}: {e})") from None
    ttgir, ptx = out.asm["ttgir"], out.asm["ptx"]
    layouts = {m.group(1): BlockedLayout.parse(m.group(2))
               for m in re.finditer(r"^(#blocked\d*) = (#ttg\.blocked<\{.*\}>)", ttgir, re.M)}
    accesses = []
    for line in ttgir.splitlines():
        m = re.search(r"\btt\.(load|store)\b", line)
        if m and "#blocked" in line:
            accesses.append((m.group(1), layouts[re.findall(r"#blocked\d*", line)[-1]]))
    ops = {k: len(re.findall(r"\b" + re.escape(k) + r"\b", ptx))
           for k in ("ld.global", "st.global", "ld.shared", "st.shared")}
    return CompiledKernel(f"cuda sm_{arch}", num_warps, accesses, ttgir.count("ttg.convert_layout"),
                          int(out.metadata.shared), ops, ttgir)


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
