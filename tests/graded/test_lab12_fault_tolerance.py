"""Graded tests for Lab 12 (exercises/lab12_fault_tolerance.py). Run: python -m labkit.grade --lab 12.

``atomic_save`` runs in forked children of the sandboxed worker that die on cue — before the
first byte, half way, after the last byte, just before the rename (labkit.checkpoint.experiments.
crash_test); the judge reads what is left at the path. A kill is not a power loss (the page cache
survives a killed process), so a save with no fsync would pass every kill: the worker also
observes the child's fsync calls, and two tests ask for the new file to be fsync-ed whole before
its rename and the folder after it (a small payload catches a missing flush). ``resume_state`` hands a small training
run over from one process to a fresh, differently seeded one; the judge compares both runs'
parameters bit for bit (the same operations on the same numbers). ``young_interval`` and
``abft_locate`` are compared with the judge's own answers; ``simulate_wall_time``'s mean must lie
within 5 standard errors (the judge's own, from labkit's simulator at the same settings) of the
closed-form expected wall time, and its standard error within 25 % of the judge's. ``peer_ranks``
is checked for what makes a peer copy useful, not against one answer: a permutation (every rank
keeps one copy) with each copy on another node, for one rank per node and for several; the
judge's `labkit.checkpoint.hierarchical.check_peers` says which rule a wrong answer breaks.
"""
import math
import random

import pytest
import torch

from labkit.checkpoint.abft import abft_matmul, inject
from labkit.checkpoint.hierarchical import check_peers
from labkit.checkpoint.interval import expected_wall_time, simulate_job
from labkit.grading.generate import references
from labkit.grading.static import Policy

POLICY = Policy(references=references("lab12_fault_tolerance"))

_RUNS = {}


def _once(key, make):
    if key not in _RUNS:
        try:
            _RUNS[key] = make()
        except Exception as e:  # remembered: sibling tests fail the same way
            _RUNS[key] = e
    if isinstance(_RUNS[key], Exception):
        raise _RUNS[key]
    return _RUNS[key]


# ---- atomic_save ------------------------------------------------------------------------------
POINTS = ("start", "half", "end", "rename")


def _crashes(impl, seed):
    """(cases, results), once the save is known to work when nothing kills it (a save that fails
    or is a stub leaves the old file too, and must not score for it)."""
    cases, results = _crashes_run(impl, seed)
    for (old, new, point), res in zip(cases, results):
        if point == "none":
            assert res["exit"] == 0 and res["found"] == "new", (
                f"left alone, atomic_save did not write the data (exit {res['exit']}, found {res['found']})")
    return cases, results


def _crashes_run(impl, seed):
    def make():
        rng = random.Random(seed)
        old, new = bytes(rng.randrange(256) for _ in range(3000)), bytes(rng.randrange(256) for _ in range(7001))
        small = bytes(rng.randrange(256) for _ in range(100))      # fits a file object's buffer: needs a flush
        cases = [(old, new, "none"), (None, new, "none"), (old, small, "none")] + \
            [(old, new, p) for p in POINTS] + [(None, new, "half")]
        hexed = [[None if old is None else old.hex(), new.hex(), point] for old, new, point in cases]
        return cases, impl.harness("lab12_atomic_save", hexed)
    return _once("crash", make)


@pytest.mark.graded(points=1, exercise="atomic_save")
def test_a_save_that_finishes_writes_the_data(impl, seed):
    _crashes(impl, seed)


@pytest.mark.graded(points=3, exercise="atomic_save")
def test_a_crash_at_any_moment_leaves_old_or_new_never_torn(impl, seed):
    cases, results = _crashes(impl, seed)
    for (old, new, point), res in zip(cases, results):
        if point == "none":
            continue
        allowed = ("old", "new") if old is not None else ("missing", "new")
        assert res["found"] in allowed, (f"killed at '{point}' ({'over an old file' if old else 'no old file'}): "
                                         f"the path holds {res['found']} contents")


@pytest.mark.graded(points=1, exercise="atomic_save")
def test_the_final_path_is_never_opened_for_writing(impl, seed):
    cases, results = _crashes(impl, seed)
    assert not any(r["in_place"] for r in results), "atomic_save opened the final path for writing (in place)"


def _finished(impl, seed):
    cases, results = _crashes(impl, seed)
    return [(len(new), res) for (old, new, point), res in zip(cases, results) if point == "none"]


@pytest.mark.graded(points=1, exercise="atomic_save")
def test_the_new_file_is_fsynced_whole_before_the_rename(impl, seed):
    for size, res in _finished(impl, seed):
        assert res["fsync_file"], (f"saving {size} bytes: the file renamed onto the path was not fsync-ed with all "
                                   "its bytes before the rename (flush, then os.fsync(f.fileno())); a kill would "
                                   "not show it, a power cut would lose the new data")


@pytest.mark.graded(points=1, exercise="atomic_save")
def test_the_folder_is_fsynced_after_the_rename(impl, seed):
    for size, res in _finished(impl, seed):
        assert res["fsync_dir"], (f"saving {size} bytes: the folder was not fsync-ed after the rename "
                                  "(os.open(folder, os.O_RDONLY), os.fsync); a power cut could undo the rename")


# ---- resume_state -----------------------------------------------------------------------------
@pytest.mark.graded(points=4, exercise="resume_state")
def test_a_resumed_run_is_bit_identical(impl):
    runs = _once("resume", lambda: impl.harness("lab12_resume"))
    whole, resumed = runs["whole"], runs["resumed"]
    differ = [n for n in whole if not torch.equal(whole[n], resumed[n])]
    assert not differ, (f"after the resume {len(differ)} of {len(whole)} parameters differ from the "
                        f"uninterrupted run (first: {differ[0]}); some generator or the data position was not "
                        "saved and restored")


# ---- young_interval ---------------------------------------------------------------------------
@pytest.mark.graded(points=1, exercise="young_interval")
def test_young_interval(impl, seed):
    rng = random.Random(seed)
    for _ in range(20):
        c, m = rng.uniform(1, 600), rng.uniform(600, 10**6)
        got = impl.young_interval(c, m)
        assert got == pytest.approx(math.sqrt(2 * c * m), rel=1e-12), f"C={c:.1f} s, M={m:.0f} s: {got}"


# ---- simulate_wall_time -----------------------------------------------------------------------
JOBS = ((4 * 3600.0, 1200.0, 60.0, 300.0, 3 * 3600.0), (3600.0, 900.0, 120.0, 60.0, 1800.0))


@pytest.mark.graded(points=2, exercise="simulate_wall_time")
def test_simulated_mean_matches_the_closed_form(impl, seed):
    for job in JOBS:
        mean, se = impl.simulate_wall_time(*job, 2000, seed % 10**6)
        want = expected_wall_time(*job).wall_s
        ref = simulate_job(*job, runs=2000, seed=1)
        assert abs(mean - want) <= 5 * ref.wall_se_s, (f"job {job}: mean wall time {mean:.0f} s, closed form "
                                                       f"{want:.0f} s (standard error {ref.wall_se_s:.0f} s)")
        assert se == pytest.approx(ref.wall_se_s, rel=0.25), f"job {job}: standard error {se:.1f} s, expected about " \
                                                             f"{ref.wall_se_s:.1f} s"


# ---- abft_locate ------------------------------------------------------------------------------
@pytest.mark.graded(points=2, exercise="abft_locate")
def test_abft_locates_the_wrong_element_and_passes_clean_products(impl, seed):
    gen = torch.Generator().manual_seed(seed % 10**6)
    rng = random.Random(seed)
    for _ in range(6):
        m, k, n = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 9)
        p = abft_matmul(torch.randn(m, k, generator=gen, dtype=torch.float64),
                        torch.randn(k, n, generator=gen, dtype=torch.float64))
        tol = 1e-9
        assert impl.abft_locate(p.full, tol) is None, f"{m}x{n}: a clean product was flagged"
        i, j = rng.randrange(m), rng.randrange(n)
        got = impl.abft_locate(inject(p, i, j, rng.choice([-1, 1]) * rng.uniform(0.5, 5)).full, tol)
        assert got is not None and tuple(int(v) for v in got) == (i, j), f"{m}x{n}: error at {(i, j)}, found {got}"


# ---- peer_ranks -------------------------------------------------------------------------------
def _peer_cases(seed, one_per_node):
    rng = random.Random(seed)
    cases = [(2, 1), (3, 1), (5, 1)] if one_per_node else [(4, 2), (6, 2), (6, 3), (8, 4), (9, 3), (12, 4)]
    for _ in range(6):
        per_node = 1 if one_per_node else rng.randint(2, 8)
        cases.append((per_node * rng.randint(2, 9), per_node))
    return cases


def _check_peer_ranks(impl, cases):
    for world, per_node in cases:
        got = impl.peer_ranks(world, per_node)
        try:
            check_peers(list(got), world, per_node)
        except (ValueError, TypeError) as e:
            raise AssertionError(f"world {world}, per_node {per_node}: {got}: {e}") from None


@pytest.mark.graded(points=1, exercise="peer_ranks")
def test_peer_ranks_one_rank_per_node(impl, seed):
    _check_peer_ranks(impl, _peer_cases(seed, True))


@pytest.mark.graded(points=2, exercise="peer_ranks")
def test_peer_ranks_copies_leave_the_node(impl, seed):
    _check_peer_ranks(impl, _peer_cases(seed, False))
