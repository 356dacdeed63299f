"""The notebooks as a learner meets them: JupyterLab in a real browser (Chromium driven by Playwright).

JupyterLab is started the way ``make course`` starts it (plus a fixed token, a
free loopback port and ``expose_app_in_browser`` so the test can ask the
notebook for its state), on a temporary copy of notebooks/ so autosave never
touches the checkout. For each notebook:

1. freshly opened (not yet run, not trusted) it shows pictures, never the raw
   ``VBox(children=...)`` text of a saved widget;
2. Run All finishes with no error output and no console errors;
3. every widget renders as a widget, and moving its slider (or pressing Play)
   changes the picture;
4. its live slideshow (jupyterlab-rise, on the kernel that just ran it) steps
   through every slide with no error, and each widget on a slide plays
   (instructor_mode.py).
Each notebook's Run All time is written to ``$LABKIT_BROWSER_TIMES`` if set (and each
instructor-mode check's wall and CPU seconds: instructor_mode.timed).

The tests are two files, even- and odd-numbered notebooks (about equal time), so that the two
pytest workers of ``make test`` can share the tier; ``conftest.py`` makes `browser_session` and
`lab_session` session fixtures: one Chromium and one JupyterLab per worker (the instructor-mode
checks of static slides and demo pages use the Chromium alone).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
TOKEN = "labkit-browser-tier"
BENIGN_CONSOLE = ("favicon", "Failed to load resource: the server responded with a status of 404",
                  "announcements", "jupyterlab_pygments")


def chromium() -> str | None:
    for path in (os.environ.get("LABKIT_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                 shutil.which("google-chrome")):
        if path and os.path.exists(path):
            return path
    return None


def browser_session():
    """One Chromium driven by Playwright: yields the browser."""
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("Chromium is not installed (make setup installs it with apt-get where it can; "
                    "or set LABKIT_CHROMIUM to a Chromium/Chrome binary)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        yield browser
        browser.close()


def lab_session(browser, tmp_path_factory):
    """JupyterLab on a copy of the notebooks, and `browser_session`'s Chromium: yields (browser, url)."""
    root = tmp_path_factory.mktemp("notebooks")
    for nb in NOTEBOOKS:
        shutil.copy(nb, root)
    settings = tmp_path_factory.mktemp("lab-settings")   # render every cell (JupyterLab 4 renders only those in view)
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    jupyter = Path(sys.executable).with_name("jupyter")
    cmd = [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={TOKEN}", "--LabApp.expose_app_in_browser=True",
           f"--ServerApp.root_dir={root}", "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")            # as `make course` does for root
    log = open(root / "server.log", "w")
    server = subprocess.Popen(cmd, cwd=ROOT / "notebooks", stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True,
                              env=dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
                                       JUPYTERLAB_WORKSPACES_DIR=str(tmp_path_factory.mktemp("workspaces"))))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert server.poll() is None, (root / "server.log").read_text()[-2000:]
                time.sleep(0.2)
        yield browser, f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


PANEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    return !!(w && w.content && w.content.model && w.sessionContext && w.sessionContext.session
              && w.sessionContext.session.kernel); }"""
# Run All is over when every code cell has run, or when one failed (JupyterLab stops there).
ALL_RUN = """() => { const w = window.jupyterapp.shell.currentWidget, cells = w.content.model.cells;
    let n = 0, done = 0, failed = false;
    for (let i = 0; i < cells.length; i++) { const c = cells.get(i);
        if (c.type !== 'code') continue;
        if (c.outputs.toJSON().some(o => o.output_type === 'error')) failed = true;
        if (c.sharedModel.getSource().trim()) { n++; if (c.executionCount) done++; } }
    return w.sessionContext.session.kernel.status === 'idle' && (done === n || failed); }"""
OUTPUTS = """() => { const cells = window.jupyterapp.shell.currentWidget.content.model.cells, r = [];
    for (let i = 0; i < cells.length; i++) { const c = cells.get(i);
        if (c.type === 'code') r.push(c.outputs.toJSON()); }
    return r; }"""
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
CURRENT = ".jp-NotebookPanel:not(.lm-mod-hidden)"   # the notebook in front


def open_notebook(browser, url, name, console):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(str(e)))
    page.goto(f"{url}/lab/workspaces/{Path(name).stem}/tree/{name}?token={TOKEN}&reset")
    page.wait_for_function(PANEL_READY, timeout=90_000)
    page.wait_for_timeout(1000)   # let saved outputs render
    return page


def visible_text(page) -> str:
    return "\n".join(page.locator(f"{CURRENT} .jp-OutputArea").all_inner_texts())


def raw_widget_text(text: str) -> str:
    """The first place where a widget is shown as its Python repr (empty if none)."""
    for marker in ("VBox(children", "HBox(children"):
        at = text.find(marker)
        if at >= 0:
            return text[max(0, at - 200):at + 100]
    return ""


def check_notebook(lab, notebook: Path) -> None:
    """Steps 1-3 of this module's docstring on one notebook; ``lab`` is `lab_session`'s value."""
    browser, url = lab
    console: list[str] = []
    page = open_notebook(browser, url, notebook.name, console)
    saved = json.loads(notebook.read_text())
    n_widgets = sum(WIDGET_MIME in o.get("data", {}) for c in saved["cells"] for o in c.get("outputs", []))
    has_widgets = n_widgets > 0

    # 1. before running: pictures, not widget reprs
    text = visible_text(page)
    assert not raw_widget_text(text), f"a saved widget shows as raw text: {raw_widget_text(text)}"
    shown = text.count("run the cell to")   # the note under each saved widget's first picture (labkit.viz.player)
    assert shown == n_widgets, f"{n_widgets} saved widgets but {shown} show their first picture before running"

    # 2. Run All: no errors
    t0 = time.monotonic()
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_timeout(1500)
    page.wait_for_function(ALL_RUN, timeout=600_000, polling=1000)
    seconds = time.monotonic() - t0
    outputs = page.evaluate(OUTPUTS)
    errors = [o for cell in outputs for o in cell if o.get("output_type") == "error"]
    assert not errors, f"{notebook.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    tracebacks = [o["text"] for cell in outputs for o in cell if o.get("name") == "stderr" and "Traceback" in o["text"]]
    assert not tracebacks, tracebacks[0][-500:]

    # 3. widgets render and respond
    page.wait_for_timeout(1000)
    text = visible_text(page)
    assert "Error displaying widget" not in text and not raw_widget_text(text), raw_widget_text(text)
    widgets = page.locator(f"{CURRENT} .jp-OutputArea .widget-vbox")
    if has_widgets:
        assert widgets.count() > 0, "widgets did not render"
    move_widgets(page, widgets, limit=6)
    problems = [m for m in console if not any(b in m for b in BENIGN_CONSOLE)]
    assert not problems, f"console errors: {problems[:3]}"
    times = os.environ.get("LABKIT_BROWSER_TIMES")
    if times:
        with open(times, "a") as f:
            f.write(f"{notebook.stem}\t{seconds:.1f}\n")

    # 4. the live slideshow of the notebook just run (instructor mode: instructor_mode.py)
    import instructor_mode

    instructor_mode.check_live_slideshow(browser, url, notebook, page)
    page.close()


def move_widgets(page, widgets, limit: int = 6) -> int:
    """Move the slider of each of the first ``limit`` widgets (VBoxes of labkit.viz.player or
    controlled) two steps and wait until its picture changes; returns how many moved."""
    moved = 0
    for i in range(min(widgets.count(), limit)):
        box = widgets.nth(i)
        handle, picture = box.locator(".noUi-handle").first, box.locator(".widget-html-content").last
        if handle.count() == 0 or picture.count() == 0:
            continue
        box.scroll_into_view_if_needed()
        before = picture.inner_html()
        handle.focus()
        for _ in range(2):
            page.keyboard.press("ArrowRight")
        page.wait_for_function("([el, old]) => el.innerHTML !== old", arg=[picture.element_handle(), before],
                               timeout=15_000)
        moved += 1
    return moved
