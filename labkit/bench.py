"""The course's one timer and one results-table writer.

``median_time(fn, ...)`` times a call (seconds, median of repeats, after
warm-up; synchronises CUDA when a tensor is on the GPU). ``now()`` is the same
clock read once, for code that stamps the phases of a step (forward, backward,
a collective): it first waits for the GPU work already queued, so asynchronous
kernels and NCCL collectives count where they run, not where they were queued.
``write_results``
writes a Markdown table under benchmarks/results/ headed by device, date and
versions, so every committed table says where and when it was measured.
"""
from __future__ import annotations

import datetime
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _sync() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def now() -> float:
    """``time.perf_counter()`` (seconds) once the GPU work queued so far has finished; on a CPU, just
    ``perf_counter``. Differences of two readings time what ran between them."""
    _sync()
    return time.perf_counter()


def median_time(fn: Callable[[], object], repeat: int = 5, warmup: int = 1, min_time_s: float = 0.0) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs (after ``warmup`` runs).

    If one run is shorter than ``min_time_s``, each sample loops ``fn`` enough
    times to last about that long and reports the per-call time.
    """
    for _ in range(warmup):
        fn()
    _sync()
    inner = 1
    if min_time_s > 0:
        t0 = time.perf_counter()
        fn()
        _sync()
        one = max(time.perf_counter() - t0, 1e-9)
        inner = max(1, int(min_time_s / one))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def environment_header(ran_on: str | None = None) -> str:
    """One Markdown paragraph: device, date (UTC), python/torch/triton versions.

    ``ran_on`` names what the table was measured on when that is not simply this machine's best
    device, e.g. "cpu (gloo ranks)" for a benchmark that runs gloo ranks on a GPU box; the machine
    follows it."""
    from labkit.env import report

    rep = report(verbose=False)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{rep.device} ({rep.device_name}), {rep.compute_units} {rep.compute_unit_kind}"
    return (f"- device: {machine if ran_on is None else f'{ran_on}; machine: {machine}'}\n"
            f"- date: {date}\n"
            f"- versions: python {rep.python_version}, torch {rep.torch_version}, triton {rep.triton_version}\n")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, title: str, header: Sequence[str], rows: Sequence[Sequence[object]],
                  notes: str = "", ran_on: str | None = None) -> Path:
    """Write benchmarks/results/<name>.md (environment header + table + notes); return the path.
    ``ran_on``: the device the table ran on (see `environment_header`)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.md"
    text = f"# {title}\n\n{environment_header(ran_on)}\n{markdown_table(header, rows)}\n"
    if notes:
        text += f"\n{notes.strip()}\n"
    path.write_text(text)
    return path
