"""The grader is proven here: stubs score 0, solutions full marks, known-wrong answers lose
points, a hanging or crashing test costs only its own points, and exercises/ and solutions/ are
generated from labkit's marked answers."""
import ast
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from labkit import grade, grading
from labkit.grading.run import run_graded_tests, score_table
from labkit.grading import generate

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted(p.stem for p in (ROOT / "solutions").glob("lab*.py"))
KNOWN_WRONG = sorted(p for p in (ROOT / "tests" / "known_wrong").iterdir() if p.is_dir())
# The grading runs below start together in one fixture, and the first test to wait on it bears them all
# (about 3 min idle, 5+ under load): a longer limit than the suite's 300 s, still finite.
pytestmark = pytest.mark.timeout(1200)


def test_there_is_something_to_grade():
    assert SOLUTIONS, "no solutions/lab*.py found"
    assert all((ROOT / "tests" / "graded" / f"test_{s}.py").exists() for s in SOLUTIONS)


def test_every_lab_has_a_manifest_and_every_manifest_a_lab():
    assert sorted(generate.LABS) == SOLUTIONS


@pytest.mark.parametrize("name", SOLUTIONS)
def test_exercises_and_solutions_are_generated_from_labkit(name):
    """exercises/ and solutions/ are written by labkit.grading.generate from the marked answers in
    labkit: regenerated here, they match the committed files byte for byte."""
    assert name in generate.LABS, f"{name} has no manifest in labkit/grading/manifests.py"
    for path, text in generate.targets(name).items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run make exercises"


@pytest.mark.parametrize("name", SOLUTIONS)
def test_policy_references_are_the_marked_answers(name):
    """Each graded test file denies what the markers mark, and every graded exercise is a marked
    labkit function (so its reference is denied)."""
    tree = ast.parse((ROOT / "tests" / "graded" / f"test_{name}.py").read_text())
    refs = [kw.value for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Policy"
            for kw in node.keywords if kw.arg == "references"]
    assert refs and all(ast.unparse(r) == f"references({name!r})" for r in refs), \
        "Policy(references=...) must be references(<this lab>) from labkit.grading.generate, not a hand-written list"
    stubs = generate.stubs(name)
    assert _graded_exercises(name) <= set(stubs), f"not marked in labkit: {_graded_exercises(name) - set(stubs)}"
    assert set(stubs.values()) <= set(generate.references(name))


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
    for group in known_wrong_groups():
        sub = known_wrong_submission(group, tmp_path_factory.mktemp(group[0].name) / "submission")
        job = pool.submit(run, str(sub), next(group[0].glob("lab*.py")).stem[3:5],
                          sorted({ex for case in group for ex in _expected(case)}))
        jobs.update({case.name: job for case in group})
    for module, exercise in ALONE:
        sub = tmp_path_factory.mktemp(f"alone-{exercise}") / "submission"
        sub.mkdir()
        (sub / f"{module}.py").write_text(generate.render_mixed(module, frozenset({exercise})))
        jobs[("alone", exercise)] = pool.submit(run, str(sub), module[3:5], [exercise])
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


# Exercises whose answer calls another exercise (Megatron's f inside the column-parallel layer, the
# ring's two halves inside its all-reduce) or whose test once did (reduce_from_tp's called copy_to_tp):
# each is graded as the only answer in a file of stubs.
ALONE = (("lab07_tensor_parallel", "reduce_from_tp"), ("lab07_tensor_parallel", "column_parallel_linear"),
         ("lab05_collectives", "ring_all_reduce"))


@pytest.mark.parametrize("module,exercise", ALONE, ids=[e for _, e in ALONE])
def test_one_answer_among_stubs_scores_full_marks(module, exercise, gradings):
    rows = {r["exercise"]: r for r in gradings[("alone", exercise)].result()}
    assert (rows[exercise]["score"], rows[exercise]["failures"]) == (rows[exercise]["max_score"], [])


@pytest.mark.parametrize("module", SOLUTIONS)
def test_the_worker_puts_references_in_place_of_the_other_exercises(module):
    """What the worker grading exercise X loads in place of the learner's other exercises: all of
    them answered, X a stub, and no hidden helper that only X's answer uses."""
    from labkit.grading.remote import other_exercises

    names = list(generate.stubs(module))
    for x in names:
        others = other_exercises(module, x)
        if len(names) == 1:
            assert others is None
            continue
        assert sorted(others["names"]) == sorted(n for n in names if n != x) and others["exercise"] == x
        tree = ast.parse(others["source"])
        defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert "NotImplementedError" in ast.unparse(defs[x]), f"{module}: {x} is answered in its own others file"
        for n in others["names"]:
            assert "NotImplementedError" not in ast.unparse(defs[n]), f"{module}: {n} is a stub in {x}'s others file"


def _defined(case: Path) -> set[str]:
    tree = ast.parse(next(case.glob("lab*.py")).read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | \
        {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def known_wrong_groups() -> list[list[Path]]:
    """The known-wrong cases, packed into as few grading runs as possible: cases of one lab share a
    run when each redefines only the exercises it breaks (no helper another exercise may call), and
    those differ. Each exercise is graded in its own worker with the file's other exercises replaced
    by the references, so one case's mistake cannot cost another case's exercise its points."""
    shared: dict[str, list[list[Path]]] = {}
    alone: list[list[Path]] = []
    for case in KNOWN_WRONG:
        module = next(case.glob("lab*.py")).stem
        names = _defined(case) | set(_expected(case))
        if not names <= set(generate.stubs(module)):
            alone.append([case])
            continue
        groups = shared.setdefault(module, [])
        group = next((g for g in groups if not any(names & (_defined(c) | set(_expected(c))) for c in g)), None)
        if group is None:
            groups.append([case])
        else:
            group.append(case)
    return [g for groups in shared.values() for g in groups] + alone


def known_wrong_submission(cases, dest: Path) -> Path:
    """A submission folder for known-wrong cases of one lab: the reference answers' text, then each
    case's own definitions (their ``from solutions... import`` lines dropped), which replace the
    right ones. Graded as a learner's file would be: nothing of it imports solutions."""
    cases = [cases] if isinstance(cases, Path) else list(cases)
    module = next(cases[0].glob("lab*.py"))
    own = ["\n".join(ln for ln in next(c.glob("lab*.py")).read_text().splitlines()
                      if not ln.startswith("from solutions.")) for c in cases]
    dest.mkdir()
    (dest / module.name).write_text((ROOT / "solutions" / module.name).read_text() + "\n\n" + "\n\n".join(own) + "\n")
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
