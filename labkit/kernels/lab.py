"""Lab 04's one-liners: "check your work" pictures, the launch-options check, the GPU timings.

    picture("add_kernel")(kernel)   launches the kernel on sizes that are not block multiples (CPU
                                    tensors, through Triton's interpreter, on a GPU box too), checks
                                    the result against PyTorch, counts out-of-bounds and masked lanes,
                                    and draws the last program's accesses as the lab does
    launch_options_table()          one recorded matmul per (num_warps, num_stages): the interpreter
                                    ignores both (same bits out, same accesses)
    gpu_timings()                   compiled kernels vs PyTorch on a GPU: softmax GB/s, matmul TFLOP/s

Tolerances: add is exact (one fp32 add per element, as torch does); softmax, layer norm and matmul
differ from PyTorch only in summation order (fp32): 1e-5 relative and absolute.
"""
from __future__ import annotations

import torch
import triton

from labkit.kernels.record import record
from labkit.table import Table

# exercise -> (output parameter, input parameters drawn next to it)
DRAWN = {"add_kernel": ("out_ptr", ("x_ptr", "y_ptr")), "softmax_kernel": ("out_ptr", ("x_ptr",)),
         "matmul_kernel": ("c_ptr", ("a_ptr", "b_ptr")), "layernorm_kernel": ("y_ptr", ("x_ptr",))}


def _rnd(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def launch(exercise: str, kernel):
    """Run ``kernel`` (the learner's) on this exercise's case under `record()`.

    Returns (out, want, rec, width): its output, PyTorch's answer, the recorder, and the row width
    used to draw 1-D tensors.
    """
    if exercise == "add_kernel":
        x, y = _rnd(37), _rnd(37, seed=1)
        out = torch.empty_like(x)
        with record() as rec:
            kernel[(triton.cdiv(37, 16),)](x, y, out, 37, BLOCK=16)
        return out, x + y, rec, 16
    if exercise == "softmax_kernel":
        x = _rnd(3, 50) * 3
        out = torch.empty_like(x)
        with record() as rec:
            kernel[(3,)](x, out, 50, x.stride(0), BLOCK=64)
        return out, torch.softmax(x, 1), rec, None
    if exercise == "matmul_kernel":
        a, b = _rnd(37, 29), _rnd(29, 45, seed=1)
        c = torch.empty(37, 45)
        with record() as rec:
            kernel[(3, 3)](a, b, c, 37, 45, 29, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           c.stride(0), c.stride(1), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return c, a @ b, rec, None
    if exercise == "layernorm_kernel":
        x, w, b = _rnd(4, 50) * 2 + 1, _rnd(50, seed=1), _rnd(50, seed=2)
        y = torch.empty_like(x)
        with record() as rec:
            kernel[(4,)](x, w, b, y, 50, 1e-5, BLOCK=64)
        return y, torch.nn.functional.layer_norm(x, (50,), w, b, 1e-5), rec, None
    raise ValueError(f"unknown exercise {exercise!r}; expected one of {', '.join(DRAWN)}")


def check(exercise: str, kernel) -> dict:
    """Launch and judge: {"close": matches PyTorch, "max_err", "out_of_bounds", "masked_stores", "rec",
    "width"}. A stub (its body raises NotImplementedError) raises NotImplementedError here."""
    try:
        out, want, rec, width = launch(exercise, kernel)
    except Exception as e:   # the interpreter wraps what a kernel raises
        if "NotImplementedError" in f"{type(e).__name__} {e}":
            raise NotImplementedError(exercise) from None
        raise
    exact = exercise == "add_kernel"
    close = torch.equal(out, want) if exact else torch.allclose(out, want, rtol=1e-5, atol=1e-5)
    err = (out - want).abs().nan_to_num(float("inf")).max().item()
    name = DRAWN[exercise][0]
    return {"close": close, "max_err": err, "out_of_bounds": len(rec.out_of_bounds),
            "masked_stores": rec.n_masked("store", name), "rec": rec, "width": width}


def picture(exercise: str):
    """``picture(kernel)`` for `check_your_work` (see the module docstring)."""
    def draw(kernel):
        from IPython.display import HTML, display

        from labkit.kernels.draw import kernel_frame, n_programs
        from labkit.viz.player import figure_to_html

        got = check(exercise, kernel)
        out, inputs = DRAWN[exercise]
        rec = got["rec"]
        how = "exactly" if exercise == "add_kernel" else "to 1e-5"
        print(f"{exercise}: matches PyTorch {how}: {got['close']} (max error {got['max_err']:.1e})")
        print(f"out-of-bounds accesses: {got['out_of_bounds']}; masked store lanes: {got['masked_stores']}")
        if rec.launches:
            last = n_programs(rec) - 1
            print(f"the last program ({last}), the one the masks matter for:")
            display(HTML(figure_to_html(kernel_frame(rec, last, out, inputs, width=got["width"]))))
        return got
    return draw


def launch_options_table(options=((1, 1), (4, 3), (8, 4))) -> Table:
    """A (37x29)@(29x45) matmul, 16x16x16 tiles, recorded once per (num_warps, num_stages).

    Columns: the options, whether C equals the first run's C bit for bit, whether every program
    made the same loads and stores (same elements, same order), and the accesses recorded.
    Under the interpreter both options are ignored: every row says True, True.
    """
    from labkit.kernels.matmul import matmul

    a, b = _rnd(37, 29), _rnd(29, 45, seed=1)
    rows, first = [], None
    for nw, ns in options:
        cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_warps": nw, "num_stages": ns}
        with record() as rec:
            c = matmul(a, b, config=cfg)
        seen = [(x.pid, x.kind, x.tensor, x.offsets.tolist()) for x in rec.accesses]
        first = first or (c, seen)
        rows.append([nw, ns, torch.equal(c, first[0]), seen == first[1], len(seen)])
    return Table(["num_warps", "num_stages", "same C bits", "same accesses", "loads+stores"], rows)


def gpu_timings(bench=None, rows: int = 4096, cols=(1024, 4096), n: int = 4096,
                device: str = "cuda") -> Table:
    """Compiled Triton kernels vs PyTorch, timed with ``bench(fn) -> ms`` (default: the course's
    one timer, `labkit.bench.median_time`, which synchronises CUDA).

    softmax (rows x cols fp32): GB/s = 2*rows*cols*4 bytes / time (one read, one write);
    matmul (n x n x n bf16): TFLOP/s = 2*n^3 / time.
    "ratio" = torch's time / ours (above 1: ours is faster).
    """
    from labkit.kernels.matmul import matmul
    from labkit.kernels.softmax import softmax

    if bench is None:
        from labkit.bench import median_time

        def bench(fn):
            return median_time(fn, repeat=20, warmup=5) * 1e3
    out = []
    for c in cols:
        x = torch.randn(rows, c, device=device)
        t_ours, t_torch = bench(lambda: softmax(x)), bench(lambda: torch.softmax(x, -1))
        gbs = lambda ms: 2 * rows * c * 4 / (ms * 1e-3) / 1e9  # noqa: E731
        name = f"softmax {rows}x{c} fp32"
        out.append([name, "GB/s", gbs(t_ours), gbs(t_torch), t_torch / t_ours])
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    t_ours, t_torch = bench(lambda: matmul(a, a)), bench(lambda: a @ a)
    tfs = lambda ms: 2 * n ** 3 / (ms * 1e-3) / 1e12  # noqa: E731
    out.append([f"matmul {n}^3 bf16", "TFLOP/s", tfs(t_ours), tfs(t_torch), t_torch / t_ours])
    return Table(["kernel", "unit", "ours", "torch", "ratio"], out,
                 formats={"ours": ".0f", "torch": ".0f", "ratio": ".2f"})


def kernel_player(rec, out: str, inputs: tuple = (), launch: int = 0, width: int | None = None, **kw):
    """Play + slider over the programs of one recorded launch (frame i = program i)."""
    from labkit.kernels.draw import kernel_frame, n_programs
    from labkit.viz.player import player

    return player(lambda i: kernel_frame(rec, i, out, inputs, launch, width), n_programs(rec, launch),
                  description="program", **kw)
