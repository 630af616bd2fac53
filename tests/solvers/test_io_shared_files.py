"""The LIBSVM/SVMlight reader against scikit-learn's on the shared data sets: the same arrays,
their dimension, index base and explicit zeros as the files hold them."""

import bz2
import io

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from solvers.io import LibsvmFormatError, load_libsvm, read_libsvm
from tests.conftest import SHARED_DATA, shared_file
from tests.solvers._io_helpers import assert_same, read_text


def _shared_files():
    if not SHARED_DATA.is_dir():  # the test then skips, or fails under MARGIN_REQUIRE_DATA=1
        return [pytest.param(None, id="shared-data-missing")]
    files = sorted(p for p in SHARED_DATA.glob("*/*") if p.is_file() and p.name != "README.md")
    return [pytest.param(p, id=p.name) for p in files]


@pytest.mark.parametrize("path", _shared_files())
def test_every_shared_file_reads_as_scikit_learn_reads_it(path):
    if path is None:
        shared_file("README.md")
    text = path.read_bytes()
    if path.suffix == ".bz2":  # decompress once for both readers (the slow part)
        text = bz2.decompress(text)
    X, y = read_text(text)
    A, b = load_svmlight_file(io.BytesIO(text))
    assert_same(X, y, A, b)
    assert X.indices.dtype == np.int32 and X.indptr.dtype == np.int32
    assert y.dtype == np.float64


def test_float32_files_match_scikit_learn_float32_and_stay_float32():
    text = bz2.decompress(shared_file("reuters-money-fx", "reuters.tst.bz2").read_bytes())
    X, y = read_text(text, dtype=np.float32)  # values in capital-E notation
    A, b = load_svmlight_file(io.BytesIO(text), dtype=np.float32)
    assert_same(X, y, A, b)
    assert X.dtype == np.float32


def test_explicit_zeros_are_stored_entries():
    path = shared_file("australian", "australian")  # 1,936 explicit k:0 entries
    X, _ = read_libsvm(path)
    assert X.nnz == 9660
    assert np.count_nonzero(X.data == 0) == 1936


def test_w8a_keeps_its_rows_without_features():
    X, y = read_libsvm(shared_file("w8a", "w8a.bz2"))
    assert X.shape == (49749, 300)
    assert np.count_nonzero(np.diff(X.indptr) == 0) == 4203
    assert set(np.unique(y)) == {-1.0, 1.0}


def test_a_test_file_reads_with_its_training_files_dimension():
    train = load_libsvm(shared_file("a9a", "a9a.bz2"))
    assert (train.n_features, train.zero_based) == (123, False)
    X, _ = read_libsvm(shared_file("a9a", "a9a.t"), n_features=train.n_features)
    assert X.shape == (16281, 123)
    assert read_libsvm(shared_file("a9a", "a9a.t"))[0].shape == (16281, 122)


def test_a_too_small_n_features_names_the_first_line_beyond_it():
    path = shared_file("a9a", "a9a.t")
    with pytest.raises(LibsvmFormatError) as err:
        read_libsvm(path, n_features=100)
    A, _ = load_svmlight_file(str(path))
    wide_rows = np.flatnonzero(np.diff(A[:, 100:].tocsr().indptr))  # rows with an index > 100
    assert err.value.line == wide_rows[0] + 1
    assert str(err.value).startswith(f"line {wide_rows[0] + 1}: index ")
    assert "n_features=100" in str(err.value)


def test_zero_based_files_are_detected_and_can_be_forced():
    path = shared_file("phishing", "phishing.t")
    data = load_libsvm(path)
    assert (data.zero_based, data.n_features) == (True, 68)
    X1, _ = read_libsvm(path, zero_based=True)
    assert_same(data.X, data.y, X1, data.y)
    with pytest.raises(LibsvmFormatError, match=r"^line \d+: index 0 in a one-based file"):
        read_libsvm(path, zero_based=False)
