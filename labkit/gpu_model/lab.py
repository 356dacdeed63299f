"""Lab 03's GPU-execution-model one-liners (the "GPU execution model" section of notebook 03).

    divergence_table(a, b, c)       slots issued and active-lane efficiency of branchy kernels on a
                                    warp (`simulate_warp`), next to the closed forms
    lane_masks(program)             which lanes are active in each issued slot (for the drawing)
    stride_table(strides)           32-byte sectors (and 128-byte segments) of one warp request at a
                                    stride and at random, counted, next to the closed forms
                                    min(32, 4s) and min(32, s) for 4-byte elements
    recorded_table()                per-warp sectors of real Triton programs recorded under the
                                    interpreter (Lab 04's recorder) with the thread model (one block
                                    element per lane): add, a strided read, a naive transpose
    compiled_table()                the naive transpose compiled for sm_90 (no GPU needed): the
                                    layouts Triton chose, sectors per warp instruction, shared memory
    occupancy_table(cases)          resident blocks and warps per SM from threads, registers and
                                    shared memory per block (`occupancy`), and the limiting resource
    bank_table(strides)             shared-memory conflict degree of tile rows, columns, padded
                                    columns and strides, counted, next to gcd(s, 32)
    stencil_table()                 global loads of 1-D and 2-D stencils, untiled vs tiled, counted
                                    next to n(2r+1) and n + 2r·cdiv(n, T)
    local_memory_table(N, V)        what kernel v2's V×V accumulators would cost in local memory
    host_device(backend)            launch vs completion, implicit syncs, pinned vs pageable
                                    copies (a `NeedsCuda` without a CUDA GPU)
    simd_table(n), order_table(n)   this CPU: contiguous vs gathered copies; in-order vs random

Every table is a `labkit.table.Table` (aligned, lines <= 100 characters); every number in it
comes from the `labkit.gpu_model` function named in its docstring.
"""
from __future__ import annotations

import numpy as np
import torch

from labkit.checks import check_int, check_real
from labkit.gpu_model import banks as Bk
from labkit.gpu_model import coalescing as Co
from labkit.gpu_model import cpu_simd as Cs
from labkit.gpu_model import host_device as Hd
from labkit.gpu_model import occupancy as Oc
from labkit.gpu_model import stencil as St
from labkit.gpu_model import warps as W
from labkit.table import Table

WARP = W.WARP_SIZE


# ---------------------------------------------------------------------------- 1. divergence
def divergence_kernels(a: int = 3, b: int = 5, c: int = 2) -> list[tuple[str, list, int]]:
    """(text, program, threads) for the divergence table: two-way branches whose sides cost a and
    b slots, and loops whose body costs c slots. Lane value v = lane id (thread id t for 64)."""
    def branch(cond, text):
        return [W.If(cond, [W.Op("A", a)], [W.Op("B", b)], text=text)]

    def loop(trips, text):
        return [W.Loop(trips, [W.Op("body", c)], text=text)]

    return [
        ("if v < 32: A else: B", branch(lambda v: v < 32, "v < 32"), WARP),
        ("if v % 2 == 0: A else: B", branch(lambda v: v % 2 == 0, "v % 2 == 0"), WARP),
        ("if v % 4 == 0: A else: B", branch(lambda v: v % 4 == 0, "v % 4 == 0"), WARP),
        ("if v == 0: A else: B", branch(lambda v: v == 0, "v == 0"), WARP),
        ("if t // 32 == 0: A else: B", branch(lambda v: v // 32 == 0, "t // 32 == 0"), 2 * WARP),
        ("for _ in range(4): body", loop(lambda v: 4, "4"), WARP),
        ("for _ in range(v): body", loop(lambda v: v, "v"), WARP),
        ("for _ in range(32 if v == 0 else 1)", loop(lambda v: 32 if v == 0 else 1, "32 if v == 0 else 1"), WARP),
    ]


def _formula(program, values) -> W.WarpCost:
    """The closed form for one warp running a one-node kernel on ``values``: `branch_formula`
    with the number of lanes whose condition holds, or `loop_formula` with each lane's trips."""
    node = program[0]
    if isinstance(node, W.If):
        return W.branch_formula(node.then[0].cost, node.orelse[0].cost, sum(bool(node.cond(v)) for v in values))
    return W.loop_formula([node.trips(v) for v in values], node.body[0].cost)


def divergence_table(a: int = 3, b: int = 5, c: int = 2) -> Table:
    """Each kernel of `divergence_kernels` simulated (`simulate_threads`: warps of 32 threads)
    next to its closed form (`branch_formula`: a + b slots when both sides have a lane, else one
    side; `loop_formula`: c · max trips slots, efficiency Σ trips / (32 · max trips))."""
    fn = "divergence_table"
    a, b, c = (check_int(fn, k, v, minimum=1) for k, v in (("a", a), ("b", b), ("c", c)))
    rows = []
    for text, program, threads in divergence_kernels(a, b, c):
        run = W.simulate_threads(program, list(range(threads)))
        issued = useful = 0
        for w0 in range(0, threads, WARP):
            f = _formula(program, range(w0, w0 + WARP))
            issued, useful = issued + f.issued, useful + f.useful
        eff = useful / (WARP * issued)
        rows.append([text, len(run.warps), run.issued, issued, run.cost().efficiency, eff])
    return Table(["kernel (v = lane id, t = thread id)", "warps", "slots", "formula", "efficiency",
                  "formula eff."], rows, {"efficiency": ".3f", "formula eff.": ".3f"},
                 f"a, b = {a}, {b} slots (the branch's sides), c = {c} (a loop body); "
                 "efficiency = active lanes / (32·slots)")


def lane_masks(program, lane_values=None, warp_size: int = WARP) -> tuple[tuple, np.ndarray]:
    """(labels, masks): the Op issued in each slot of `simulate_warp(program, lane_values)` and a
    (slots, warp_size) bool array of the lanes active in it.

    It runs the simulator itself on a copy of ``program`` in which every Op sits inside two
    conditions that are true for every lane and only note which lanes evaluated them (so the
    slots issued do not change); the result is checked against the plain run's per-slot counts.
    """
    warp_size = check_int("lane_masks", "warp_size", warp_size, minimum=1, maximum=1024)
    values = list(range(warp_size)) if lane_values is None else list(lane_values)
    events: list[tuple[str, W.Op, int]] = []    # ("start" | "lane", Op, lane index) in call order

    def note(kind, op):
        def cond(t):
            events.append((kind, op, t[0]))
            return True
        return cond

    def wrap(nodes):
        out = []
        for n in nodes:
            if isinstance(n, W.Op):
                out.append(W.If(note("start", n), [W.If(note("lane", n), [n])]))
            elif isinstance(n, W.If):
                out.append(W.If(lambda t, f=n.cond: f(t[1]), wrap(n.then), wrap(n.orelse), n.text))
            else:
                out.append(W.Loop(lambda t, f=n.trips: f(t[1]), wrap(n.body), n.text))
        return out

    plain = W.simulate_warp(program, values, warp_size=warp_size)
    W.simulate_warp(wrap(program if isinstance(program, (list, tuple)) else [program]),
                    list(enumerate(values)), warp_size=warp_size)
    # one execution of an Op = a run of "start" events, then a run of "lane" events (its lanes)
    execs: list[tuple[W.Op, list]] = []
    prev = None
    for kind, op, lane in events:
        if kind == "lane":
            if prev != "lane":
                execs.append((op, []))
            execs[-1][1].append(lane)
        prev = kind
    labels, masks = [], []
    for op, lanes in execs:
        m = np.zeros(warp_size, bool)
        m[lanes] = True
        labels += [op.name] * op.cost
        masks += [m] * op.cost
    masks_arr = np.array(masks, dtype=bool).reshape(-1, warp_size)
    if tuple(labels) != plain.labels or tuple(int(k) for k in masks_arr.sum(1)) != plain.active_per_slot:
        raise RuntimeError("lane_masks: the traced run does not match simulate_warp")   # pragma: no cover
    return plain.labels, masks_arr


# ---------------------------------------------------------------------------- 2. coalescing
def stride_table(strides=(1, 2, 4, 8, 16, 32, 64), element_bytes: int = 4, random_warps: int = 200,
                 random_kib=(4, 65536), seed: int = 0) -> Table:
    """One warp request of 32 lanes, lane i reading element i·s (``element_bytes`` each, aligned
    start): the aligned 32-byte **sectors** it touches (what current GPUs move and profilers
    count per request) and the older 128-byte segments, counted by `analyze_warp`, next to the
    closed form `strided_transactions` for each size (for 4-byte elements min(32, 4s) sectors and
    min(32, s) segments; stride 0 is a broadcast). The last rows: lanes reading random elements of
    an array of each size in ``random_kib`` (KiB), mean over ``random_warps`` seeded warps, next to
    `expected_random_transactions` for its M sectors (and segments)."""
    fn = "stride_table"
    e = check_int(fn, "element_bytes", element_bytes, minimum=1, maximum=Co.SECTOR_BYTES)
    random_warps = check_int(fn, "random_warps", random_warps, minimum=1)
    rows = []
    for s in strides:
        s = check_int(fn, "stride", s, minimum=0)
        acc = Co.analyze_warp(Co.strided_addresses(s, e), e)
        expr = "broadcast" if s == 0 else f"min(32, 4·{s})" if e == 4 else "⌊31·s·e/32⌋+1"
        rows.append([f"stride {s}", acc.sectors, Co.strided_transactions(s, e, Co.SECTOR_BYTES), expr,
                     acc.transactions, Co.strided_transactions(s, e), acc.efficiency])
    rng = np.random.default_rng(seed)
    for kib in random_kib:
        kib = check_int(fn, "random_kib", kib, minimum=1)
        n_elem = (kib << 10) // e
        m_sec, m_seg = (kib << 10) // Co.SECTOR_BYTES, (kib << 10) // Co.SEGMENT_BYTES
        accs = [Co.analyze_warp([int(i) * e for i in rng.integers(0, n_elem, WARP)], e) for _ in range(random_warps)]
        rows.append([f"random, M={m_sec}", float(np.mean([a.sectors for a in accs])),
                     Co.expected_random_transactions(max(m_sec, 1)), "M(1-(1-1/M)^32)",
                     float(np.mean([a.transactions for a in accs])), Co.expected_random_transactions(max(m_seg, 1)),
                     float(np.mean([a.efficiency for a in accs]))])
    return Table(["32 lanes read", "sectors", "formula", "expression", "segments", "seg. formula", "efficiency"],
                 rows, {"sectors": ".4g", "formula": ".4g", "segments": ".4g", "seg. formula": ".4g",
                        "efficiency": ".3f"},
                 f"{e}-byte elements; sector = 32 B, segment = 128 B; M = sectors of the array; "
                 "efficiency = used / moved")


def recorded_runs(n: int = 1000, block: int = 256, stride: int = 8, shape=(64, 96), seed: int = 0) -> list:
    """[(kernel name, output equals torch's, WarpRecording)] for three interpreted Triton launches
    on CPU tensors: Lab 04's ``add`` (n elements, blocks of ``block``), `strided_read` (``x[::stride]``
    of 2048 floats, blocks of 64) and the naive `transpose` (``shape``, 32 × 32 tiles)."""
    from labkit.kernels import add

    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    v = torch.arange(2048, dtype=torch.float32)
    t = torch.randn(*shape, generator=g)
    runs = []
    for name, call, want in (("add", lambda: add(x, y, block_size=block), lambda: x + y),
                             (f"strided s={stride}", lambda: Co.strided_read(v, stride, block_size=64),
                              lambda: v[::stride]),
                             ("transpose", lambda: Co.transpose(t, 32, 32), lambda: t.T)):
        with Co.record_warps() as rec:
            out = call()
        runs.append((name, bool(torch.equal(out, want())), rec))
    return runs


def recorded_table(runs: list | None = None) -> Table:
    """Per kernel, tensor and kind (load/store): warps, 32-byte sectors (total and per warp),
    128-byte segments, bytes moved and efficiency, from `coalescing_table` of each recording in
    `recorded_runs`. The warps are the *thread model* of the interpreter's accesses: one block
    element per lane, 32 consecutive (row-major) block elements per warp."""
    runs = recorded_runs() if runs is None else runs
    rows = []
    for name, _, rec in runs:
        t = Co.coalescing_table(rec)
        for r in t.rows:
            v = dict(zip(t.columns, r))
            rows.append([name, v["tensor"], v["kind"], v["warps"], v["sectors"], v["sectors"] / v["warps"],
                         v["transactions"], v["bytes moved"], v["efficiency"]])
    ok = all(same for _, same, _ in runs)
    return Table(["kernel", "tensor", "kind", "warps", "sectors", "per warp", "segments", "bytes moved",
                  "efficiency"], rows, {"per warp": ".2f", "efficiency": ".3f"},
                 f"thread model of the interpreter's accesses, a lane per element; outputs equal torch's: {ok}")


TRANSPOSE_SHAPE = (64, 96)


def compiled_transpose(block: int = 32, shape=TRANSPOSE_SHAPE, arch: int = 90):
    """The naive `transpose_kernel` compiled for ``sm_<arch>`` (`compiled.compile_for_gpu`, no GPU
    needed) with ``block`` × ``block`` tiles, and the cost of warp 0's first load and store
    instruction on an (M, N) = ``shape`` input, under Triton's chosen layouts and under the thread
    model (one element per lane along a row of the tile). Returns (CompiledKernel, rows)."""
    from labkit.gpu_model import compiled as Cp

    M, N = (check_int("compiled_transpose", k, v, minimum=1) for k, v in zip("MN", shape))
    k = Cp.compile_for_gpu(Co.transpose_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "M": "i32", "N": "i32",
                                                 "BM": "constexpr", "BN": "constexpr"},
                           {"BM": block, "BN": block}, arch=arch)
    address = {"load": lambda i, j: i * N + j, "store": lambda i, j: j * M + i}   # x[i, j] and out[j, i]
    row_of_tile = Cp.BlockedLayout((1, 1), (1, WARP), (1, 1), (1, 0))
    rows = []
    for kind, layout in k.accesses:
        for model, lay in (("thread model", row_of_tile), (f"compiled {k.target}", layout)):
            c = Cp.warp_cost(lay.warp_elements(), address[kind])
            rows.append([kind, model, lay.describe(), c.bytes_used, c.sectors, c.efficiency])
    return k, rows


def compiled_table(block: int = 32, shape=TRANSPOSE_SHAPE, arch: int = 90) -> Table:
    """`compiled_transpose` as a table: per access and model, the lanes' layout, bytes one warp
    instruction uses, its sectors and its efficiency; the title gives the layout conversions and
    shared memory Triton added, and the PTX's shared-memory instructions."""
    k, rows = compiled_transpose(block, shape, arch)
    ops = k.ptx_ops
    return Table(["access", "model", "a warp's lanes", "bytes", "sectors", "efficiency"], rows,
                 {"efficiency": ".3f"},
                 f"naive transpose, {block}x{block} tiles, {k.target}: {k.conversions} layout conversion, "
                 f"{k.shared_bytes} B shared memory, {ops['st.shared'] + ops['ld.shared']} shared ld/st")


def occupancy_table(cases=((256, 32, 0), (256, 64, 0), (256, 128, 0), (128, 32, 48 * 1024),
                           (1024, 32, 0), (64, 32, 0)), sm: Oc.SMLimits = Oc.H100) -> Table:
    """`occupancy` of each (threads per block, registers per thread, shared bytes per block) on
    ``sm``: blocks each resource allows, resident blocks and warps, occupancy and the limiter."""
    rows = []
    for threads, regs, smem in cases:
        o = Oc.occupancy(threads, regs, smem, sm)
        b = o.blocks_by
        rows.append([threads, regs, smem // 1024, b["warps"], b["regs"], b["smem"], o.blocks, o.warps,
                     o.fraction, o.limiter])
    return Table(["threads", "regs", "smem KiB", "by warps", "by regs", "by smem", "blocks", "warps",
                  "occ.", "limit"], rows, {"occ.": ".2f"},
                 f"{sm.name}: {sm.max_warps} warps, {sm.max_blocks} blocks, {sm.registers} registers, "
                 f"{sm.smem_bytes // 1024} KiB shared memory per SM")


# ---------------------------------------------------------------------------- 3. banks
def bank_table(strides=(0, 1, 2, 3, 4, 8, 16, 32, 33)) -> Table:
    """Conflict degree (passes a warp's shared-memory access needs) counted by `conflict_degree`:
    a row and a column of ``float tile[32][32]``, a column of the padded ``tile[32][33]``, and lane i
    reading word i·s; next to the closed form `strided_conflict_degree` (gcd(s, 32); 1 for s = 0)."""
    rows = [["row of tile[32][32]", 1, Bk.conflict_degree(Bk.tile_row_words(0)), Bk.strided_conflict_degree(1)],
            ["column of tile[32][32]", 32, Bk.conflict_degree(Bk.tile_column_words(0)),
             Bk.strided_conflict_degree(32)],
            ["column of tile[32][33]", 33, Bk.conflict_degree(Bk.tile_column_words(0, row_words=33)),
             Bk.strided_conflict_degree(33)]]
    for s in strides:
        s = check_int("bank_table", "stride", s, minimum=0)
        rows.append([f"word i·{s}", s, Bk.conflict_degree([i * s for i in range(WARP)]),
                     Bk.strided_conflict_degree(s)])
    for r in rows:
        r.append("broadcast" if r[1] == 0 else f"gcd({r[1]}, 32)")
    return Table(["lane i reads", "stride (words)", "degree", "formula", "expression"], rows,
                 title="32 banks of 4-byte words; degree = passes (1: conflict-free, 32: serialised)")


# ---------------------------------------------------------------------------- 4. stencil
STENCIL_1D = ((1024, 1, 64), (1024, 4, 64), (1000, 2, 64), (1024, 1, 1024))
STENCIL_2D = ((64, 64, 1, 16), (60, 50, 2, 16))


def stencil_table(cases_1d=STENCIL_1D, cases_2d=STENCIL_2D, seed: int = 0) -> Table:
    """Global loads counted while computing each stencil without and with shared-memory tiles
    (`stencil1d_naive`/`stencil1d_tiled`, `stencil2d_naive`/`stencil2d_tiled`), next to the closed
    forms (`stencil1d_formula`: n(2r+1) vs n + 2r·cdiv(n, T); `stencil2d_formula`: (4r+1)·R·C vs
    R·C + 2r(C·cdiv(R, T) + R·cdiv(C, T))). The title says whether every output equals numpy's."""
    rng = np.random.default_rng(seed)
    rows, ok = [], True
    for n, r, T in cases_1d:
        x, w = rng.standard_normal(n + 2 * r), rng.standard_normal(2 * r + 1)
        naive, tiled = St.stencil1d_naive(x, w), St.stencil1d_tiled(x, w, T)
        ref = St.stencil1d_reference(x, w)
        ok &= bool(np.allclose(naive.out, ref) and np.allclose(tiled.out, ref))
        rows.append(["1-D", f"n={n}", r, T, naive.counts.global_loads, St.stencil1d_formula(n, r).global_loads,
                     tiled.counts.global_loads, St.stencil1d_formula(n, r, T).global_loads])
    for R, C, r, T in cases_2d:
        x, w = rng.standard_normal((R + 2 * r, C + 2 * r)), rng.standard_normal(2 * r + 1)
        naive, tiled = St.stencil2d_naive(x, w), St.stencil2d_tiled(x, w, T)
        ref = St.stencil2d_reference(x, w)
        ok &= bool(np.allclose(naive.out, ref) and np.allclose(tiled.out, ref))
        rows.append(["2-D star", f"{R}x{C}", r, T, naive.counts.global_loads,
                     St.stencil2d_formula(R, C, r).global_loads, tiled.counts.global_loads,
                     St.stencil2d_formula(R, C, r, T).global_loads])
    for row in rows:
        row.append(row[4] / row[6])
    return Table(["stencil", "outputs", "r", "T", "untiled", "untiled formula", "tiled", "tiled formula",
                  "x fewer"], rows, {"x fewer": ".2f"},
                 f"global loads (elements); outputs equal numpy's: {ok}")


# ---------------------------------------------------------------------------- local memory
def local_memory_table(N: int = 1024, V: int = 8) -> Table:
    """Kernel v2 (a V×V tile of C per thread, outer products) on N×N: its global operand loads
    (`labkit.matmul.thread_model.gpu_formula`, 2N³/V) next to the accesses its accumulators c[V][V]
    need each k step: none from memory in registers; in local memory (which lives in device DRAM)
    one read and one write per multiply-add, 2·V² per thread per k step, 2N³ in all."""
    from labkit.matmul.thread_model import gpu_formula

    N = check_int("local_memory_table", "N", N, minimum=1)
    V = check_int("local_memory_table", "V", V, minimum=1)
    glob = gpu_formula("v2", N, V)["global_reads"]
    fma = N ** 3                                     # N² outputs × N multiply-adds
    rows = [["A, B operands (global memory)", 2 * V, glob, 1.0],
            ["c[V][V] in registers", 0, 0, 0.0],
            ["c[V][V] in local memory (DRAM)", 2 * V * V, 2 * fma, 2 * fma / glob]]
    return Table(["what kernel v2 moves", "per thread per k", "total", "x operand loads"], rows,
                 {"x operand loads": ".1f"}, f"N = {N}, V = {V}: accesses to memory (elements)")


# ---------------------------------------------------------------------------- 5. host and device
HOST_DEVICE_MEASURES = "async launches, implicit syncs, pinned vs pageable copies"


def host_device(kernel_s: float = 0.05, nbytes: int = 64 << 20, backend=None) -> Table | Hd.NeedsCuda:
    """`launch_vs_completion`, `find_implicit_syncs` and `h2d_bandwidth` in one table (ms, GB/s);
    a one-line `NeedsCuda` where there is no CUDA GPU."""
    kernel_s = check_real("host_device", "kernel_s", kernel_s, positive=True)
    nbytes = check_int("host_device", "nbytes", nbytes, minimum=1)
    launch = Hd.launch_vs_completion(kernel_s, backend=backend)
    if isinstance(launch, Hd.NeedsCuda):
        return Hd.NeedsCuda(HOST_DEVICE_MEASURES)
    syncs = Hd.find_implicit_syncs(kernel_s, backend=backend)
    copy = Hd.h2d_bandwidth(nbytes, backend=backend)
    ms = 1e3
    k = f"{kernel_s * ms:g} ms kernel"
    rows = [[f"launch a {k} (host call)", launch.launch_s * ms, f"{launch.ratio:.0f}x shorter than completion"],
            [f"launch until the {k} is done", launch.complete_s * ms, "synchronize() waited for it"]]
    for p in syncs:
        rows.append([f"{p.name} after a {k}", p.call_s * ms, "waited" if p.waits else "returned at once"])
    mib = f"{nbytes / 2**20:g} MiB"
    rows += [[f"H2D copy of {mib}, pinned", copy.pinned_gpu_s * ms,
              f"{copy.pinned_gbps:.1f} GB/s; copy_ call {copy.pinned_call_s * ms:.3f} ms"],
             [f"H2D copy of {mib}, pageable", copy.pageable_gpu_s * ms,
              f"{copy.pageable_gbps:.1f} GB/s; copy_ call {copy.pageable_call_s * ms:.3f} ms"]]
    return Table(["measurement", "ms", "note"], rows, {"ms": ".3f"},
                 f"host/device: pinned is {copy.ratio:.1f}x pageable bandwidth")


# ---------------------------------------------------------------------------- 6. this CPU
def simd_table(n: int = 1 << 22, stride: int = 8, repeat: int = 3) -> Table:
    """`simd_vs_gather`'s table: copying n / stride float32 contiguously, through sequential
    indices, at a stride and through random indices (one thread; ms, useful GB/s)."""
    return Cs.simd_vs_gather(n=n, stride=stride, repeat=repeat).table()


def order_table(n: int = 1 << 22, repeat: int = 3) -> Table:
    """`access_order`'s table: summing n float32 through an index in order vs a random
    permutation, and ``x.sum()`` (one thread; ms, useful GB/s)."""
    return Cs.access_order(n=n, repeat=repeat).table()
