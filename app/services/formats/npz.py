"""The npz upload: a ``scipy.sparse.save_npz`` CSR archive with one more member, ``y``.

Members (a zip archive of ``.npy`` files, as ``np.savez_compressed`` writes them): ``data``,
``indices``, ``indptr``, ``shape`` and ``format`` (b"csr"), as `scipy.sparse.save_npz` stores a
CSR matrix, and ``y`` (n_rows labels). Column j is feature j (a zero-based dataset of
``shape[1]`` features).

Nothing in the archive is trusted: at most `MAX_MEMBERS` members; arrays are read with their
``.npy`` headers checked (no object dtype, so no pickles; sizes that match the member) and the
members' expanded sizes count against MAX_EXPANDED_MB before anything is decompressed; the CSR
structure is checked in full (index range, monotone row pointers, finite values).
"""

from __future__ import annotations

import zipfile
from typing import BinaryIO

import numpy as np
import scipy.sparse as sp

from app.limits import ExpansionTooLarge
from solvers.io import LibsvmData

MAX_MEMBERS = 8
REQUIRED = ("data", "indices", "indptr", "shape", "format", "y")
MAX_HEADER_BYTES = 4096


def read_npz(stream: BinaryIO, source: str, max_expanded: int) -> LibsvmData:
    """Read an npz upload once it has fully arrived (`stream` is drained first: a zip archive
    is read from its end)."""
    while stream.read(1 << 20):
        pass  # waits for the whole upload (and stops if it is abandoned)
    with open(source, "rb") as raw:
        if raw.read(4) != b"PK\x03\x04":
            raise ValueError("npz: expected a zip archive as np.savez writes (do not compress it)")
    try:
        with zipfile.ZipFile(source) as archive:
            arrays = _members(archive, max_expanded)
    except zipfile.BadZipFile as exc:
        raise ValueError(f"npz: not a readable zip archive: {exc}") from None
    return _dataset(arrays)


def _members(archive: zipfile.ZipFile, max_expanded: int) -> dict[str, np.ndarray]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ValueError(f"npz: expected at most {MAX_MEMBERS} members, got {len(infos)}")
    names = [info.filename.removesuffix(".npy") for info in infos]
    if len(set(names)) != len(names):
        raise ValueError("npz: a member name appears twice")
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise ValueError(
            f"npz: missing member(s) {', '.join(missing)} (expected scipy.sparse.save_npz's "
            "CSR members plus y)"
        )
    if sum(info.file_size for info in infos) > max_expanded:
        raise ExpansionTooLarge(max_expanded)
    return {
        name: _read_array(archive, info, name)
        for name, info in zip(names, infos, strict=True)
        if name in REQUIRED
    }


def _read_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> np.ndarray:
    """One ``.npy`` member, its header checked before its data is read."""
    fmt = np.lib.format
    with archive.open(info) as member:
        try:
            version = fmt.read_magic(member)
            header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
            if version not in header:
                raise ValueError(f"unsupported .npy version {version}")
            shape, fortran, dtype = header[version](member, max_header_size=MAX_HEADER_BYTES)
        except ValueError as exc:
            raise ValueError(f"npz: member {name}: not a .npy array ({exc})") from None
        if dtype.hasobject:
            raise ValueError(f"npz: member {name}: object arrays are not accepted")
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes > info.file_size:
            raise ValueError(f"npz: member {name}: its header declares more data than it holds")
        data = member.read(nbytes)
    if len(data) != nbytes:
        raise ValueError(f"npz: member {name}: truncated")
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape, order="F" if fortran else "C")


def _integers(array: np.ndarray, name: str, ndim: int = 1) -> np.ndarray:
    if array.dtype.kind not in "iu" or array.ndim != ndim:
        raise ValueError(f"npz: member {name}: expected a {ndim}-d integer array")
    return array.astype(np.int64)


def _format_name(array: np.ndarray) -> str | None:
    if array.ndim != 0 or array.dtype.kind not in "SU":
        return None
    value = array.item()
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


def _dataset(arrays: dict[str, np.ndarray]) -> LibsvmData:
    if _format_name(arrays["format"]) != "csr":
        raise ValueError("npz: member format: expected 'csr' (save a CSR matrix)")
    shape = _integers(arrays["shape"], "shape")
    if shape.shape != (2,) or shape.min() < 0 or shape[1] >= 2**31:
        raise ValueError("npz: member shape: expected (n_rows, n_features) below 2**31 features")
    n_rows, n_features = (int(v) for v in shape)
    data, y = arrays["data"], arrays["y"]
    if data.dtype.kind not in "iuf" or data.ndim != 1:
        raise ValueError("npz: member data: expected a 1-d numeric array")
    if y.dtype.kind not in "iuf" or y.shape != (n_rows,):
        raise ValueError(f"npz: member y: expected {n_rows} numeric labels (one per row)")
    data = data.astype(np.float64)
    y = y.astype(np.float64)
    if not np.isfinite(data).all():
        raise ValueError("npz: member data: values must be finite")
    if not np.isfinite(y).all():
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"row {bad + 1}: the label is not a finite number")
    indices = _integers(arrays["indices"], "indices")
    indptr = _integers(arrays["indptr"], "indptr")
    _check_structure(indices, indptr, len(data), n_rows, n_features)
    index_type = np.int32 if len(data) < 2**31 else np.int64
    X = sp.csr_matrix(
        (data, indices.astype(index_type), indptr.astype(index_type)),
        shape=(n_rows, n_features),
    )
    X.sum_duplicates()  # sorted indices, one entry per (row, column)
    return LibsvmData(X=X, y=y, qid=None, zero_based=True, n_features=n_features)


def _check_structure(indices, indptr, nnz: int, n_rows: int, n_features: int) -> None:
    if indptr.shape != (n_rows + 1,) or indptr[0] != 0 or indptr[-1] != nnz:
        raise ValueError(
            f"npz: member indptr: expected {n_rows + 1} row pointers from 0 to {nnz}"
        )
    if len(indices) != nnz:
        raise ValueError("npz: members indices and data differ in length")
    if n_rows and np.any(np.diff(indptr) < 0):
        raise ValueError("npz: member indptr: row pointers must not decrease")
    if nnz and (indices.min() < 0 or indices.max() >= n_features):
        raise ValueError(f"npz: member indices: column indices must lie in [0, {n_features})")
