"""The browser tier's checks of instructor mode (labkit.slides, labkit.demo), one lab at a time:

- `check_live_slideshow`: after browser_tier.check_notebook has run a notebook in JupyterLab, its
  RISE slideshow (jupyterlab-rise's page, on the same kernel) shows every slide of the plan, steps
  through them all with no console error, and every widget on a slide plays there;
- `check_static_slides`: ``make slides``' HTML opened from a file URL loads nothing from the network,
  has the plan's slides, steps through them with no error, and shows its pictures and its widgets
  (rendered from their saved state);
- `check_demo_page`: the Voilà demo page runs with no error, shows no code, renders every widget of
  the demo path, and a Play (or a click on the slider) changes each one's picture.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import nbformat

from labkit import slides

TOKEN = "labkit-browser-tier"
# jupyterlab-rise 0.43.1's own page logs "Maximum call stack size exceeded" while it starts (its
# bundled web-components toolkit registers its elements twice), before any cell renders, changing
# nothing shown; and it looks for optional style sheets beside the notebook (rise.css, then
# <notebook>.css), which the course does not ship.
RISE_BENIGN = ("Maximum call stack size exceeded", "Refused to apply style from")
BENIGN = ("favicon", "Failed to load resource: the server responded with a status of 404", "announcements",
          "jupyterlab_pygments")
LEAF = """() => { const all = [...document.querySelectorAll('.reveal .slides section')];
    const leaves = all.filter(s => !s.querySelector('section'));
    return [leaves.findIndex(s => s.classList.contains('present')), leaves.length]; }"""
TOP_WIDGETS = ".widget-vbox:not(.widget-vbox .widget-vbox)"


def shown_widgets(notebook: Path) -> int:
    """Widgets on the slides of ``notebook``'s saved plan."""
    nb = nbformat.read(notebook, as_version=4)
    return sum(slides.picture_kind(c) == "widget" for c in nb.cells
               if c.metadata.get("slideshow", {}).get("slide_type", "skip") != "skip")


def _tree_cpu() -> float:
    """CPU seconds (user + system) so far of this process and everything it started that still runs
    (Chromium, the servers and their kernels)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


@contextlib.contextmanager
def timed(what: str):
    """Append "<what>\t<wall s>\t<CPU s>" to ``$LABKIT_BROWSER_TIMES`` if set, for the block."""
    path = os.environ.get("LABKIT_BROWSER_TIMES")
    t0, c0 = time.monotonic(), _tree_cpu() if path else 0.0
    yield
    if path:
        with open(path, "a") as f:
            f.write(f"{what}\t{time.monotonic() - t0:.1f}\t{_tree_cpu() - c0:.1f}\n")


def _watch(page, into: list) -> None:
    page.on("console", lambda m: into.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: into.append(str(e)))


def _problems(console: list, extra=()) -> list:
    return [m for m in console if not any(b in m for b in BENIGN + tuple(extra))]


# Every picture in view (the slide in front, else the page): the widgets redraw by replacing their
# HTML, and a redraw may replace the elements themselves, so the check compares their contents.
PICTURES = """() => { const leaf = [...document.querySelectorAll('.reveal .slides section.present')]
        .find(s => !s.querySelector('section'));
    return [...(leaf || document).querySelectorAll('.widget-html-content')].map(e => e.innerHTML).join('|'); }"""


def play(page, box) -> None:
    """Press the widget's Play, else click its first visible slider's track at 3/4 or 1/4 (a slider squeezed
    to nothing by a long label: its handle, two steps with the keyboard), else pick another option
    of its first drop-down; then wait for a picture in view to change."""
    before = page.evaluate(PICTURES)
    play_button = box.locator(".widget-play button >> visible=true").first
    track = box.locator(".noUi-base >> visible=true").first
    handle = box.locator(".noUi-handle").first
    dropdown = box.locator("select >> visible=true").first
    if play_button.count():
        play_button.click()
    elif track.count():
        # at 3/4 of the track; at 1/4 when that moved nothing (the JupyterLab page's check may have
        # put this same widget model, one kernel, at 3/4 already)
        size, knob = track.bounding_box(), handle
        value = lambda: knob.get_attribute("aria-valuenow", timeout=5_000) if knob.count() else None  # noqa: E731
        was = value()
        track.click(position={"x": size["width"] * 0.75, "y": size["height"] / 2})
        page.wait_for_timeout(300)
        if value() == was:
            track.click(position={"x": size["width"] * 0.25, "y": size["height"] / 2})
            page.wait_for_timeout(300)
        for key in ("ArrowLeft", "ArrowRight"):   # a track squeezed by a long label: the keyboard
            if value() != was or not knob.count():
                break
            knob.focus()
            for _ in range(2):
                page.keyboard.press(key)
    elif handle.count():
        handle.focus()
        for _ in range(2):
            page.keyboard.press("ArrowRight")
    else:
        assert dropdown.count(), "a widget with no Play, slider or drop-down: " + box.inner_html()[:300]
        options = dropdown.locator("option").all_inner_texts()
        current = dropdown.evaluate("s => s.selectedIndex")
        dropdown.select_option(index=(current + 1) % len(options))
    page.wait_for_function(f"old => ({PICTURES})() !== old", arg=before, timeout=30_000)


def widgets_per_slide(nb) -> list[int]:
    """The number of widgets each slide (or subslide) of ``nb``'s saved plan shows, in order."""
    counts: list[int] = []
    for cell in nb.cells:
        kind = cell.metadata.get("slideshow", {}).get("slide_type", "skip")
        if kind in ("slide", "subslide"):
            counts.append(0)
        if counts and kind not in ("skip", "notes") and slides.picture_kind(cell) == "widget":
            counts[-1] += 1
    return counts


# The widgets shown on the slide in front: RISE keeps a slide's skipped cells in its section, hidden.
SHOWN_HERE = f"""() => {{ const leaf = [...document.querySelectorAll('.reveal .slides section.present')]
        .find(s => !s.querySelector('section'));
    return leaf ? [...leaf.querySelectorAll('{TOP_WIDGETS}')].filter(w => w.getClientRects().length > 0
        && getComputedStyle(w).visibility !== 'hidden').length : -1; }}"""


def check_live_slideshow(browser, url: str, notebook: Path, lab_page) -> None:
    """See the module docstring; ``lab_page`` holds the notebook, just run, in JupyterLab. Its wall
    and CPU time are written to ``$LABKIT_BROWSER_TIMES`` if set."""
    with timed(f"{notebook.stem} slideshow"):
        _live_slideshow(browser, url, notebook, lab_page)


def _live_slideshow(browser, url: str, notebook: Path, lab_page) -> None:
    lab_page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")   # RISE opens the file
    lab_page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
    nb = nbformat.read(notebook, as_version=4)
    want_slides, per_slide = slides.slide_count(nb), widgets_per_slide(nb)
    console: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    _watch(page, console)
    page.goto(f"{url}/rise/{notebook.name}?token={TOKEN}")
    page.wait_for_selector(".reveal .slides section.present", timeout=90_000)
    index, leaves = page.evaluate(LEAF)
    assert leaves == want_slides, f"{notebook.name}: the slideshow has {leaves} slides, the plan {want_slides}"
    seen, played = set(), 0
    for _ in range(3 * want_slides + len(nb.cells)):   # fragments take a key press too
        index, _ = page.evaluate(LEAF)
        if index not in seen:
            seen.add(index)
            page.wait_for_function(f"() => ({SHOWN_HERE})() === {per_slide[index]}", timeout=30_000)
            boxes = page.locator(f".reveal .slides section.present:not(:has(section)) {TOP_WIDGETS} >> visible=true")
            for i in range(boxes.count()):
                play(page, boxes.nth(i))
                played += 1
        if index == want_slides - 1:
            break
        page.keyboard.press("Space")   # reveal.js moves within the key's handler (no transition)
    assert seen == set(range(want_slides)), f"{notebook.name}: visited slides {sorted(seen)} of {want_slides}"
    assert played == sum(per_slide), f"{notebook.name}: {played} widgets played on the slides, {sum(per_slide)} shown"
    optional_css = [m for m in console if "Refused to apply style from" in m]
    assert all(f"/files/rise.css'" in m or f"/files/{notebook.stem}.css'" in m for m in optional_css), optional_css
    assert not _problems(console, RISE_BENIGN), f"console errors in the slideshow: {_problems(console, RISE_BENIGN)[:3]}"
    page.close()


def check_static_slides(browser, html: Path, notebook: Path) -> None:
    """See the module docstring; wall and CPU time to ``$LABKIT_BROWSER_TIMES`` if set."""
    with timed(f"{notebook.stem} static slides"):
        page = _static_slides(browser, html, notebook)
    page.close()


def _static_slides(browser, html: Path, notebook: Path):
    nb = nbformat.read(notebook, as_version=4)
    kinds = [c.metadata.get("slideshow", {}).get("slide_type", "skip") for c in nb.cells]
    want_slides = slides.slide_count(nb)
    want_widgets = shown_widgets(notebook)
    want_pictures = sum(slides.picture_kind(c) == "picture" for c, k in zip(nb.cells, kinds) if k != "skip")
    console: list[str] = []
    remote: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    _watch(page, console)
    page.on("request", lambda r: remote.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.on("requestfailed", lambda r: console.append(f"failed to load {r.url}"))
    page.goto(html.as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getTotalSlides()") == want_slides
    page.wait_for_function(f"() => document.querySelectorAll('{TOP_WIDGETS}').length >= {want_widgets}",
                           timeout=30_000)
    seen = set()
    for _ in range(3 * want_slides + len(nb.cells)):
        seen.add(tuple(page.evaluate("[Reveal.getIndices().h, Reveal.getIndices().v]")))
        if page.evaluate("Reveal.isLastSlide() && !Reveal.availableFragments().next"):
            break
        page.evaluate("Reveal.next()")
    assert len(seen) == want_slides, f"{html.name}: stepped through {len(seen)} of {want_slides} slides"
    images = page.evaluate("[...document.querySelectorAll('.reveal .slides img')].map(i => i.complete && i.naturalWidth > 0)")
    assert all(images), f"{html.name}: {images.count(False)} of {len(images)} pictures did not load"
    drawn = page.evaluate("document.querySelectorAll('.reveal .slides .jp-OutputArea-output img, "
                          ".reveal .slides .jp-OutputArea-output svg').length")
    assert drawn >= want_pictures, f"{html.name}: {drawn} pictures shown, {want_pictures} static ones planned"
    widgets = page.locator(f".reveal .slides {TOP_WIDGETS}")
    assert widgets.count() == want_widgets
    for i in range(widgets.count()):
        assert widgets.nth(i).locator(".widget-html-content").last.inner_html().strip(), "a widget shows no picture"
    assert not remote, f"{html.name} loads from the network: {remote[:3]}"
    assert not _problems(console), f"console errors: {_problems(console)[:3]}"
    return page


# Voilà's page template links Font Awesome from a CDN although its own bundle carries the same
# fonts (the Play button's icons show offline); those two requests may fail, nothing else may.
VOILA_CDN = "https://cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free@"


def check_demo_page(browser, base: str, notebook: Path, address: str | None = None) -> None:
    """See the module docstring; ``address`` is the page's URL (by default Voilà's page of
    ``notebook``'s name under ``base``). Wall and CPU time (the kernel's included: measured before
    the page closes and Voilà stops it) to ``$LABKIT_BROWSER_TIMES`` if set."""
    with timed(f"{notebook.stem} demo page"):
        page = _demo_page(browser, base, notebook, address)
    page.close()


def _demo_page(browser, base: str, notebook: Path, address: str | None):
    console: list[str] = []
    remote: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    _watch(page, console)
    page.on("request", lambda r: remote.append(r.url) if not r.url.startswith((base, "data:")) else None)
    page.goto(address or f"{base}/voila/render/{notebook.name}", timeout=600_000)   # it streams while cells run
    page.wait_for_selector("#rendered_cells", state="visible", timeout=60_000)
    text = page.inner_text("body")
    assert "Traceback" not in text and "There was an error when executing cell" not in text, \
        text[text.find("Traceback") - 300:][:1500]
    assert page.locator(".jp-CodeCell .jp-InputArea, .jp-InputArea-editor").count() == 0, "the demo page shows code"
    want = shown_widgets(notebook)
    page.wait_for_function(f"() => document.querySelectorAll('{TOP_WIDGETS}').length >= {want}", timeout=60_000)
    boxes = page.locator(TOP_WIDGETS)
    assert boxes.count() == want, f"{boxes.count()} widgets on the demo page, {want} on the demo path"
    for i in range(want):
        boxes.nth(i).scroll_into_view_if_needed()
        play(page, boxes.nth(i))
    assert all(u.startswith(VOILA_CDN) for u in remote), f"the demo page loads from the network: {remote[:3]}"
    problems = _problems(console)
    cdn_failures = [m for m in problems if "ERR_NAME_NOT_RESOLVED" in m or "ERR_INTERNET_DISCONNECTED" in m]
    assert len(cdn_failures) <= len(remote) and len(problems) == len(cdn_failures), f"console errors: {problems[:3]}"
    return page
