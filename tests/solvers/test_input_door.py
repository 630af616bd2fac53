"""One input door for every solver and estimator: any int32/int64 index arrays, float32/float64
values, CSR/CSC/COO/dense input give the solution of the int32/float64 CSR run at the same seed
(issue: int64 indices were read as garbage by SVR and the structural solvers)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
import solvers._core.problem as door
from solvers._core.problem import CSRArrays, check_csr, csr_arrays
from tests.solvers._every_solver import SOLVERS, dense_problem, solution

DENSE = dense_problem()[0]
INDEX = (np.int32, np.int64)
VALUES = (np.float64, np.float32)


def variant(fmt, values, indices=np.int32, indptr=np.int32):
    """DENSE as ``fmt`` with the given value and index types (COO: col and row arrays)."""
    data = DENSE.astype(values)
    if fmt == "dense":
        return data
    X = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}[fmt](data)
    if fmt == "coo":
        X.col, X.row = X.col.astype(indices), X.row.astype(indptr)
    else:
        X.indices, X.indptr = X.indices.astype(indices), X.indptr.astype(indptr)
    return X


def assert_same(got, ref, values):
    rtol = 1e-10 if values == np.float64 else 1e-5
    scale = max(np.abs(ref).max(), 1.0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=rtol * scale)


@pytest.fixture(scope="module")
def references():
    """Each solver's solution on CSR with int32 indices and float64, then float32, values."""
    return {
        (name, values): solution(fit(variant("csr", values)))
        for name, fit in SOLVERS.items()
        for values in VALUES
    }


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
@pytest.mark.parametrize("name", list(SOLVERS))
def test_every_form_gives_the_same_solution(references, name, fmt):
    fit = SOLVERS[name]
    index_pairs = [(np.int32, np.int32)] if fmt == "dense" else itertools.product(INDEX, INDEX)
    for (indices, indptr), values in itertools.product(index_pairs, VALUES):
        got = solution(fit(variant(fmt, values, indices, indptr)))
        assert_same(got, references[name, values], values)
    # float32 values: the same problem to float32 precision
    single, double = references[name, np.float32], references[name, np.float64]
    assert np.linalg.norm(single - double) <= 1e-4 * max(np.linalg.norm(double), 1.0), name


def _unsorted_duplicated_zeros():
    """DENSE as CSR whose rows hold their entries reversed, one entry split in two, and
    explicit zeros: the door's canonical form is DENSE."""
    X = sp.csr_matrix(DENSE)
    rows, data, indices = [0], [], []
    for i in range(X.shape[0]):
        start, end = X.indptr[i], X.indptr[i + 1]
        cols, vals = list(X.indices[start:end][::-1]), list(X.data[start:end][::-1])
        if cols:
            cols.append(cols[0])  # a duplicate: the first value split in two halves
            vals[0] /= 2
            vals.append(vals[0])
        cols.append((i * 5) % X.shape[1])
        vals.append(0.0)  # an explicit zero (sums with whatever shares its column)
        data += vals
        indices += cols
        rows.append(len(data))
    messy = sp.csr_matrix(
        (np.array(data), np.array(indices, dtype=np.int32), np.array(rows, dtype=np.int32)),
        shape=X.shape,
    )
    assert not messy.has_canonical_format
    return messy


@pytest.mark.parametrize("name", list(SOLVERS))
def test_unsorted_duplicates_explicit_zeros_and_two_billion_entries(references, monkeypatch, name):
    fit, ref = SOLVERS[name], references[name, np.float64]
    messy = _unsorted_duplicated_zeros()
    snapshot = (messy.data.copy(), messy.indices.copy())
    assert_same(solution(fit(messy)), ref, np.float64)
    # the caller's matrix is left as it was
    np.testing.assert_array_equal(messy.data, snapshot[0])
    np.testing.assert_array_equal(messy.indices, snapshot[1])
    # explicit zeros alone are kept (canonical form, no copy) and change nothing
    zeros = sp.csr_matrix(DENSE)
    zeros.data[::4] = 0.0
    dense_zeros = zeros.toarray()
    assert_same(solution(fit(zeros)), solution(fit(dense_zeros)), np.float64)
    # a matrix of 2³¹ entries or more: int32 indices with an int64 indptr must widen (simulated
    # on this small matrix by lowering the door's threshold)
    monkeypatch.setattr(door, "INT32_ENTRIES", 10)
    big = variant("csr", np.float64, np.int32, np.int64)
    assert csr_arrays(big).indices.dtype == np.uint64
    assert_same(solution(fit(big)), ref, np.float64)


def test_the_door_converts_the_least_and_copies_nothing_it_need_not():
    X = variant("csr", np.float32)
    view = csr_arrays(X)
    assert view.data is X.data and np.shares_memory(view.indices, X.indices)
    assert view.indptr is X.indptr and view.indices.dtype == np.uint32
    assert csr_arrays(view) is view  # validated once
    wide = variant("csr", np.float64, np.int64, np.int64)
    view = csr_arrays(wide)
    assert np.shares_memory(view.indices, wide.indices) and view.indptr is wide.indptr
    # a mixed pair: only the small indptr is converted
    mixed = csr_arrays(variant("csr", np.float64, np.int32, np.int64))
    assert (mixed.indices.dtype, mixed.indptr.dtype) == (np.uint32, np.int32)
    mixed = csr_arrays(variant("csr", np.float64, np.int64, np.int32))
    assert (mixed.indices.dtype, mixed.indptr.dtype) == (np.uint64, np.int64)
    # integer and boolean values become float64; other index types become int64
    assert csr_arrays(sp.csr_matrix(np.eye(3, dtype=np.int16))).data.dtype == np.float64
    assert csr_arrays(np.eye(3, dtype=bool)).data.dtype == np.float64
    odd = sp.csr_matrix(np.eye(3))
    odd.indices = odd.indices.astype(np.uint16)
    assert csr_arrays(odd).indices.dtype == np.uint64
    back = CSRArrays(*view).to_scipy()
    assert (back != wide).nnz == 0 and isinstance(back, sp.csr_matrix)


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (np.eye(3, dtype=np.complex128), "real numbers .*got dtype complex128"),
        (sp.csr_matrix(np.eye(3, dtype=np.complex64)), "got dtype complex64"),
        (np.array([[1.0, "a"]], dtype=object), "got dtype object"),
        (np.array([["1", "2"]]), "got dtype <U1"),
        (np.array([[np.inf, 1.0]]), "NaN or infinite"),
        # finite, but its square overflows: it trained an all-zero model
        (np.array([[1.0, -1.0000001e100]]), r"values beyond ±1e\+100"),
        (np.zeros(3), "2-D matrix"),
    ],
)
def test_the_door_refuses_other_types_with_a_clear_message(X, message):
    with pytest.raises(ValueError, match=message):
        check_csr(X)
    with pytest.raises(ValueError, match=message):
        solvers.solve_binary(X, np.ones(X.shape[0] if X.ndim == 2 else 3))


def test_values_up_to_the_bound_pass_the_door():
    at_bound = check_csr(np.array([[1e100, -1e100], [0.0, 1.0]]))
    assert at_bound.nnz == 3 and abs(at_bound.data).max() == 1e100


@pytest.mark.parametrize("loss", ["epsilon_insensitive", "squared_epsilon_insensitive"])
def test_regression_targets_beyond_the_bound_are_refused(loss):
    # 1e300 trained a "converged" model of weights near 1e299 with overflowing objectives
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    for y in ([1e300, -1e300, 3.0], [1.0000001e100, 0.0, 1.0]):
        with pytest.raises(ValueError, match=r"y has values beyond ±1e\+100.*scale the targets"):
            solvers.LinearSVR(loss=loss).fit(X, y)
    with pytest.raises(ValueError, match=r"y has values beyond ±1e\+100"):
        solvers.solve_binary(X, [1e101, 0.0, 1.0], loss="squared_error")
    at_bound = solvers.LinearSVR(loss=loss, tol=1e-3).fit(X, [1e100, -1e100, 0.0])
    assert np.isfinite(at_bound.coef_).all()


@pytest.mark.parametrize(
    "estimator",
    [solvers.LinearSVC, solvers.LinearSVR,
     lambda **kw: solvers.LinearSVCCV(cv=2, Cs=[1.0], **kw)],  # fmt: skip
)
def test_intercept_scaling_is_bounded_as_the_values_are(estimator):
    """The bias feature's value enters every row's squared norm as the data's values do: 1e160
    overflowed them and the fit ended with an all-zero model, status max_iter."""
    X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]] * 3)
    y = np.array([1, 1, -1, -1] * 3)
    with pytest.raises(ValueError, match=r"'intercept_scaling'.*<= 1e\+100"):
        estimator(intercept_scaling=1.0000000000000002e100).fit(X, y)
    assert np.isfinite(estimator(intercept_scaling=1e100).fit(X, y).coef_).all()


def test_a_malformed_matrix_fails_at_the_door():
    bad = sp.csr_matrix(np.eye(3))
    bad.indices = np.array([0, 1, 7], dtype=np.int32)  # column 7 of 3
    with pytest.raises(ValueError, match=r"column index outside \[0, 3\)"):
        csr_arrays(bad)
    negative = sp.csr_matrix(np.eye(3))
    negative.indices = np.array([0, -1, 2], dtype=np.int32)
    with pytest.raises(ValueError, match="column index outside"):
        solvers.solve_svr(negative, np.ones(3))


def test_readers_output_goes_through_the_door_unchanged(tmp_path):
    X = sp.csr_matrix(DENSE)
    path = tmp_path / "x.svm"
    solvers.write_libsvm(path, X, np.ones(X.shape[0]))
    read, _ = solvers.read_libsvm(path, n_features=X.shape[1])
    assert check_csr(read) is read  # already in the door's form: used in place
