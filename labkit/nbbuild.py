"""Build course notebooks from their sources and execute them.

``python -m labkit.nbbuild notebooks/_src/05_collectives.py [...]`` reads each
source with jupytext (percent format: cells start with ``# %%``, markdown
cells with ``# %% [markdown]``; cell tags ride on the marker, e.g.
``# %% tags=["nbval-ignore-output"]`` for a timing cell nbval must not
compare), writes ``notebooks/<name>.ipynb``, executes it top to bottom in
``notebooks/`` and saves it with outputs, which nbval then compares on every
test run. Sources are the reviewed text; the .ipynb files are generated and
must not be edited by hand.

Kernels run with one torch thread (``TEST_ENV``), here and under ``make test``
(which sets the same variable): a sum's rounding depends on how many threads
share it, so stored outputs match on any machine, and two test workers on two
cores do not oversubscribe them (two spinning OpenMP threads each ran small
models 4x slower). A root conftest.py cannot carry it: the grader refuses one.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

from labkit import slides

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
HEADER = "# Source of notebooks/"   # a source's first line: says how it is built; not a cell
TEST_ENV = {"OMP_NUM_THREADS": "1"}   # for every kernel that makes or checks stored outputs


def read_source(src: Path) -> nbformat.NotebookNode:
    """The notebook a percent-format source describes, with stable cell ids and the course kernel."""
    nb = jupytext.reads(src.read_text(), fmt="py:percent")
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith(HEADER))]
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                   "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"  # stable ids keep regenerated notebooks' diffs small
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def build(src: Path, execute: bool = True, timeout: int = 600) -> Path:
    """Write notebooks/<src stem>.ipynb from ``src``; execute it when asked. Returns the path."""
    nb = read_source(src)
    if execute:
        os.environ.update(TEST_ENV)   # the kernel inherits it
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
    slides.stamp(nb)   # the slide plan reads the saved outputs (labkit.slides)
    out = NOTEBOOKS / f"{src.stem}.ipynb"
    nbformat.write(nb, out)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for name in argv:
        t0 = time.perf_counter()
        out = build(Path(name))
        print(f"built {out.relative_to(NOTEBOOKS.parent)} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
