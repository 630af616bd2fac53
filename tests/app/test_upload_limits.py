"""Uploads are bounded while they are parsed: feature count (MAX_FEATURES), line length
(MAX_LINE_MB), expanded size (MAX_EXPANDED_MB, by default MAX_UPLOAD_MB) and the tenant's storage
room; the arrays are written to disk as the file is read, and equal what the in-memory reader
gives."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from app.config import Settings
from app.services import dataset_files
from solvers.io import load_libsvm
from tests.app.conftest import upload

pytestmark = pytest.mark.one_database


def nothing_stored(app) -> None:
    data = app.state.settings.data_dir
    assert list((data / "datasets").iterdir()) == []
    assert list((data / "tmp").iterdir()) == []
    with app.state.db.session() as session:
        from sqlalchemy import text

        assert session.execute(text("SELECT count(*) FROM datasets")).scalar() == 0


def test_a_22_byte_file_cannot_declare_two_billion_features(client, app):
    response = upload(client, b"1 2147483646:1\n")
    assert response.status_code == 413, response.text
    assert "beyond the limit of 16777216 features" in response.json()["detail"]
    assert response.json()["line"] == 1
    nothing_stored(app)


def test_max_features_just_over_and_at_the_limit(client, app):
    app.state.settings.max_features = 10
    over = upload(client, b"1 1:1\n-1 11:1\n")
    assert over.status_code == 413 and over.json()["line"] == 2
    nothing_stored(app)
    assert upload(client, b"1 1:1\n-1 10:1\n").json()["n_features"] == 10
    # zero-based: index 10 needs 11 columns (known once index 0 is seen)
    assert upload(client, b"1 0:1\n-1 10:1\n").status_code == 413


def test_values_beyond_the_solvers_bound_are_refused_naming_the_row(client, app):
    # the solvers refuse |x| > 1e100 (their squares overflow): refused here, not at every job
    response = upload(client, b"1 1:1\n\n-1 2:3 3:-1.0000001e100\n")
    assert response.status_code == 422, response.text
    assert "row 2: the value -1e+100 is beyond ±1e+100" in response.json()["detail"]
    nothing_stored(app)
    csv = upload(client, b"label,a,b\n1,0,2\n-1,1e101,0\n", filename="t.csv")
    assert csv.status_code == 422 and "row 2: the value 1e+101" in csv.json()["detail"]
    nothing_stored(app)
    at_bound = upload(client, b"1 1:1e100\n-1 2:-1e100\n")
    assert at_bound.status_code == 201, at_bound.text


def test_a_line_over_max_line_is_413_and_a_nul_line_is_not_text(client, app):
    app.state.settings.max_line_mb = 1024 / 2**20  # 1 KiB
    ok = b"1 " + b" ".join(b"%d:1" % i for i in range(1, 150)) + b"\n"  # ~900 bytes
    assert len(ok) < 1024 and upload(client, ok + b"-1 1:1\n").status_code == 201
    long = b"1 " + b" ".join(b"%d:1" % i for i in range(1, 400)) + b"\n"
    response = upload(client, b"-1 2:1\n" + long)
    assert response.status_code == 413, response.text
    assert "longer than 1024 bytes" in response.json()["detail"]
    assert response.json()["line"] == 2
    nul = upload(client, b"1 1:1\n" + b"\0" * 50_000)
    assert nul.status_code == 422 and "NUL byte" in nul.json()["detail"]
    nothing_stored_but_one = app.state.settings.data_dir / "tmp"
    assert list(nothing_stored_but_one.iterdir()) == []


def test_the_expanded_size_defaults_to_the_upload_limit():
    settings = Settings(max_upload_mb=100)
    assert settings.max_expanded_bytes == settings.max_upload_bytes
    assert Settings().max_expanded_bytes == 2048 * 2**20  # not 8 x 2 GB


def test_a_compressed_upload_is_stopped_at_the_quota_as_it_grows(client, app):
    from app.services import keys

    keys.set_quota(app.state.db, "local", storage_bytes=200_000, active_jobs=None)
    bomb = gzip.compress(b"1 1:1\n" * 2_000_000)  # 12 MB of text, 12 kB compressed
    app.state.settings.max_upload_mb = 1
    app.state.settings.max_expanded_mb = 64
    response = upload(client, bomb, filename="bomb.gz")
    assert response.status_code == 429, response.text
    assert int(response.headers["Retry-After"]) > 0
    assert "storage quota" in response.json()["detail"]
    nothing_stored(app)


@pytest.mark.parametrize(
    "text",
    [
        b"1 1:0.5 3:2\n-1 2:1\n\n# c\n2 5:1e-3 7:4\n" * 300,
        b"1 0:0.5 3:2\n-1 2:1\n" * 301,
        b"1 qid:3 1:1\n2 qid:3 2:1\n1 qid:4 4:1\n" * 200,
        b"3\n-1 4:1\n" * 7,
    ],
    ids=["one-based", "zero-based", "qid", "empty-rows"],
)
def test_arrays_written_in_chunks_equal_the_in_memory_reader(tmp_path, monkeypatch, text):
    monkeypatch.setattr(dataset_files, "CHUNK_ROWS", 17)
    monkeypatch.setattr(dataset_files, "CHUNK_NNZ", 64)
    source = tmp_path / "f.svm"
    source.write_bytes(text)
    meta = dataset_files.parse_to_arrays(str(source), str(tmp_path / "out"))
    expected = load_libsvm(io.BytesIO(text))
    assert meta["zero_based"] == expected.zero_based
    assert meta["n_features"] == expected.n_features
    assert meta["has_qid"] == (expected.qid is not None)
    X, y, qid = dataset_files.load_arrays(tmp_path / "out", meta["n_features"])
    assert X.indptr.dtype == expected.X.indptr.dtype == np.int32
    np.testing.assert_array_equal(X.indptr, expected.X.indptr)
    np.testing.assert_array_equal(X.indices, expected.X.indices)
    np.testing.assert_array_equal(X.data, expected.X.data)
    np.testing.assert_array_equal(y, expected.y)
    if expected.qid is None:
        assert qid is None
    else:
        np.testing.assert_array_equal(qid, expected.qid)
    assert meta == {**meta, **dataset_files.summarize_labels(expected.y)}
    assert meta["stored_bytes"] == sum(p.stat().st_size for p in (tmp_path / "out").iterdir())
