"""Instructor mode's slide plan (labkit.slides): the rules on made-up notebooks, and every lab's
notebook carrying the plan its source and saved outputs give, within a 10-15 minute lecture."""
import copy
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from labkit import nbbuild, slides

LABS = slides.lab_notebooks()
WIDGET = {slides.WIDGET_MIME: {"model_id": "m"}, "text/plain": "VBox()"}
PNG = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}


def _nb(*cells):
    return new_notebook(cells=list(cells))


def _code(data=None, **meta):
    cell = new_code_cell("x = 1", metadata=meta)
    if data:
        cell.outputs = [new_output("display_data", data=data)]
    return cell


def test_rules_title_picture_question_answer_summary_and_skips():
    nb = _nb(new_markdown_cell("# Lab 99\n\nobjectives"), _code(),                     # 0 slide, 1 skip
             new_markdown_cell("## 1. A ring"), _code(WIDGET),                          # 2 slide, 3 subslide
             new_markdown_cell("long text"), _code(),                                   # skipped
             new_markdown_cell("**Predict first:** how many?"), _code(),                # 6 slide, 7 subslide
             new_markdown_cell("**Predict first:** and now?"), _code(),                 # only one question
             new_markdown_cell("## 9. Worked problems"),
             new_markdown_cell("## Summary\n\n- a\n\n## Further reading\n\n- b"))       # 11 slide
    assert slides.plan(nb) == ["slide", "skip", "slide", "subslide", "skip", "skip", "slide", "subslide",
                               "skip", "skip", "skip", "slide"]


def test_widgets_come_before_static_pictures_and_the_budget_caps_them(monkeypatch):
    cells = [new_markdown_cell("# Lab 99")]
    for data in (PNG, WIDGET, PNG, WIDGET):
        cells += [new_markdown_cell("context " * 100), _code(data)]
    nb = _nb(*cells)
    every = slides.plan(nb)
    assert [every[i] for i in (1, 2, 3, 4, 5, 6, 7, 8)] == ["slide", "subslide"] * 4
    # a budget for the title and two widgets only: the static pictures are left out, widgets kept
    two_widgets = slides._seconds(nb.cells, ["slide", "skip", "skip", "slide", "subslide", "skip", "skip",
                                             "slide", "subslide"])
    monkeypatch.setattr(slides, "TARGET_S", two_widgets)
    assert slides.plan(nb) == ["slide", "skip", "skip", "slide", "subslide", "skip", "skip", "slide", "subslide"]
    monkeypatch.setattr(slides, "TARGET_S", 0)    # over budget at once: still one key picture
    assert slides.plan(nb).count("subslide") == 1 and slides.plan(nb)[4] == "subslide"


def test_an_override_on_the_source_marker_wins_and_a_bad_one_is_one_line(tmp_path):
    src = tmp_path / "99_demo.py"
    src.write_text('# %% [markdown]\n# # Lab 99\n\n# %% slide="fragment"\nx = 1\n\n'
                   '# %% [markdown] slide="skip"\n# ## Summary\n')
    nb = nbbuild.read_source(src)
    assert slides.plan(nb) == ["slide", "fragment", "skip"]
    nb.cells[1].metadata["slide"] = "slides"
    with pytest.raises(ValueError, match=r"^cell 1: slide='slides' is not one of slide, subslide"):
        slides.plan(nb)


def test_estimated_time_follows_the_stated_model():
    nb = slides.stamp(_nb(new_markdown_cell("word " * 100), _code(WIDGET),
                          new_markdown_cell("**Predict first:** x?"), _code(PNG), _code(),
                          new_markdown_cell("## Summary\n\none two three\n\n## Further reading\n\n" + "w " * 500)))
    kinds = [c.metadata.slideshow.slide_type for c in nb.cells]
    assert kinds == ["slide", "subslide", "slide", "subslide", "skip", "slide"]
    want = (100 * slides.SPEAK_S_PER_WORD + slides.WIDGET_S + slides.MIN_TEXT_S + slides.THINK_S
            + slides.PICTURE_S + slides.MIN_TEXT_S)   # the reading list after the summary is not spoken
    assert slides.estimated_seconds(nb) == pytest.approx(want)
    assert slides.slide_count(nb) == 5


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_every_lab_carries_the_plan_its_source_gives_and_presents_in_10_to_15_minutes(path):
    saved = nbformat.read(path, as_version=4)
    assert all("slideshow" in c.metadata for c in saved.cells), f"{path.name}: run make notebooks"
    want = slides.restamp(copy.deepcopy(saved), nbbuild.read_source(path.parent / "_src" / f"{path.stem}.py"))
    assert [c.metadata for c in saved.cells] == [c.metadata for c in want.cells] and \
        saved.metadata["rise"] == want.metadata["rise"], \
        f"{path.name}'s slide plan is stale: python -m labkit.slides stamp notebooks/{path.name}"
    kinds = [c.metadata.slideshow.slide_type for c in saved.cells]
    assert kinds[0] == "slide" and 6 <= slides.slide_count(saved) <= 14, kinds
    assert any(slides.picture_kind(c) for c, k in zip(saved.cells, kinds) if k != "skip") or \
        not any(slides.picture_kind(c) for c in saved.cells), "a lab with pictures shows at least one"
    questions = [k for c, k in zip(saved.cells[1:], kinds[1:]) if c.cell_type == "markdown"
                 and "**Predict first" in c.source]
    assert "slide" in questions or not questions, "a lab with predict-first questions presents one"
    assert 10 * 60 <= slides.estimated_seconds(saved) <= slides.TARGET_S


def test_unknown_lab_is_one_line_and_exit_2():
    run = subprocess.run([sys.executable, "-m", "labkit.slides", "export", "--lab", "42"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        f"error: LAB=42: unknown lab; the labs are {', '.join(slides.lab_id(p) for p in LABS)}"]


def test_remote_urls_finds_what_would_need_the_network():
    page = ('<script src="_assets/require.js"></script><link rel="stylesheet" href="https://unpkg.com/x.css">'
            "<style>@import url('http://fonts/a.css');</style><img src='data:image/png;base64,AA'>"
            "<script type=module>import m from 'https://cdn/m.mjs';</script>"
            '<a href="https://pytorch.org/docs">further reading</a>')
    assert slides.remote_urls(page) == ["https://unpkg.com/x.css", "http://fonts/a.css", "https://cdn/m.mjs"]


def test_readme_names_every_labs_demo_path_with_its_slides_and_minutes():
    readme = (slides.ROOT / "README.md").read_text().split("## For instructors", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0][:2].isdigit():
            rows[cells[0]] = cells[1:]
    assert sorted(rows) == [slides.lab_id(p) for p in LABS]
    for path in LABS:
        nb = nbformat.read(path, as_version=4)
        n, minutes, path_text = rows[slides.lab_id(path)]
        assert (int(n), int(minutes)) == (slides.slide_count(nb), round(slides.estimated_seconds(nb) / 60)), path.stem
        assert path_text.endswith("summary") or path.name.startswith("00"), path_text
    for target in ("make slides", "make demo LAB=05", "Render as Reveal Slideshow", "python -m labkit.slides stamp"):
        assert target in readme, target


def test_demo_port_taken_or_lab_unknown_is_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "labkit.demo", "--lab", "05", "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [f"error: make demo: PORT={port}: 127.0.0.1:{port} is taken (address already in "
                                       f"use); pick another, e.g. PORT={port + 1}"]
    for args, want in ((["--lab", "99"], "error: LAB=99: unknown lab; the labs are "),
                       ([], "error: make demo needs a lab: make demo LAB=05"),
                       (["--lab", "05", "--port", "0"], "error: make demo: PORT must be an int in 1..65535, got 0")):
        run = subprocess.run([sys.executable, "-m", "labkit.demo", *args], capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and run.stderr.startswith(want), run.stderr


def test_demo_notebook_keeps_the_plan_and_the_cells_it_reads():
    from labkit import demo

    nb = slides.stamp(_nb(new_markdown_cell("# Lab 99"), new_code_cell("import math\nunused = 3"),
                          new_code_cell("r = 2"), new_code_cell("noise = 7"), new_code_cell("d = {}"),
                          new_code_cell("d['k'] = r"), new_markdown_cell("**Predict first:** area?"),
                          new_code_cell("print(math.pi * d['k'] ** 2)")))
    page = demo.demo_notebook(nb)
    assert [c.source for c in page.cells] == ["# Lab 99", "import math", "r = 2", "d = {}", "d['k'] = r",
                                              "**Predict first:** area?", "print(math.pi * d['k'] ** 2)"]
    assert demo.names("!ls\nz = w") == ({"z"}, {"get_ipython", "w"})   # a shell escape parses
    assert demo.names("m = {r: k for r, k in t}\ndef f(a, *b, c=1):\n    return a + b + c + g") == ({"m", "f"}, {"t", "g"})


def test_a_set_up_cell_needed_for_its_imports_gives_only_them_and_only_widgets_cuts_the_rest():
    from labkit import demo

    widget = new_code_cell("show(np.zeros(n))")
    widget.outputs = [new_output("display_data", data=WIDGET)]
    nb = slides.stamp(_nb(new_markdown_cell("# Lab 99"),
                          new_code_cell("import numpy as np\nimport time\nslow = time.sleep(60)"),
                          new_code_cell("n = 3\nfrom labkit.show import show"),
                          new_markdown_cell("**Predict first:** how long?"), new_code_cell("print(slow)"),
                          new_markdown_cell("## 2. Watch it"), widget))
    assert demo.needed_imports("import numpy as np\nimport time\nslow = time.sleep(60)", {"np"}) == "import numpy as np"
    assert demo.needed_imports("n = 3\nfrom labkit.show import show", {"n", "show"}) is None   # n needs the cell
    whole = [c.source for c in demo.demo_notebook(nb).cells if c.cell_type == "code"]
    assert whole == [nb.cells[1].source, nb.cells[2].source, "print(slow)", "show(np.zeros(n))"]
    widgets = [c.source for c in demo.demo_notebook(nb, only_widgets=True).cells]
    assert widgets == ["# Lab 99", "import numpy as np", nb.cells[2].source, "**Predict first:** how long?",
                       "## 2. Watch it", "show(np.zeros(n))"]
