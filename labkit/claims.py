"""Claim checks: a notebook sentence that states a result, checked in the cell that computes it.

``claim("the damaged file is refused", refused, f"{reason}")`` prints one line,
``✓ the damaged file is refused (checksum mismatch)``, when ``holds`` is true, and raises
``ClaimFailed`` naming the claim and the numbers when it is false. The cell then fails, and with
it the notebook build, nbval, the browser tier and the GPU tier: a false sentence cannot be saved.

A claim must be able to fail: ``holds`` is computed from data the cell has just measured or
computed, never a constant and never data compared with itself. ``tests/test_notebook_claims.py``
counts the stored ``✓`` lines of every lab notebook (at least 6 each) and refuses literal ``True``.

``claim_close`` and ``claim_between`` are the two comparisons most claims need; they print the
numbers and the tolerance they used, so the learner sees how close "close" was.
"""
from __future__ import annotations

import math

MARK = "\u2713"   # the first character of every printed claim line


class ClaimFailed(AssertionError):
    """A claim in a notebook does not hold for the data its cell computed."""


def claim(statement: str, holds, detail: str = "") -> None:
    """Print ``✓ statement (detail)`` if ``holds`` is truthy, else raise ClaimFailed (one line)."""
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError("claim: statement must be a non-empty str")
    if isinstance(holds, (str, bytes)) or holds is None:
        raise TypeError(f"claim: holds must be a truth value computed from data, got {holds!r}")
    ok = bool(holds)
    line = statement + (f" ({detail})" if detail else "")
    if not ok:
        raise ClaimFailed(f"claim does not hold: {line}")
    print(f"{MARK} {line}")


def claim_close(statement: str, measured: float, expected: float, *, rel: float = 0.0,
                abs_: float = 0.0, unit: str = "") -> None:
    """Claim that ``measured`` equals ``expected`` within ``rel`` (relative) or ``abs_`` (absolute).

    With both tolerances 0 the claim is exact equality. The printed detail names both numbers and
    the tolerance that was applied."""
    m, e = float(measured), float(expected)
    ok = math.isclose(m, e, rel_tol=rel, abs_tol=abs_) if (rel or abs_) else m == e
    tol = ("exactly" if not (rel or abs_) else
           " and ".join(t for t in (f"within {rel:.0%}" if rel else "",
                                    f"within {abs_:g}{unit}" if abs_ else "") if t))
    claim(statement, ok, f"{_fmt(m)}{unit} vs {_fmt(e)}{unit}, {tol}")


def claim_between(statement: str, value: float, low: float, high: float, *, unit: str = "") -> None:
    """Claim that ``low <= value <= high``; prints the value and the range."""
    v = float(value)
    claim(statement, low <= v <= high, f"{_fmt(v)}{unit} in [{_fmt(low)}, {_fmt(high)}]{unit}")


def _fmt(x: float) -> str:
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.4g}"
