"""`solvers.io.iter_libsvm`: a file in chunks of rows that concatenate to the whole, with errors
named by the line of the whole file."""

import io

import numpy as np
import pytest
import scipy.sparse as sp

import solvers.io as sio
import solvers.io.reader as reader
from solvers.io import LibsvmFormatError, read_libsvm
from tests.conftest import shared_file
from tests.solvers._io_helpers import TEXT, assert_same, random_problem


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000, 10**6])
def test_iter_libsvm_chunks_concatenate_to_the_whole_file(monkeypatch, chunk_rows):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 4096)
    path = shared_file("dna", "dna.scale.t")
    X, y = read_libsvm(path, n_features=180, zero_based=False)
    chunks = list(sio.iter_libsvm(path, chunk_rows=chunk_rows, n_features=180, zero_based=False))
    assert all(c[0].shape[0] <= chunk_rows and c[0].shape[1] == 180 for c in chunks)
    assert all(c[0].shape[0] == chunk_rows for c in chunks[:-1])
    assert_same(
        sp.vstack([c[0] for c in chunks], format="csr"),
        np.concatenate([c[1] for c in chunks]),
        X,
        y,
    )


def test_iter_libsvm_with_qid_compressed_and_float32(tmp_path):
    rng = np.random.default_rng(3)
    X, y = random_problem(rng, rows=100, dtype=np.float32)
    qid = np.repeat(np.arange(20), 5)
    path = tmp_path / "ranks.svm.bz2"
    sio.write_libsvm(path, X, y, qid=qid)
    chunks = list(
        sio.iter_libsvm(
            path, chunk_rows=30, n_features=25, zero_based=False, dtype=np.float32, query_id=True
        )
    )
    assert [c[0].shape[0] for c in chunks] == [30, 30, 30, 10]
    assert all(c[0].dtype == np.float32 for c in chunks)
    assert_same(
        sp.vstack([c[0] for c in chunks], format="csr"),
        np.concatenate([c[1] for c in chunks]),
        X,
        y,
    )
    np.testing.assert_array_equal(np.concatenate([c[2] for c in chunks]), qid)


def test_iter_libsvm_errors_name_the_line_of_the_whole_file(monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK_BYTES", 32)
    text = b"1 1:1\n" * 50 + b"1 9:1\n"
    chunks = sio.iter_libsvm(io.BytesIO(text), chunk_rows=8, n_features=5, zero_based=False)
    with pytest.raises(LibsvmFormatError, match=r"^line 51: index out of range for n_features=5"):
        for _ in chunks:
            pass


def test_iter_libsvm_checks_its_options_before_reading():
    with pytest.raises(ValueError, match="explicit n_features and zero_based"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=2, n_features=None, zero_based=False)
    with pytest.raises(ValueError, match="explicit n_features and zero_based"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=2, n_features=3, zero_based="auto")
    with pytest.raises(ValueError, match="chunk_rows"):
        sio.iter_libsvm(io.BytesIO(TEXT), chunk_rows=0, n_features=3, zero_based=False)
    with pytest.raises(LibsvmFormatError, match="no data rows"):
        list(
            sio.iter_libsvm(
                io.BytesIO(b"# nothing\n"), chunk_rows=2, n_features=3, zero_based=False
            )
        )
