"""labkit.grading.generate on a small made-up course: how markers become a stub, an answer, a
hint and a deny-list, and the one-line errors for misplaced markers. (tests/test_grading.py
checks the real exercises/ and solutions/ are current.)"""
import ast
import textwrap

import pytest

from labkit.grading import generate
from labkit.grading.manifests import Lab

TOPIC = '''\
"""A made-up topic module."""
import math


def public_api(x):
    """Checked wrapper: not part of the exercise."""
    if x < 0:
        raise ValueError("x must be >= 0")
    return _root(x)


def _root(x):
    """The square root of x (a float >= 0)."""
    # BEGIN SOLUTION
    # HINT: the math module has it;
    # HINT: so does ** 0.5.
    return math.sqrt(x)
    # END SOLUTION


# BEGIN SOLUTION (only the answer needs this helper)
def _helper(x):
    return 2 * x
# END SOLUTION


def twice_root(x):
    """Twice the square root of x."""
    # BEGIN SOLUTION
    # HINT: reuse your _root.
    return _helper(_root(x))
    # END SOLUTION


def given(x):
    """A function the learner is given whole."""
    return x + 1
'''

ELSEWHERE = '''\
# BEGIN SOLUTION (labkit's production version answers lab99_demo too)
def production(x):
    return x ** 0.5
# END SOLUTION


# BEGIN SOLUTION (another lab's answer: lab98_other)
def unrelated(x):
    return x
# END SOLUTION
'''


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A course root with labkit/topic.py, labkit/other.py and a manifest for lab99_demo."""
    (tmp_path / "labkit").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions").mkdir()

    def write(name, text):
        (tmp_path / "labkit" / name).write_text(text)
        generate._module_defs.cache_clear()
        generate._modules_naming.cache_clear()

    write("topic.py", TOPIC)
    write("other.py", ELSEWHERE)
    monkeypatch.setattr(generate, "ROOT", tmp_path)
    monkeypatch.setitem(generate.LABS, "lab99_demo", Lab(
        title="Lab 99 exercises: a demo", doc="Some rules.\n", imports=("import math",),
        items=("labkit.topic._helper", "labkit.topic._root as root", "labkit.topic.twice_root",
               "labkit.topic.given")))
    yield write
    generate._module_defs.cache_clear()
    generate._modules_naming.cache_clear()


def _defs(text):
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def test_the_stub_keeps_signature_and_docstring_and_raises_the_hint(course):
    text = generate.render("lab99_demo", stub=True)
    defs = _defs(text)
    assert list(defs) == ["root", "twice_root", "given"]          # the helper is the answer's only
    assert ast.get_docstring(defs["root"]) == "The square root of x (a float >= 0)."
    body = defs["root"].body[1:]
    assert len(body) == 1 and ast.unparse(body[0]) == \
        "raise NotImplementedError('hint: the math module has it; so does ** 0.5.')"
    assert "reuse your root" in text                               # renamed in the hint too
    assert "math.sqrt" not in text and "# BEGIN" not in text and "# HINT" not in text
    assert "import math  # noqa: F401" in text
    assert ast.unparse(defs["given"].body[1]) == "return x + 1"


def test_the_solution_is_the_marked_code_renamed(course):
    text = generate.render("lab99_demo", stub=False)
    assert list(_defs(text)) == ["_helper", "root", "twice_root", "given"]
    assert "return _helper(root(x))" in text and "public_api" not in text
    assert "# BEGIN" not in text and "# HINT" not in text
    namespace = {}
    exec(compile(text, "solutions/lab99_demo.py", "exec"), namespace)
    assert namespace["twice_root"](9) == 6.0
    assert text.startswith('"""Lab 99 exercises: a demo.\n\nReference answers')


def test_references_are_every_answer_bearing_definition_of_the_lab(course):
    assert set(generate.references("lab99_demo")) == {
        "labkit.topic._root", "labkit.topic._helper", "labkit.topic.twice_root",
        "labkit.other.production"}                                # named in another module's block
    assert generate.stubs("lab99_demo") == {"root": "labkit.topic._root", "twice_root": "labkit.topic.twice_root"}


def test_stale_files_are_named_and_main_writes_them(course, tmp_path, capsys):
    assert generate.main(["--check", "lab99_demo"]) == 1
    assert "stale: exercises/lab99_demo.py" in capsys.readouterr().out
    assert generate.main(["lab99_demo"]) == 0
    assert generate.main(["--check", "lab99_demo"]) == 0
    assert (tmp_path / "solutions" / "lab99_demo.py").read_text() == generate.render("lab99_demo", stub=False)
    assert generate.main(["lab00_nothing"]) == 2


@pytest.mark.parametrize("broken, message", [
    ('def _root(x):\n    # BEGIN SOLUTION\n    # HINT: h\n    return x\n    # END SOLUTION\n',
     "its docstring"),
    ('def _root(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n',
     "HINT: line first"),
    ('def _root(x):\n    """Doc."""\n    # BEGIN SOLUTION\n    # HINT: h\n    return x\n',
     "never closed"),
    ('def _root(x):\n    """Doc."""\n    y = x\n    # BEGIN SOLUTION\n    # HINT: h\n    return y\n    # END SOLUTION\n',
     "its docstring"),
    ('def _root(x):\n    """Doc."""\n    # HINT: h\n    return x\n', "outside a solution block"),
    ('# BEGIN SOLUTION\ndef _root(x):\n    return x\n', "inside another block"),
])
def test_misplaced_markers_are_one_line_errors(course, broken, message):
    course("topic.py", TOPIC.replace(TOPIC[TOPIC.index("def _root"):TOPIC.index("# BEGIN SOLUTION (only")],
                                     broken + "\n\n"))
    with pytest.raises(generate.MarkerError, match=message) as e:
        generate.render("lab99_demo", stub=True)
    assert "\n" not in str(e.value)


def test_show_hides_the_markers(tmp_path):
    from labkit.show import is_marker

    src = textwrap.dedent(TOPIC)
    kept = [ln for ln in src.splitlines() if not is_marker(ln)]
    assert not any("SOLUTION" in ln or "HINT" in ln for ln in kept)
    assert "    return math.sqrt(x)" in kept
