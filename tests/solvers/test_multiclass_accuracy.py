"""Test-set accuracy on news20 and sector: ours against LIBLINEAR, trained on the training file.

Crammer–Singer against LIBLINEAR -s 4 and one-vs-rest against -s 1 (squared hinge) and -s 3
(hinge), within 0.5 points;
Weston–Watkins within 1.5 points of our Crammer–Singer. Same C = 1, bias 1 and default tol (0.1)
on both sides. The test files are read with the training file's number of features.

news20 holds raw term counts (row norms up to 1e5), on which LIBLINEAR -s 4 needs thousands of
passes; every row, in training and test files alike, is scaled to unit length first (the
benchmark's news20-l2). sector is used as distributed (sector.scale, sector.t.scale).
"""

from functools import cache

import pytest
from liblinear import liblinearutil

from solvers._core.progress import Status
from solvers.multiclass.crammer_singer import solve_crammer_singer
from solvers.multiclass.ovr import solve_ovr
from solvers.multiclass.weston_watkins import solve_weston_watkins
from tests.solvers.multiclass_data import accuracy, liblinear_weights, load_text

SETS = ["news20", "sector"]
# Both sets are far from chance (20 and 105 classes); a lower figure means the test file was not
# read in the training file's feature space.
FLOOR = 80.0


def held_out_accuracy(name, W, b) -> float:
    Xt, _, yt, _ = load_text(name, "test")
    return accuracy(Xt, yt, W, b)


@cache
def crammer_singer(name):
    """Our Crammer–Singer fit, shared by the LIBLINEAR and the Weston–Watkins comparisons."""
    X, _, y, classes = load_text(name)
    return solve_crammer_singer(X, y, len(classes), C=1.0, bias=1.0)


def liblinear(name, solver_type):
    X, labels, _, classes = load_text(name)
    model = liblinearutil.train(labels, X, f"-s {solver_type} -c 1 -B 1 -q")
    return liblinear_weights(model, classes, X.shape[1], 1.0)


@pytest.mark.parametrize("name", SETS)
def test_crammer_singer_close_to_liblinear(name):
    ours = crammer_singer(name)
    assert ours.status is Status.CONVERGED
    acc_ours = held_out_accuracy(name, ours.w, ours.bias)
    acc_ref = held_out_accuracy(name, *liblinear(name, 4))
    assert min(acc_ours, acc_ref) > FLOOR
    assert abs(acc_ours - acc_ref) <= 0.5, (acc_ours, acc_ref)


@pytest.mark.parametrize("loss, solver_type", [("squared_hinge", 1), ("hinge", 3)])
@pytest.mark.parametrize("name", SETS)
def test_ovr_close_to_liblinear(name, loss, solver_type):
    X, _, y, classes = load_text(name)
    ours = solve_ovr(X, y, len(classes), loss=loss, C=1.0, bias=1.0)
    assert ours.status is Status.CONVERGED
    acc_ours = held_out_accuracy(name, ours.w, ours.bias)
    acc_ref = held_out_accuracy(name, *liblinear(name, solver_type))
    assert min(acc_ours, acc_ref) > FLOOR
    assert abs(acc_ours - acc_ref) <= 0.5, (acc_ours, acc_ref)


@pytest.mark.parametrize("name", SETS)
def test_weston_watkins_close_to_crammer_singer(name):
    X, _, y, classes = load_text(name)
    ww = solve_weston_watkins(X, y, len(classes), C=1.0, bias=1.0)
    assert ww.status is Status.CONVERGED
    cs = crammer_singer(name)
    acc_ww = held_out_accuracy(name, ww.w, ww.bias)
    acc_cs = held_out_accuracy(name, cs.w, cs.bias)
    assert min(acc_ww, acc_cs) > FLOOR
    assert abs(acc_ww - acc_cs) <= 1.5, (acc_ww, acc_cs)
