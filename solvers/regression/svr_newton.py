"""LinearSVR's finishing method: the L2 loss ends by primal truncated Newton after a dual stall.

For the squared ε-insensitive loss (LIBLINEAR's -s 12, which switches to its primal -s 11 the same
way), a solve whose passes stall (`solvers._core.newton.StallDetector` on the relative violation
sum of each pass: after ``STALL_CAP`` passes, or when it stops falling geometrically) is finished
by `solvers._core.newton` from the dual's w̃, with the stopping rule

    ‖∇P(w̃)‖ ≤ ε′ ‖∇P(0)‖,   ε′ = 0.01 · tol

(tol = 0.1 gives LIBLINEAR's -s 11 default, 0.001). After a switch ``status == "converged"``
means this rule held, ``gap`` is ‖∇P‖/‖∇P(0)‖, ``method`` is ``"newton"``, and ``alpha`` is
β(w̃) = 2 C_i sign(y_i − z_i) max(0, |y_i − z_i| − ε) or the dual iterate before the switch,
whichever has the better dual objective; ``duality_gap`` is that of (w̃, alpha).
"""

from __future__ import annotations

import numpy as np

from solvers._core.newton import METHOD, L2Loss, StallDetector, newton_finish
from solvers._core.progress import Progress, SolveResult, relative_duality_gap

STALL_CAP = 300
STALL_WINDOW = 50


def stall_detector(loss: str, enabled: bool) -> StallDetector | None:
    if not enabled or loss != "squared_epsilon_insensitive":
        return None
    return StallDetector(cap=STALL_CAP, window=STALL_WINDOW)


def finish(X, y, c, epsilon, bias, beta, w, tol, n_iter, max_iter, monitor, dual_before):
    """Run the finishing method from w̃ (``w``, n_features + 1 entries) and build the result."""
    loss = L2Loss(np.asarray(y, dtype=np.float64), c, regression=True, epsilon=float(epsilon))
    outcome = newton_finish(
        X, bias, loss, w, eps=0.01 * tol, max_iter=max(max_iter - n_iter, 1), monitor=monitor,
        first_iteration=n_iter, dual_before=dual_before,
    )  # fmt: skip
    if outcome.dual <= dual_before:
        beta = outcome.beta
    else:
        outcome.dual = dual_before
    n_iter += outcome.n_iter
    duality_gap = relative_duality_gap(outcome.primal, -outcome.dual)
    final = monitor.conclude(
        Progress(
            iteration=n_iter,
            elapsed_s=monitor.elapsed(),
            gap=outcome.grad_ratio,
            primal=outcome.primal,
            dual=outcome.dual,
            duality_gap=duality_gap,
            method=METHOD,
        )
    )
    d = X.n_features
    return SolveResult(
        w=outcome.w[:d].copy(),
        bias=float(bias * outcome.w[d]),
        alpha=beta,
        n_iter=n_iter,
        status=outcome.status,
        gap=final.gap,
        primal=outcome.primal,
        dual=outcome.dual,
        history=monitor.history,
        duality_gap=duality_gap,
        method=METHOD,
    )
