"""The npz upload format: arrays that equal the LIBSVM path's, and every bound of an untrusted
archive (member count, declared and expanded sizes, pickles, CSR structure) answered with a clear
error that leaves nothing behind."""

from __future__ import annotations

import gzip
import io
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from app.services.dataset_files import load_arrays
from app.services.datasets import dataset_dir
from margin_client._encode import npz_bytes
from solvers.io import read_libsvm
from tests.app.conftest import HEART

pytestmark = pytest.mark.one_database


def post(client, body: bytes, **params):
    return client.post(
        "/v1/datasets",
        content=body,
        params=params,
        headers={"content-type": "application/octet-stream"},
    )


def archive(**members) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **members)
    return buffer.getvalue()


def csr_members(X, y):
    X = sp.csr_matrix(X)
    return dict(
        data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape),
        format=np.array(b"csr"), y=np.asarray(y, dtype=float),
    )


def test_npz_upload_stores_the_same_arrays_as_the_libsvm_file(client, settings):
    X, y = read_libsvm(str(HEART))
    response = post(client, npz_bytes(X, y), format="npz", name="heart-npz")
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["n_rows"], body["n_features"], body["nnz"]) == (270, 13, X.nnz)
    assert body["zero_based"] is True
    assert body["labels"]["classes"] == [{"label": -1, "count": 150}, {"label": 1, "count": 120}]
    stored, stored_y, qid = load_arrays(dataset_dir(settings, body["id"]), 13)
    assert qid is None
    assert abs(stored - X).max() == 0 and np.array_equal(stored_y, y)


def test_format_is_recognised_from_the_zip_magic(client):
    X = sp.random(30, 7, density=0.3, random_state=0, format="csr")
    response = post(client, npz_bytes(X, np.arange(30) % 2))
    assert response.status_code == 201, response.text
    assert response.json()["n_features"] == 7


def test_scipy_save_npz_output_plus_y_is_accepted(client):
    X = sp.random(20, 5, density=0.5, random_state=1, format="csr")
    buffer = io.BytesIO()
    sp.save_npz(buffer, X)
    with zipfile.ZipFile(buffer, "a") as zf, zf.open("y.npy", "w") as member:
        np.lib.format.write_array(member, np.ones(20))
    assert post(client, buffer.getvalue(), format="npz").status_code == 201


def test_duplicate_entries_are_summed_and_sorted(client, settings):
    members = dict(
        data=np.array([1.0, 2.0, 3.0]), indices=np.array([2, 0, 2]), indptr=np.array([0, 3]),
        shape=np.array([1, 3]), format=np.array(b"csr"), y=np.array([1.0]),
    )
    body = post(client, archive(**members), format="npz").json()
    X, _, _ = load_arrays(dataset_dir(settings, body["id"]), 3)
    assert X.toarray().tolist() == [[2.0, 0.0, 4.0]]


BAD = {
    "missing y": lambda m: m.pop("y"),
    "object y": lambda m: m.update(y=np.array([object()] * len(m["y"]), dtype=object)),
    "index out of range": lambda m: m["indices"].__setitem__(0, 99),
    "decreasing indptr": lambda m: m.update(indptr=m["indptr"][::-1].copy()),
    "short y": lambda m: m.update(y=m["y"][:-1]),
    "nan value": lambda m: m["data"].__setitem__(0, np.nan),
    "not csr": lambda m: m.update(format=np.array(b"coo")),
    "too many members": lambda m: m.update({f"extra{i}": np.zeros(1) for i in range(5)}),
}


@pytest.mark.parametrize("y", [np.zeros(0), np.array([], dtype="<U1")], ids=["numbers", "text"])
def test_an_archive_of_no_rows_is_422(client, settings, y):
    # its labels' summary divided by the rows: a 500 (a text file of no rows is a 422)
    members = csr_members(np.zeros((0, 3)), [])
    members["y"] = y
    response = post(client, archive(**members), format="npz")
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "npz: the matrix has no rows (shape[0] = 0)"
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_archives_are_422_and_store_nothing(client, settings, case):
    members = csr_members(np.eye(4) + 1, [1, -1, 1, -1])
    BAD[case](members)
    response = post(client, archive(**members), format="npz")
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"]
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())


def test_a_text_file_declared_npz_and_a_compressed_archive_are_refused(client):
    assert post(client, HEART.read_bytes(), format="npz").status_code == 422
    packed = gzip.compress(npz_bytes(np.eye(3), [1, 2, 3]))
    response = post(client, packed, format="npz")
    assert response.status_code == 422
    assert "zip" in response.json()["detail"]


def test_declared_sizes_beyond_the_expanded_limit_are_413(app, client):
    limit = app.state.settings.max_expanded_bytes
    # a highly compressible member whose expanded size is just over the limit
    big = np.zeros(limit // 8 + 1)
    members = csr_members(np.eye(2), [1, -1])
    members["pad"] = big
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **members)
    assert len(buffer.getvalue()) < app.state.settings.max_upload_bytes
    response = post(client, buffer.getvalue(), format="npz")
    assert response.status_code == 413, response.text
    assert "MAX_EXPANDED_MB" in response.json()["detail"]


def test_a_header_that_claims_more_data_than_its_member_holds_is_422(client):
    members = csr_members(np.eye(3), [1, 2, 3])
    raw = io.BytesIO()
    np.savez(raw, **members)
    # rewrite y's header to claim a billion rows: its data is not allocated on trust
    with zipfile.ZipFile(raw) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**9,)}
    )
    entries["y.npy"] = header.getvalue() + entries["y.npy"][len(header.getvalue()):]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    response = post(client, out.getvalue(), format="npz")
    assert response.status_code == 422
    assert "member y: its header declares more data" in response.json()["detail"]


@pytest.mark.parametrize(
    "member, shape, said",
    [
        ("data", (-1,), "negative shape"),  # before: read(-N) read the whole member
        ("shape", (-1,), "negative shape"),
        ("data", (-(2**31), -(2**31)), "negative shape"),  # a positive product of negatives
        ("data", (2**62, 2**62), "declares more data"),  # a product that wrapped in int64
    ],
)
def test_a_header_of_negative_or_wrapping_extents_is_422_before_its_data_is_read(
    client, member, shape, said
):
    entries = {f"{name}.npy": buffer for name, buffer in _npy_members(np.eye(3), [1, 2, 3])}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    # zeros behind the header, within the test's MAX_EXPANDED_MB (1)
    entries[f"{member}.npy"] = header.getvalue() + bytes(512 << 10)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    response = post(client, out.getvalue(), format="npz")
    assert response.status_code == 422, response.text
    assert f"member {member}: its header declares" in response.json()["detail"]
    assert said in response.json()["detail"]


def _npy_members(X, y):
    for name, array in csr_members(X, y).items():
        buffer = io.BytesIO()
        np.save(buffer, array)
        yield name, buffer.getvalue()


@pytest.mark.parametrize("code", [0xD800, 0xDFFF, 0x110000, 0xFFFFFFFF])
def test_a_text_label_that_is_no_unicode_text_is_422(client, settings, code):
    """numpy keeps any 32-bit code in a unicode array: a lone surrogate made a class name that
    cannot be written as UTF-8 (the dataset was stored, then its upload's answer and every list
    of the tenant's datasets was a 500), a code beyond U+10FFFF killed the parser (500)."""
    codes = np.array([[0x61, 0], [0x62, 0], [0x61, 0], [0x62, code]], dtype="<u4")
    members = csr_members(np.eye(4) + 1, [1, 2, 3, 4])
    members["y"] = codes.view("<U2").reshape(-1)
    response = post(client, archive(**members), format="npz")
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("row 4: the label is not Unicode text")
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())
    members["y"] = members["y"].astype(">U2")  # the same names, big-endian
    assert post(client, archive(**members), format="npz").status_code == 422
