"""Instructor mode in the browser (instructor_mode.py): every lab's static slides from a file URL,
every lab's widgets on a Voilà demo page, and ``make demo``'s own page for one lab. (Each lab's live
slideshow is step 4 of browser_tier.check_notebook, on the kernel that step 2 ran, so no notebook
runs twice.)

The demo pages of all labs come from one Voilà, and hold each lab's demo path cut to its widgets
(`labkit.demo.demo_notebook(only_widgets=True)`: the widget cells, the cells they read and the
plan's text): the widgets are what only a browser can check, while the path's measurements are the
notebook's own cells, which nbval and the browser tier run. ``make demo``'s whole path is served
through its command line for Lab 03."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import instructor_mode as im
import pytest

from labkit import demo, slides
from labkit.nbbuild import TEST_ENV

pytestmark = pytest.mark.slow
LABS = slides.lab_notebooks()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(cmd: list[str], port: int, log_path, **popen):
    """Run ``cmd`` (a server, in its own process group) until it listens on 127.0.0.1:``port``;
    yield its base URL; then stop the group."""
    log = open(log_path, "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **popen)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def static_slides(tmp_path_factory):
    """Every lab's static slides, exported as make slides does (reveal.js and the widget renderer
    fetched with npm once into build/slides/, then copied)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed (make setup installs it where apt-get works)")
    cache = slides.ROOT / "build" / "slides"
    slides.fetch_assets(cache)
    out = tmp_path_factory.mktemp("slides")
    for name in ("_assets", "@jupyter-widgets"):
        shutil.copytree(cache / name, out / name)
    return {nb.stem: slides.export(nb, out) for nb in LABS}


@pytest.fixture(scope="module")
def voila(tmp_path_factory):
    """One Voilà on 127.0.0.1 serving every lab's demo path cut to its widgets: its base URL."""
    folder = tmp_path_factory.mktemp("demo")
    for nb in LABS:
        demo.write_demo(nb, folder, only_widgets=True)
    port = free_port()
    with serving(demo.voila_command(folder, port), port, folder / "voila.log", cwd=folder,
                 env=dict(os.environ, **TEST_ENV)) as base:
        yield base


@pytest.mark.parametrize("notebook", LABS, ids=lambda p: p.stem)
def test_static_slides_work_offline_from_a_file_url(browser, static_slides, notebook):
    im.check_static_slides(browser, static_slides[notebook.stem], notebook)


@pytest.mark.parametrize("notebook", LABS, ids=lambda p: p.stem)
def test_demo_page_renders_and_its_widgets_play(browser, voila, notebook):
    im.check_demo_page(browser, voila, notebook)


def test_make_demo_serves_a_labs_whole_demo_path(browser, tmp_path):
    """``python -m labkit.demo --lab 03`` (make demo LAB=03): the page of the lab's whole demo path
    (its predict-first measurement included) at the server's root."""
    (notebook,) = slides.find_lab("03")
    port = free_port()
    cmd = [sys.executable, "-m", "labkit.demo", "--lab", "03", "--port", str(port)]
    with serving(cmd, port, tmp_path / "demo.log", cwd=slides.ROOT) as base:
        im.check_demo_page(browser, base, notebook, address=f"{base}/")
