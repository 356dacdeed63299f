"""The grader is proven here: stubs score 0, solutions full marks, known-wrong answers lose
points, a hanging or crashing test costs only its own points, and stubs match solutions."""
import ast
import inspect
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from labkit import grade, grading
from labkit.grading.run import run_graded_tests, score_table

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted(p.stem for p in (ROOT / "solutions").glob("lab*.py"))
KNOWN_WRONG = sorted(p for p in (ROOT / "tests" / "known_wrong").iterdir() if p.is_dir())
# The grading runs below start together in one fixture, and the first test to wait on it bears them all
# (about 3 min idle, 5+ under load): a longer limit than the suite's 300 s, still finite.
pytestmark = pytest.mark.timeout(1200)


def _public_functions(module):
    return {n: f for n, f in vars(module).items()
            if not n.startswith("_") and inspect.isfunction(f) and f.__module__ == module.__name__}


def test_there_is_something_to_grade():
    assert SOLUTIONS, "no solutions/lab*.py found"
    assert all((ROOT / "tests" / "graded" / f"test_{s}.py").exists() for s in SOLUTIONS)


@pytest.mark.parametrize("name", SOLUTIONS)
def test_stubs_and_solutions_are_in_step(name):
    sol = grading.load(name, "solutions")
    ex = grading.load(name, "exercises")
    s_funcs, e_funcs = _public_functions(sol), _public_functions(ex)
    assert sorted(s_funcs) == sorted(e_funcs), "exercises and solutions define different functions"
    for fname, f in s_funcs.items():
        assert inspect.signature(f) == inspect.signature(e_funcs[fname]), fname
        assert inspect.getdoc(f) and inspect.getdoc(f) == inspect.getdoc(e_funcs[fname]), f"{fname}: docstrings differ"


def _graded_exercises(name):
    """Exercise names used by the graded tests of module ``name`` (read from their markers)."""
    tree = ast.parse((ROOT / "tests" / "graded" / f"test_{name}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "graded":
            names |= {kw.value.value for kw in node.keywords if kw.arg == "exercise"}
    return names


@pytest.mark.parametrize("name", SOLUTIONS)
def test_every_graded_exercise_is_a_stub_that_raises_with_a_hint(name):
    src = (ROOT / "exercises" / f"{name}.py").read_text()
    funcs = {n.name: n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)}
    for ex in _graded_exercises(name):
        assert ex in funcs, f"graded exercise {ex!r} is not a function in exercises/{name}.py"
        raises = [n for n in ast.walk(funcs[ex]) if isinstance(n, ast.Raise)
                  and "NotImplementedError" in ast.unparse(n) and "hint" in ast.unparse(n).lower()]
        assert raises, f"exercises/{name}.py:{ex} should raise NotImplementedError with a hint"


@pytest.fixture(scope="module")
def gradings(tmp_path_factory):
    """Every whole grading run this file checks — the solutions, the stubs, each known-wrong case —
    started at once, two at a time (each is a judge process plus sandboxed workers, about half of
    it start-up and waiting): {name: future of its score table}."""
    pool = ThreadPoolExecutor(max_workers=2)

    def run(impl, lab=None, exercises=None):
        return score_table(run_graded_tests(impl, lab=lab, exercises=exercises))

    jobs = {"solutions": pool.submit(run, "solutions"), "exercises": pool.submit(run, "exercises")}
    for case in KNOWN_WRONG:
        sub = known_wrong_submission(case, tmp_path_factory.mktemp(case.name) / "submission")
        jobs[case.name] = pool.submit(run, str(sub), next(case.glob("lab*.py")).stem[3:5], _expected(case))
    yield jobs
    pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def solution_rows(gradings):
    return gradings["solutions"].result()


def test_solutions_score_full_marks(solution_rows):
    assert solution_rows
    failed = [(r["exercise"], r["failures"]) for r in solution_rows if r["score"] != r["max_score"]]
    assert not failed


def test_stubs_score_zero(gradings):
    rows = gradings["exercises"].result()
    assert rows and all(r["score"] == 0 for r in rows), [(r["exercise"], r["score"]) for r in rows]
    # so check_your_work may print an untouched stub's verdict without a grading run:
    from labkit.grading.check import is_untouched_stub, max_points

    for r in rows:
        module = next(s for s in SOLUTIONS if s[3:5] == r["lab"])
        assert is_untouched_stub(getattr(grading.load(module, "exercises"), r["exercise"])), r["exercise"]
        assert max_points(module, r["exercise"]) == r["max_score"], r["exercise"]


def known_wrong_submission(case: Path, dest: Path) -> Path:
    """A submission folder for a known-wrong case: the reference answers' text, then the case's
    own definitions (its ``from solutions... import`` lines dropped), which replace the right ones.
    Graded as a learner's file would be: nothing of it imports solutions."""
    module = next(case.glob("lab*.py"))
    own = "\n".join(ln for ln in module.read_text().splitlines() if not ln.startswith("from solutions."))
    dest.mkdir()
    (dest / module.name).write_text((ROOT / "solutions" / module.name).read_text() + "\n\n" + own + "\n")
    return dest


def _expected(case: Path) -> list[str]:
    return [ln.strip() for ln in (case / "EXPECT").read_text().splitlines() if ln.strip()]


@pytest.mark.parametrize("case", KNOWN_WRONG, ids=lambda p: p.name)
def test_known_wrong_solutions_are_rejected(case, gradings):
    expected = _expected(case)
    assert expected, f"{case}/EXPECT names no exercise"
    lab = next(case.glob("lab*.py")).stem[3:5]
    rows = {r["exercise"]: r for r in gradings[case.name].result()}
    for ex in expected:
        assert ex in rows, f"{ex} is not an exercise of lab {lab}"
        assert rows[ex]["score"] < rows[ex]["max_score"], f"{case.name}: {ex} was not rejected"
        reasons = " ".join(rows[ex].get("reasons", {}))
        assert "forbidden" not in reasons and "not allowed" not in reasons, \
            f"{case.name}: {ex} lost its points to the static check, not to its mistake: {reasons}"


def test_cli_table_and_gradescope_json(tmp_path, capsys):
    out = tmp_path / "results.json"
    lab = SOLUTIONS[0][3:5]
    assert grade.main(["--impl", "solutions", "--lab", lab, "--gradescope", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    best = sum(t["max_score"] for t in data["tests"])
    assert data["score"] == best > 0
    assert "total" in printed and f"{best:>3} / {best}" in printed
    assert all({"name", "score", "max_score", "output"} <= set(t) for t in data["tests"])


SYNTHETIC = '''
import os, time, pytest

@pytest.mark.graded(points=2, exercise="fine")
def test_fine():
    assert True

@pytest.mark.graded(points=3, exercise="wrong")
def test_wrong():
    assert 1 + 1 == 3

@pytest.mark.timeout(2)
@pytest.mark.graded(points=5, exercise="hangs")
def test_hangs():
    time.sleep(600)

@pytest.mark.graded(points=7, exercise="crashes")
def test_crashes():
    os._exit(3)

@pytest.mark.graded(points=11, exercise="after_the_crash")
def test_after_the_crash():
    assert True

@pytest.mark.skip(reason="graded tests must run")
@pytest.mark.graded(points=13, exercise="skipped")
def test_skipped():
    pass
'''


def test_hang_and_crash_cost_only_their_own_points(tmp_path):
    f = tmp_path / "test_lab99_synthetic.py"
    f.write_text(textwrap.dedent(SYNTHETIC))
    rows = {r["exercise"]: r for r in score_table(run_graded_tests("solutions", test_files=[f]))}
    assert {k: (v["score"], v["max_score"]) for k, v in rows.items()} == {
        "fine": (2, 2), "wrong": (0, 3), "hangs": (0, 5), "crashes": (0, 7),
        "after_the_crash": (11, 11), "skipped": (0, 13)}
    assert "Timeout" in rows["hangs"]["failures"][0]
    assert "crashed the test process" in rows["crashes"]["failures"][0]
