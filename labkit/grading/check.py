"""The "check your work" cell that ends each exercise's section of a notebook.

    from labkit.grading.check import check_your_work
    check_your_work("lab05_collectives", "ring_all_reduce", picture=lambda fn: draw_ring(fn))

1. ``picture(fn)`` runs the learner's own ``exercises/<module>.py`` function through
   the lab's own drawing (their ring in the ring animation, their schedule as a
   Gantt chart); while it is still a stub this prints a friendly line instead.
2. Then the real grader grades that one exercise (sandboxed, as staff would) and
   prints one line: the score and, if points were lost, the first reason. An
   untouched stub (its body is the shipped ``raise NotImplementedError(...)`` and
   nothing else) scores 0 without a grading run — the grader gives every stub 0,
   which tests/test_grading.py proves — so the line comes at once.

Every printed line is at most 100 characters and deterministic for an untouched
stub (notebooks compare outputs with nbval).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Callable

from labkit import grading

WIDTH = 100


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def run_picture(module: str, exercise: str, picture: Callable[[Callable], Any]) -> Any:
    """``picture(learner's function)``; a friendly line (and None) while it is a stub or when it raises."""
    fn = getattr(grading.load(module, "exercises"), exercise)
    try:
        return picture(fn)
    except Exception as e:  # noqa: BLE001 - the learner's code may raise anything; say what, in one line
        # a stub raises NotImplementedError, here or on launched ranks (a RankError naming it)
        if isinstance(e, NotImplementedError) or getattr(e, "exc_type", None) == "NotImplementedError":
            print(_clip(f"{exercise} is still a stub."))
            print(_clip(f"Fill it in in exercises/{module}.py, then run this cell again."))
        else:
            print(_clip(f"your {exercise} raised {type(e).__name__}: {e}"))
    return None


def is_untouched_stub(fn: Callable) -> bool:
    """True if ``fn``'s body is only a docstring and one ``raise NotImplementedError(...)`` (for a
    ``@triton.jit`` kernel: the Python function it wraps)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn))))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call)
            and getattr(body[0].exc.func, "id", "") == "NotImplementedError")


def max_points(module: str, exercise: str) -> int:
    """Points the graded tests of ``module`` give ``exercise``: each marked test's points, times its
    number of parametrized cases (read from the test file; tests/test_grading.py checks the result
    equals the grader's maximum for every exercise)."""
    tree = ast.parse((grading.GRADED_TESTS / f"test_{module}.py").read_text())
    total = 0
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        points, cases = 0, 1
        for dec in fn.decorator_list:
            attr = getattr(getattr(dec, "func", None), "attr", "")
            kw = {k.arg: k.value for k in getattr(dec, "keywords", [])}
            if attr == "graded" and getattr(kw.get("exercise"), "value", None) == exercise:
                points = kw["points"].value
            elif attr == "parametrize":
                cases *= len(dec.args[1].elts)
        total += points * cases
    return total


def grade_one(module: str, exercise: str) -> dict:
    """Grade the learner's ``exercise`` with the real grader; return its score-table row."""
    from labkit.grading.run import run_graded_tests, score_table

    lab = module[3:5]
    rows = score_table(run_graded_tests("exercises", lab=lab, exercises=[exercise]))
    return next(r for r in rows if r["exercise"] == exercise)


def check_your_work(module: str, exercise: str, picture: Callable[[Callable], Any] | None = None) -> None:
    """Run the learner's function through the lab's picture (if given) and the grader; print the verdict.

    Returns None, so a notebook cell shows only what is printed and drawn (IPython's trailing
    ``;`` does not silence a result under nbval, which runs cells without history).
    """
    if picture is not None:
        run_picture(module, exercise, picture)
    if is_untouched_stub(getattr(grading.load(module, "exercises"), exercise)):
        row = {"score": 0, "max_score": max_points(module, exercise), "reasons": {"NotImplementedError": 1}}
    else:
        row = grade_one(module, exercise)
    verdict = f"grader: {exercise} {row['score']}/{row['max_score']}"
    if row["score"] == row["max_score"]:
        print(_clip(verdict + " - all checks pass"))
    else:
        reason = next(iter(row.get("reasons", {})), "")
        if "NotImplementedError" in reason:
            reason = "not implemented yet"
        print(_clip(f"{verdict} - {reason}"))
