"""Helpers of the LIBSVM/SVMlight reader and writer tests (tests/solvers/test_io_*.py): read
bytes, compare with scikit-learn's result entry by entry, and make a random problem to write."""

import io

import numpy as np
import scipy.sparse as sp

from solvers.io import read_libsvm

TEXT = b"1 1:0.5 3:1\n-1 2:2\n1\n"


def read_text(text, **kwargs):
    """`read_libsvm` of the bytes ``text``."""
    return read_libsvm(io.BytesIO(text), **kwargs)


def assert_same(X, y, A, b):
    """Same shape, labels and stored entries (explicit zeros included) as scikit-learn's."""
    assert X.shape == A.shape
    assert X.dtype == A.dtype
    np.testing.assert_array_equal(y, b)
    assert (X - A).count_nonzero() == 0
    np.testing.assert_array_equal(X.indptr, A.indptr)
    np.testing.assert_array_equal(X.indices, A.indices)
    np.testing.assert_array_equal(X.data, A.data)  # stored zeros kept as entries


def random_problem(rng, rows=60, cols=25, dtype=np.float64):
    X = sp.random(rows, cols, density=0.2, format="coo", random_state=rng, dtype=np.float64)
    keep = X.row != 5  # an empty row
    X = sp.csr_matrix((X.data[keep], (X.row[keep], X.col[keep])), shape=(rows, cols))
    X.data = (X.data - 0.5) * 10.0 ** rng.integers(-5, 6, size=X.nnz)
    X.data[::7] = np.round(X.data[::7])
    X.data[3] = 0.0  # a stored zero survives the round trip
    y = rng.choice([-1.0, 1.0, 2.5, 1e-7], size=rows)
    return X.astype(dtype), y
