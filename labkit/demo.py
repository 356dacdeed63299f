"""Instructor mode, part 2: a lab's demo path as a Voilà page (outputs and widgets, no code).

``python -m labkit.demo --lab 05 [--port 8866]`` (``make demo LAB=05``) writes
``build/demo/05_collectives.ipynb``, `demo_notebook` of the built lab, and serves it with Voilà on
127.0.0.1 only. A taken port is refused with one line before anything starts (Voilà would
otherwise quietly move to another port).

The demo notebook holds the cells of the lab's slide plan (`labkit.slides`: everything not
``skip``) and, before them, the earlier code cells those need: every code cell that binds a name
a kept cell reads, found backwards from the last kept cell (`needed_cells`; of a cell that binds
them only by imports, just those imports). So the page runs the
set-up, the pictures' data and the widgets, not the whole lab: Voilà runs a notebook top to bottom
each time the page is opened.
"""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

import nbformat

from labkit import checks, slides
from labkit.nbbuild import TEST_ENV

DEMO = slides.ROOT / "build" / "demo"


def _python(source: str) -> str:
    """A cell's source as plain Python (IPython's magics and shell escapes turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def names(source: str) -> tuple[set[str], set[str]]:
    """(names a code cell binds or changes in place, names it reads from earlier cells). Names local
    to a comprehension, a lambda or a function (their targets and parameters) are neither."""
    tree = ast.parse(_python(source))
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            local |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.arguments):
            local |= {a.arg for a in node.posonlyargs + node.args + node.kwonlyargs + [node.vararg, node.kwarg] if a}
    binds, reads = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (binds if isinstance(node.ctx, (ast.Store, ast.Del)) else reads).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                binds.add(base.id)    # x.a = ... / x[k] = ... changes x
    return binds - local, reads - local


def needed_imports(source: str, wanted: set[str]) -> str | None:
    """The import statements of a set-up cell that bind names in ``wanted`` (as source), when the
    cell binds every wanted name it binds by importing it; else None: the whole cell is needed."""
    body = ast.parse(_python(source)).body
    imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom)) and names(ast.unparse(s))[0] & wanted]
    rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    if not imports or any(names(ast.unparse(s))[0] & wanted for s in rest):
        return None
    return "\n".join(ast.unparse(s) for s in imports)


def needed_cells(nb, keep: list[int]) -> list[tuple[int, str]]:
    """(index, source) of ``keep``'s cells plus every earlier code cell binding a name that a kept
    (or so added) code cell reads, in notebook order. An added cell that binds those names only by
    importing them contributes only those imports (Lab 12's tiers widget needs a module, not the
    run of real failures that shares its cell)."""
    chosen = {i: nb.cells[i].source for i in keep}
    wanted: set[str] = set()
    for i in range(max(keep, default=-1), -1, -1):
        cell = nb.cells[i]
        if cell.cell_type != "code":
            continue
        binds, reads = names(cell.source)
        if i not in chosen and binds & wanted:
            chosen[i] = needed_imports(cell.source, wanted) or cell.source
        if i in chosen:
            wanted |= names(chosen[i])[1]
    return sorted(chosen.items())


def demo_notebook(nb, only_widgets: bool = False):
    """The lab's demo path as a notebook to run: see this module's docstring. Outputs are cleared
    (Voilà runs it); slide types are kept. ``only_widgets`` keeps of the plan's code cells only
    those showing a widget (with the cells they read, and the plan's text): the quick page the
    browser tier plays every lab's widgets on, without the measurements the rest of the path runs."""
    keep = [i for i, c in enumerate(nb.cells) if c.metadata.get("slideshow", {}).get("slide_type", "skip") != "skip"
            and not (only_widgets and c.cell_type == "code" and slides.picture_kind(c) != "widget")]
    out = nbformat.v4.new_notebook(metadata={k: v for k, v in nb.metadata.items() if k != "widgets"})
    for i, source in needed_cells(nb, keep):
        cell = nbformat.from_dict(nb.cells[i])
        cell.source = source
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        out.cells.append(cell)
    return out


def write_demo(notebook: Path, folder: Path = DEMO, only_widgets: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / notebook.name
    nbformat.write(demo_notebook(nbformat.read(notebook, as_version=4), only_widgets), out)
    return out


def voila_command(target: Path, port: int) -> list[str]:
    """Voilà serving ``target`` (a notebook or a folder of them) on 127.0.0.1:``port``, no code shown.
    JupyterLab's jupytext extension is not loaded into the page: it needs JupyterLab's document
    manager, which a Voilà page does not have."""
    return [str(Path(sys.executable).with_name("voila")), str(target), f"--port={port}", "--Voila.ip=127.0.0.1",
            "--Voila.port_retries=0", "--no-browser", "--strip_sources=True", "--show_tracebacks=True",
            "--VoilaConfiguration.extension_denylist=jupyterlab-jupytext"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--lab", default=None, help="the lab, e.g. 05")
    parser.add_argument("--port", type=int, default=8866)
    args = parser.parse_args(argv)
    try:
        if not args.lab:
            raise slides.UsageError("make demo needs a lab: make demo LAB=05")
        (notebook,) = slides.find_lab(args.lab)
        port = checks.check_port_free("make demo", "PORT", args.port)
    except (slides.UsageError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    page = write_demo(notebook)
    print(f"serving {page.relative_to(slides.ROOT)} at http://127.0.0.1:{port}/ (Ctrl-C stops it)", flush=True)
    try:   # the kernel runs as the saved outputs were made (labkit.nbbuild.TEST_ENV: one torch thread)
        return subprocess.call(voila_command(page, port), env=dict(os.environ, **TEST_ENV))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
