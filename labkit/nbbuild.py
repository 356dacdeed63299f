"""Build course notebooks from their sources and execute them.

``python -m labkit.nbbuild notebooks/_src/05_collectives.py [...]`` turns each
percent-format source (cells start with ``# %%``; markdown cells with
``# %% [markdown]`` and ``# ``-prefixed lines) into ``notebooks/<name>.ipynb``,
executes it top to bottom in ``notebooks/`` and saves it with outputs, which
nbval then compares on every test run. Sources are the reviewed text; the
.ipynb files are generated and must not be edited by hand.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def parse_percent(text: str) -> list[tuple[str, str]]:
    """Split percent-format text into [(cell_type, source)]; text before the first ``# %%`` is dropped."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            kind = "markdown" if "[markdown]" in line else "code"
            cells.append((kind, []))
        elif cells:
            kind, body = cells[-1]
            if kind == "markdown":
                line = line[2:] if line.startswith("# ") else line.lstrip("#")
            body.append(line)
    return [(k, "\n".join(b).strip("\n")) for k, b in cells if "\n".join(b).strip()]


def build(src: Path, execute: bool = True, timeout: int = 600) -> Path:
    """Write notebooks/<src stem>.ipynb from ``src``; execute it when asked. Returns the path."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, body) in enumerate(parse_percent(src.read_text())):
        cell = nbformat.v4.new_markdown_cell(body) if kind == "markdown" else nbformat.v4.new_code_cell(body)
        cell.id = f"cell-{i:03d}"  # stable ids keep regenerated notebooks' diffs small
        nb.cells.append(cell)
    if execute:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
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
