"""The search behind `LinearSVCCV` and `LinearSVRCV`: a warm-started C path per fold, its table,
the calibration from its held-out decision values, and the warm-started refit.

Why the warm start is sound: in every formulation here the dual feasible set at C is a product over
rows of sets that only grow with C (binary and one-vs-rest hinge: 0 ≤ α_i ≤ C_i; squared hinge: α_i
≥ 0, with C entering the objective only; Crammer–Singer: α_i^m ≤ C_i·[m = y_i] with Σ_m α_i^m = 0;
Weston–Watkins: 0 ≤ α_i^m ≤ C_i; SVR: |β_i| ≤ C_i, or unbounded for the squared loss, whatever ε).
So the solution at a smaller C is feasible at the next larger C and the next solve starts from it,
as Chu, Ho, Tsai, Lin and Lin, "Warm start for parameter selection of linear classifiers" (KDD 2015)
do for the dual solvers; each solver first moves that start to the best dual point of its ray, r*α
(`solvers._core.warm_start`), which at small C, where the solution grows about linearly with C, is
most of the way to the next solution. Chu et al. observe that the dual warm start helps little at
large C for the hinge loss, where the dual solver itself converges slowly; the primal (Newton) warm
start that LIBLINEAR's -C uses is better there. So for two classes and the squared hinge a fold's
path turns to the primal Newton method from the previous C's w̃ where the dual passes slow down
(`WarmStarts`; the primal problem is unconstrained, so any w̃ is a valid start). Each solve is
stopped by the solver's own rule (for `LinearSVCCV` its Newton steps by LIBLINEAR's, ``newton_tol``
= 0.1 · tol: the path's solves rank the Cs and give the calibration its held-out values, and the
model returned, the refit, keeps the fit's rule) and reports its duality gap (for a primal solve,
that of (w̃, α(w̃))), so a warm start never changes the optimum it certifies. The refit on all rows
starts from the per-row average of the folds' solutions at the chosen C (feasible by the same
row-wise convexity), or from the mean of their w̃ where every fold ended by Newton.

A fit's ``time_limit`` is one deadline for the whole search (`deadline_of`): each solve gets what
is left of it (`seconds_left`), `run_path` starts no solve after it, and a grid point that it cut
short (a fold's solve ended "time_limit") is not scored, so the choice is made among the points
every fold finished, and the refit, with what is left, still makes its first pass.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from solvers._core.progress import Progress, Status
from solvers._core.sparse import subset_times, subset_times_by_row
from solvers.selection import grid
from solvers.selection.calibration import fit_calibration
from solvers.selection.path import Step, averaged_alpha, out_of_fold, run_path

PRIMAL_AFTER_PASSES = 10
PRIMAL_MAX_STEPS = 5
NEWTON_AFTER_PASSES = 20
LAST_SOLVE_S = 1e-3  # a solve started at the deadline still makes its first pass


def deadline_of(time_limit: float | None) -> float | None:
    """The `time.monotonic()` at which a fit of budget ``time_limit`` seconds, starting now,
    must end (None: no bound)."""
    return None if time_limit is None else time.monotonic() + float(time_limit)


def seconds_left(deadline: float | None) -> float | None:
    """What a solve starting now may take of the fit's budget; at least `LAST_SOLVE_S`, so
    that a solve started at the deadline (the refit) still returns a model after one pass."""
    return None if deadline is None else max(LAST_SOLVE_S, deadline - time.monotonic())


@dataclass(frozen=True)
class SearchProgress:
    """One solver pass inside a search: ``stage`` "path" (with ``fold`` of ``folds_total`` and
    ``c_index`` of ``cs_total``, both from 0; for `LinearSVRCV` a point of the (C, ε) grid) or
    "refit"; ``solves_done`` of ``solves_total`` (refit included) finished when it was sent.

    Each solve's end is a record of its own, its last pass again, counted in ``solves_done``:
    the count moves as each solve ends, and a finished search's last record says every solve
    done. A solve stopped by the callback is not counted. Once the early-stopping rule of an
    int ``Cs`` ends the path, ``cs_total`` is the Cs visited and ``solves_total`` the solves
    finished plus the refit: a fold that had run ahead of the stop point counts the solves it
    finished there, and the one it is running stops at its next pass, uncounted. So the share
    done, ``solves_done / solves_total``, never moves back and ends at 1."""

    stage: str
    fold: int | None
    c_index: int | None
    C: float
    epsilon: float | None
    solves_done: int
    solves_total: int
    progress: Progress
    folds_total: int | None = None
    cs_total: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage, "fold": self.fold, "c_index": self.c_index, "C": self.C,
            "epsilon": self.epsilon, "solves_done": self.solves_done,
            "solves_total": self.solves_total, "folds_total": self.folds_total,
            "cs_total": self.cs_total, **self.progress.as_dict(),
        }  # fmt: skip


class WarmStarts:
    """Per fold, how the next solve starts: from the previous C's α (dual coordinate descent) or,
    for the L2 losses of two classes, from its w̃ by the primal Newton method.

    The caller allows the primal start (``primal``) only where the folds have more rows than
    features: LIBLINEAR's guide recommends its primal solver for n ≫ d, and with d > n, as on
    text data, each Newton step costs many passes while the dual passes stay cheap. A fold turns
    to the primal start once a solve needed ``PRIMAL_AFTER_PASSES`` dual passes or stalled and
    ended by Newton: there the dual passes are slow from any start, while Newton from the
    previous w̃ takes a few steps (Chu et al., KDD 2015; LIBLINEAR's -C). It turns back to the
    dual start for good when a primal solve needed more than ``PRIMAL_MAX_STEPS`` Newton steps:
    the previous w̃ was not close (news20, were it allowed, needs 9 to 27 steps per C where a9a
    needs 0 to 2). A dual start whose previous solve ended by Newton (its passes stalled, or the
    fold has left the primal start; for one-vs-rest, some class's passes stalled: each class
    then leaves the passes by the same cap) hands over to the Newton finish after
    ``NEWTON_AFTER_PASSES`` passes instead of waiting for the stall detector (at least 100
    passes): at a larger C the passes stall again, and on news20 (two classes, C from 0.02 up)
    the 80 passes saved cost more than the few Newton steps they would have spared. The rules
    count passes and steps, not seconds, so a search's result does not depend on the load of
    the machine. Each fold's steps run one at a time, so its entries need no lock.
    """

    def __init__(self, n_folds: int, primal: bool, bias: float):
        self.bias = bias
        self.dual_only = [not primal] * n_folds

    def primal_start(self, fold: int, previous) -> np.ndarray | None:
        """w̃ (weights, bias weight last) of ``previous`` when the fold's next solve starts the
        primal method from it, else None."""
        if previous is None or self.dual_only[fold]:
            return None
        if previous.method != "newton" and previous.n_iter < PRIMAL_AFTER_PASSES:
            return None
        return weights_of(previous, self.bias)

    def newton_after(self, previous) -> int | None:
        """The dual passes after which the next solve hands over to Newton: ``NEWTON_AFTER_PASSES``
        when the previous C's solve ended by Newton, else None (the solver's stall detector)."""
        if previous is not None and previous.method == "newton":
            return NEWTON_AFTER_PASSES
        return None

    def record(self, fold: int, primal: bool, result) -> None:
        if primal and result.n_iter > PRIMAL_MAX_STEPS:
            self.dual_only[fold] = True


def weights_of(result, bias: float) -> np.ndarray:
    """w̃ of a binary result: its weights with the bias feature's weight last."""
    w = np.asarray(result.w, dtype=np.float64)
    return np.append(w, result.bias / bias if bias else 0.0)


def dual_weights(result, bias: float):
    """The weights a solve's α holds, for the next solve started from that α (it then skips
    the pass that rebuilds them): w̃ for two classes (bias weight last), (W, bias weights) for
    one-vs-rest. None unless every class ended by its dual passes: a Newton finish returns w̃,
    not Σ y α x̃ of the α(w̃) it reports."""
    if result is None or result.method != "dcd":
        return None
    w = np.asarray(result.w, dtype=np.float64)
    if w.ndim == 1:
        return weights_of(result, bias)
    intercept = np.asarray(result.bias, dtype=np.float64)
    return w, (intercept / bias if bias else np.zeros(w.shape[0]))


def averaged_primal(steps: dict[int, Step], bias: float) -> np.ndarray | None:
    """The mean of the folds' w̃ at one C when every fold ended by Newton (the refit then starts
    the primal method from it), else None."""
    results = [step.result for step in steps.values()]
    if any(r.method != "newton" for r in results):
        return None
    return np.mean([weights_of(r, bias) for r in results], axis=0)


def thread_budget(n_jobs, n_folds: int) -> tuple[int, int]:
    """(fold threads, threads inside one solve): folds first, never more than n_jobs in all."""
    total = int(n_jobs) if n_jobs else (os.cpu_count() or 1)
    outer = max(1, min(total, n_folds))
    return outer, max(1, total // outer)


def held_out_decisions(X, test, coef, intercept) -> np.ndarray:
    """x̃ᵀw for the ``test`` rows of X (`CSRArrays`), read in place (no copy of the rows)."""
    coef = np.asarray(coef, dtype=np.float64)
    out = np.empty((len(test), coef.shape[0]))
    if coef.shape[0] > 1 and coef.T.flags.c_contiguous:  # one-vs-rest's (n_features, k) weights
        subset_times_by_row(X.data, X.indices, X.indptr, test, coef.T, out)
    else:
        coef = np.ascontiguousarray(coef)  # the model's own array, as a rule
        subset_times(X.data, X.indices, X.indptr, test, coef, out)
    out += intercept
    return out[:, 0] if coef.shape[0] == 1 else out


def _lighten(steps: dict[int, Step]) -> None:
    """Keep of a finished C's steps what the table needs: the weights, the dual variables, the
    held-out values and the history go (the fold's next solve holds its own reference to the
    result), so that the search holds the models of one C per fold, not of every C."""
    for step in steps.values():
        step.result = replace(step.result, w=None, alpha=None, history=[])
        step.decisions = None


class SolveReport:
    """The callback of one solve of a search: hands each pass to the user's callback as a
    `SearchProgress`, stops the solve when the search stops or when it lies past an early stop,
    and counts and reports its end (`end`)."""

    def __init__(self, search: Search, stage: str, fold, c_index, point: dict):
        self.search, self.stage, self.fold, self.c_index = search, stage, fold, c_index
        self.C, self.epsilon = float(point["C"]), point.get("epsilon")
        self.last: Progress | None = None  # the latest pass, repeated at the end
        # the objectives cost a pass each: computed mid-solve only as often as the user's
        # callback asks (`objective_interval`), never when it is there only to stop the search
        user = search.owner.callback
        self.objective_every = None if user is None else getattr(user, "objective_every", 10)

    def __call__(self, progress: Progress):
        search = self.search
        if search.stop.is_set() or search.beyond_stop(self.c_index):
            return False
        self.last = progress
        if search.owner.callback is None:
            return None
        with search.lock:  # the counts read in the order of the calls: they never move back
            return self._send(progress)

    def end(self, result) -> None:
        """Count the solve as finished and report it, unless it or the search was stopped."""
        search = self.search
        with search.lock:
            stopped = result.status is Status.STOPPED or search.stop.is_set()
            if stopped or search.beyond_stop(self.c_index):
                return
            search.done += 1
            if search.owner.callback is not None and self.last is not None:
                self._send(self.last)

    def _send(self, progress: Progress):
        search = self.search
        record = SearchProgress(
            self.stage, self.fold, self.c_index, self.C, self.epsilon, search.done, search.total,
            progress, len(search.folds), search.limit,
        )  # fmt: skip
        if search.owner.callback(record) is False:
            search.stop.set()
            return False
        return None


class Search:
    """One fit's search state: the grid, folds, the estimator template and the callback."""

    def __init__(self, owner, X, target, grid_points, fold_list, *, fit_one, decisions_of,
                 primal=False, bias=0.0, row_axis=0, calibrating=False,
                 deadline=None, hand_weights=False):  # fmt: skip
        self.owner, self.X, self.target = owner, X, target
        # the fit's end (`deadline_of`): every solve gets what is left of it, no solve starts
        # after it, and a grid point whose solves it cut short is not scored
        self.deadline, self.out_of_time = deadline, False
        self.base = owner._template()
        self.points = grid_points  # list of dicts of parameters, in path order
        self.folds = fold_list
        self.fit_one, self.decisions_of = fit_one, decisions_of
        self.scoring = grid.check_scoring(owner.scoring, owner._classifier)
        self.outer, self.inner = thread_budget(owner.n_jobs, len(fold_list))
        self.lock, self.stop = threading.Lock(), threading.Event()
        # the path's length and the solves of the search, until an early stop cuts them
        self.limit = len(grid_points)
        self.refits = 1 if owner.refit else 0
        self.total = self.limit * len(fold_list) + self.refits
        self.done = 0  # solves finished (SolveReport.end)
        self.means: list[float] = []
        self.scores: dict[int, list[float]] = {}  # per grid point that every fold finished
        # (index, held-out values, the refit's α and w̃ starts) of the best point so far; the
        # held-out values (one per row) are kept only for a calibration to fit on
        self.calibrating = calibrating
        self.best: tuple[int, np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self.starts = WarmStarts(len(fold_list), primal, bias)
        self.bias, self.row_axis = bias, row_axis  # α's axis of rows
        # whether the solvers take the previous C's weights with its α (`dual_weights`)
        self.hand_weights = hand_weights

    def template(self, point: dict, stage: str, fold, c_index):
        # a shallow copy of one validated template per solve, not scikit-learn's clone, whose
        # signature inspection cost more than a short solve at small C
        est = copy.copy(self.base)
        for name, value in point.items():
            setattr(est, name, value)
        if hasattr(est, "n_jobs"):
            est.n_jobs = self.inner
        if self.deadline is not None:
            est.time_limit = seconds_left(self.deadline)
        est.callback = SolveReport(self, stage, fold, c_index, point)
        return est

    def beyond_stop(self, c_index) -> bool:
        """Whether a path solve lies past the point where the path stopped early."""
        return c_index is not None and c_index >= self.limit

    def solve(self, i: int, f: int, previous):
        point = self.points[i]
        if point.get("restart"):
            previous = None
        est = self.template({k: v for k, v in point.items() if k != "restart"}, "path", f, i)
        train, test = self.folds[f]
        alpha0 = None if previous is None else previous.alpha
        start = self.starts.primal_start(f, previous)
        warm_weights = None
        if self.hand_weights and start is None:
            warm_weights = dual_weights(previous, self.bias)
        result = self.fit_one(
            est, train, alpha0, start, self.starts.newton_after(previous), warm_weights
        )
        self.starts.record(f, start is not None, result)
        est.callback.end(result)
        return result, self.decisions_of(est, result, test)

    def score(self, step: Step) -> float:
        test = self.folds[step.fold][1]
        if isinstance(self.scoring, str):
            return grid.FAST_SCORES[self.scoring](self.target[test], step.decisions)
        est = self.owner._stand_in(step.result)
        return float(self.scoring(est, self.X.to_scipy()[test], self.owner._labels_of(test)))

    def complete(self, i: int, steps: dict[int, Step]) -> bool:
        if any(s.result.status is Status.TIME_LIMIT for s in steps.values()):
            self.out_of_time = True  # cut short by the fit's deadline: not a finished point
            return False
        if self.stop.is_set() or any(s.result.status is Status.STOPPED for s in steps.values()):
            return False
        scores = [self.score(steps[f]) for f in range(len(self.folds))]
        self.scores[i] = scores
        self.means.append(float(np.mean(scores)))
        if self.best is None or self.means[-1] > self.means[self.best[0]]:
            shape = (len(self.target),) + np.shape(steps[0].decisions)[1:]
            # the refit's starts, taken now: the folds' α (four fifths of the rows each) are
            # then let go, and the search holds one n-length α instead of k
            alpha0 = averaged_alpha(steps, self.folds, len(self.target), self.row_axis)
            held_out = out_of_fold(steps, self.folds, shape) if self.calibrating else None
            self.best = (i, held_out, alpha0, averaged_primal(steps, self.bias))
        _lighten(steps)
        if self.owner._early_stop and grid.should_stop(self.means):
            self.stop_after(i)
            return False
        return True

    def stop_after(self, i: int) -> None:
        """End the path at grid point ``i``: the totals shrink to the solves finished (every
        fold has finished ``i``) and the refit, and any solve past ``i`` stops at its next pass."""
        with self.lock:
            self.limit = i + 1
            self.total = self.done + self.refits

    def run(self):
        state = run_path(len(self.points), len(self.folds), self.solve, self.outer, self.complete,
                         deadline=self.deadline)  # fmt: skip
        self.out_of_time = self.out_of_time or state.out_of_time
        return state


def cv_table(search: Search, state) -> dict[str, np.ndarray]:
    """scikit-learn-style ``cv_results_``: one entry per grid point that every fold finished."""
    n_folds = len(search.folds)
    rows = sorted(search.scores)
    table: dict[str, Any] = {}
    for name in search.points[0]:
        if name != "restart":
            table[f"param_{name}"] = np.array([search.points[i][name] for i in rows])
    scores = np.array([search.scores[i] for i in rows]).reshape(len(rows), n_folds)
    table["mean_test_score"] = scores.mean(axis=1)
    table["std_test_score"] = scores.std(axis=1)
    order = np.argsort(-table["mean_test_score"], kind="stable")
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(1, len(rows) + 1)
    table["rank_test_score"] = rank
    for f in range(n_folds):
        steps = [state.steps[i][f] for i in rows]
        table[f"split{f}_test_score"] = scores[:, f]
        table[f"split{f}_n_iter"] = np.array([int(s.result.n_iter) for s in steps])
        table[f"split{f}_fit_time"] = np.array([s.seconds for s in steps])
        table[f"split{f}_status"] = np.array([str(s.result.status) for s in steps])
        table[f"split{f}_duality_gap"] = np.array([float(s.result.duality_gap) for s in steps])
        table[f"split{f}_method"] = np.array([str(s.result.method) for s in steps])
    times = np.array([[state.steps[i][f].seconds for f in range(n_folds)] for i in rows])
    table["mean_fit_time"] = times.reshape(len(rows), n_folds).mean(axis=1)
    return table, scores, rows


def finish(search: Search, state, *, calibrate: str | None):
    """Table, best point, held-out calibration and the refit's warm start, set on the owner."""
    owner = search.owner
    table, scores, rows = cv_table(search, state)
    owner.cv_results_, owner.scores_ = table, scores
    owner.search_status_ = "complete"
    if search.stop.is_set():
        owner.search_status_ = "stopped"
    elif search.out_of_time:
        owner.search_status_ = "time_limit"
    best_index, oof, alpha0 = 0, None, None
    if search.best is not None:
        best_index, oof, alpha0, _ = search.best
    best = {k: v for k, v in search.points[best_index].items() if k != "restart"}
    owner.best_params_ = best
    owner.C_ = float(best["C"])
    owner.best_score_ = float(search.means[best_index]) if search.means else float("nan")
    if owner._classifier:
        owner.calibration_ = None
    if calibrate and oof is not None:
        seen = ~np.isnan(oof if oof.ndim == 1 else oof[:, 0])
        owner.calibration_ = fit_calibration(oof[seen], search.target[seen], calibrate)
    return best, alpha0
