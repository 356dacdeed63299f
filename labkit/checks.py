"""Argument checks shared by every part of labkit: one line naming the function and the argument.

``check_int`` and ``check_real`` return the value converted; they raise TypeError for the wrong
kind of value (a bool is not an int, 16.0 is not an int) and ValueError for a value out of range.
Tensor checks for the Triton wrappers live in `labkit.kernels.checks`, which builds on these.
"""
from __future__ import annotations

import math
import numbers


def check_int(fn: str, name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int; TypeError unless it is an int (not bool, not float), ValueError
    (one line, naming ``fn`` and ``name``) if it lies outside ``minimum``..``maximum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        want = (f"in {minimum}..{maximum}" if minimum is not None and maximum is not None else
                f">= {minimum}" if minimum is not None else f"<= {maximum}")
        raise ValueError(f"{fn}: {name} must be an int {want}, got {value}")
    return value


def check_real(fn: str, name: str, value, *, positive: bool = False) -> float:
    """Return ``value`` as a float; it must be a finite real number (not bool), > 0 if ``positive``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{fn}: {name} must be a finite{' positive' if positive else ''} number, got {value!r}")
    return value
