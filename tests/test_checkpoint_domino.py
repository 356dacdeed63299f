"""Lab 12: recovery lines, orphan messages, and the domino effect (independent vs coordinated checkpoints).

Hand-built traces with answers worked out on paper, and random traces checked against a brute
force that tries every combination of checkpoints.
"""
import itertools

import pytest

from labkit.checkpoint import domino as D

M = D.Message

# A zig-zag between two processes: every message is sent just after one process's checkpoint and
# received just before the other's.   P0 checkpoints at 1, 5, 9;  P1 at 3, 7, 11.
ZIGZAG = (M(1, 0.5, 0, 0.8), M(0, 2.0, 1, 2.5), M(1, 4.0, 0, 4.5),
          M(0, 6.0, 1, 6.5), M(1, 8.0, 0, 8.5), M(0, 10.0, 1, 10.5))
INDEPENDENT = ((1.0, 5.0, 9.0), (3.0, 7.0, 11.0))
COORDINATED = ((3.0, 7.0, 9.5), (3.0, 7.0, 9.5))


def test_domino_to_the_start():
    """P0 fails at 12 and restarts from 9. P1 received m(10 → 10.5), which P0 has not sent yet:
    P1 goes back to 7 (its checkpoint at 11 already holds the receipt), orphaning m(8 → 8.5), so
    P0 goes to 5, and so on, to time 0 for both. Six checkpoints, all useless."""
    line = D.recovery_line(ZIGZAG, INDEPENDENT, failed_process=0, failure_s=12.0)
    assert line.restored == (0, 0) and line.cut_s == (0.0, 0.0) and line.domino
    assert line.lost_s == (12.0, 12.0) and line.total_lost_s == 24.0
    assert [(s.process, s.from_s, s.to_s) for s in line.steps] == [
        (0, 12.0, 9.0), (1, 12.0, 7.0), (0, 9.0, 5.0), (1, 7.0, 3.0), (0, 5.0, 1.0), (1, 3.0, 0.0), (0, 1.0, 0.0)]
    assert [s.message for s in line.steps[1:]] == list(ZIGZAG[::-1])
    assert line.in_transit == ()


def test_same_trace_other_process_fails_nothing_cascades():
    """If P1 fails at 12 it restarts from 11; it sent nothing after 11, so P0 keeps its state."""
    line = D.recovery_line(ZIGZAG, INDEPENDENT, failed_process=1, failure_s=12.0)
    assert line.restored == (None, 3) and line.cut_s == (12.0, 11.0)
    assert line.lost_s == (0.0, 1.0) and not line.domino and len(line.steps) == 1


def test_coordinated_checkpoints_stop_at_the_last_line():
    """The same messages with both processes checkpointing at 3, 7, 9.5: P0 restarts from 9.5, P1
    (which received m(10 → 10.5)) follows to 9.5, and there it stops."""
    line = D.recovery_line(ZIGZAG, COORDINATED, failed_process=0, failure_s=12.0)
    assert line.restored == (3, 3) and line.cut_s == (9.5, 9.5)
    assert line.lost_s == (2.5, 2.5) and line.total_lost_s == 5.0
    assert D.is_consistent(ZIGZAG, line.cut_s)


def test_orphans_and_in_transit_messages():
    m = M(0, 2.0, 1, 3.0)
    assert D.orphans([m], (1.0, 4.0)) == [m]           # P1 remembers it, P0 has not sent it
    assert D.orphans([m], (2.5, 4.0)) == []
    assert D.in_transit([m], (2.5, 2.8)) == [m]        # sent, not yet received: replayed from a log
    assert D.is_consistent([m], (2.5, 2.8))
    # three processes: P0 fails at 5 and restarts from 2.5; m(3.0 → 3.2) becomes an orphan, so P1
    # goes back to 3.1 (before that receipt); P2 received from P1 at 4.5 a message P1 sent at 2.0,
    # before its line, so P2 keeps its state; m(2.0 → 3.15) now crosses the line: in transit.
    msgs = (M(0, 1.0, 1, 1.5), M(0, 3.0, 1, 3.2), M(1, 2.0, 2, 4.5), M(0, 2.0, 1, 3.15))
    line = D.recovery_line(msgs, ((2.5,), (3.1,), (1.0,)), failed_process=0, failure_s=5.0)
    assert line.cut_s == (2.5, 3.1, 5.0) and line.restored == (1, 1, None)
    assert line.in_transit == (msgs[3],)
    assert line.lost_s == (2.5, 5.0 - 3.1, 0.0)


def _brute_force(messages, checkpoints, failed, failure_s):
    """Every combination of restore points; the componentwise latest of the consistent ones."""
    cands = []
    for p, ts in enumerate(checkpoints):
        c = [0.0] + [t for t in ts if t < failure_s]
        cands.append(c if p == failed else c + [failure_s])
    msgs = [m for m in messages if m.send_s < failure_s]
    good = [cut for cut in itertools.product(*cands) if D.is_consistent(msgs, cut)]
    best = tuple(max(cut[p] for cut in good) for p in range(len(checkpoints)))
    assert best in good                                 # consistent cuts are closed under max
    return best


@pytest.mark.parametrize("style", ["independent", "coordinated"])
def test_random_traces_against_brute_force(style):
    lines = []
    for seed in range(60):
        msgs = D.random_messages(3, 25, 30.0, 3.0, seed=seed)
        ckpts = (D.independent_checkpoints(3, 6.0, 30.0, seed=seed) if style == "independent"
                 else D.coordinated_checkpoints(3, 6.0, 30.0))
        failed = seed % 3
        line = D.recovery_line(msgs, ckpts, failed, 30.0)
        assert line.cut_s == _brute_force(msgs, ckpts, failed, 30.0), seed
        assert D.is_consistent([m for m in msgs if m.send_s < 30.0], line.cut_s)
        lines.append(line)
    if style == "coordinated":
        # nobody ever rolls back past the last coordinated checkpoint, at 24 s
        assert all(min(ln.cut_s) >= 24.0 for ln in lines) and not any(ln.domino for ln in lines)
    else:
        # on these same traces, independent checkpoints roll someone back further than that
        assert any(min(ln.cut_s) < 24.0 for ln in lines)


def test_the_experiment_shows_the_domino_effect():
    t = D.domino_table(message_counts=(15, 240), trials=100)
    assert max(len(line) for line in str(t).splitlines()) <= 100
    rows = {(r[0], r[1]): r for r in t.rows}
    k_all, k_max = t.columns.index("all to 0 %"), t.columns.index("max rollback s")
    # coordinated: never to the start, never more than one period (10 s) back
    for count in (15, 240):
        assert rows[count, "coordinated"][k_all] == 0.0 and rows[count, "coordinated"][k_max] <= 10.0
    # independent with frequent messages: whole runs are lost
    assert rows[240, "independent"][k_all] > 5.0 and rows[240, "independent"][k_max] == 60.0
    assert t == D.domino_table(message_counts=(15, 240), trials=100)           # seeded


def test_helpers():
    assert D.coordinated_checkpoints(2, 10.0, 35.0) == ((10.0, 20.0, 30.0), (10.0, 20.0, 30.0))
    assert D.coordinated_checkpoints(1, 10.0, 30.0) == ((10.0, 20.0),)
    ind = D.independent_checkpoints(3, 10.0, 35.0, seed=1)
    assert len(ind) == 3 and all(0 < ts[0] < 10 and len(ts) in (3, 4) for ts in ind)
    assert ind == D.independent_checkpoints(3, 10.0, 35.0, seed=1)
    msgs = D.random_messages(4, 50, 20.0, 2.0, seed=2)
    assert len(msgs) == 50 and all(m.sender != m.receiver and 0 < m.recv_s - m.send_s < 2.0 for m in msgs)


@pytest.mark.parametrize("call,exc,words", [
    (lambda: D.recovery_line([M(0, 2.0, 0, 3.0)], ((), ()), 0, 5.0), ValueError, "two different"),
    (lambda: D.recovery_line([M(0, 3.0, 1, 2.0)], ((), ()), 0, 5.0), ValueError, "received after"),
    (lambda: D.recovery_line([M(0, 2.0, 5, 3.0)], ((), ()), 0, 5.0), ValueError, "recovery_line: message process"),
    (lambda: D.recovery_line([M(0, 2.0, 1, 3.0)], ((2.0,), ()), 0, 5.0), ValueError, "distinct"),
    (lambda: D.recovery_line([], ((3.0, 1.0), ()), 0, 5.0), ValueError, "strictly increasing"),
    (lambda: D.recovery_line([], ((), ()), 2, 5.0), ValueError, "recovery_line: failed_process"),
    (lambda: D.recovery_line([(0, 1, 1, 2)], ((), ()), 0, 5.0), TypeError, "Message objects"),
])
def test_bad_arguments_raise_one_line_errors(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)
