"""Primal truncated Newton for the L2 losses: the finishing method after dual coordinate descent.

Problem, with z_i = w̃ᵀx̃_i (x̃_i = [x_i, bias], the bias feature implicit as everywhere else):

    min_w̃  P(w̃) = ½‖w̃‖² + Σ_i C_i a_i(z_i)²,
           a_i = max(0, 1 − y_i z_i)                   (squared hinge, y_i = ±1)
           a_i = max(0, |y_i − z_i| − ε)              (squared ε-insensitive; ε = 0: squared error)

P is strongly convex with a Lipschitz gradient, ∇P(w̃) = w̃ − X̃ᵀβ(w̃), where β_i = 2 C_i y_i a_i
(classification) or 2 C_i sign(y_i − z_i) a_i (regression); its generalized Hessian is
H = I + X̃_Iᵀ diag(2 C_I) X̃_I over the rows I with a_i > 0 (Keerthi and DeCoste, JMLR 2005;
Lin, Weng, Keerthi, "Trust region Newton method for large-scale logistic regression", JMLR 2008;
LIBLINEAR's line-search successor ``newton.cpp``, Galli and Lin 2021). Each Newton step solves
H s = −∇P approximately by conjugate gradients preconditioned with (1 − ρ) + ρ·diag(H) (ρ = 0.01),
stopped when the residual is ≤ ``CG_RELATIVE`` ‖∇P‖, and takes the step by backtracking (Armijo,
η = 0.01) along s: X̃s is computed once, so each trial costs O(n). Every Hessian-vector product
is one pass over the rows in I.

The stopping rule is ``‖∇P(w̃)‖ ≤ eps · ‖∇P(0)‖`` with ``eps`` chosen by the caller (the dual
drivers state theirs). The answer is certified by the duality gap of (w̃, β(w̃)): β(w̃) is the
dual point the optimality conditions map w̃ to (α_i = 2 C_i a_i for classification, with
w̃ = Σ y_i α_i x̃_i at the optimum), and the dual objective in minimisation form is

    f(β) = ½‖X̃ᵀβ‖² − yᵀβ + ε‖β‖₁ + Σ_i β_i² / (4 C_i),

so P(w̃) + f(β(w̃)) ≥ 0 bounds the distance of both to the optimum. Compiled kernels here take
arrays and scalars only; `newton_finish` is the driver (progress, callback and time budget go
through the caller's `Monitor`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from solvers._core.progress import Progress, Status, relative_duality_gap
from solvers._core.sparse import dot, row_axpy, row_dot, rows_dot_where

CG_RELATIVE = 0.1
CG_MAX_STEPS = 250
CG_MODEL = 0.5
PRECONDITIONER_WEIGHT = 0.01
ARMIJO = 0.01
MAX_BACKTRACKS = 20
METHOD = "newton"


@njit(cache=True, nogil=True)
def hessian_vector(data, indices, indptr, n_features, bias, rows, C, s, out):
    """out = s + Σ_{i ∈ rows} 2 C_i (x̃_iᵀs) x̃_i (one pass over the rows in I)."""
    for j in range(s.shape[0]):
        out[j] = s[j]
    for k in range(rows.shape[0]):
        i = rows[k]
        t = 2.0 * C[i] * row_dot(data, indices, indptr[i], indptr[i + 1], s, n_features, bias)
        if t != 0.0:
            row_axpy(t, data, indices, indptr[i], indptr[i + 1], out, n_features, bias)


@njit(cache=True, nogil=True)
def hessian_diagonal(data, indices, indptr, n_features, bias, rows, C, out):
    """out = diag(H) = 1 + Σ_{i ∈ rows} 2 C_i x̃_ij²."""
    for j in range(out.shape[0]):
        out[j] = 1.0
    for k in range(rows.shape[0]):
        i = rows[k]
        c = 2.0 * C[i]
        for p in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            out[indices[p]] += c * data[p] * data[p]
        out[n_features] += c * bias * bias


@njit(cache=True, nogil=True, inline="always")
def _compensated_add(acc, carry, term):
    """One step of Kahan–Babuška summation: (new sum, new carry). The line search compares
    objective values that differ in their last digits near the optimum, where a plain loop's
    rounding (larger than BLAS's blocked sums) would hide a real decrease."""
    total = acc + term
    if abs(acc) >= abs(term):
        carry += (acc - total) + term
    else:
        carry += (term - total) + acc
    return total, carry


@njit(cache=True, nogil=True, inline="always")
def _excess(y_i, z_i, regression, epsilon):
    """(a_i ≥ 0, the sign with which β_i follows a_i) at the margin z_i."""
    if regression:
        e = y_i - z_i
        a = max(abs(e) - epsilon, 0.0)
        return a, (1.0 if e > 0.0 else (-1.0 if e < 0.0 else 0.0))
    return max(1.0 - y_i * z_i, 0.0), y_i


@njit(cache=True, nogil=True)
def loss_value(y, C, z, dz, step, regression, epsilon):
    """Σ C_i a_i(z_i + step·dz_i)² with compensated summation (`_compensated_add`): the line
    search's trial points cost no n-length array."""
    acc = 0.0
    carry = 0.0
    for i in range(z.shape[0]):
        zi = z[i] if step == 0.0 else z[i] + step * dz[i]
        a, _ = _excess(y[i], zi, regression, epsilon)
        acc, carry = _compensated_add(acc, carry, C[i] * (a * a))
    return acc + carry


@njit(cache=True, nogil=True)
def gradient(data, indices, indptr, n_features, bias, y, C, z, w, regression, epsilon):
    """∇P(w̃) = w̃ − X̃ᵀβ(z), β_i = 2 C_i · direction_i · a_i formed row by row."""
    out = np.zeros(n_features + 1)
    for i in range(z.shape[0]):
        a, direction = _excess(y[i], z[i], regression, epsilon)
        b = 2.0 * C[i] * direction * a
        if b != 0.0:
            row_axpy(b, data, indices, indptr[i], indptr[i + 1], out, n_features, bias)
    for j in range(out.shape[0]):
        out[j] = w[j] - out[j]
    return out


@njit(cache=True, nogil=True)
def active_rows(y, C, z, regression, epsilon):
    """The rows I with a_i > 0 and C_i > 0 (those of the generalized Hessian), ascending."""
    count = 0
    for i in range(z.shape[0]):
        if C[i] > 0.0 and _excess(y[i], z[i], regression, epsilon)[0] > 0.0:
            count += 1
    rows = np.empty(count, dtype=np.int64)
    k = 0
    for i in range(z.shape[0]):
        if C[i] > 0.0 and _excess(y[i], z[i], regression, epsilon)[0] > 0.0:
            rows[k] = i
            k += 1
    return rows


@njit(cache=True, nogil=True)
def dual_point(y, C, z, regression, epsilon):
    """β(w̃) from the margins z."""
    beta = np.empty(z.shape[0])
    for i in range(z.shape[0]):
        a, direction = _excess(y[i], z[i], regression, epsilon)
        beta[i] = 2.0 * C[i] * direction * a
    return beta


@njit(cache=True, nogil=True)
def dual_sums(y, C, beta):
    """(Σ β_i² / (4 C_i) over C_i > 0, yᵀβ, ‖β‖₁), each with compensated summation."""
    quad, quad_carry, lin, lin_carry, l1, l1_carry = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for i in range(beta.shape[0]):
        if C[i] > 0.0:
            quad, quad_carry = _compensated_add(quad, quad_carry, beta[i] * beta[i] / (4.0 * C[i]))
        lin, lin_carry = _compensated_add(lin, lin_carry, y[i] * beta[i])
        l1, l1_carry = _compensated_add(l1, l1_carry, abs(beta[i]))
    return quad + quad_carry, lin + lin_carry, l1 + l1_carry


@njit(cache=True, nogil=True)
def move_margins(z, dz, step):
    """z += step · dz in place (the accepted step's margins)."""
    for i in range(z.shape[0]):
        z[i] = z[i] + step * dz[i]


@dataclass
class L2Loss:
    """The data term Σ C_i a_i(z)² of the module docstring, evaluated from the margins z by
    compiled loops that keep no n-length temporaries (the finish runs beside the dual state,
    and a search runs several at once)."""

    y: np.ndarray
    C: np.ndarray  # per sample, shape (n,)
    regression: bool
    epsilon: float = 0.0

    def value(self, z, dz=None, step=0.0):
        """The data term at z, or at z + step·dz."""
        dz = z if dz is None else dz
        return loss_value(self.y, self.C, z, dz, step, self.regression, self.epsilon)

    def beta(self, z):
        return dual_point(self.y, self.C, z, self.regression, self.epsilon)

    def rows(self, z):
        return active_rows(self.y, self.C, z, self.regression, self.epsilon)

    def dual(self, beta, w_beta):
        """f(β) of the module docstring (minimisation form); rows with C_i = 0 have β_i = 0."""
        quad, lin, l1 = dual_sums(self.y, self.C, beta)
        return 0.5 * dot(w_beta, w_beta) - lin + self.epsilon * l1 + quad


@dataclass
class NewtonOutcome:
    w: np.ndarray  # w̃, n_features + 1 entries
    beta: np.ndarray  # β(w̃) (signed dual point; α = |β| for classification)
    status: Status
    n_iter: int  # Newton steps taken
    grad_ratio: float  # ‖∇P(w̃)‖ / ‖∇P(0)‖
    primal: float
    dual: float  # f(β(w̃)), minimisation form

    @property
    def duality_gap(self):
        return relative_duality_gap(self.primal, -self.dual)


class _Objective:
    """P, ∇P and Hessian products at one point; holds the margins of that point."""

    def __init__(self, csr, bias, loss: L2Loss):
        self.csr, self.bias, self.loss = csr, bias, loss

    def margins(self, v):
        # only the rows with C_i > 0: the others (a fold's held-out rows) add nothing to P, its
        # gradient or its Hessian, so their margins are never computed (they stay 0)
        X = self.csr
        return rows_dot_where(X.data, X.indices, X.indptr, self.loss.C, v, X.n_features, self.bias)

    def gradient(self, w, z):
        X, loss = self.csr, self.loss
        return gradient(X.data, X.indices, X.indptr, X.n_features, self.bias, loss.y, loss.C, z,
                        w, loss.regression, loss.epsilon)  # fmt: skip

    def at(self, w, z):
        """(P, ∇P, rows I) at w̃ with margins z."""
        return 0.5 * dot(w, w) + self.loss.value(z), self.gradient(w, z), self.loss.rows(z)

    def hess(self, rows, s, out):
        X = self.csr
        hessian_vector(X.data, X.indices, X.indptr, X.n_features, self.bias, rows, self.loss.C, s,
                       out)  # fmt: skip

    def preconditioner(self, rows):
        X = self.csr
        diag = np.empty(X.n_features + 1)
        hessian_diagonal(
            X.data, X.indices, X.indptr, X.n_features, self.bias, rows, self.loss.C, diag
        )
        return (1.0 - PRECONDITIONER_WEIGHT) + PRECONDITIONER_WEIGHT * diag


def _conjugate_gradient(objective, rows, grad):
    """s ≈ −H⁻¹∇P by preconditioned CG (`conjugate_gradient`); returns (s, steps)."""
    X = objective.csr
    s = np.zeros_like(grad)
    steps = conjugate_gradient(
        X.data, X.indices, X.indptr, X.n_features, objective.bias, rows, objective.loss.C,
        grad, objective.preconditioner(rows), s, CG_RELATIVE, CG_MODEL, CG_MAX_STEPS,
    )  # fmt: skip
    return s, steps


@njit(cache=True, nogil=True)
def conjugate_gradient(
    data, indices, indptr, n_features, bias, rows, C, grad, precond, s, relative, model_tol,
    max_steps,
):  # fmt: skip
    """Solve H s = −grad approximately into ``s`` (zeros on entry); returns the steps taken.

    Preconditioned by ``precond`` (a diagonal). Stops when the residual is ≤ ``relative``·‖grad‖
    or when the model Q(s) = gradᵀs + ½sᵀHs stops falling: j · (Q_{j−1} − Q_j) ≤ ``model_tol`` ·
    |Q_j| at step j (Nash and Sofer's rule, the one LIBLINEAR's Newton method uses; on
    ill-conditioned raw data the residual rule alone spends hundreds of products on digits the
    line search does not need).
    """
    r = -grad
    z = r / precond
    d = z.copy()
    Hd = np.empty_like(grad)
    rz = dot(r, z)
    limit = relative * np.sqrt(dot(grad, grad))
    model = 0.0
    steps = 0
    while steps < max_steps and np.sqrt(dot(r, r)) > limit:
        steps += 1
        hessian_vector(data, indices, indptr, n_features, bias, rows, C, d, Hd)
        dHd = dot(d, Hd)
        if dHd <= 0.0:
            break
        step = rz / dHd
        for j in range(s.shape[0]):
            s[j] += step * d[j]
            r[j] -= step * Hd[j]
        previous = model
        model = 0.5 * (dot(grad, s) - dot(s, r))
        if model < 0.0 and steps * (previous - model) <= model_tol * abs(model):
            break
        rz_new = 0.0
        for j in range(r.shape[0]):
            z[j] = r[j] / precond[j]
            rz_new += r[j] * z[j]
        beta = rz_new / rz
        for j in range(d.shape[0]):
            d[j] = z[j] + beta * d[j]
        rz = rz_new
    return steps


def _line_search(objective, w, z, f, grad, s):
    """Backtracking along s from w̃: (step, new w̃, new margins, new P) or None if none decreased.
    The accepted step's margins are written over ``z``; the trials make no n-length array."""
    Xs = objective.margins(s)
    gs, ws, ss, ww = dot(grad, s), dot(w, s), dot(s, s), dot(w, w)
    step = 1.0
    for _ in range(MAX_BACKTRACKS):
        f_new = 0.5 * (ww + 2 * step * ws + step * step * ss) + objective.loss.value(z, Xs, step)
        if f_new <= f + ARMIJO * step * gs:
            move_margins(z, Xs, step)
            return step, w + step * s, z, f_new
        step *= 0.5
    return None


def newton_finish(
    csr, bias, loss: L2Loss, w, *, eps, max_iter, monitor, first_iteration, min_steps=0,
    dual_before=None,
) -> NewtonOutcome:  # fmt: skip
    """Minimise P from w̃ (``w``, n_features + 1 entries, not modified) until
    ‖∇P‖ ≤ eps ‖∇P(0)‖ after at least ``min_steps`` steps (fewer when no step along the Newton
    direction decreases P and the rule holds), ``max_iter`` Newton steps, or the monitor says
    stop.

    Each step is reported to
    ``monitor`` as a `Progress` numbered from ``first_iteration`` with ``gap`` = ‖∇P‖/‖∇P(0)‖,
    the primal objective and ``method="newton"``. With ``dual_before`` (the dual objective of
    the caller's other candidate dual point; inf when there is none) the record also carries the
    dual objective of the better of that point and β(w̃), and their duality gap: the
    certificate the caller returns should the solve end at that step.
    """
    objective = _Objective(csr, bias, loss)
    grad0 = objective.gradient(np.zeros_like(w), np.zeros(csr.n_samples))
    scale = np.sqrt(dot(grad0, grad0)) or 1.0
    z = objective.margins(w)
    f, grad, rows = objective.at(w, z)
    status = Status.MAX_ITER
    steps = 0
    while True:
        ratio = np.sqrt(dot(grad, grad)) / scale
        if steps >= min_steps and ratio <= eps:
            status = Status.CONVERGED
            break
        if steps >= max_iter:
            break
        s, _ = _conjugate_gradient(objective, rows, grad)
        found = _line_search(objective, w, z, f, grad, s)
        if found is None:  # no decrease along s: the gradient is at rounding level
            if ratio <= eps:
                status = Status.CONVERGED  # the rule held; only ``min_steps`` asked for more
            break
        steps += 1
        _, w, z, f = found
        f, grad, rows = objective.at(w, z)
        dual = None
        if dual_before is not None:
            dual = min(loss.dual(loss.beta(z), w - grad), dual_before)
        stop = monitor.report(
            Progress(
                iteration=first_iteration + steps,
                elapsed_s=monitor.elapsed(),
                gap=np.sqrt(dot(grad, grad)) / scale,
                active=int(rows.shape[0]),
                primal=f,
                dual=dual,
                duality_gap=relative_duality_gap(f, None if dual is None else -dual),
                method=METHOD,
            )
        )
        if stop is not None:
            status = Status.CONVERGED if np.sqrt(dot(grad, grad)) / scale <= eps else stop
            break
    beta = loss.beta(z)
    # X̃ᵀβ(w̃) = w̃ − ∇P(w̃): the last gradient was taken at this very (w̃, z), so the dual
    # objective costs no further pass over the rows
    dual = loss.dual(beta, w - grad)
    return NewtonOutcome(w, beta, status, steps, np.sqrt(dot(grad, grad)) / scale, f, dual)


class StallDetector:
    """When dual coordinate descent has stalled and the primal Newton method should finish.

    Fed the stopping measure (M − m) of every pass: stalled after ``cap`` passes, or when the
    smallest measure of the last ``window`` passes is more than ``ratio`` times the smallest of
    the ``window`` passes before them (the measure has stopped falling geometrically).
    """

    def __init__(self, cap=300, window=50, ratio=0.5):
        self.cap, self.window, self.ratio = cap, window, ratio
        self.values: list[float] = []

    def stalled(self, measure: float) -> bool:
        self.values.append(measure)
        n = len(self.values)
        if n >= self.cap:
            return True
        if n < 2 * self.window:
            return False
        recent = min(self.values[-self.window :])
        before = min(self.values[-2 * self.window : -self.window])
        return recent > self.ratio * before
