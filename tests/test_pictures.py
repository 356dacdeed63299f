"""labkit.pictures finds, from the lab's name alone, the picture each notebook hands
`check_your_work` today (``picture=lab.picture("...")``): same module, same drawing code."""
import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

from labkit import pictures

SOURCES = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "_src").glob("[0-9][0-9]_*.py"))
CALL = re.compile(r'check_your_work\(\s*"(lab\d\d_\w+)",\s*"(\w+)",\s*picture=(\w+)\.picture\("(\w+)"\)\)')


def _calls():
    out = []
    for src in SOURCES:
        text = src.read_text()
        aliases = {a.asname or a.name: f"{node.module}.{a.name}" for node in ast.walk(ast.parse(text))
                   if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labkit") for a in node.names}
        for lab, exercise, alias, drawn in CALL.findall(text):
            assert drawn == exercise, (src.name, exercise)
            out.append((lab, exercise, aliases[alias]))
    return out


CALLS = _calls()


def test_every_exercise_of_the_notebooks_is_seen():
    assert len(CALLS) >= 60 and {lab for lab, _, _ in CALLS} == set(pictures.LAB_MODULES) - {"lab00_welcome"}


@pytest.mark.parametrize("lab,exercise,module", CALLS, ids=[f"{lab}-{ex}" for lab, ex, _ in CALLS])
def test_the_lab_name_finds_the_notebooks_picture(lab, exercise, module):
    assert pictures.picture_module(lab, exercise) == module
    found = pictures.picture(lab, exercise)
    given = import_module(module).picture(exercise)
    code = lambda f: getattr(f, "__code__", None)  # noqa: E731  (closures made twice share their code)
    assert found is given or code(found) is code(given)


def test_an_unknown_lab_is_named():
    with pytest.raises(ValueError, match="no lab named 'lab99_x'"):
        pictures.picture("lab99_x", "y")
