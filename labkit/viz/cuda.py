"""Drawing for Lab 03's CUDA section: a block's threads moving through barriers, blocks over SMs.

`block_step_html(trace, threads, step, title)` draws a traced block (`labkit.gpu_model.cuda_sim`
``LaunchRun.trace``) after ``step`` steps: one cell per thread, coloured by the phase it has reached
(the barriers it has passed), the thread that just ran outlined, finished threads grey; below, the
block's shared arrays after that step (values printed, NaN = never written; at most one value per
thread of the block).

`waves_html(schedule, wave, title)` draws a `labkit.gpu_model.occupancy.Schedule` at wave ``wave``:
one column per SM, one row per resident-block slot; blocks of earlier waves are done (grey), this
wave's are running (coloured, with their block id), and a strip underneath shows the whole grid.
Both are pure: finished data in, an HTML string out.
"""
from __future__ import annotations

import math

import numpy as np

from labkit.viz.gpu_model import _rect, _svg, _text

PHASE = ("#c6dbef", "#6baed6", "#3182bd", "#08519c", "#fdae6b", "#e6550d", "#a1d99b", "#31a354", "#756bb1")
DONE = "#bdbdbd"
RUN = "#31a354"
WAIT = "#ffffff"


def _thread_states(trace, threads: int, step: int):
    """(phase reached, status) of every thread after ``step`` steps of ``trace``."""
    phase, status = [0] * threads, ["ready"] * threads
    for s in trace[:step]:
        phase[s.thread], status[s.thread] = s.phase, s.status
    return phase, status


def block_step_html(trace, threads: int, step: int, title: str = "", columns: int = 16) -> str:
    """A traced block after ``step`` (0..len(trace)) steps; see the module docstring."""
    if not 0 <= step <= len(trace):
        raise ValueError(f"block_step_html: step must be in 0..{len(trace)}, got {step}")
    phase, status = _thread_states(trace, threads, step)
    last = trace[step - 1] if step else None
    shared = last.shared if last else (trace[0].shared if trace else {})
    cell, top, left = 22, 44, 4
    rows = math.ceil(threads / columns)
    parts = [_text(0, 12, title, 12)] if title else []
    x = 0
    legend = [(PHASE[k % len(PHASE)], f"passed {k} barrier{'s' if k != 1 else ''}") for k in range(max(phase) + 1)]
    for fill, name in legend + [(DONE, "returned")]:
        parts += [_rect(x, 20, 10, 10, fill, "#636363"), _text(x + 13, 29, name, 10)]
        x += 20 + 6 * len(name)
    for t in range(threads):
        r, c = divmod(t, columns)
        fill = DONE if status[t] == "done" else PHASE[phase[t] % len(PHASE)]
        stroke = "#e6550d" if last is not None and last.thread == t else "#636363"
        parts.append(f'<rect x="{left + c * cell}" y="{top + r * cell}" width="{cell - 2}" height="{cell - 2}" '
                     f'fill="{fill}" stroke="{stroke}" stroke-width="{3 if stroke != "#636363" else 0.5}"/>')
        parts.append(_text(left + c * cell + cell // 2 - 1, top + r * cell + 14, str(t), 9, "middle"))
    y = top + rows * cell + 16
    for name, arr in shared.items():
        vals = np.asarray(arr).ravel()
        note = f" (first {threads} of {vals.size})" if vals.size > threads else ""
        vals = vals[:threads]                       # a 1-D array sized for the largest block: this block's part
        parts.append(_text(0, y, f"shared {name}{note}:", 10))
        y += 6
        for k, v in enumerate(vals):
            r, c = divmod(k, columns)
            parts.append(_rect(left + c * cell, y + r * cell, cell - 2, cell - 2, "#fff7bc" if np.isfinite(v) else WAIT,
                               "#636363"))
            parts.append(_text(left + c * cell + cell // 2 - 1, y + r * cell + 14,
                               "" if not np.isfinite(v) else f"{v:g}", 9, "middle"))
        y += math.ceil(len(vals) / columns) * cell + 14
    width = max(left + columns * cell + 8, x + 8)
    return _svg(width, y, parts)


def waves_html(schedule, wave: int, title: str = "", max_sms: int = 16) -> str:
    """``schedule`` at wave ``wave`` (0-based); at most ``max_sms`` SM columns are drawn."""
    if not 0 <= wave < max(schedule.waves, 1):
        raise ValueError(f"waves_html: wave must be in 0..{schedule.waves - 1}, got {wave}")
    sms = min(schedule.sms, max_sms)
    cell, top, left = 26, 46, 40
    parts = [_text(0, 12, title, 12)] if title else []
    x = 0
    for fill, name in ((DONE, "done"), (RUN, "running (this wave)"), (WAIT, "waiting")):
        parts += [_rect(x, 20, 10, 10, fill, "#636363"), _text(x + 13, 29, name, 10)]
        x += 20 + 6 * len(name)
    for s in range(sms):
        parts.append(_text(left + s * cell + cell // 2, top - 4, f"SM{s}", 8, "middle"))
        for k in range(schedule.blocks_per_sm):
            blocks = schedule.slots[wave][s] if schedule.slots else ()
            b = blocks[k] if k < len(blocks) else None
            parts.append(_rect(left + s * cell, top + k * cell, cell - 2, cell - 2, RUN if b is not None else WAIT,
                               "#636363"))
            if b is not None:
                parts.append(_text(left + s * cell + cell // 2 - 1, top + k * cell + 16, str(b), 9, "middle"))
    for k in range(schedule.blocks_per_sm):
        parts.append(_text(left - 4, top + k * cell + 16, f"slot {k}", 8, "end"))
    y = top + schedule.blocks_per_sm * cell + 18
    total = sum(len(b) for w in schedule.slots for b in w)
    parts.append(_text(0, y, f"the grid: {total} blocks, wave {wave + 1} of {schedule.waves}", 10))
    per_wave = schedule.sms * schedule.blocks_per_sm
    per_row, small = 48, 9
    for b in range(total):
        w = b // per_wave
        r, c = divmod(b, per_row)
        fill = DONE if w < wave else RUN if w == wave else WAIT
        parts.append(_rect(c * small, y + 6 + r * small, small - 1, small - 1, fill, "#636363"))
    height = y + 10 + math.ceil(total / per_row) * small
    width = max(left + sms * cell + 8, per_row * small + 8, x + 8)
    return _svg(width, height, parts)
