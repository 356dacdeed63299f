"""pytest plugin behind the grader (loaded for every run via pyproject's addopts).

- ``--impl exercises|solutions|PATH`` picks the implementation (sets LABKIT_IMPL).
- the ``impl`` fixture returns the exercise module named after the test file:
  tests/graded/test_lab05_collectives.py -> load("lab05_collectives").
- ``@pytest.mark.graded(points=N, exercise="name")`` marks a graded test; each
  gets a per-test timeout (default 60 s) unless it sets its own.
- ``--exercise NAME`` (repeatable) keeps only that exercise's graded tests.
- ``--grade-report FILE`` keeps a JSON record of every graded test, rewritten
  as each one starts and ends; a test left "running" in it crashed the test
  process, and the grader re-runs the rest without it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from labkit import grading

DEFAULT_TIMEOUT_S = 60


def pytest_addoption(parser):
    group = parser.getgroup("labkit grading")
    group.addoption("--impl", default=None, help="exercises | solutions | PATH to a folder of labNN_*.py")
    group.addoption("--grade-report", default=None, help="write graded results as JSON to this file")
    group.addoption("--exercise", action="append", default=None,
                    help="run only the graded tests of this exercise (repeatable)")


def pytest_configure(config):
    impl = config.getoption("--impl")
    if impl:
        os.environ[grading.ENV_VAR] = impl
    config._labkit_graded = {}


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
        Path(path).write_text(json.dumps(list(config._labkit_graded.values()), indent=1))


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


def _lab_of(item) -> str:
    name = Path(str(item.fspath)).stem  # test_lab05_collectives
    return name.removeprefix("test_lab")[:2]


def _short_message(report) -> str:
    text = str(report.longrepr) if report.longrepr else report.outcome
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-3:]
    return "\n".join(lines[:8])


@pytest.fixture
def impl(request):
    """The exercise module under test, chosen by --impl / LABKIT_IMPL (default: solutions)."""
    name = Path(str(request.node.fspath)).stem.removeprefix("test_")
    return grading.load(name)
