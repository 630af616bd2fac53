"""Checks of the options every solver shares, each with one message naming what was expected."""

from __future__ import annotations

import math
import numbers


def check_tol(tol, name: str = "tol") -> float:
    if (
        isinstance(tol, bool)
        or not isinstance(tol, numbers.Real)
        or not (math.isfinite(tol) and tol > 0)
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {tol!r}")
    return float(tol)


def check_max_iter(max_iter, name: str = "max_iter") -> int:
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {max_iter!r}")
    return int(max_iter)


def check_bias(bias) -> float:
    """The bias feature's value: at most MAX_ABS_VALUE, as the data's values (its square enters
    every row's squared norm: 1e160 overflowed them, and the solve ended with zeros)."""
    from solvers._core.sparse import MAX_ABS_VALUE

    if (
        isinstance(bias, bool)
        or not isinstance(bias, numbers.Real)
        or not (math.isfinite(bias) and bias >= 0)
    ):
        raise ValueError(f"bias must be a finite number >= 0, got {bias!r}")
    if bias > MAX_ABS_VALUE:
        raise ValueError(f"bias must be at most {MAX_ABS_VALUE:g}, got {bias!r}")
    return float(bias)


def check_objective_every(objective_every, *, zero_means_never: bool) -> None:
    """None, or an integer >= 1 (>= 0 where 0 means never)."""
    if objective_every is None:
        return
    least = 0 if zero_means_never else 1
    if (
        isinstance(objective_every, bool)
        or not isinstance(objective_every, numbers.Integral)
        or objective_every < least
    ):
        raise ValueError(f"objective_every must be an integer >= {least}, got {objective_every!r}")


def check_choice(value, choices, name: str) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value
