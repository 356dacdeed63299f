"""Write ``exercises/labNN_*.py`` (stubs) and ``solutions/labNN_*.py`` (answers) from labkit.

Every graded function is written once, in labkit, with its answer between solution markers
(nbgrader/otter style) and its hint first inside them (labkit/roofline/model.py)::

    def _attainable_flops(intensity, peak_flops, bandwidth):
        \"\"\"Roofline: the best FLOP/s ... (the learner's specification: what, units, shapes)\"\"\"
        # BEGIN SOLUTION
        # HINT: the roof is the lower of two ceilings: the compute peak, and what memory can feed
        # HINT: (intensity times bandwidth).
        return min(peak_flops, intensity * bandwidth)
        # END SOLUTION

- **In a function** the block holds the whole body after the docstring. The stub is the signature,
  the docstring and ``raise NotImplementedError("hint: <HINT lines joined>")`` (what
  ``check_your_work`` recognises as untouched); the answer is the body. A hint names the idea and
  the API, not the code.
- **The learner's contract only.** The marked function is what the exercise asks, nothing more.
  Teaching-only hardening (argument checks with one-line errors, devices, groups, recording, a
  richer API) stays outside the markers, in a separately named function; where that public
  function has the exercise's name, the marked one is ``_name`` and the manifest renames it
  (``"labkit.roofline.model._attainable_flops as attainable_flops"``).
- **At module level** a block (``# BEGIN SOLUTION`` ... ``# END SOLUTION`` at column 0; a note in
  brackets may follow the marker) holds answer-bearing code: helpers only the answer needs (an
  autograd Function), listed in the manifest and written to the solutions file only, and labkit's
  own fuller implementations of the same answer (kept out of both files). Everything defined in a
  block (functions, classes, a table assigned to a name) is denied to submissions.

A lab's *manifest* (`LABS` in labkit/grading/manifests.py) gives the generated module's docstring,
its imports (the same lines in both files; the stub's get ``# noqa: F401``) and the labkit
definitions it is made of, in order, as dotted paths (``path as name`` renames). From the markers
and the manifest come:

- ``exercises/<lab>.py`` and ``solutions/<lab>.py``: ``make exercises`` (``python -m
  labkit.grading.generate [lab ...]``; ``--check`` writes nothing and exits 1 naming stale files).
  tests/test_grading.py regenerates both in memory and compares them byte for byte.
- `references(lab)`, the ``Policy.references`` of the lab's graded tests: every answer-bearing
  definition in the modules the manifest draws from, and in any other labkit module, what lies
  in a block whose note names the lab (``# BEGIN SOLUTION (lab04_triton: ...)``). The grading
  worker replaces each, wherever labkit holds it, by a function that raises.

**Adding an exercise** (a few minutes):

1. In the labkit module that teaches it, write the function with the learner's signature and the
   specification as its docstring; put the whole body between ``# BEGIN SOLUTION`` and ``# END
   SOLUTION``, ``# HINT:`` lines first. The body may use only the lab file's imports (labkit
   names only where the lab's Policy allows them) and other items of the manifest. If labkit's
   public function of that name checks its arguments, make it call the marked ``_name``. Put
   helpers only the answer uses, and labkit's fuller versions of the answer, in column-0 blocks.
2. Add the dotted path to the lab's ``items`` in labkit/grading/manifests.py (helpers before
   their users; ``_name as name`` to rename) and any import the answer needs to ``imports``.
3. ``make exercises``; commit labkit, exercises/ and solutions/ together. Write the graded test
   (``@pytest.mark.graded(points=..., exercise="name")``, ``Policy(references=references(lab))``)
   and a known-wrong case; run tests/test_grading.py.
   A new lab: a ``Lab(...)`` entry in the manifests, then the same steps.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from labkit.grading.manifests import LABS, Lab
from labkit.show import BEGIN_SOLUTION as BEGIN, END_SOLUTION as END, HINT, is_marker

ROOT = Path(__file__).resolve().parents[2]   # the course root (labkit/, exercises/, solutions/)
NOQA = "  # noqa: F401"


class MarkerError(ValueError):
    """A solution marker is misplaced (one line naming the file and line)."""


# ---------------------------------------------------------------- reading labkit's sources

@dataclass(frozen=True)
class _Def:
    name: str
    lines: tuple[str, ...]   # the definition's source lines (decorators first), no newlines
    graded: bool             # has a solution block in its body
    hidden: str              # the BEGIN line of the module-level solution block it lies in ("" if none)


@lru_cache(maxsize=None)
def _module_defs(module: str) -> dict[str, _Def]:
    """Top-level definitions of labkit module ``module`` (dotted), read from its source file."""
    path = _module_path(module)
    text = path.read_text()
    lines = text.splitlines()
    blocks = _module_blocks(lines, path)
    defs = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):   # a table of answers (e.g. backward rules)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hidden = next((lines[a] for a, b in blocks if a < node.lineno - 1 and node.end_lineno - 1 < b), "")
            for t in targets:
                if isinstance(t, ast.Name) and hidden:
                    defs[t.id] = _Def(t.id, tuple(lines[node.lineno - 1:node.end_lineno]), False, hidden)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            end = node.end_lineno   # the AST ends at the last statement: take trailing comments too
            while end < len(lines) and lines[end].strip().startswith("#") and \
                    len(lines[end]) - len(lines[end].lstrip()) > node.col_offset:
                end += 1
            body = tuple(lines[first:end])
            hidden = next((lines[a] for a, b in blocks if a < first and end - 1 < b), "")
            graded = any(_is(ln, BEGIN) for ln in body[1:]) and not hidden
            defs[node.name] = _Def(node.name, body, graded, hidden)
    return defs


def _is(line: str, marker: str) -> bool:
    return is_marker(line) and line.strip().startswith(marker)


def _module_path(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _module_blocks(lines: list[str], path: Path) -> list[tuple[int, int]]:
    """(begin, end) line indexes of the column-0 solution blocks."""
    blocks, start = [], None
    for i, ln in enumerate(lines):
        if is_marker(ln) and ln.startswith(BEGIN):
            if start is not None:
                raise MarkerError(f"{path}:{i + 1}: {BEGIN} inside another block")
            start = i
        elif is_marker(ln) and ln.startswith(END):
            if start is None:
                raise MarkerError(f"{path}:{i + 1}: {END} without {BEGIN}")
            blocks.append((start, i))
            start = None
    if start is not None:
        raise MarkerError(f"{path}:{start + 1}: {BEGIN} is never closed")
    return blocks


def _split(path: str) -> tuple[str, str]:
    module, name = path.rsplit(".", 1)
    return module, name


def _item(item: str) -> tuple[_Def, str]:
    """The definition an item names, and the name it has in the generated files."""
    path, _, alias = item.partition(" as ")
    module, name = _split(path)
    try:
        return _module_defs(module)[name], alias or name
    except KeyError:
        raise MarkerError(f"{path}: no top-level definition {name!r} in {module}") from None


def _renames(lab: Lab) -> dict[str, str]:
    """{labkit name: generated name} for the items the manifest renames (``path as name``)."""
    return {_split(i.partition(" as ")[0])[1]: i.partition(" as ")[2] for i in lab.items if " as " in i}


# ---------------------------------------------------------------- writing the two files

def _render(d: _Def, stub: bool, where: str) -> list[str] | None:
    """The definition as it appears in the exercises (``stub``) or solutions file; None when it is
    left out (a hidden helper in the exercises file)."""
    if d.hidden:
        return None if stub else list(d.lines)
    if not d.graded:
        if any(is_marker(ln) for ln in d.lines):
            raise MarkerError(f"{where}: a marker outside a solution block")
        return list(d.lines)
    out, i, lines = [], 0, d.lines
    while i < len(lines):
        ln = lines[i]
        if not _is(ln, BEGIN):
            if is_marker(ln):
                raise MarkerError(f"{where}: {ln.strip()!r} outside a solution block")
            out.append(ln)
            i += 1
            continue
        indent = ln[:len(ln) - len(ln.lstrip())]
        j, hint = i + 1, []
        while j < len(lines) and lines[j].strip().startswith(HINT):
            hint.append(lines[j].strip()[len(HINT):].strip())
            j += 1
        k = j
        while k < len(lines) and not _is(lines[k], END):
            k += 1
        if k == len(lines):
            raise MarkerError(f"{where}: {BEGIN} is never closed")
        if not hint:
            raise MarkerError(f"{where}: a solution block needs a {HINT} line first")
        if any(ln.strip() for ln in lines[k + 1:]):
            raise MarkerError(f"{where}: the solution block must end the function's body")
        if stub:
            _check_before_block(lines[:i], where)
            out.append(f"{indent}raise NotImplementedError({_quoted('hint: ' + ' '.join(hint))})")
        else:
            out.extend(lines[j:k])
        i = k + 1
    return out


def _quoted(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_before_block(head, where: str) -> None:
    """What precedes a function's solution block must be its whole header and docstring."""
    text = textwrap.dedent("\n".join(head)) + "\n    pass\n"
    try:
        fn = ast.parse(text).body[0]
    except SyntaxError:
        raise MarkerError(f"{where}: {BEGIN} must follow the function's signature and docstring") from None
    if not ast.get_docstring(fn) or len(fn.body) != 2:
        raise MarkerError(f"{where}: a graded function is its signature, its docstring (the specification), "
                          f"then {BEGIN}")


def _docstring(lab: Lab, stub: bool) -> str:
    what = ("Your work: replace each ``raise NotImplementedError`` with code (its hint names the idea and the API)."
            if stub else "Reference answers, written by ``make exercises`` from labkit: edit labkit, not this file.")
    return '"""' + "\n\n".join(p for p in (lab.title + ".", what, lab.doc.strip()) if p) + '\n"""'


def render(name: str, stub: bool) -> str:
    """The text of ``exercises/<name>.py`` (``stub``) or ``solutions/<name>.py``."""
    lab = LABS[name]
    imports = [ln if not stub or not ln or ln.startswith("from __future__") else ln + NOQA for ln in lab.imports]
    text = _docstring(lab, stub) + "\n" + "".join(ln + "\n" for ln in imports)
    renames = _renames(lab)
    for item in lab.items:
        block = _render(_item(item)[0], stub, item)
        if block is not None:
            text += "\n\n" + _rename("\n".join(block), renames) + "\n"
    return text


@lru_cache(maxsize=None)
def render_except(name: str, exercise: str) -> str:
    """The solutions file of lab ``name`` with ``exercise`` a stub, and without the hidden helpers
    that only ``exercise``'s answer uses: what the grading worker puts in place of the learner's
    other exercises while it grades ``exercise`` (so a test never depends on another exercise).
    Nothing in it answers ``exercise``."""
    return render_mixed(name, frozenset(stubs(name)) - {exercise})


def render_mixed(name: str, solved) -> str:
    """Lab ``name``'s file with the exercises in ``solved`` answered and the others stubs, holding
    the hidden helpers the answered ones use (transitively) and no others."""
    lab = LABS[name]
    renames = _renames(lab)
    imports = [ln if not ln or ln.startswith("from __future__") else ln + NOQA for ln in lab.imports]
    blocks = []                      # (generated name, text, is a hidden helper)
    for item in lab.items:
        d, as_name = _item(item)
        block = _render(d, d.graded and as_name not in solved, item)
        blocks.append((as_name, _rename("\n".join(block), renames), bool(d.hidden)))
    needed, text_of = set(), {n: t for n, t, _ in blocks}
    todo = [n for n, _, hidden in blocks if not hidden]
    while todo:                      # the helpers the kept definitions use, transitively
        words = set(re.findall(r"\w+", text_of[todo.pop()]))
        for n, _, hidden in blocks:
            if hidden and n in words and n not in needed:
                needed.add(n)
                todo.append(n)
    text = _docstring(lab, True) + "\n" + "".join(ln + "\n" for ln in imports)
    for n, t, hidden in blocks:
        if not hidden or n in needed:
            text += "\n\n" + t + "\n"
    return text


def _rename(text: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        text = re.sub(rf"(?<![\w.]){re.escape(old)}\b", new, text)
    return text


def references(name: str) -> tuple[str, ...]:
    """Dotted paths of every answer-bearing labkit definition of lab ``name``: in the modules its
    manifest draws from, the graded functions and everything in module-level solution blocks; in
    other labkit modules, what lies in a block whose BEGIN line names the lab (e.g.
    ``# BEGIN SOLUTION (lab04_triton: the production kernel)``)."""
    own = dict.fromkeys(_split(i.partition(" as ")[0])[0] for i in LABS[name].items)
    out = [f"{m}.{d.name}" for m in own for d in _module_defs(m).values() if d.graded or d.hidden]
    for m in _modules_naming(name):
        if m not in own:
            out += [f"{m}.{d.name}" for d in _module_defs(m).values() if re.search(rf"\b{name}\b", d.hidden)]
    return tuple(out)


@lru_cache(maxsize=None)
def _modules_naming(name: str) -> tuple[str, ...]:
    """labkit modules with a module-level solution block whose BEGIN line names lab ``name``."""
    found = []
    for path in sorted((ROOT / "labkit").rglob("*.py")):
        if any(ln.startswith(BEGIN) and re.search(rf"\b{name}\b", ln) for ln in path.read_text().splitlines()):
            rel = path.relative_to(ROOT).with_suffix("")
            found.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    return tuple(found)


def stubs(name: str) -> dict[str, str]:
    """{exercise name: dotted path of its marked labkit function} for lab ``name``."""
    out = {}
    for item in LABS[name].items:
        d, as_name = _item(item)
        if d.graded:
            out[as_name] = item.partition(" as ")[0]
    return out


def targets(name: str) -> dict[Path, str]:
    """{file: its current text} for lab ``name``."""
    return {ROOT / "exercises" / f"{name}.py": render(name, True),
            ROOT / "solutions" / f"{name}.py": render(name, False)}


def stale(names=None) -> list[Path]:
    """Generated files whose committed text differs from what the manifests give now."""
    return [p for n in (names or LABS) for p, text in targets(n).items()
            if not p.exists() or p.read_text() != text]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading.generate", description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="lab modules (e.g. lab07_tensor_parallel); default: all")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming stale files")
    args = parser.parse_args(argv)
    names = args.labs or list(LABS)
    unknown = [n for n in names if n not in LABS]
    if unknown:
        print(f"generate: no manifest for {', '.join(unknown)} (known: {', '.join(LABS)})", file=sys.stderr)
        return 2
    if args.check:
        old = stale(names)
        for p in old:
            print(f"stale: {p.relative_to(ROOT)} (run make exercises)")
        return 1 if old else 0
    for n in names:
        for p, text in targets(n).items():
            if not p.exists() or p.read_text() != text:
                p.write_text(text)
                print(f"wrote {p.relative_to(ROOT)}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
