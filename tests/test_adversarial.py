"""Adversarial submissions (tests/adversarial/*) get what they deserve, and leave nothing behind.

Each case is graded by the real command line (a separate process, as staff
would run it) on a folder holding that one lab file. Afterwards: the
exercises it attacked score 0, every other exercise of the lab keeps full
marks, the results file is the grader's own (also ``linger`` seconds later),
no process of the submission is alive, and the checkout is unchanged.
Every case runs under bubblewrap; the cases that attack the machine rather
than the score run again without it. There, workers run as ``nobody`` when
the grader is root and nobody can reach Python; otherwise as the grader's own
user, and then a write to the checkout cannot be stopped, only detected: the
grader must refuse the grade (exit 3).
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit.grading.sandbox import bwrap_path

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p for p in (ROOT / "tests" / "adversarial").iterdir() if p.is_dir())
FORGE = (ROOT / "tests" / "adversarial" / "forge_snippet.txt").read_text()
MACHINE_ATTACKS = {"detached_child_rewrites_results", "write_conftest", "rewrite_report_atexit", "c_loop_timeout",
                   "memory_hog"}
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build"}


def expect(case: Path) -> dict:
    spec = {}
    for line in (case / "EXPECT").read_text().splitlines():
        key, _, value = line.partition(":")
        spec[key.strip()] = value.strip()
    return spec


def checkout_state() -> dict:
    """(size, mtime) of every file of the checkout outside caches and the virtual environment."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for f in filenames:
            p = Path(dirpath) / f
            st = p.stat()
            state[str(p.relative_to(ROOT))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return state


def workers_alive(tag: str) -> list[str]:
    """Worker processes of the grading run labelled ``tag`` still alive (other tests may be grading
    at the same time: their workers carry other labels)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "labkit.grading.worker" in cmd and f"tag={tag}" in cmd.split():
            found.append(f"{pid}: {cmd[:120]}")
    return found


def grade(case: Path, tmp_path: Path, sandbox: str) -> tuple[dict, dict, str]:
    spec = expect(case)
    module = next(case.glob("lab*.py"))
    results = tmp_path / "results.json"
    text = (module.read_text().replace("{FORGE}", FORGE).replace("{REPO}", str(ROOT))
            .replace("{GRADESCOPE}", str(results)))
    if spec.get("base") == "before":
        text = (ROOT / "solutions" / module.name).read_text() + "\n\n" + text
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / module.name).write_text(text)
    lab = module.stem[3:5]
    cmd = [sys.executable, "-m", "labkit.grade", "--impl", str(sub), "--lab", lab, "--gradescope", str(results)]
    if "timeout" in spec:
        cmd += ["--exercise-timeout", spec["timeout"]]
    if "memory" in spec:
        cmd += ["--memory-mb", spec["memory"]]
    env = dict(os.environ, LABKIT_SANDBOX=sandbox, LABKIT_GRADING_TAG=tag_of(tmp_path))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode == 3 and same_user_without_sandbox(sandbox):
        return spec, {"void": proc.stderr}, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return spec, json.loads(results.read_text()), proc.stdout


def tag_of(tmp_path: Path) -> str:
    return tmp_path.name


def same_user_without_sandbox(sandbox: str) -> bool:
    from labkit.grading.sandbox import Sandbox

    return sandbox == "none" and not Sandbox("none").runs_as_nobody()


def run_case(case: Path, tmp_path: Path, sandbox: str) -> None:
    before = checkout_state()
    try:
        spec, data, printed = grade(case, tmp_path, sandbox)
        if "void" in data:
            # No sandbox, same user: the attack could write the checkout, and the grader noticed and refused.
            assert case.name == "write_conftest" and "grade is void" in data["void"], data["void"]
            return
        zero = set(spec.get("zero", "").split())
        scores = {t["name"].split(" ", 1)[1]: t for t in data["tests"]}
        assert scores, printed
        for name, t in scores.items():
            if "*" in zero or name in zero:
                assert t["score"] == 0, f"{case.name}: {name} scored {t['score']}/{t['max_score']}\n{printed}"
                if "message" in spec:
                    assert spec["message"] in t["output"], t["output"]
            else:
                assert t["score"] == t["max_score"], f"{case.name}: {name} lost points it should keep:\n{t['output']}"
        assert not (zero - {"*"}) - set(scores), f"EXPECT names exercises the lab does not have: {zero}"
        first = (tmp_path / "results.json").read_text()
        assert len(first) < 100_000, f"results.json is {len(first)} bytes"
        time.sleep(float(spec.get("linger", 0)))
        assert (tmp_path / "results.json").read_text() == first, "the results file changed after grading"
        deadline = time.monotonic() + 5
        while workers_alive(tag_of(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not workers_alive(tag_of(tmp_path)), workers_alive(tag_of(tmp_path))
    finally:
        for leftover in ("tests/graded/conftest.py", "conftest.py"):
            if leftover not in before and (ROOT / leftover).exists():
                (ROOT / leftover).unlink()   # keep later tests sound even when this one fails
        (ROOT / "tests" / "graded").chmod(0o755)
        after = checkout_state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"the submission changed the checkout: {changed[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_attack_under_bubblewrap(case, tmp_path):
    if not bwrap_path():
        pytest.skip("bubblewrap (bwrap) is not installed or cannot create namespaces here; "
                    "`make setup` installs it where apt-get can")
    run_case(case, tmp_path, "bubblewrap")


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c.name in MACHINE_ATTACKS], ids=lambda p: p.name)
def test_attack_without_sandbox(case, tmp_path):
    tmp_path.chmod(0o755)
    run_case(case, tmp_path, "none")


def test_bad_command_lines_exit_2(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "labkit.grade", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)

    empty = tmp_path / "empty"
    empty.mkdir()
    for args, words in [(["--impl", "/nonexistent"], "no such folder"),
                        (["--impl", str(empty)], "no labNN_*.py"),
                        (["--lab", "42"], "unknown lab"),
                        (["--lab", "01", "--gradescope", "/proc/nope/results.json"], "cannot write"),
                        (["--lab", "01", "--gradescope", str(tmp_path)], "is a folder")]:
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_solutions_folder_is_hidden_from_workers():
    if not bwrap_path():
        pytest.skip("bubblewrap is not installed")
    from labkit.grading.sandbox import Sandbox

    box = Sandbox.best()
    probe = "import os, sys; print(sorted(os.listdir(sys.argv[1])))"
    proc = box.start([sys.executable, "-c", probe, str(ROOT / "solutions")], ROOT / "exercises",
                     {"PATH": os.environ["PATH"], "HOME": "/tmp"})
    out, _ = proc.communicate(timeout=60)
    assert out.decode().strip() == "[]", out
    assert shutil.which("bwrap")
