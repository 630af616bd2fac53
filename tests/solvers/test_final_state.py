"""Outcomes describe the state returned: for every solver the final gap and status equal those of
the last progress record, a stop at max_iter or time_limit reports the gap of the returned
solution (measured here again, independently, with numpy), and every result carries
duality_gap = (P − D) / max(1, |P|)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import Status
from tests.solvers._every_solver import (
    GROUPS,
    MARGINS,
    SOLVERS,
    TARGET,
    Y3,
    Y_PM,
    C,
    dense_problem,
)

X = sp.csr_matrix(dense_problem()[0])
XB = sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()  # x̃ = [x, 1] (bias 1 everywhere)
RESULTS = [name for name in SOLVERS if not name.startswith("Linear")]
ESTIMATORS = [name for name in SOLVERS if name.startswith("Linear")]


def _projected(G, alpha, upper, lower=0.0):
    return np.where(alpha <= lower, np.minimum(G, 0), np.where(alpha >= upper, np.maximum(G, 0), G))


def binary_range(r, loss):
    """(M, m) of the projected gradients at the returned α."""
    w = np.r_[r.w, r.bias]
    if loss == "squared_error":
        s, mag = np.sign(TARGET), np.abs(TARGET)
        G = s * (XB @ w) - mag + r.alpha / (2 * C)
        return G.max(), G.min()
    G = Y_PM * (XB @ w) - 1 + (0.0 if loss == "hinge" else r.alpha / (2 * C))
    PG = _projected(G, r.alpha, C if loss == "hinge" else np.inf)
    return PG.max(), PG.min()


def ovr_range(r):
    largest = 0.0
    for c in range(3):
        yc = np.where(Y3 == c, 1.0, -1.0)
        G = yc * (XB @ np.r_[r.w[c], r.bias[c]]) - 1 + r.alpha[c] / (2 * C)
        PG = _projected(G, r.alpha[c], np.inf)
        largest = max(largest, PG.max() - PG.min())
    return largest


def cs_violation(r):
    scores = XB @ np.c_[r.w, r.bias].T
    g = scores + (np.arange(3)[None, :] != Y3[:, None])
    cap = np.where(np.arange(3)[None, :] == Y3[:, None], C, 0.0)
    can_grow = np.where(r.alpha < cap, g, np.inf)
    return float((g.max(axis=1) - can_grow.min(axis=1)).max())


def ww_violation(r):
    scores = XB @ np.c_[r.w, r.bias].T
    g = scores[np.arange(len(Y3)), Y3][:, None] - scores - 1
    v = np.where(r.alpha <= 0, np.maximum(0, -g), np.where(r.alpha >= C, np.maximum(0, g), abs(g)))
    v[np.arange(len(Y3)), Y3] = 0.0
    return float(v.max())


def svr_largest_violation(r, eps=0.1):
    g = XB @ np.r_[r.w, r.bias] - TARGET
    b, gp, gn = r.alpha, g + eps, g - eps
    v = np.where(
        b == 0,
        np.maximum(np.maximum(-gp, gn), 0),
        np.where(b >= C, np.maximum(gp, 0), np.where(b <= -C, np.maximum(-gn, 0), 0.0)),
    )
    inside = (b != 0) & (b > -C) & (b < C)
    v = np.where(inside, np.where(b > 0, abs(gp), abs(gn)), v)
    return float(v.max())


def structural_upper_bound(w, rows=slice(None)):
    slack = np.maximum(0, MARGINS[rows] - X[rows] @ w)
    worst = np.zeros(GROUPS.max() + 1)
    np.maximum.at(worst, GROUPS[rows], slack)
    return 0.5 * w @ w + C * worst.sum()


def independent_gap(name, r):
    """The solver's stopping measure on the state it returned, from scratch."""
    if name.startswith("binary"):
        M, m = binary_range(r, name.removeprefix("binary ").replace(" ", "_"))
        return M - m
    if name == "one-vs-rest":
        return ovr_range(r)
    if name == "Crammer-Singer":
        return cs_violation(r)
    if name == "Weston-Watkins":
        return ww_violation(r)
    if name == "structural":
        lower = -0.5 * r.w @ r.w + MARGINS @ r.alpha
        return structural_upper_bound(r.w) - lower
    if name == "structural stream":
        return structural_upper_bound(r.w, slice(0, 48)) - r.lower_bound
    return None  # SVR: its largest violation is checked instead


def check_consistent(name, r):
    last = r.history[-1]
    assert r.gap == last.gap and r.n_iter == last.iteration, name
    assert r.duality_gap is not None and np.isfinite(r.duality_gap), name
    if name.startswith("structural"):
        expected = (r.upper_bound - r.lower_bound) / max(1.0, abs(r.upper_bound))
    else:
        expected = (r.primal + r.dual) / max(1.0, abs(r.primal))
    assert r.duality_gap == pytest.approx(expected, rel=1e-12, abs=1e-15), name
    explicit = {
        "pg_range": r.pg_range,
        "max_violation": r.max_violation,
    }
    if name.startswith("binary") or name == "one-vs-rest":
        assert explicit["pg_range"] == r.gap and last.pg_range == r.gap, name
        assert r.pg_max - r.pg_min == pytest.approx(r.gap) or name == "one-vs-rest"
    elif name in ("Crammer-Singer", "Weston-Watkins"):
        assert explicit["max_violation"] == r.gap == last.max_violation, name


@pytest.mark.parametrize("name", RESULTS)
def test_a_converged_solve_ends_on_its_last_record(name):
    r = SOLVERS[name](X)
    assert r.status is Status.CONVERGED, name
    check_consistent(name, r)
    if name.startswith("structural"):  # the others certify by the pass that converged
        assert r.gap == pytest.approx(independent_gap(name, r), rel=1e-8, abs=1e-10), name


@pytest.mark.parametrize("stop", ["max_iter", "time_limit", "callback"])
@pytest.mark.parametrize("name", RESULTS)
def test_an_early_stop_reports_the_gap_of_the_returned_state(name, stop):
    options = {
        "max_iter": {"max_iter": 2},
        "time_limit": {"time_limit": 1e-9},
        "callback": {"callback": lambda p: p.iteration < 2},
    }[stop]
    if name == "structural stream":
        options = {"passes": 1} if stop == "max_iter" else options
    r = SOLVERS[name](X, **{"tol": 1e-12, **options})
    expected = {"max_iter": Status.MAX_ITER, "time_limit": Status.TIME_LIMIT}.get(
        stop, Status.STOPPED
    )
    assert r.status is expected, name
    check_consistent(name, r)
    measured = independent_gap(name, r)
    if measured is not None:
        assert r.gap == pytest.approx(measured, rel=1e-8, abs=1e-10), name
    else:
        assert r.max_violation == pytest.approx(svr_largest_violation(r), rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimators_store_the_last_records_gap_and_status(name):
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    for options in ({}, {"max_iter": 2, "tol": 1e-12}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = SOLVERS[name](X, **options)
        last = est.history_[-1]
        assert est.gap_ == last["gap"] and est.n_iter_ == last["iteration"], name
        assert est.status_ == ("converged" if not options else "max_iter"), name
        assert est.duality_gap_ is not None and est.duality_gap_ >= -1e-12
        assert np.isfinite(est.objective_)


def test_crammer_singer_stopped_after_a_shrunk_pass_reports_the_returned_state():
    """The bug of the issue: the gap of the last full pass was reported after shrunk passes."""
    from solvers import solve_crammer_singer

    seen = []
    r = solve_crammer_singer(X, Y3, 3, C=C, bias=1.0, tol=1e-12, max_iter=7, callback=seen.append)
    shrunk = [p for p in seen[:-1] if p.active < len(Y3)]
    assert shrunk, "expected shrunk passes before the stop"
    assert r.gap == seen[-1].gap == pytest.approx(cs_violation(r), rel=1e-10)


def _margin_primal(name, r):
    """The primal at the returned (w, bias), from numpy alone (the bias weight regularized)."""
    W = np.c_[r.w, r.bias]
    scores = XB @ W.T
    own = scores[np.arange(len(Y3)), Y3][:, None]
    other = np.arange(3)[None, :] != Y3[:, None]
    if name == "Crammer-Singer":
        loss = np.max(other + scores - own, axis=1)
    elif name == "Weston-Watkins":
        loss = np.sum(np.where(other, np.maximum(0.0, 1.0 - own + scores), 0.0), axis=1)
    else:  # one-vs-rest, squared hinge per class
        sign = np.where(other, -1.0, 1.0)
        loss = np.sum(np.maximum(0.0, 1.0 - sign * scores) ** 2, axis=1)
    return 0.5 * float(np.sum(W * W)) + C * float(loss.sum())


class _Quiet(list):
    """A callback that asks for no objective pass mid-solve."""

    objective_every = None

    def __call__(self, progress):
        self.append(progress)


@pytest.mark.parametrize("watched", [False, True])
@pytest.mark.parametrize("name", ["one-vs-rest", "Crammer-Singer", "Weston-Watkins"])
def test_a_converged_multiclass_solve_ends_on_a_record_of_its_objectives(name, watched):
    # The last record (the last one a callback sees) describes the returned state: its primal,
    # dual and duality gap, as a converged binary solve's last record does, not only the result.
    seen = _Quiet()
    r = SOLVERS[name](X, **({"callback": seen} if watched else {}))
    assert r.status is Status.CONVERGED, name
    last = r.history[-1]
    if watched:
        assert seen[-1] is last
    assert r.primal == pytest.approx(_margin_primal(name, r), rel=1e-9), name
    assert (last.primal, last.dual, last.duality_gap) == (r.primal, r.dual, r.duality_gap), name


@pytest.mark.parametrize("stop", [None, "max_iter", "callback"])
def test_an_svr_solve_ends_on_a_record_of_its_objectives(stop):
    # Converged or stopped early, the last record describes the returned (w, β) with its primal,
    # dual and duality gap, as the result does.
    options, expected = {
        None: ({}, Status.CONVERGED),
        "max_iter": ({"max_iter": 2, "tol": 1e-12}, Status.MAX_ITER),
        "callback": ({"callback": lambda p: p.iteration < 2, "tol": 1e-12}, Status.STOPPED),
    }[stop]
    r = SOLVERS["SVR"](X, **options)
    assert r.status is expected
    w = np.r_[r.w, r.bias]
    residual = np.maximum(np.abs(TARGET - XB @ w) - 0.1, 0.0)
    assert r.primal == pytest.approx(0.5 * w @ w + C * residual.sum(), rel=1e-9)
    last = r.history[-1]
    assert last.iteration == r.n_iter and last.gap == r.gap
    assert (last.primal, last.dual, last.duality_gap) == (r.primal, r.dual, r.duality_gap)


@pytest.mark.parametrize(
    ("name", "module"),
    [("Crammer-Singer", "crammer_singer"), ("Weston-Watkins", "weston_watkins")],
)
def test_a_converged_joint_solve_measures_its_objectives_once(monkeypatch, name, module):
    # The converging pass's record measures the returned state, and the result reuses it: a
    # second measure cost a pass over every (row, class) pair of each of a search's solves.
    import importlib

    formulation = importlib.import_module(f"solvers.multiclass.{module}")
    measured = []
    counting = formulation.margin_objectives
    monkeypatch.setattr(
        formulation, "margin_objectives", lambda *a, **k: measured.append(1) or counting(*a, **k)
    )
    r = SOLVERS[name](X)
    assert r.status is Status.CONVERGED, name
    assert len(measured) == 1, name
    assert r.primal == pytest.approx(_margin_primal(name, r), rel=1e-9), name
