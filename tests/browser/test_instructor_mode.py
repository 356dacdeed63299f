"""Instructor mode in the browser (instructor_mode.py): every lab's static slides from a file URL and
its Voilà demo page. (Its live slideshow is step 4 of browser_tier.check_notebook, on the kernel
that step 2 ran, so no notebook runs twice.)"""
import os
import shutil
import socket
import subprocess
import time

import instructor_mode as im
import pytest

from labkit import demo, slides
from labkit.nbbuild import TEST_ENV

pytestmark = pytest.mark.slow
LABS = slides.lab_notebooks()


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
    """One Voilà on 127.0.0.1 serving every lab's demo notebook (labkit.demo): its base URL."""
    folder = tmp_path_factory.mktemp("demo")
    for nb in LABS:
        demo.write_demo(nb, folder)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(folder / "voila.log", "w")
    server = subprocess.Popen(demo.voila_command(folder, port), cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True, env=dict(os.environ, **TEST_ENV))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (folder / "voila.log").read_text()[-2000:]
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.mark.parametrize("notebook", LABS, ids=lambda p: p.stem)
def test_static_slides_work_offline_from_a_file_url(lab, static_slides, notebook):
    im.check_static_slides(lab[0], static_slides[notebook.stem], notebook)


@pytest.mark.parametrize("notebook", LABS, ids=lambda p: p.stem)
def test_demo_page_renders_and_its_widgets_play(lab, voila, notebook):
    im.check_demo_page(lab[0], voila, notebook)
