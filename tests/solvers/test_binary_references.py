"""solve_binary against LIBLINEAR (liblinear-official) and scikit-learn's LinearSVC."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from liblinear.liblinear import liblinear, parameter, problem, toPyModel
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from solvers.binary import solve_binary
from tests.solvers._binary_helpers import load, primal, synthetic, w_tilde_of

SOLVER = {"hinge": 3, "squared_hinge": 1}


def liblinear_w_tilde(X, y, options, bias):
    """[w, w_bias] of a LIBLINEAR binary model, oriented so that +1 is the positive class."""
    prob = problem(y, sp.csr_matrix(X, dtype=np.float64))
    prob.set_bias(bias if bias > 0 else -1)
    param = parameter(options + f" -B {bias if bias > 0 else -1} -q")
    liblinear.set_print_string_function(param.print_func)
    model = toPyModel(liblinear.train(prob, param))
    n_w = model.get_nr_feature() + (1 if bias > 0 else 0)
    w = np.ctypeslib.as_array(model.w, shape=(n_w,)).copy()
    return w if model.get_labels()[0] == 1 else -w


def converged_primal(X, y, C, loss):
    """The primal of scikit-learn's LinearSVC solved to tol 1e-10 (its bias regularized: -B 1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a9a's hinge: within 2e-6 of optimal
        model = LinearSVC(loss=loss, C=C, tol=1e-10, max_iter=200_000, random_state=0).fit(X, y)
    return primal(X, y, np.append(model.coef_.ravel(), model.intercept_), C, loss, 1.0)


@pytest.mark.parametrize("name", ["heart_scale", "breast-cancer", "a9a", "reuters-money-fx"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_default_tol_primal_within_a_tenth_of_a_percent(name, loss):
    X, y = load(name)
    C = 0.5
    ours = solve_binary(X, y, loss=loss, C=C, bias=1.0)
    ref = liblinear_w_tilde(X, y, f"-s {SOLVER[loss]} -c {C} -e 0.1", 1.0)
    p_ref = primal(X, y, ref, C, loss, 1.0)
    # both stop early at tol 0.1; ours may land lower (better), never more than 0.1% higher.
    # How much lower depends on LIBLINEAR's pass order (its process-wide RNG, so on the tests
    # run before: 2.2% on reuters-money-fx in one order), so the lower side is held by bounds
    # that do not depend on it: the dual bound, which neither primal may cross, and the optimum,
    # below which no primal can be. LIBLINEAR at -e 1e-6 is not that optimum for the hinge (its
    # dual solver stops at 1,000 passes: 0.09% above it on heart_scale in one order), so the
    # optimum comes from scikit-learn's copy of that solver, seeded and with a far higher cap.
    assert ours.primal <= p_ref * (1 + 1e-3)
    assert -ours.dual <= min(ours.primal, p_ref) * (1 + 1e-12)
    assert ours.primal >= converged_primal(X, y, C, loss) * (1 - 1e-4)


@pytest.mark.parametrize("name", ["heart_scale", "breast-cancer", "reuters-money-fx"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_tight_tol_never_worse_than_liblinear(name, loss):
    X, y = load(name)
    tol = 1e-7 if loss == "hinge" else 1e-6
    ours = solve_binary(X, y, loss=loss, C=1.0, bias=1.0, tol=tol, max_iter=100_000)
    ref = liblinear_w_tilde(X, y, f"-s {SOLVER[loss]} -c 1 -e {tol}", 1.0)
    p_ref = primal(X, y, ref, 1.0, loss, 1.0)
    # Never worse than LIBLINEAR, whatever pass order its process-wide RNG gives it: its primal
    # is never below the optimum, and ours is certified within 1e-8 of it by our duality gap.
    # (At tol 1e-7 our hinge gap is 1.4e-9 relative on reuters-money-fx, and LIBLINEAR's hinge
    # solver lands from 1.9e-9 to 1e-6 above the optimum with the order: a 1e-9 margin held
    # for the orders seen, not for every order.)
    assert 0 <= ours.primal + ours.dual <= 1e-8 * ours.primal
    assert ours.primal <= p_ref * (1 + 1e-8)
    if loss == "squared_hinge":
        # LIBLINEAR's primal Newton method (-s 2) converges to the optimum: we match it
        newton = liblinear_w_tilde(X, y, "-s 2 -c 1 -e 1e-8", 1.0)
        assert ours.primal == pytest.approx(primal(X, y, newton, 1.0, loss, 1.0), rel=1e-6)
        np.testing.assert_allclose(w_tilde_of(ours, 1.0), newton, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_class_weights_match_liblinear_wi(loss):
    # -w1 3 -w-1 0.5: C_i = C · weight(y_i)
    X, y = load("breast-cancer")
    C = np.where(y > 0, 3.0, 0.5) * 0.7
    tol = 1e-7 if loss == "hinge" else 1e-6
    ours = solve_binary(X, y, loss=loss, C=C, bias=1.0, tol=tol, max_iter=100_000)
    if loss == "squared_hinge":
        ref = liblinear_w_tilde(X, y, "-s 2 -c 0.7 -w1 3 -w-1 0.5 -e 1e-8", 1.0)
        assert ours.primal == pytest.approx(primal(X, y, ref, C, loss, 1.0), rel=1e-6)
    else:
        ref = liblinear_w_tilde(X, y, f"-s 3 -c 0.7 -w1 3 -w-1 0.5 -e {tol}", 1.0)
        p_ref = primal(X, y, ref, C, loss, 1.0)
        # LIBLINEAR's hinge dual stops at its pass cap, where depends on its process-wide RNG
        # state (0.0003% to 0.23% above the optimum over 1,000 orders, near the 0.5% that was
        # asked of it): never worse than it (ours certified within 1e-8 of the optimum, below
        # which its primal cannot be). The weighted optimum itself, as LIBLINEAR's -wi defines
        # it, comes from scikit-learn's copy of the solver, seeded, run to convergence.
        assert 0 <= ours.primal + ours.dual <= 1e-8 * ours.primal
        assert ours.primal <= p_ref * (1 + 1e-8)
        converged = LinearSVC(loss=loss, C=0.7, class_weight={1: 3.0, -1: 0.5}, tol=1e-10,
                              max_iter=1_000_000, random_state=0).fit(X, y)  # fmt: skip
        w_converged = np.append(converged.coef_.ravel(), converged.intercept_)
        assert ours.primal == pytest.approx(primal(X, y, w_converged, C, loss, 1.0), rel=1e-6)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("tol", [0.1, 1e-6])
def test_sample_weights_match_scikit_learn(loss, tol):
    X, y = synthetic(n=400, d=30, seed=7)
    sw = np.random.default_rng(1).uniform(0.0, 3.0, size=y.shape)
    sw[:20] = 0.0
    C = 0.3
    # seeded: at tol 0.1 where it stops depends on its pass order (unseeded, 1 run in 6 failed)
    ref = LinearSVC(C=C, loss=loss, dual=True, tol=tol, max_iter=1_000_000, random_state=0)
    ref.fit(X, y, sample_weight=sw)
    p_ref = primal(X, y, np.append(ref.coef_.ravel(), ref.intercept_[0]), C * sw, loss, 1.0)
    ours = solve_binary(
        X, y, loss=loss, C=C * sw, bias=1.0, tol=tol / 10 if tol < 0.1 else tol, max_iter=1_000_000
    )
    if tol < 0.1:
        assert ours.primal <= p_ref * (1 + 1e-9)
        assert ours.primal == pytest.approx(p_ref, rel=1e-6)
    else:
        assert ours.primal == pytest.approx(p_ref, rel=1e-3)
    np.testing.assert_array_equal(ours.alpha[:20], 0.0)
