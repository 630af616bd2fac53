"""The binary solver's finishing method: the primal truncated Newton method after a dual stall.

Dual coordinate descent is slow exactly where the problem is hard (large C, data far from
separable, raw unscaled features): its M − m stops falling. For the L2 losses (squared hinge,
squared error) the primal P(w̃) is twice differentiable almost everywhere and strongly convex, so
`solvers._core.newton` finishes the solve from the dual's w̃, as LIBLINEAR does after its dual
passes (its -s 1 switches to -s 2).

When: `solvers._core.newton.StallDetector` (after ``STALL_CAP`` passes, or as soon as the smallest
M − m of the last ``STALL_WINDOW`` passes is more than half that of the window before).

Stopping rule of the finishing method, derived from the dual's ``tol``:

    ‖∇P(w̃)‖ ≤ ε′ ‖∇P(0)‖,   ε′ = 0.01 · tol · max(1, min(n₊, n₋)) / n   (classification),
                              ε′ = 0.01 · tol                            (squared error),

with n₊, n₋ the rows of each class among the n with C_i > 0 (LIBLINEAR's -s 2 scaling of its
tolerance by the smaller class, at a tenth of its default for tol = 0.1). A caller may give the
factor instead (``newton_tol``, in place of 0.01 · tol): the solves of a path over C use
0.1 · tol, LIBLINEAR's own rule where its -s 1 switches to -s 2 (a tenth of its -e) and, at
tol = 0.1, that of its -C search (-s 2 -e 0.01); their held-out values rank the Cs and fit the
calibration, and the model a search returns, its refit, keeps the rule above. After a switch,
``status == "converged"`` means this rule held; ``gap`` is ‖∇P(w̃)‖ / ‖∇P(0)‖; ``method`` is
``"newton"``. The certificate: α(w̃) = 2 C_i max(0, 1 − y_i w̃ᵀx̃_i) (for squared error
2 C_i (y_i − w̃ᵀx̃_i) sign(y_i)), the dual point the optimality conditions map w̃ to, or the dual
iterate of the passes before the switch when its dual objective is better (on raw, badly scaled
data α(w̃) becomes a good dual point only once w̃ is very accurate); ``alpha`` is that point,
``duality_gap`` is that of (w̃, alpha), a bound on the distance of both to the optimum, and
``pg_max``/``pg_min`` are alpha's projected gradients.

`solve_from_primal` runs the same method with no dual passes at all, from a given w̃ (a path over C,
warm-started from the previous C's w̃ where the dual passes would stall: Chu, Ho, Tsai, Lin and Lin,
KDD 2015, find the primal warm start the better one there). It takes at least one Newton step
(unless no step along the Newton direction decreases P): the rule is relative to ‖∇P(0)‖, which
grows with C while the gradient at the previous C's w̃ does not, so a larger C's solve could
otherwise end where it began and the path would score the previous C's model again under the new C.
Its result is certified by the duality gap of (w̃, α(w̃)); it measures no projected gradients
(``pg_*`` are None): they would cost two more passes and say nothing the duality gap does not.
"""

from __future__ import annotations

import math

import numpy as np

from solvers._core.newton import METHOD, L2Loss, StallDetector, newton_finish
from solvers._core.progress import Progress, SolveResult, finite_or_none, relative_duality_gap
from solvers._core.sparse import weighted_row_sum

STALL_CAP = 300
STALL_WINDOW = 50
FINISHING_LOSSES = ("squared_hinge", "squared_error")
PATH_NEWTON_TOL = 0.1  # newton_tol = this · tol for the solves of a path over C (docstring)


def stall_detector(loss: str, enabled: bool, cap: int | None = None) -> StallDetector | None:
    """A detector for the losses Newton can finish, or None; ``cap`` replaces ``STALL_CAP``."""
    if not enabled or loss not in FINISHING_LOSSES:
        return None
    return StallDetector(cap=STALL_CAP if cap is None else cap, window=STALL_WINDOW)


def primal_tolerance(y, C, tol: float, regression: bool, newton_tol: float | None = None) -> float:
    """ε′ of the module docstring; ``newton_tol`` replaces its factor 0.01 · tol."""
    factor = 0.01 * tol if newton_tol is None else newton_tol
    if regression:
        return factor
    kept = C > 0
    n = max(int(kept.sum()), 1)
    positives = int((y[kept] > 0).sum())
    return factor * max(1, min(positives, n - positives)) / n


def finish(state, y, tol, n_iter, max_iter, monitor, loss: str, newton_tol=None) -> SolveResult:
    """Run the finishing method from the state's w̃ and build the result (module docstring)."""
    csr = state.csr
    C = np.ascontiguousarray(np.broadcast_to(state.C, (csr.n_samples,)), dtype=np.float64)
    regression = loss == "squared_error"
    l2 = L2Loss(np.asarray(y, dtype=np.float64), C, regression)
    eps = primal_tolerance(l2.y, C, tol, regression, newton_tol)
    # the dual point of the passes stays a candidate for the certificate: on raw data, α(w̃)
    # becomes a good dual point only once w̃ is very accurate
    dual_before = state.dual_objective()
    outcome = newton_finish(
        csr, state.bias, l2, state.w, eps=eps, max_iter=max(max_iter - n_iter, 1),
        monitor=monitor, first_iteration=n_iter, dual_before=dual_before,
    )  # fmt: skip
    if outcome.dual <= dual_before:
        record_alpha = state.record.values[0 :: state.record.width]
        record_alpha[:] = outcome.beta
        np.negative(record_alpha, out=record_alpha, where=l2.y < 0)  # α_i = s_i β_i
        # w̃(α) = Σ s_i α_i x̃_i, for the projected gradients of α(w̃)
        state.w = weighted_row_sum(
            outcome.beta, csr.data, csr.indices, csr.indptr, csr.n_features, state.bias
        )
    else:
        outcome.dual = dual_before
    M, m = state.full_range()
    alpha = state.take_alpha()  # the record's buffer, shrunk to α: no copy
    n_iter += outcome.n_iter
    final = monitor.conclude(_final_progress(monitor, n_iter, outcome, M, m, state.index.shape[0]))
    pg = {
        "pg_max": finite_or_none(M),
        "pg_min": finite_or_none(m),
        "pg_range": finite_or_none(M - m),
    }
    return _as_result(outcome, csr.n_features, state.bias, alpha, n_iter, final, monitor, **pg)


def solve_from_primal(
    csr, bias, y, C, w_start, tol, max_iter, monitor, loss: str, newton_tol=None
) -> SolveResult:
    """The primal Newton method from ``w_start`` (w̃, n_features + 1 entries), no dual passes
    (module docstring); ``C`` as the binary driver holds it (shape (1,) or (n_samples,))."""
    C = np.ascontiguousarray(np.broadcast_to(C, (csr.n_samples,)), dtype=np.float64)
    regression = loss == "squared_error"
    l2 = L2Loss(np.asarray(y, dtype=np.float64), C, regression)
    outcome = newton_finish(
        csr, bias, l2, np.asarray(w_start, dtype=np.float64),
        eps=primal_tolerance(l2.y, C, tol, regression, newton_tol), max_iter=max_iter,
        monitor=monitor, first_iteration=0, min_steps=1, dual_before=math.inf,
    )  # fmt: skip
    nan = float("nan")
    final = monitor.conclude(_final_progress(monitor, outcome.n_iter, outcome, nan, nan, 0))
    alpha = outcome.beta  # α_i = s_i β_i, in place: the outcome's own array
    np.negative(alpha, out=alpha, where=l2.y < 0)
    return _as_result(outcome, csr.n_features, bias, alpha, outcome.n_iter, final, monitor)


def _as_result(outcome, d, bias, alpha, n_iter, final, monitor, **pg) -> SolveResult:
    """The Newton outcome (w̃ with the bias entry last) as a `SolveResult`."""
    return SolveResult(
        w=outcome.w[:d],
        bias=float(bias * outcome.w[d]),
        alpha=alpha,
        n_iter=n_iter,
        status=outcome.status,
        gap=final.gap,
        primal=outcome.primal,
        dual=outcome.dual,
        history=monitor.history,
        duality_gap=outcome.duality_gap,
        method=METHOD,
        **pg,
    )


def _final_progress(monitor, n_iter, outcome, M, m, active):
    return Progress(
        iteration=n_iter,
        elapsed_s=monitor.elapsed(),
        gap=outcome.grad_ratio,
        pg_max=finite_or_none(M),
        pg_min=finite_or_none(m),
        pg_range=finite_or_none(M - m),
        active=int(active),
        primal=outcome.primal,
        dual=outcome.dual,
        duality_gap=relative_duality_gap(outcome.primal, -outcome.dual),
        method=METHOD,
    )
