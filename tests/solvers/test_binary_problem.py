"""Input checks (solvers._core.problem) and the compiled CSR row kernels (solvers._core.sparse)."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers._core.problem import check_csr, csr_arrays, fold_weights_into_C, per_sample_C
from solvers._core.sparse import (
    row_sq_norms,
    rows_dot,
    unsigned_indices,
    weighted_row_sum,
)
from tests.solvers._binary_helpers import augmented


def _matrix(dtype=np.float64, index_dtype=np.int32):
    X = sp.random(40, 25, density=0.3, format="csr", random_state=0, dtype=dtype)
    X = X.tolil()
    X[3] = 0  # an empty row
    X = X.tocsr()
    X.indices = X.indices.astype(index_dtype)
    X.indptr = X.indptr.astype(index_dtype)
    return X


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bias", [0.0, 2.5])
def test_row_kernels_match_scipy(dtype, index_dtype, bias):
    X = _matrix(dtype, index_dtype)
    c = csr_arrays(X)
    assert c.indices.dtype == (np.uint32 if index_dtype == np.int32 else np.uint64)
    assert np.shares_memory(c.indices, X.indices) and c.data is X.data
    Xt = augmented(X, bias) if bias else sp.hstack([X, sp.csr_matrix((40, 1))]).tocsr()
    w = np.random.default_rng(1).standard_normal(26)
    np.testing.assert_allclose(rows_dot(c.data, c.indices, c.indptr, w, 25, bias), Xt @ w,
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(
        row_sq_norms(c.data, c.indptr, bias), np.asarray(Xt.multiply(Xt).sum(axis=1)).ravel(),
        rtol=1e-6,
    )  # fmt: skip
    coef = np.random.default_rng(2).standard_normal(40)
    np.testing.assert_allclose(weighted_row_sum(coef, c.data, c.indices, c.indptr, 25, bias),
                               Xt.T @ coef, rtol=1e-6, atol=1e-12)  # fmt: skip


def test_unsigned_indices_rejects_other_types():
    with pytest.raises(TypeError, match="int32 or int64"):
        unsigned_indices(np.zeros(3, dtype=np.int16))


def test_check_csr_keeps_valid_input_and_converts_the_rest():
    X = _matrix(np.float32)
    assert check_csr(X) is X  # canonical float32 CSR: no copy
    dense = check_csr(X.toarray())
    assert dense.format == "csr" and dense.dtype == np.float32
    assert check_csr(X.tocoo()).format == "csr"
    ints = check_csr(sp.csr_matrix(np.eye(3, dtype=np.int64)))
    assert ints.dtype == np.float64
    dup = sp.csr_matrix((np.array([1.0, 2.0]), np.array([1, 1]), np.array([0, 2])), shape=(1, 3))
    fixed = check_csr(dup)
    assert fixed.nnz == 1 and fixed[0, 1] == 3.0 and dup.nnz == 2  # caller's matrix untouched


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (sp.csr_matrix(np.array([[np.nan, 1.0]])), "NaN or infinite"),
        (np.zeros(3), "2-D matrix"),
        (sp.csr_matrix(np.array([[1 + 1j]])), "real numbers"),
    ],
)
def test_check_csr_rejects(X, message):
    with pytest.raises(ValueError, match=message):
        check_csr(X)


def test_per_sample_C_and_weights():
    np.testing.assert_array_equal(per_sample_C(2.0, 3), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(per_sample_C(np.array([1.0, 0.0]), 2), [1.0, 0.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        per_sample_C(np.array([1.0, -1.0]), 2)
    assert fold_weights_into_C(0.5, 4) == 0.5
    folded = fold_weights_into_C(0.5, 3, np.array([1.0, 2.0, 0.0]), np.array([3.0, 1.0, 1.0]))
    np.testing.assert_array_equal(folded, [1.5, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"sample_weight must have shape \(3,\)"):
        fold_weights_into_C(0.5, 3, np.ones(2))
    with pytest.raises(ValueError, match="finite and >= 0"):
        fold_weights_into_C(0.5, 2, np.array([1.0, np.inf]))
