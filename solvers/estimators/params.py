"""Checks of the estimators' constructor parameters, run at the start of ``fit``.

scikit-learn validates its own estimators' parameters with private helpers; these are ours, with
the same contract (a ValueError naming the parameter, what it must be and what it got).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive() -> tuple[Callable, str]:
    return (lambda v: _real(v) and math.isfinite(v) and v > 0), "a finite float > 0"


def bias_value() -> tuple[Callable, str]:
    """``intercept_scaling``: the value of a constant feature, bounded as the solvers' door bounds
    the data's values (its square enters every row's squared norm: 1e160 overflowed them to inf,
    and the fit ended with an all-zero model)."""
    from solvers._core.sparse import MAX_ABS_VALUE

    return (
        lambda v: _real(v) and math.isfinite(v) and 0 < v <= MAX_ABS_VALUE
    ), f"a float > 0 and <= {MAX_ABS_VALUE:g}"


def non_negative() -> tuple[Callable, str]:
    return (lambda v: _real(v) and math.isfinite(v) and v >= 0), "a finite float >= 0"


def positive_or_none() -> tuple[Callable, str]:
    return (lambda v: v is None or (_real(v) and v > 0)), "a float > 0 or None"


def at_least_one() -> tuple[Callable, str]:
    return (
        lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1
    ), "an int >= 1"


def at_least_one_or_none() -> tuple[Callable, str]:
    check, _ = at_least_one()
    return (lambda v: v is None or check(v)), "an int >= 1 or None"


def boolean() -> tuple[Callable, str]:
    return (lambda v: isinstance(v, bool | np.bool_)), "a bool"


def one_of(*options) -> tuple[Callable, str]:
    return (lambda v: isinstance(v, str) and v in options), f"one of {sorted(options)}"


def calibration() -> tuple[Callable, str]:
    methods = ("auto", "none", "sigmoid", "softmax", "isotonic")
    check = lambda v: v is None or (isinstance(v, str) and v in methods)  # noqa: E731
    return check, f"one of {methods} or None"


def callable_or_none() -> tuple[Callable, str]:
    return (lambda v: v is None or callable(v)), "a callable or None"


def random_state() -> tuple[Callable, str]:
    return (
        lambda v: (
            v is None
            or (isinstance(v, numbers.Integral) and not isinstance(v, bool))
            or isinstance(v, np.random.RandomState | np.random.Generator)
        )
    ), "an int, a numpy RandomState or Generator, or None"


def class_weight() -> tuple[Callable, str]:
    return (lambda v: v is None or v == "balanced" or isinstance(v, dict)), (
        'a dict, "balanced" or None'
    )


def check_params(estimator, rules: dict) -> None:
    """Raise a ValueError for the first parameter of ``estimator`` that breaks its rule."""
    for name, (valid, description) in rules.items():
        value = getattr(estimator, name)
        if not valid(value):
            raise ValueError(
                f"The {name!r} parameter of {type(estimator).__name__} must be {description}; "
                f"got {value!r}"
            )


def seed_of(random_state):
    """A seed or Generator the solvers take, from an estimator's ``random_state``."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    return random_state
