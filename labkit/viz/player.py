"""The one animation widget: Play + slider over precomputed frames.

``player(render, n_frames)`` shows ``render(0)`` at once (so a static notebook
still shows something), and a Play button and slider drive later frames.
``render(i)`` returns an HTML string or a matplotlib Figure; it must be a pure
function of ``i`` so it can be unit-tested without a browser.
"""
from __future__ import annotations

import base64
import io
from typing import Callable, Union

import matplotlib


Frame = Union[str, "matplotlib.figure.Figure"]


def figure_to_html(fig) -> str:
    """Render a matplotlib Figure as an <img> tag (PNG, base64) and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=90)
    plt.close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"/>'


def as_html(frame: Frame) -> str:
    return frame if isinstance(frame, str) else figure_to_html(frame)


def player(render: Callable[[int], Frame], n_frames: int, interval_ms: int = 700, description: str = "step"):
    """An ipywidgets VBox: [Play, slider] over ``n_frames`` frames drawn by ``render(i)``."""
    import ipywidgets as W

    if n_frames < 1:
        raise ValueError(f"player: need at least one frame, got n_frames={n_frames}")
    html = W.HTML(as_html(render(0)))
    play = W.Play(value=0, min=0, max=n_frames - 1, step=1, interval=interval_ms, description="play")
    slider = W.IntSlider(value=0, min=0, max=n_frames - 1, step=1, description=description)
    W.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: setattr(html, "value", as_html(render(change["new"]))), names="value")
    return W.VBox([W.HBox([play, slider]), html])


def controlled(render: Callable[..., Frame], **controls):
    """An ipywidgets VBox: the given control widgets above ``render(**their values)``.

    Example: ``controlled(draw, n=W.IntSlider(4, 1, 8), kind=W.Dropdown(options=["a", "b"]))``.
    The first frame is drawn at once; any control change redraws.
    """
    import ipywidgets as W

    def values():
        return {k: w.value for k, w in controls.items()}

    html = W.HTML(as_html(render(**values())))
    for w in controls.values():
        w.observe(lambda _change: setattr(html, "value", as_html(render(**values()))), names="value")
    return W.VBox([*controls.values(), html])
