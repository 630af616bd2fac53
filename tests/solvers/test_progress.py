"""The callback protocol: a callback may say how often it wants the (costly) objectives."""

import math

import numpy as np
import scipy.sparse as sp

from solvers import solve_binary
from solvers._core.progress import Monitor, Progress, objective_interval


class Recorder:
    def __init__(self, objective_every):
        self.objective_every = objective_every
        self.records = []

    def __call__(self, progress):
        self.records.append(progress)


def test_objective_interval_rules():
    assert objective_interval(None, None, 10) == math.inf
    assert objective_interval(None, 4, 10) == 4
    assert objective_interval(lambda p: None, None, 10) == 10
    assert objective_interval(Recorder(None), None, 10) == math.inf
    assert objective_interval(Recorder(3), None, 10) == 3
    assert objective_interval(Recorder(3), 7, 10) == 7


def _problem():
    rng = np.random.default_rng(1)
    X = sp.random(300, 40, density=0.2, format="csr", random_state=2)
    y = np.where(X @ rng.normal(size=40) + 0.1 * rng.normal(size=300) > 0, 1.0, -1.0)
    return X, y


def test_binary_solver_honours_the_callbacks_objective_interval():
    X, y = _problem()
    never, every = Recorder(None), Recorder(1)
    a = solve_binary(X, y, loss="hinge", tol=1e-6, callback=never, shrinking=False)
    b = solve_binary(X, y, loss="hinge", tol=1e-6, callback=every, shrinking=False)
    assert a.n_iter > 3 and a.n_iter == b.n_iter
    # no objective pass is asked for before the end; the converged pass's record, which closes
    # the history, has those of the returned state (as the multiclass solvers' last record)
    assert all(p.primal is None for p in never.records[:-1])
    assert never.records[-1].primal == a.primal and never.records[-1].iteration == a.n_iter
    assert all(p.primal is not None and p.dual is not None for p in every.records)
    assert a.primal == b.primal and a.dual is not None


def test_multiclass_solvers_honour_the_callbacks_objective_interval():
    from solvers import solve_crammer_singer, solve_ovr, solve_weston_watkins

    X, _ = _problem()
    y = np.random.default_rng(3).integers(0, 3, size=X.shape[0])
    for solve in (solve_crammer_singer, solve_weston_watkins, solve_ovr):
        never, every = Recorder(None), Recorder(1)
        a = solve(X, y, 3, tol=1e-4, callback=never)
        b = solve(X, y, 3, tol=1e-4, callback=every)
        np.testing.assert_array_equal(a.w, b.w)
        # the converged pass's record, which closes the history, has the objectives of the
        # returned state; none before it
        assert all(p.primal is None for p in never.records if p.iteration < a.n_iter)
        assert never.records[-1].primal == a.primal and never.records[-1].iteration == a.n_iter
        assert any(p.primal is not None for p in every.records), solve.__name__


def test_a_conclusion_on_the_last_records_state_completes_its_objectives():
    # The returned state was measured by the last pass, whose record lacks the objectives: the
    # history ends on the record that has them, and the callback sees it.
    seen = []
    monitor = Monitor(seen.append)
    monitor.report(Progress(iteration=3, elapsed_s=0.0, gap=0.5))
    final = monitor.conclude(
        Progress(iteration=3, elapsed_s=0.1, gap=0.5, primal=2.0, dual=-1.5, duality_gap=0.25)
    )
    assert len(monitor.history) == 1 and monitor.history[-1] is final is seen[-1]
    assert (final.primal, final.dual, final.duality_gap) == (2.0, -1.5, 0.25)
