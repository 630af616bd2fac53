"""The LIBSVM/SVMlight writer: what it writes reads back identically, by our reader and by
scikit-learn's; what the format cannot hold is refused."""

import io

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

import solvers.io as sio
from solvers.io import load_libsvm, read_libsvm
from tests.solvers._io_helpers import assert_same, random_problem


@pytest.mark.parametrize("zero_based", [False, True])
@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_write_then_read_gives_identical_arrays(tmp_path, zero_based, suffix):
    rng = np.random.default_rng(1)
    X, y = random_problem(rng)
    X.data[10] = 0.0
    qid = np.repeat(np.arange(12), 5)
    path = tmp_path / f"data.svm{suffix}"
    sio.write_libsvm(path, X, y, qid=qid, zero_based=zero_based)
    data = load_libsvm(path, n_features=X.shape[1], zero_based=zero_based)
    assert_same(data.X, data.y, X, y)
    np.testing.assert_array_equal(data.qid, qid)
    if suffix != ".xz":  # scikit-learn reads gzip and bzip2 only
        A, b, q = load_svmlight_file(
            str(path), n_features=X.shape[1], zero_based=zero_based, query_id=True
        )
        assert_same(data.X, data.y, A, b)
        np.testing.assert_array_equal(q, qid)
    if not zero_based:
        assert load_libsvm(path).zero_based is False


def test_write_float32_and_dense_input(tmp_path):
    rng = np.random.default_rng(2)
    X, y = random_problem(rng, dtype=np.float32)
    buffer = io.BytesIO()
    sio.write_libsvm(buffer, X, y)
    X2, y2 = read_libsvm(io.BytesIO(buffer.getvalue()), n_features=25, dtype=np.float32)
    assert_same(X2, y2, X, y)
    buffer = io.BytesIO()
    sio.write_libsvm(buffer, np.array([[0.0, 1.5], [2.0, 0.0]]), [1, -1])
    assert buffer.getvalue() == b"1 2:1.5\n-1 1:2\n"


def test_write_rejects_what_the_format_cannot_hold(tmp_path):
    X = sp.csr_matrix(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="NaN or infinite"):
        sio.write_libsvm(tmp_path / "x", X, [1.0])
    with pytest.raises(ValueError, match=r"y must have shape \(1,\)"):
        sio.write_libsvm(tmp_path / "x", np.ones((1, 2)), [1.0, 2.0])


def test_the_package_exports_the_reader_and_writer():
    import solvers

    assert solvers.read_libsvm is read_libsvm
    assert solvers.write_libsvm is sio.write_libsvm
