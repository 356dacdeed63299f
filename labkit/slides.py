"""Instructor mode, part 1: each lab's slide plan, and its static slides.

Every built notebook carries reveal.js slideshow metadata (``cell.metadata.slideshow.slide_type``),
which JupyterLab's RISE extension presents live and ``nbconvert --to slides`` exports. The plan is
made by rules from the built notebook (cells and saved outputs), so a lab's source needs no
per-cell markup; it is the lab's **demo path**, a 10-15 minute lecture:

1. the title cell (the learning objectives): a slide;
2. the key pictures: code cells whose output is a widget, then those showing a static picture
   (PNG, SVG, an ``<img>`` or ``<svg>`` in HTML), each in notebook order, as many as keep the
   lecture within `TARGET_S` (at least one, at most `MAX_PICTURES`); each is a subslide after the
   markdown just before it (its context, a slide);
3. one predict-first question: the first markdown cell after the title that asks "**Predict
   first**" and is followed by a code cell; the question is a slide, the code cell that measures
   the answer a subslide;
4. the summary (the markdown cell with a ``## Summary`` heading): a slide.

Every other cell (set-up, long code, tables, exercises, worked problems) is ``skip``: it stays in
the notebook, not in the slides. One cell's rule is overridden from the source by a key on its
jupytext marker, e.g. ``# %% slide="fragment"``, with a reveal.js slide type (`SLIDE_TYPES`).

``estimated_seconds`` turns a plan into presenting time with a stated model (`SPEAK_S_PER_WORD` and
friends): what the README's demo-path table quotes.

``python -m labkit.slides stamp notebooks/NN_*.ipynb`` re-applies the plan to built notebooks
without running them (after a merge, say); ``python -m labkit.slides export [--lab 05]`` writes
static reveal.js slides to ``build/slides/`` (see `export`).
"""
from __future__ import annotations

import argparse
import copy
import fnmatch
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import jinja2
import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
SLIDE_TYPES = ("slide", "subslide", "fragment", "notes", "skip", "-")
MAX_PICTURES = 4
TARGET_S = 15 * 60     # the longest a lab's demo path should take to present (seconds)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

# The presenting-time model (seconds): the instructor says about as much as a shown text holds at a
# speaking pace of 150 words a minute, lets a class think over a prediction, and explains a picture.
SPEAK_S_PER_WORD = 0.4
MIN_TEXT_S = 20
PICTURE_S = 60
WIDGET_S = 120         # play the animation through once, pausing on a step or two
ANSWER_S = 45          # the measured answer: read the numbers and the check
THINK_S = 60           # the class writes its prediction down


class UsageError(Exception):
    """Bad command-line input (an unknown lab, a missing build): printed as one line, exit status 2."""


def lab_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb"))   # a lab's second part: 06b_*


def lab_id(notebook: Path) -> str:
    """"05" of 05_collectives.ipynb, "06b" of 06b_scaling_convergence.ipynb."""
    return notebook.name.split("_", 1)[0]


def find_lab(lab: str | None) -> list[Path]:
    """The built notebook of ``lab`` ("05", "5", "06b") or of every lab (None); UsageError if unknown."""
    all_labs = lab_notebooks()
    if lab is None or lab == "":
        return all_labs
    match = re.fullmatch(r"(\d+)([a-z]?)", lab)
    hit = [p for p in all_labs if match and lab_id(p) == f"{int(match[1]):02d}{match[2]}"]
    if not hit:
        raise UsageError(f"LAB={lab}: unknown lab; the labs are {', '.join(lab_id(p) for p in all_labs)}")
    return hit


def _source(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def picture_kind(cell) -> str | None:
    """'widget' or 'picture' for a code cell whose saved output shows one, else None."""
    if cell.cell_type != "code":
        return None
    kind = None
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if WIDGET_MIME in data:
            return "widget"
        html = data.get("text/html", "")
        html = html if isinstance(html, str) else "".join(html)
        if "image/png" in data or "image/svg+xml" in data or "<img" in html or "<svg" in html:
            kind = "picture"
    return kind


def _is_summary(cell) -> bool:
    return cell.cell_type == "markdown" and re.search(r"^## Summary\b", _source(cell), re.M) is not None


def plan(nb) -> list[str]:
    """The slide type of each cell of a built notebook: the rules of this module's docstring."""
    cells = nb.cells
    kinds = ["skip"] * len(cells)
    if not cells:
        return kinds
    kinds[0] = "slide"
    for i, cell in enumerate(cells[1:-1], start=1):
        if cell.cell_type == "markdown" and "**Predict first" in _source(cell) \
                and cells[i + 1].cell_type == "code":
            kinds[i], kinds[i + 1] = "slide", "subslide"
            break
    for i, cell in enumerate(cells):
        if _is_summary(cell):
            kinds[i] = "slide"
    overrides = {}
    for i, cell in enumerate(cells):   # explicit overrides from the source
        override = cell.metadata.get("slide")
        if override is not None:
            if override not in SLIDE_TYPES:
                raise ValueError(f"cell {i}: slide={override!r} is not one of {', '.join(SLIDE_TYPES)}")
            overrides[i] = override

    def with_overrides(kinds):
        return [overrides.get(i, k) for i, k in enumerate(kinds)]

    pictures = [i for i, c in enumerate(cells) if picture_kind(c) == "widget"]
    pictures += [i for i, c in enumerate(cells) if picture_kind(c) == "picture"]
    for n, i in enumerate(pictures[:MAX_PICTURES]):
        if kinds[i] != "skip":
            continue
        trial = list(kinds)
        trial[i] = "subslide"
        if i > 0 and cells[i - 1].cell_type == "markdown" and trial[i - 1] == "skip":
            trial[i - 1] = "slide"   # the markdown just before a picture opens its slide
        if n > 0 and _seconds(cells, with_overrides(trial)) > TARGET_S:
            break
        kinds = trial
    return with_overrides(kinds)


# The live slideshow's settings (jupyterlab-rise reads a notebook's "rise" metadata): reveal.js's
# "white" theme has its fonts in RISE's bundle (the default, "simple", loads them from Google); a
# slide taller than the screen scrolls; the show starts at the title whichever cell is selected.
RISE_CONFIG = {"theme": "white", "transition": "none", "scroll": True, "start_slideshow_at": "beginning"}


def stamp(nb):
    """Write `plan`'s slide types into ``nb``'s cells and `RISE_CONFIG` into its metadata (in
    place); returns ``nb``."""
    for cell, kind in zip(nb.cells, plan(nb)):
        cell.metadata["slideshow"] = {"slide_type": kind}
    nb.metadata["rise"] = dict(RISE_CONFIG)
    return nb


def restamp(nb, source_nb):
    """`stamp` a built notebook again with the ``slide`` overrides its source (``source_nb``, the
    percent-format source as jupytext reads it) now gives, matched by cell text, without running it."""
    overrides = {(c.cell_type, _source(c)): c.metadata.get("slide") for c in source_nb.cells}
    for cell in nb.cells:
        override = overrides.get((cell.cell_type, _source(cell)))
        if override is None:
            cell.metadata.pop("slide", None)
        else:
            cell.metadata["slide"] = override
    return stamp(nb)


def slide_count(nb) -> int:
    """Slides and subslides: the screens a presenter steps through (fragments build within one)."""
    return sum(c.metadata.get("slideshow", {}).get("slide_type") in ("slide", "subslide") for c in nb.cells)


def _spoken_words(cell) -> int:
    """Words of a markdown cell an instructor presents: a summary cell's further reading and
    exercise list are shown, not talked through."""
    text = _source(cell)
    if _is_summary(cell):
        text = re.split(r"^## Summary\b", text, flags=re.M)[1]
        text = re.split(r"^## ", text, flags=re.M)[0]
    return len(text.split())


def _seconds(cells, kinds) -> float:
    total = 0.0
    for cell, kind in zip(cells, kinds):
        if kind in ("skip", "notes"):
            continue
        if cell.cell_type == "markdown":
            total += max(MIN_TEXT_S, SPEAK_S_PER_WORD * _spoken_words(cell))
            total += THINK_S if "**Predict first" in _source(cell) else 0
        else:
            pic = picture_kind(cell)
            total += WIDGET_S if pic == "widget" else PICTURE_S if pic else ANSWER_S
    return total


def estimated_seconds(nb) -> float:
    """Presenting time of ``nb``'s stamped demo path under this module's time model (seconds)."""
    return _seconds(nb.cells, [c.metadata.get("slideshow", {}).get("slide_type", "-") for c in nb.cells])


# --- static slides --------------------------------------------------------------------------------

# Front-end files the static slides load, from the npm registry (pinned; fetched once with npm into
# build/slides/): package@version -> [(folder or file in the package, where it goes relative to the
# slides, which of its files)]. reveal.js 4.0.2 is the version nbconvert's reveal template is
# written for; html-manager 1.x renders the saved state of ipywidgets 8 widgets and looks for its
# icon fonts both beside itself and two folders up.
FONTS = ("*.woff2", "*.woff", "*.ttf")
ASSETS = {
    "reveal.js@4.0.2": [("dist", "_assets/reveal.js/dist", ("*",)),
                        ("plugin/notes", "_assets/reveal.js/plugin/notes", ("*",))],
    "requirejs@2.3.7": [("require.js", "_assets/require.js", ("*",))],
    "jquery@3.7.1": [("dist/jquery.min.js", "_assets/jquery.min.js", ("*",))],
    "@jupyter-widgets/html-manager@1.0.15": [
        ("dist", "@jupyter-widgets/html-manager/dist", ("embed-amd.js", "*.LICENSE.txt") + FONTS),
        ("dist", "@jupyter-widgets", FONTS)],
}
WIDGET_RENDERER = "@jupyter-widgets/html-manager/dist/embed-amd.js"


def fetch_assets(folder: Path) -> None:
    """Put `ASSETS` under ``folder``, fetched with ``npm pack`` unless already there."""
    done = folder / "_assets" / ".complete"
    if done.exists() and done.read_text() == repr(ASSETS):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise UsageError("make slides needs npm once, to fetch reveal.js and the widget renderer "
                         "(make setup installs it where apt-get works)")
    with tempfile.TemporaryDirectory() as tmp:
        for spec, entries in ASSETS.items():
            run = subprocess.run([npm, "pack", spec, "--silent", "--pack-destination", tmp],
                                 capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                last = (run.stderr.strip().splitlines() or ["no message"])[-1]
                raise UsageError(f"npm pack {spec} failed: {last}")
            with tarfile.open(Path(tmp) / run.stdout.strip().splitlines()[-1]) as tar:
                files = [m for m in tar.getmembers() if m.isfile()]
                for inside, name, keep in entries:
                    prefix = f"package/{inside}"
                    if any(m.name == prefix for m in files):      # a single file
                        chosen = {folder / name: m for m in files if m.name == prefix}
                    else:
                        chosen = {folder / name / m.name[len(prefix) + 1:]: m for m in files
                                  if m.name.startswith(prefix + "/")
                                  and any(fnmatch.fnmatch(Path(m.name).name, k) for k in keep)}
                    if not chosen:
                        raise UsageError(f"npm package {spec} has no {inside}")
                    for target, m in chosen.items():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(tar.extractfile(m).read())
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(repr(ASSETS))


# nbconvert's reveal template with three changes: it loads nothing from a CDN that the labs do not
# use (MathJax: the labs write no TeX; Mermaid: no diagrams, and an ES module would not load from a
# file URL anyway); a slide taller than the screen scrolls; and `window.Reveal` is set, for the
# browser tests (under require.js reveal.js defines no global).
OFFLINE_TEMPLATE = """{%- extends 'reveal/index.html.j2' -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_css -%}
{{ super() }}
<style>.reveal { font-size: 30px; } .reveal .slides section { height: 100%; overflow-y: auto; }</style>
{%- endblock html_head_css -%}
{% block footer_js %}
<script>
require(["{{ resources.reveal.url_prefix }}/dist/reveal.js", "{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"],
  function (Reveal, RevealNotes) {
    window.Reveal = Reveal;
    Reveal.initialize({controls: true, progress: true, history: true, center: false,
                       transition: "{{ resources.reveal.transition }}", slideNumber: true,
                       plugins: [RevealNotes]});
  });
</script>
{% endblock footer_js %}
"""


def remote_urls(html: str) -> list[str]:
    """The http(s) addresses ``html`` loads scripts, style sheets, pictures or modules from (links a
    reader may follow are not loads)."""
    tags = r"""<(?:script|img|iframe|link)\b[^>]*?\b(?:src|href)\s*=\s*["'](https?://[^"']+)"""
    return re.findall(tags, html) + re.findall(r"""(?:@import\s+url\(|\bimport\b[^;'"]*)["']?(https?://[^)"']+)""", html)


def export(notebook: Path, folder: Path) -> Path:
    """``folder``/<lab>.slides.html: the notebook's demo path as static reveal.js slides.

    The saved outputs and widget state are rendered as saved (no kernel): pictures show, widgets
    show their saved frame. Every script, style sheet and font is a local file under ``folder``,
    so the slides work offline from a file URL (checked: UsageError if the page would load
    anything from the network); code cells' inputs are left out.
    """
    from nbconvert import SlidesExporter

    fetch_assets(folder)
    nb = nbformat.read(notebook, as_version=4)
    if not any("slideshow" in c.metadata for c in nb.cells):
        raise UsageError(f"{notebook.name} has no slideshow metadata: run make notebooks (or "
                         f"python -m labkit.slides stamp {notebook.relative_to(ROOT)})")
    exporter = SlidesExporter(
        extra_loaders=[jinja2.DictLoader({"labkit_offline_slides.html.j2": OFFLINE_TEMPLATE})],
        template_file="labkit_offline_slides.html.j2",
        reveal_url_prefix="_assets/reveal.js", reveal_transition="none", reveal_theme="white",
        require_js_url="_assets/require.js", jquery_url="_assets/jquery.min.js",
        widget_renderer_url=WIDGET_RENDERER,
        exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
    remote = remote_urls(body)
    if remote:
        raise UsageError(f"{notebook.stem}'s slides would load {remote[0]} from the network")
    out = folder / f"{notebook.stem}.slides.html"
    out.write_text(body)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.slides", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stamp", help="re-apply the slide plan to built notebooks (no execution)")
    st.add_argument("notebooks", nargs="*", type=Path)
    ex = sub.add_parser("export", help="static reveal.js slides under build/slides/")
    ex.add_argument("--lab", default=None)
    ex.add_argument("--out", type=Path, default=ROOT / "build" / "slides")
    args = parser.parse_args(argv)
    try:
        if args.command == "stamp":
            import jupytext   # the source's markers only (labkit.nbbuild, which builds, imports this module)

            for path in args.notebooks or lab_notebooks():
                nb = nbformat.read(path, as_version=4)
                before = copy.deepcopy(nb)
                src = NOTEBOOKS / "_src" / f"{path.stem}.py"
                if not src.exists():
                    raise UsageError(f"{path}: no source {src.relative_to(ROOT)}")
                if restamp(nb, jupytext.read(src, fmt="py:percent")) != before:
                    nbformat.write(nb, path)
                print(f"{path.name}: {slide_count(nb)} slides, about {estimated_seconds(nb) / 60:.1f} min")
            return 0
        notebooks = find_lab(args.lab)
        args.out.mkdir(parents=True, exist_ok=True)
        for path in notebooks:
            out = export(path, args.out)
            print(f"wrote {out} ({slide_count(nbformat.read(path, as_version=4))} slides)")
        return 0
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
