"""Percent done and time left of a converging solve, from its gap history.

The gap of a dual coordinate descent solver falls roughly geometrically, so progress is measured
on a log scale: 0 % at the first full pass's gap g0, 100 % at the tolerance. The remaining time
extrapolates the average rate of log-gap decrease so far.
"""

from __future__ import annotations

import math


def estimate(
    first_gap: float | None,
    first_elapsed: float,
    gap: float | None,
    elapsed: float,
    tol: float | None,
) -> tuple[float | None, float | None]:
    """(percent in [0, 100], eta in seconds) or None where unknown."""
    if first_gap is None or gap is None or tol is None or tol <= 0:
        return None, None
    if not (math.isfinite(first_gap) and math.isfinite(gap)):
        return None, None
    if gap <= tol:
        return 100.0, 0.0
    if first_gap <= tol:  # the gap rose again after meeting tol (e.g. the next one-vs-rest class)
        return 0.0, None
    total = math.log(first_gap / tol)
    done = math.log(first_gap / gap) if gap > 0 else total
    percent = min(100.0, max(0.0, 100.0 * done / total))
    if done <= 0 or elapsed <= first_elapsed:
        return percent, None
    rate = done / (elapsed - first_elapsed)
    return percent, max(0.0, (total - done) / rate)
