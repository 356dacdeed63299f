"""The one animation widget: Play + slider over frames, and sliders/dropdowns over a drawing.

``player(render, n_frames)`` draws ``render(0)`` at once, and a Play button and
a slider (counting frames from 1, as captions do) drive later frames.
``render(i)`` returns an HTML string or a matplotlib Figure; it must be a pure
function of ``i`` so it can be unit-tested without a browser. When there are
few frames (``PRECOMPUTE_MAX``) they are all drawn up front: moving the slider
is then instant, and the widget keeps the height of its tallest frame, so the
page does not jump while playing.

Both widgets also carry their first picture as plain HTML in the saved
notebook: a notebook opened before it is run (or not yet trusted) shows that
picture and a one-line note instead of the raw ``VBox(children=...)`` text.
"""
from __future__ import annotations

import base64
import io
import re
from typing import Callable, Union

import matplotlib

Frame = Union[str, "matplotlib.figure.Figure"]
PRECOMPUTE_MAX = 64          # frames drawn up front when there are at most this many
_IMG_STYLE = "max-width:100%;height:auto"


def figure_to_html(fig, dpi: int = 90) -> str:
    """Render a matplotlib Figure as an <img> tag (PNG, base64) that fits its output area, and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", dpi=dpi)
    plt.close(fig)
    return f'<img style="{_IMG_STYLE}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"/>'


def as_html(frame: Frame) -> str:
    return frame if isinstance(frame, str) else figure_to_html(frame)


def png_height(html: str) -> int:
    """Pixel height of the tallest base64 PNG in ``html`` (0 if none), as Pillow reads it."""
    from PIL import Image, UnidentifiedImageError

    best = 0
    for data in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html):
        try:
            with Image.open(io.BytesIO(base64.b64decode(data))) as image:
                best = max(best, image.height)
        except (UnidentifiedImageError, ValueError):      # not a PNG after all: no height to keep
            continue
    return best


def _static(widget_cls, first_html: str, note: str):
    """A widget class instance whose saved output also holds ``first_html`` and ``note`` (see module doc)."""

    class Static(widget_cls):
        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs)
            data["text/plain"] = note
            data["text/html"] = f"{first_html}<div><i>{note}</i></div>"
            return data

    Static.__name__ = f"Static{widget_cls.__name__}"
    return Static


def player(render: Callable[[int], Frame], n_frames: int, interval_ms: int = 700, description: str = "step"):
    """An ipywidgets VBox: [Play, slider 1..n_frames] over the frames ``render(0..n_frames-1)``."""
    import ipywidgets as W

    if isinstance(n_frames, bool) or not isinstance(n_frames, int) or n_frames < 1:
        raise ValueError(f"player: need at least one frame, got n_frames={n_frames!r}")
    cache: dict[int, str] = {}

    def frame(i: int) -> str:
        if i not in cache:
            cache[i] = as_html(render(i))
        return cache[i]

    if n_frames <= PRECOMPUTE_MAX:
        for i in range(n_frames):
            frame(i)
    html = W.HTML(frame(0))
    tallest = max((png_height(h) for h in cache.values()), default=0)
    if tallest:
        html.layout.min_height = f"{tallest + 8}px"
    play = W.Play(value=1, min=1, max=n_frames, step=1, interval=interval_ms, description="play")
    slider = W.IntSlider(value=1, min=1, max=n_frames, step=1, description=description, continuous_update=False,
                         style={"description_width": "initial"})
    W.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: setattr(html, "value", frame(change["new"] - 1)), names="value")
    note = f"Animation of {n_frames} frames (frame 1 shown): run the cell to play it."
    return _static(W.VBox, frame(0), note)([W.HBox([play, slider]), html])


def controlled(render: Callable[..., Frame], **controls):
    """An ipywidgets VBox: the given control widgets above ``render(**their values)``.

    Example: ``controlled(draw, n=W.IntSlider(4, 1, 8), kind=W.Dropdown(options=["a", "b"]))``.
    The first drawing is made at once; a change redraws (sliders only when released).
    """
    import ipywidgets as W

    def values():
        return {k: w.value for k, w in controls.items()}

    for w in controls.values():
        if hasattr(w, "continuous_update"):
            w.continuous_update = False
        if hasattr(w, "style") and hasattr(w.style, "description_width"):
            w.style.description_width = "initial"
    first = as_html(render(**values()))
    html = W.HTML(first)
    for w in controls.values():
        w.observe(lambda _change: setattr(html, "value", as_html(render(**values()))), names="value")
    note = "Interactive figure (the default settings shown): run the cell to change them."
    return _static(W.VBox, first, note)([*controls.values(), html])
