"""A number counts only when it is one: finite, not a boolean, within its domain.

JSON lets ``NaN``, ``Infinity``, ``true`` and ``-3`` stand where a measurement should be; every
baseline, benchmark result and gate metric passes through here before it is compared with anything.
"""
from __future__ import annotations

import math


def measured(value: object, what: str, lo: float = 0.0, hi: float = math.inf, lo_open: bool = False) -> float:
    """``value`` as a float within [lo, hi] (``(lo, hi]`` with ``lo_open``), else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{what}: {value!r} is not a finite number")
    if x < lo or (lo_open and x == lo) or x > hi:
        low, high = "(" if lo_open else "[", "]" if math.isfinite(hi) else ")"
        raise ValueError(f"{what}: {value!r} is outside {low}{lo:g}, {hi:g}{high}")
    return x


def finite_or_none(value: object, lo: float = 0.0) -> float | None:
    """``value`` when it is a finite number >= lo, else None (a measurement that does not count)."""
    try:
        return measured(value, "value", lo)
    except ValueError:
        return None


def count(value: object, what: str) -> int:
    """A count: a non-negative integer (never a boolean, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: {value!r} is not a count (an integer >= 0)")
    return value
