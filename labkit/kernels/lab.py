"""Lab 04's "check your work" pictures: a learner's kernel launched under the access recorder.

    picture("add_kernel")(kernel)   launches the kernel on sizes that are not block multiples (CPU
                                    tensors, through Triton's interpreter, on a GPU box too), checks
                                    the result against PyTorch, counts out-of-bounds and masked lanes,
                                    and draws the last program's accesses as the lab does

Tolerances: add is exact (one fp32 add per element, as torch does); softmax, layer norm and matmul
differ from PyTorch only in summation order (fp32): 1e-5 relative and absolute.
"""
from __future__ import annotations

import torch
import triton

from labkit.kernels.record import record

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

        from labkit.viz.kernels import kernel_frame, n_programs
        from labkit.viz.player import figure_to_html

        got = check(exercise, kernel)
        out, inputs = DRAWN[exercise]
        rec = got["rec"]
        how = "exactly" if exercise == "add_kernel" else "to 1e-5"
        print(f"{exercise}: matches PyTorch {how}: {got['close']} (max error {got['max_err']:.1e}); "
              f"out-of-bounds accesses: {got['out_of_bounds']}; masked store lanes: {got['masked_stores']}")
        if rec.launches:
            last = n_programs(rec) - 1
            print(f"the last program ({last}), the one the masks matter for:")
            display(HTML(figure_to_html(kernel_frame(rec, last, out, inputs, width=got["width"]))))
        return got
    return draw
