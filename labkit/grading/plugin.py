"""pytest plugin behind the grader (loaded for every run via pyproject's addopts).

The pytest process that runs tests/graded is the *judge*: it never imports
the submission. The ``impl`` fixture is a `RemoteModule`: each call runs in a
sandboxed worker (one per exercise) and only data comes back, which the test
compares with references it computes itself.

- ``--impl exercises|solutions|PATH``: the implementation (its lab*.py files
  are copied to a private snapshot first; default: solutions).
- ``@pytest.mark.graded(points=N, exercise="name")`` marks a graded test.
- ``--exercise NAME`` (repeatable) keeps only that exercise's graded tests.
- ``--grade-seed N``: the seed graded inputs are drawn from (default: a fresh
  random one per run, printed in the report so a grade can be reproduced).
- ``--exercise-timeout S`` / ``--lab-timeout S``: worker time budgets;
  ``--memory-mb M``: a worker's memory limit; ``--require-sandbox``: refuse to
  grade without bubblewrap.
- ``--grade-report FILE``: a JSON record of every graded test, rewritten as
  each one starts and ends; a test left "running" crashed the judge process.
- A module-level ``POLICY = labkit.grading.static.Policy(...)`` in a graded
  test file says what that lab's submissions may import (checked statically).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from labkit import grading
from labkit.env import REPO_ROOT
from labkit.grading import static
from labkit.grading.remote import Budget, Pool, RemoteModule
from labkit.grading.sandbox import Limits, Sandbox

DEFAULT_TIMEOUT_S = 300     # judge-side backstop per test; workers have their own budgets
MAX_MESSAGE_CHARS = 1000


def pytest_addoption(parser):
    group = parser.getgroup("labkit grading")
    group.addoption("--impl", default=None, help="exercises | solutions | PATH to a folder of labNN_*.py")
    group.addoption("--grade-report", default=None, help="write graded results as JSON to this file")
    group.addoption("--exercise", action="append", default=None,
                    help="run only the graded tests of this exercise (repeatable)")
    group.addoption("--grade-seed", type=int, default=None, help="seed for graded inputs (default: random)")
    group.addoption("--exercise-timeout", type=float, default=60.0, help="worker seconds per exercise")
    group.addoption("--lab-timeout", type=float, default=240.0, help="worker seconds per lab")
    group.addoption("--memory-mb", type=int, default=4096, help="memory limit of a worker's process tree")
    group.addoption("--require-sandbox", action="store_true", help="fail unless bubblewrap is available")


def pytest_configure(config):
    impl = config.getoption("--impl")
    if impl:
        os.environ[grading.ENV_VAR] = impl
    seed = config.getoption("--grade-seed")
    config._labkit_seed = seed if seed is not None else secrets.randbits(32)
    config._labkit_graded = {}
    config._labkit_pool = None


def _graded_marker(item):
    return item.get_closest_marker("graded")


def pytest_collection_modifyitems(config, items):
    wanted = config.getoption("--exercise")
    if wanted:
        keep = [it for it in items if _graded_marker(it) and _graded_marker(it).kwargs.get("exercise") in wanted]
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep
    for item in items:
        mark = _graded_marker(item)
        if mark is None:
            continue
        if "points" not in mark.kwargs or "exercise" not in mark.kwargs:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.graded needs points= and exercise=")
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))
        config._labkit_graded[item.nodeid] = {
            "nodeid": item.nodeid,
            "target": "::".join([str(item.path), *item.nodeid.split("::")[1:]]),  # absolute, for re-runs
            "lab": _lab_of(item),
            "exercise": mark.kwargs["exercise"],
            "max_points": mark.kwargs["points"],
            "status": "not run",  # -> running -> passed | failed
            "message": "",
        }
    _write(config)


def _write(config) -> None:
    path = config.getoption("--grade-report")
    if path:
        pool = config._labkit_pool
        report = {"seed": config._labkit_seed, "sandbox": pool.sandbox.describe() if pool else "",
                  "tests": list(config._labkit_graded.values())}
        Path(path).write_text(json.dumps(report, indent=1))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    entry = item.config._labkit_graded.get(item.nodeid)
    if entry is not None:
        entry["status"] = "running"
        _write(item.config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    entry = item.config._labkit_graded.get(item.nodeid)
    if entry is None:
        return
    failed = report.failed or report.skipped  # a graded test must run to earn points
    if failed and entry["status"] != "failed":
        entry["status"], entry["message"] = "failed", _short_message(report)
    elif report.when == "teardown" and entry["status"] == "running":
        entry["status"] = "passed"
    if failed or report.when == "teardown":
        _write(item.config)


def pytest_runtest_teardown(item, nextitem):
    """Stop an exercise's worker once its last test has run."""
    pool = item.config._labkit_pool
    if pool is None or _graded_marker(item) is None:
        return
    key = (_module_of(item), _graded_marker(item).kwargs["exercise"])
    nxt = (_module_of(nextitem), _graded_marker(nextitem).kwargs.get("exercise")) \
        if nextitem is not None and _graded_marker(nextitem) else None
    if nxt != key:
        pool.release(*key)


def pytest_sessionfinish(session):
    pool = session.config._labkit_pool
    if pool is not None:
        pool.close()
        shutil.rmtree(pool.submission_dir.parent, ignore_errors=True)
    _write(session.config)


def _lab_of(item) -> str:
    return Path(str(item.fspath)).stem.removeprefix("test_lab")[:2]   # test_lab05_collectives -> 05


def _module_of(item) -> str:
    return Path(str(item.fspath)).stem.removeprefix("test_")         # -> lab05_collectives


def _short_message(report) -> str:
    text = str(report.longrepr) if report.longrepr else report.outcome
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-3:]
    message = "\n".join(ln[:300] for ln in lines[:8])
    return message[:MAX_MESSAGE_CHARS]


def snapshot(impl: str) -> Path:
    """Copy the implementation's lab*.py files into a fresh private folder; return it."""
    src = (REPO_ROOT / impl) if impl in ("solutions", "exercises") else Path(impl).expanduser().resolve()
    if not src.is_dir():
        raise pytest.UsageError(f"--impl {impl}: no such folder")
    root = Path(tempfile.mkdtemp(prefix="labkit-judge-"))
    os.chmod(root, 0o711)
    dest = root / "submission"
    dest.mkdir(mode=0o755)
    for f in sorted(src.glob("lab*.py")):
        shutil.copyfile(f, dest / f.name)
        os.chmod(dest / f.name, 0o644)
    return dest


def _pool(config) -> Pool:
    if config._labkit_pool is None:
        limits = Limits(memory_bytes=config.getoption("--memory-mb") << 20)
        sandbox = Sandbox.best(limits, require=config.getoption("--require-sandbox"))
        budget = Budget(config.getoption("--exercise-timeout"), config.getoption("--lab-timeout"))
        config._labkit_pool = Pool(snapshot(grading.current_impl()), sandbox, budget)
    return config._labkit_pool


@pytest.fixture
def impl(request):
    """The submission's module as a `RemoteModule` (runs in a sandboxed worker; data comes back)."""
    name = _module_of(request.node)
    mark = _graded_marker(request.node)
    exercise = mark.kwargs["exercise"] if mark else "_ungraded"
    policy = getattr(request.module, "POLICY", static.Policy())
    exercises = {m.kwargs.get("exercise") for obj in vars(request.module).values()
                 for m in getattr(obj, "pytestmark", []) if m.name == "graded"}
    pool = _pool(request.config)
    reason = static.reasons_for(pool.static_reasons(name, policy, exercises), exercise)
    if reason:
        pytest.fail(f"{name}.py: {reason}", pytrace=False)
    return RemoteModule(pool, name, exercise, tuple(policy.references))


@pytest.fixture
def seed(request) -> int:
    """A seed for this test's inputs, drawn from the run's grading seed (unknown to the submission)."""
    digest = hashlib.sha256(f"{request.config._labkit_seed}:{request.node.nodeid}".encode()).digest()
    return int.from_bytes(digest[:4], "little")
