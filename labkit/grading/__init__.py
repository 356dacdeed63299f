"""Grading: a trusted judge, untrusted sandboxed workers (threat model: ``labkit.grade``'s docstring).

    plugin      the pytest plugin; the judge's ``impl`` fixture is a `remote.RemoteModule`
    remote      the judge's side: workers with deadlines, memory and output limits
    worker      the untrusted side: imports the submission, runs calls, replies with data
    codec       data-only messages between the two (JSON + raw array bytes, no pickle)
    sandbox     bubblewrap (or a plainer fallback) around each worker
    static      AST checks of a submission against its lab's `static.Policy`
    harness     labkit code run next to a submission (Triton launches, gloo ranks, a pipeline step)
    gradescope  the autograder zip and its run_autograder

This module also picks which implementation of an exercise module *trusted* code
imports directly (notebooks, and tests that compare stubs with solutions):

``load("lab05_collectives")`` returns the module from, in order of precedence,
the ``impl`` argument or the ``LABKIT_IMPL`` environment variable:
  "solutions" (default)  -> solutions/lab05_collectives.py
  "exercises"            -> exercises/lab05_collectives.py  (the learner's work)
  any folder PATH        -> PATH/lab05_collectives.py       (e.g. a submission)
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from labkit.env import REPO_ROOT

ENV_VAR = "LABKIT_IMPL"
GRADED_TESTS = REPO_ROOT / "tests" / "graded"


def current_impl() -> str:
    return os.environ.get(ENV_VAR, "solutions")


def load(module_name: str, impl: str | None = None) -> ModuleType:
    """Import exercise module ``module_name`` (e.g. "lab05_collectives") from the chosen implementation."""
    impl = impl or current_impl()
    if impl in ("solutions", "exercises"):
        return importlib.import_module(f"{impl}.{module_name}")
    path = Path(impl).expanduser().resolve() / f"{module_name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{ENV_VAR}={impl!r}: no {module_name}.py in that folder")
    unique = f"_labkit_impl_{abs(hash(str(path)))}_{module_name}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module  # so functions defined there can be pickled by reference
    spec.loader.exec_module(module)
    return module
