"""No notebook shows a graded answer before the learner has written it.

A reference answer is any labkit definition that `labkit.grading.generate.references` denies to
submissions: the marked (graded) function itself, and everything in a solution block. Each is tied
to the exercise(s) it answers: a graded function to its own exercise; a block's definitions to the
exercises it is named after or its BEGIN note names, else to the lab's exercises that live in the same module, else to
all of the lab's exercises. An exercise is "written" at its ``check_your_work`` cell. This test
reads every notebook source, resolves each ``show(...)`` argument through the notebook's own
imports, and fails when one shows a reference before (an earlier notebook, or an earlier cell of
the same notebook than) the check-your-work cell of an exercise it answers.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from labkit.grading import generate
from labkit.grading.manifests import LABS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "_src").glob("[0-9][0-9]*_*.py"))


def _cells(path: Path) -> list[str]:
    return re.split(r"^# %%.*$", path.read_text(), flags=re.M)


def _answers() -> dict[str, set[tuple[str, str]]]:
    """{dotted path of a reference answer: {(lab, exercise) it answers}}."""
    out: dict[str, set] = {}
    for lab in LABS:
        graded = generate.stubs(lab)                          # {exercise: dotted path}
        by_module: dict[str, set] = {}
        for ex, path in graded.items():
            by_module.setdefault(path.rsplit(".", 1)[0], set()).add(ex)
            out.setdefault(path, set()).add((lab, ex))
        for path in generate.references(lab):
            module, name = path.rsplit(".", 1)
            d = generate._module_defs(module)[name]
            if d.graded:
                continue
            named = {ex for ex, p in graded.items()
                     if ex == name or re.search(rf"\b({ex}|{p.rsplit('.', 1)[1]})\b", d.hidden)}
            exercises = named or by_module.get(module) or set(graded)
            out.setdefault(path, set()).update((lab, ex) for ex in exercises)
    return out


def _written() -> dict[tuple[str, str], tuple[int, int]]:
    """{(lab, exercise): (notebook index, cell index) of its check_your_work call}."""
    out = {}
    for n, src in enumerate(SOURCES):
        for c, cell in enumerate(_cells(src)):
            for m in re.finditer(r'check_your_work\(\s*"(lab\d\d_\w+)",\s*"(\w+)"', cell):
                out.setdefault((m.group(1), m.group(2)), (n, c))
    return out


def _namespace(path: Path) -> dict:
    """The notebook's imported names (every import statement in it, run one by one)."""
    ns: dict = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), ns)
            except Exception:  # noqa: BLE001 - an import the notebook guards (a GPU-only module)
                pass
    return ns


def _dotted(obj) -> str | None:
    for attr in ("fn", "__wrapped__", "__func__"):
        obj = getattr(obj, attr, obj)
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qual.split('.')[0]}" if module and qual else None


def _shown(path: Path) -> list[tuple[int, str, str]]:
    """(cell index, the show() argument as written, the dotted path of what it shows)."""
    ns, out = _namespace(path), []
    for c, cell in enumerate(_cells(path)):
        try:
            tree = ast.parse(cell)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "show" and node.args:
                arg = node.args[0]
                if not isinstance(arg, (ast.Name, ast.Attribute)):
                    continue
                try:
                    obj = eval(compile(ast.Expression(arg), str(path), "eval"), ns)
                except Exception:  # noqa: BLE001 - a name the notebook defines itself
                    continue
                dotted = _dotted(obj)
                if dotted:
                    out.append((c, ast.unparse(arg), dotted))
    return out


def test_the_scan_finds_the_notebooks_exercises_and_shows():
    written = _written()
    assert len(SOURCES) >= 14 and len(written) >= 40, (len(SOURCES), len(written))
    assert sum(len(_shown(p)) for p in SOURCES) >= 30
    # and it would see a reference shown too early: Lab 03's CUDA matmul answer shown in notebook 01
    answers = _answers()
    assert ("lab03_matmul", "tiled_matmul") in answers["labkit.gpu_model.cuda_kernels.matmul_tiled"]
    assert written[("lab03_matmul", "tiled_matmul")] > (1, 10 ** 6) and SOURCES[1].name.startswith("01_")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_reference_answer_is_shown_before_its_exercise(source):
    answers, written = _answers(), _written()
    n = SOURCES.index(source)
    early = []
    for cell, text, dotted in _shown(source):
        for lab, ex in sorted(answers.get(dotted, ())):
            end = max(i for i, p in enumerate(SOURCES) if p.name[:2] == lab[3:5])
            at = written.get((lab, ex), (end, 10 ** 6))   # no check cell: the end of its lab's notebooks
            if (n, cell) < at:
                early.append(f"cell {cell}: show({text}) shows {dotted}, the answer to {lab}.{ex}, "
                             f"before its check_your_work (notebook {at[0]:02d}, cell {at[1]})")
    assert not early, "\n".join(early)
