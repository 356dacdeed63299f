"""Shared helpers: notebook builder parsing, the timer and results tables, the player widget."""
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from labkit import bench, nbbuild
from labkit.viz import player as P


def test_percent_sources_read_with_jupytext(tmp_path):
    src = tmp_path / "99_demo.py"
    src.write_text('# Source of notebooks/99_demo.ipynb, built by make notebooks\n\n# %% [markdown]\n# # Title\n'
                   '# text\n\n# %%\nx = 1\n\nprint(x)\n\n# %% tags=["nbval-ignore-output"]\nimport time\n')
    nb = nbbuild.read_source(src)
    assert [(c.cell_type, c.source) for c in nb.cells] == [
        ("markdown", "# Title\ntext"), ("code", "x = 1\n\nprint(x)"), ("code", "import time")]
    assert nb.cells[2].metadata["tags"] == ["nbval-ignore-output"] and "tags" not in nb.cells[1].metadata
    assert [c.id for c in nb.cells] == ["cell-000", "cell-001", "cell-002"]


def test_every_notebook_is_built_from_its_current_source():
    import nbformat

    for src in sorted((nbbuild.NOTEBOOKS / "_src").glob("*.py")):
        want = nbbuild.read_source(src)
        have = nbformat.read(nbbuild.NOTEBOOKS / f"{src.stem}.ipynb", as_version=4)
        cells = lambda nb: [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]  # noqa: E731
        assert cells(have) == cells(want), f"{src.stem}.ipynb is stale: run make notebooks"


def test_every_notebook_has_a_source_and_vice_versa():
    srcs = {p.stem for p in (nbbuild.NOTEBOOKS / "_src").glob("*.py")}
    nbs = {p.stem for p in nbbuild.NOTEBOOKS.glob("*.ipynb")}
    assert srcs == nbs


def test_median_time_measures_sleep():
    t = bench.median_time(lambda: time.sleep(0.02), repeat=3, warmup=0)
    assert 0.015 < t < 0.2  # sleep can overshoot on a busy machine, never undershoot much


def test_median_time_min_time_loops_short_calls():
    calls = []
    t = bench.median_time(lambda: calls.append(1), repeat=2, warmup=0, min_time_s=0.01)
    assert len(calls) > 10 and t < 0.01


def test_markdown_table_and_results_header(tmp_path, monkeypatch):
    assert bench.markdown_table(["a", "b"], [[1, 0.12345]]) == "| a | b |\n|---|---|\n| 1 | 0.123 |"
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    text = bench.write_results("demo", "Demo", ["x"], [[1]], notes="note").read_text()
    assert text.startswith("# Demo\n\n- device: ") and "torch" in text and "| 1 |" in text and text.endswith("note\n")


def test_player_shows_frame_zero_and_follows_the_slider():
    calls = []
    w = P.player(lambda i: calls.append(i) or f"<b>{i}</b>", 3)
    (play, slider), html = w.children[0].children, w.children[1]
    assert html.value == "<b>0</b>" and (slider.min, slider.max) == (1, 3) and (play.min, play.max) == (1, 3)
    assert calls == [0, 1, 2] and not slider.continuous_update     # few frames: all drawn up front
    slider.value = 3                                               # the slider counts from 1, like captions
    assert html.value == "<b>2</b>" and calls == [0, 1, 2]         # no redraw: precomputed
    with pytest.raises(ValueError, match="at least one frame"):
        P.player(lambda i: "", 0)
    many = P.player(lambda i: calls.append(i) or str(i), P.PRECOMPUTE_MAX + 1)
    assert calls[3:] == [0]                                        # many frames: drawn on demand


def test_saved_widgets_show_their_first_picture_before_the_notebook_runs():
    fig, ax = plt.subplots(figsize=(2, 3))
    first = P.as_html(fig)
    w = P.player(lambda i: first if i == 0 else "<b>later</b>", 2)
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("Animation of 2 frames") and "VBox" not in bundle["text/plain"]
    assert first in bundle["text/html"] and 'style="max-width:100%' in first
    assert w.children[1].layout.min_height == f"{P.png_height(first) + 8}px" and 200 <= P.png_height(first) <= 300


def test_png_height_reads_the_tallest_png_and_skips_what_is_not_one():
    import base64
    import io

    from PIL import Image

    def img(height):
        buf = io.BytesIO()
        Image.new("RGB", (5, height)).save(buf, format="PNG")
        return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"/>'

    assert P.png_height(img(7) + img(31) + img(12)) == 31
    assert P.png_height('<img src="data:image/png;base64,aGVsbG8="/>' + img(3)) == 3   # "hello" is no PNG
    assert P.png_height("<b>no picture</b>") == 0


def test_controlled_redraws_on_change_and_renders_figures():
    import ipywidgets as W

    w = P.controlled(lambda n, k: f"{n}-{k}", n=W.IntSlider(2, 1, 5), k=W.Dropdown(options=["a", "b"]))
    n, k, html = w.children
    assert html.value == "2-a"
    k.value = "b"
    assert html.value == "2-b"
    fig, ax = plt.subplots()
    assert P.as_html(fig).startswith('<img style="max-width:100%;height:auto" src="data:image/png;base64,')


def test_show_gives_file_line_and_source_of_functions_kernels_and_text(capsys):
    import importlib

    from labkit.show import show, source

    add_mod = importlib.import_module("labkit.kernels.add")   # labkit.kernels.add is also a function's name

    src = source(add_mod.add_kernel)                      # a @triton.jit kernel: its Python body
    first = add_mod.add_kernel.fn.__code__.co_firstlineno
    assert src.where.startswith("labkit/kernels/add.py:") and src.code.lstrip().startswith(("@triton.jit", "def"))
    assert int(src.where.rsplit(":", 1)[1]) <= first
    assert "tl.load" in src.code and "<pre" in src._repr_html_() and "labkit/kernels/add.py" in src._repr_html_()
    assert source(bench.median_time).where.startswith("labkit/bench.py:")
    assert str(source("  for i in range(n):\n      c[i] = a[i]\n")) == "for i in range(n):\n    c[i] = a[i]"
    show(bench.median_time)
    assert capsys.readouterr().out.startswith("# labkit/bench.py:")
    with pytest.raises(ValueError, match="show: no source"):
        source(42)


def test_results_header_names_the_device_a_table_ran_on(monkeypatch):
    """A gloo benchmark on a GPU box ran on the CPU: its header says so, with the machine after it."""
    import ast
    import dataclasses
    from pathlib import Path

    from labkit import env

    gpu_box = dataclasses.replace(env.report(verbose=False), device="cuda", device_name="NVIDIA H100",
                                  compute_units=132, compute_unit_kind="SMs")
    monkeypatch.setattr(env, "report", lambda verbose=True: gpu_box)
    head = bench.environment_header(ran_on="cpu (gloo ranks)").splitlines()[0]
    assert head == "- device: cpu (gloo ranks); machine: cuda (NVIDIA H100), 132 SMs"
    assert bench.environment_header().startswith("- device: cuda (NVIDIA H100), 132 SMs\n")
    for script in sorted((Path(bench.__file__).parents[1] / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "write_results":
                assert any(k.arg == "ran_on" for k in node.keywords), f"{script.name}: write_results without ran_on"
