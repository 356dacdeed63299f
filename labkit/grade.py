"""Grade exercises: ``python -m labkit.grade [--impl exercises|solutions|PATH] [--lab NN] [--exercise NAME]``.

Threat model: the submission's code is untrusted. It may read, write, spawn,
loop, allocate, print and lie. So:

- The process that decides points (the *judge*: a pytest run of
  tests/graded, started by `labkit.grading.run`) never imports the submission. Each
  exercise's calls run in a sandboxed worker process (`labkit.grading.remote`,
  `labkit.grading.sandbox`); only data comes back (`labkit.grading.codec`:
  JSON plus raw array bytes, never pickle), and the judge compares it with
  references it computes itself, on inputs drawn from a seed chosen at
  grading time (printed, so a grade can be reproduced with ``--seed``).
- Verified outside the worker: every returned value (results, tensors,
  schedules, counts the submission reports) against the judge's reference;
  time (a wall-clock budget per exercise and per lab, enforced by killing the
  worker's whole process tree, so C loops stop too), memory, output size, and
  that no process of the submission is left afterwards.
- Best-effort inside the worker (the submission shares that process and could
  tamper with it): labkit's instrumentation (bytes counted at
  torch.distributed, the Triton access recorder, launch counts), the
  disabled built-in collectives, and the poisoned reference implementations.
  These are backed by a static check of the submission's source
  (`labkit.grading.static`) that refuses, with a one-line reason, imports of
  ``solutions``, of labkit's reference implementations of graded functions,
  of torch.distributed's collectives in labs that forbid them, and the
  dynamic tricks that would get round those rules.
- One worker per exercise, and in it the submission's other exercises of the
  file are replaced by the reference answers (`labkit.grading.remote.other_exercises`:
  the solutions file with the graded exercise a stub, so nothing in the worker answers it).
  A test therefore runs only the exercise it grades: a stub or a mistake elsewhere
  costs only its own points.
- With bubblewrap installed, workers see a read-only filesystem with
  ``solutions/`` hidden, a private /tmp, loopback-only networking and their
  own PID namespace; the report says when grading ran without it.

Without bubblewrap nothing stops a worker that runs as the grader's own user
from writing the checkout, so the grader's own files (labkit/, tests/,
pyproject.toml, any conftest.py) are compared before and after: a change
voids the grade.

Exit status: 0 after grading (whatever the score), 2 for bad arguments, 3
when the grader's own files changed while grading (the grade is void).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from labkit.grading.run import (DEFAULT_EXERCISE_S, DEFAULT_LAB_S, UsageError, check_impl, check_lab,
                                check_trusted_files, check_writable, format_table, gradescope_json,
                                run_graded_tests, score_table, trusted_state)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.grade", description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="exercises", help="exercises (default) | solutions | PATH to a folder of labNN_*.py")
    ap.add_argument("--lab", default=None, help="grade one lab only, e.g. 05")
    ap.add_argument("--exercise", action="append", default=None, help="grade only this exercise (repeatable)")
    ap.add_argument("--gradescope", metavar="FILE", default=None, help="also write Gradescope results.json here")
    ap.add_argument("--seed", type=int, default=None, help="grading seed (default: random; printed with the table)")
    ap.add_argument("--exercise-timeout", type=float, default=DEFAULT_EXERCISE_S, help="worker seconds per exercise")
    ap.add_argument("--lab-timeout", type=float, default=DEFAULT_LAB_S, help="worker seconds per lab")
    ap.add_argument("--memory-mb", type=int, default=4096, help="memory limit of one worker's processes (MiB)")
    ap.add_argument("--require-sandbox", action="store_true", help="refuse to grade without bubblewrap")
    ap.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    a = ap.parse_args(argv)
    try:
        impl, lab = check_impl(a.impl), check_lab(a.lab)
        check_writable(a.gradescope)
        check_trusted_files()
        before = trusted_state()
        if a.require_sandbox:
            from labkit.grading.sandbox import Sandbox

            Sandbox.best(require=True)
        result = run_graded_tests(impl, lab, a.verbose, exercises=a.exercise, seed=a.seed,
                                  exercise_s=a.exercise_timeout, lab_s=a.lab_timeout,
                                  require_sandbox=a.require_sandbox, memory_mb=a.memory_mb)
        rows = score_table(result)
        if not rows:
            raise UsageError(f"no graded tests for exercise(s) {a.exercise} in lab {lab or 'any'}")
    except (UsageError, RuntimeError) as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    after = trusted_state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        print(f"grade: the grader's own files changed while grading ({', '.join(changed[:3])}): the grade is void; "
              "restore the checkout and grade with bubblewrap installed", file=sys.stderr)
        return 3
    print(f"implementation: {a.impl}")
    print(f"grading seed: {result['seed']}   sandbox: {result['sandbox']}")
    print(format_table(rows))
    for r in rows:
        for reason, points in r.get("reasons", {}).items():
            tests = f"{len(points)} tests" if len(points) > 1 else "1 test"
            print(f"  lab{r['lab']} {r['exercise']}: -{sum(points)} ({tests}): {reason}")
    if a.gradescope:
        Path(a.gradescope).write_text(json.dumps(gradescope_json(rows, result["seed"], result["sandbox"]), indent=1))
        print(f"\nwrote {a.gradescope}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
