"""Lab 01's one-liners and "check your work" pictures; each returns a `Table` (or a Figure).

    picture(exercise)(fn)              a learner's formula next to labkit's, drawn on a roofline
    figure(exercise, fn)               that roofline alone (what the picture draws)
    peak_spread(n, rounds)             the same n x n matmul timed several times: how noisy a roof is
    datasheet_table(d)                 GPUs' ridge points and the compute-bound batch B* of a d x d layer
    sweep_table(sweep, peak, bw)       one layer's measured batch sweep next to its roof and 2B/b
    first_batch_near_peak(sweep, ...)  the smallest measured batch within ``frac`` of the peak
    tokens_per_matmul(...)             tokens in one matmul of training or of decoding, against B*
    explorer(peak, bw)                 the roofline explorer: an op's point moved by size or intensity sliders

The pictures use a fixed example machine (100 GFLOP/s, 10 GB/s: ridge 10 FLOP/B; the MFU picture
an H100's bf16 datasheet roof) so that what they print does not depend on this computer's timings.
"""
from __future__ import annotations

import statistics

from labkit.checks import check_int
from labkit.roofline import model as M
from labkit.roofline.draw import roofline_figure
from labkit.table import Table

PEAK, BW = 100e9, 10e9   # the example machine of the pictures: FLOP/s, bytes/s
H100 = M.DATASHEETS["NVIDIA H100 SXM (bf16 tensor cores)"]
# where the MFU picture puts a training step: an 8192 x 8192 bf16 layer over 2048 tokens
TRAIN_LAYER = (2048, 8192, 8192, 2)

CASES = {
    "matmul_intensity": [(1, 4096, 4096, 2), (16, 4096, 4096, 2), (512, 4096, 4096, 2), (64, 64, 64, 4),
                         (1024, 1024, 1024, 4), (4096, 4096, 1, 4)],
    "chain_intensity": [(1, False, 4), (1, True, 4), (3, False, 4), (3, True, 4), (8, True, 2), (8, False, 2)],
    "attainable_flops": [(0.25, PEAK, BW), (8.0, PEAK, BW), (10.0, PEAK, BW), (64.0, PEAK, BW), (0.0, PEAK, BW)],
    "mfu_hfu": [(7e9, 2 ** 20, 100.0, 989e12, False), (7e9, 2 ** 20, 100.0, 989e12, True),
                (1e6, 1000, 1.0, 1e10, True)],
}


def reference(exercise: str, case):
    """labkit's answer for one case (the same form as the exercise returns)."""
    if exercise == "matmul_intensity":
        return M.matmul(*case).intensity
    if exercise == "chain_intensity":
        k, fused, b = case
        arrays = k + 2 if fused else 3 * k
        return M.OpCost("chain", k, arrays * b).intensity
    if exercise == "attainable_flops":
        return M.attainable_flops(*case)
    n, tokens, seconds, peak, recompute = case
    return M.mfu(n, tokens, seconds, peak), M.hfu(n, tokens, seconds, peak, recompute)


def _close(a, b) -> bool:
    if isinstance(b, tuple):
        return isinstance(a, (tuple, list)) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    try:
        return abs(float(a) - b) <= 1e-9 * max(1.0, abs(b))   # float rounding only
    except (TypeError, ValueError):
        return False


def _fmt(v) -> str:
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    if isinstance(v, bool):
        return str(v)
    return f"{v:.6g}" if isinstance(v, (int, float)) else repr(v)[:20]


def compare(exercise: str, fn) -> Table:
    """The learner's ``fn`` against labkit on every case of ``exercise`` (equal to 1e-9, relative)."""
    rows = []
    for case in CASES[exercise]:
        yours, want = fn(*case), reference(exercise, case)
        rows.append((", ".join(_fmt(c) for c in case), _fmt(yours), _fmt(want), _close(yours, want)))
    return Table(["arguments", "yours", "labkit", "equal"], rows)


def figure(exercise: str, fn):
    """The lab's roofline (`labkit.roofline.draw.roofline_figure`) with the learner's ``fn`` on it.

    matmul_intensity / chain_intensity: each case at the intensity ``fn`` gives, at the speed the
    example roof allows there; attainable_flops: ``fn``'s own roof, sampled; mfu_hfu: MFU·peak and
    HFU·peak of the 7B example as heights under an H100's bf16 roof, at a training layer's intensity.
    """
    peak, bw, i_range = PEAK, BW, (2 ** -6, 2 ** 10)
    if exercise == "matmul_intensity":
        pts = []
        for m, k, n, b in CASES[exercise]:
            i = fn(m, k, n, b)
            pts.append((f"{m}x{k}x{n} ({8 * b}-bit)", i, M.attainable_flops(i, PEAK, BW)))
    elif exercise == "chain_intensity":
        pts = []
        for k, fused, b in CASES[exercise]:
            i = fn(k, fused, b)
            pts.append((f"k={k} {'fused' if fused else 'unfused'} ({8 * b}-bit)", i,
                        M.attainable_flops(i, PEAK, BW)))
        i_range = (2 ** -6, 2 ** 6)
    elif exercise == "attainable_flops":
        pts = [(f"I={i:g}", i, fn(i, PEAK, BW)) for i, _, _ in CASES[exercise] if i > 0]
    elif exercise == "mfu_hfu":
        (peak, bw), i_range = H100, (2 ** -2, 2 ** 12)
        n, tokens, seconds, p, _ = CASES[exercise][1]
        mfu, hfu = fn(n, tokens, seconds, p, True)
        i = M.linear_intensity(*TRAIN_LAYER)
        pts = [(f"MFU {mfu:.3f} x peak", i, mfu * peak), (f"HFU {hfu:.3f} x peak (checkpointing)", i, hfu * peak)]
    else:
        raise ValueError(f"no picture for {exercise!r}; one of {sorted(CASES)}")
    title = {"mfu_hfu": "your MFU and HFU (7B, 2^20 tokens, 100 s) under an H100 bf16 roof"}.get(
        exercise, f"your {exercise} on a 100 GFLOP/s, 10 GB/s roof")
    return roofline_figure(peak, bw, points=pts, title=title, i_range=i_range)


def picture(exercise: str):
    """``picture(fn)`` for `check_your_work`: the comparison table, then `figure` (the roofline with
    the learner's numbers on it) and a one-line verdict; returns the table."""
    def draw(fn):
        table = compare(exercise, fn)
        print(table)
        fig = figure(exercise, fn)
        from IPython.display import HTML, display

        from labkit.viz.player import figure_to_html

        display(HTML(figure_to_html(fig)))
        print(f"{exercise}: {sum(table.column('equal'))}/{len(table.rows)} cases equal labkit's")
        return table
    return draw


# --------------------------------------------------------------------------- measuring the roof itself

def peak_spread(n: int = 1024, rounds: int = 7, device=None, repeat: int = 3) -> Table:
    """Time the same n x n float32 matmul ``rounds`` times (each a median of ``repeat`` calls).

    The roof's peak is one such number; this shows how far apart honest repeats of it land, i.e.
    how far above a roof measured once a later point can lie without anything being wrong.
    Columns: round, ms, GFLOP/s, % of the median. Title: min, median, max and the spread.
    """
    import torch

    from labkit.roofline import measure as R

    check_int("peak_spread", "rounds", rounds, minimum=2)
    device = device or R.default_device()
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    out = torch.empty(n, n, device=device)
    ms = [R.measure(M.matmul(n, n, n), lambda: torch.mm(a, b, out=out), repeat=repeat) for _ in range(rounds)]
    rates = [m.flops_per_s / 1e9 for m in ms]
    med = statistics.median(rates)
    rows = [(r + 1, m.seconds * 1e3, g, 100 * g / med) for r, (m, g) in enumerate(zip(ms, rates))]
    title = (f"matmul {n}^3 timed {rounds} times: min {min(rates):.1f}, median {med:.1f}, max "
             f"{max(rates):.1f} GFLOP/s; max/min = {max(rates) / min(rates):.3f}")
    return Table(["round", "ms", "GFLOP/s", "% of median"], rows,
                 {"ms": ".2f", "GFLOP/s": ".1f", "% of median": ".1f"}, title)


# --------------------------------------------------------------------------- the compute-bound batch

def _dtype_bytes(name: str) -> int:
    return 2 if "bf16" in name else 4


def datasheet_table(d: int = 8192) -> Table:
    """Each datasheet machine of `model.DATASHEETS`: ridge R = peak / bandwidth, the approximation
    R·b/2 and the exact compute-bound batch B* of a d x d layer (`model.compute_bound_batch`)."""
    rows = []
    for name, (peak, bw) in M.DATASHEETS.items():
        b = _dtype_bytes(name)
        r = M.ridge_intensity(peak, bw)
        rows.append((name, peak / 1e12, bw / 1e12, b, r, r * b / 2, M.compute_bound_batch(peak, bw, d, d, b)))
    return Table(["machine", "TFLOP/s", "TB/s", "b", "ridge R", "R*b/2", f"B* (d={d})"], rows,
                 {"TFLOP/s": ".1f", "TB/s": ".3f", "ridge R": ".1f", "R*b/2": ".1f"})


def sweep_table(sweep, peak_flops: float, bandwidth: float, dtype_bytes: int = 4) -> Table:
    """A layer's batch sweep (`measure.linear_sweep`): per batch B the exact intensity, its
    approximation 2B/b, the measured GFLOP/s, the roof there, % of that roof and the bound."""
    rows = []
    for m in sweep:
        batch = int(m.name.split()[1].split("x")[0])
        roof = M.attainable_flops(m.intensity, peak_flops, bandwidth)
        rows.append((batch, m.intensity, 2 * batch / dtype_bytes, m.flops_per_s / 1e9, roof / 1e9,
                     100 * m.flops_per_s / roof, M.bound(m.intensity, peak_flops, bandwidth)))
    return Table(["B", "I (FLOP/B)", "2B/b", "GFLOP/s", "roof", "% of roof", "bound"], rows,
                 {"I (FLOP/B)": ".2f", "2B/b": ".1f", "GFLOP/s": ".2f", "roof": ".2f", "% of roof": ".0f"})


def first_batch_near_peak(sweep, peak_flops: float, frac: float = 0.8):
    """The smallest batch of ``sweep`` whose measured FLOP/s reaches ``frac`` of ``peak_flops`` (or None)."""
    for m in sweep:
        if m.flops_per_s >= frac * peak_flops:
            return int(m.name.split()[1].split("x")[0])
    return None


def tokens_per_matmul(peak_flops: float, bandwidth: float, d: int = 8192, dtype_bytes: int = 2,
                      seq_len: int = 2048, batch_tokens: float = 3.2e6) -> Table:
    """Tokens in one matmul of a d x d layer, in training and in decoding, against the layer's B*.

    Training: a global batch of ``batch_tokens`` tokens is batch_tokens / seq_len sequences; even one
    sequence on one GPU puts seq_len tokens through each matmul. Decoding: one new token per
    sequence per step, so a matmul sees as many tokens as sequences are served together.
    """
    bstar = M.compute_bound_batch(peak_flops, bandwidth, d, d, dtype_bytes)
    rows = []
    for what, tokens in ((f"training: 1 sequence of {seq_len} tokens", seq_len),
                         ("decoding: 1 sequence, 1 new token", 1),
                         ("decoding: 64 sequences, 1 new token each", 64),
                         (f"decoding: {bstar} sequences, 1 new token each", bstar)):
        i = M.linear_intensity(tokens, d, d, dtype_bytes)
        rows.append((what, tokens, i, 100 * M.attainable_flops(i, peak_flops, bandwidth) / peak_flops,
                     M.bound(i, peak_flops, bandwidth)))
    title = (f"{batch_tokens:.3g} tokens of {seq_len} = {batch_tokens / seq_len:.1f} sequences; "
             f"d = {d}, B* = {bstar} tokens")
    return Table(["matmul over", "tokens", "I (FLOP/B)", "% of peak at best", "bound"], rows,
                 {"I (FLOP/B)": ".1f", "% of peak at best": ".1f"}, title)


OPS = ("add", "chain unfused", "chain fused", "matmul", "softmax", "any intensity")


def op_cost(op: str, log2_n: int, dtype_bytes: int = 4) -> M.OpCost:
    """The cost model of ``op`` at size n = 2**log2_n (matmul: n x n x n; softmax: n rows of 1024)."""
    n = 2 ** log2_n
    if op == "add":
        return M.elementwise_add(n, dtype_bytes)
    if op == "chain unfused":
        return M.elementwise_chain(n, fused=False, dtype_bytes=dtype_bytes)
    if op == "chain fused":
        return M.elementwise_chain(n, fused=True, dtype_bytes=dtype_bytes)
    if op == "matmul":
        return M.matmul(n, n, n, dtype_bytes)
    if op == "softmax":
        return M.softmax(n, 1024, dtype_bytes)
    raise ValueError(f"op must be one of {OPS[:-1]}, got {op!r}")


def explorer_state(op: str, log2_n: int, log2_intensity: float, peak_flops: float, bandwidth: float) -> dict:
    """Where the explorer's point sits: intensity (FLOP/B), attainable FLOP/s and the bound.

    ``op == "any intensity"`` uses 2**log2_intensity directly; otherwise the op's model at n = 2**log2_n.
    """
    if op == "any intensity":
        name, intensity = f"I = 2^{log2_intensity:g}", 2.0 ** log2_intensity
    else:
        cost = op_cost(op, log2_n)
        name, intensity = cost.name, cost.intensity
    return {"name": name, "intensity": intensity,
            "attainable": M.attainable_flops(intensity, peak_flops, bandwidth),
            "bound": M.bound(intensity, peak_flops, bandwidth)}


def explorer_figure(op: str, log2_n: int, log2_intensity: float, peak_flops: float, bandwidth: float):
    """The explorer's frame: the roof plus the chosen op's point (see ``explorer_state``)."""
    s = explorer_state(op, log2_n, log2_intensity, peak_flops, bandwidth)
    return roofline_figure(peak_flops, bandwidth, highlight=(s["name"], s["intensity"]),
                           title=f"{s['name']}: {s['bound']}-bound")


def explorer(peak_flops: float, bandwidth: float):
    """Widget: op dropdown, size slider (log2 n) and intensity slider (for "any intensity")."""
    import ipywidgets as W

    from labkit.viz.player import controlled

    def render(op, log2_n, log2_intensity):
        return explorer_figure(op, log2_n, log2_intensity, peak_flops, bandwidth)

    return controlled(render,
                      op=W.Dropdown(options=OPS, value="matmul", description="op"),
                      log2_n=W.IntSlider(value=6, min=1, max=14, description="log2 n"),
                      log2_intensity=W.FloatSlider(value=0.0, min=-6.0, max=10.0, step=0.5,
                                                   description="log2 I"))
