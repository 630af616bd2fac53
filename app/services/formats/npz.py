"""The npz upload: a ``scipy.sparse.save_npz`` CSR archive with one more member, ``y``.

Members (a zip archive of ``.npy`` files, as ``np.savez_compressed`` writes them): ``data``,
``indices``, ``indptr``, ``shape`` and ``format`` (b"csr"), as `scipy.sparse.save_npz` stores a
CSR matrix, and ``y`` (n_rows labels: numbers, or text class names as a unicode array, read by
the rule of `formats.labels`). Column j is feature j (a zero-based dataset of ``shape[1]``
features).

Nothing in the archive is trusted: at most `MAX_MEMBERS` members; arrays are read with their
``.npy`` headers checked (no object dtype, so no pickles; sizes that match the member) and the
members' expanded sizes count against MAX_EXPANDED_MB before anything is decompressed. The CSR
arrays are streamed to files beside the upload and read back a chunk of rows at a time, so the
reader's memory is a chunk, not the archive; each chunk's structure is checked (index range,
monotone row pointers, finite values, at most MAX_LINE_MB / 4 entries in a row).
"""

from __future__ import annotations

import math
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import scipy.sparse as sp

from app.limits import ExpansionTooLarge
from app.services.formats.labels import MAX_LABEL_CHARS, LabelColumn
from app.services.uploads import temp_name
from solvers.io import LibsvmLimitError

MAX_MEMBERS = 8
REQUIRED = ("data", "indices", "indptr", "shape", "format", "y")
SMALL = ("shape", "format")  # read in memory; the other members are streamed to files
MAX_HEADER_BYTES = 4096
MIN_ROW_ENTRIES = 1 << 16


class NpzChunks:
    """Row chunks of an npz upload, for `DatasetWriter`, with the archive's large members
    extracted to files and read back a chunk of rows at a time (never loaded whole)."""

    zero_based = True
    has_qid = False
    feature_names = None

    def __init__(self, stream: BinaryIO, source: str, limits: dict, chunk_rows: int,
                 chunk_nnz: int):
        self.stream = stream
        self.source = source
        self.max_expanded = limits.get("max_expanded") or 2**62
        self.max_features = limits.get("max_features")
        self.max_row = max((limits.get("max_line") or 2**62) // 4, MIN_ROW_ENTRIES)
        self.chunk_rows = chunk_rows
        self.chunk_nnz = chunk_nnz
        self.n_rows = self.n_features = 0
        self.labels = LabelColumn()

    def label_text(self) -> dict | None:
        return self.labels.text()

    def __iter__(self):
        while self.stream.read(1 << 20):
            pass  # waits for the whole upload (and stops if it is abandoned)
        with open(self.source, "rb") as raw:
            if raw.read(4) != b"PK\x03\x04":
                raise ValueError(
                    "npz: expected a zip archive as np.savez writes (do not compress it)"
                )
        workdir = Path(self.source).parent / temp_name("npz")
        workdir.mkdir()
        try:
            try:
                with zipfile.ZipFile(self.source) as archive:
                    arrays = _members(archive, self.max_expanded, workdir)
            except zipfile.BadZipFile as exc:
                raise ValueError(f"npz: not a readable zip archive: {exc}") from None
            yield from self._rows(arrays)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _rows(self, arrays: dict) -> Iterator[tuple]:
        n_rows, n_features = _check_header(arrays)
        if n_rows == 0:  # as a text file of no rows: the store's summary divided by them (a 500)
            raise ValueError("npz: the matrix has no rows (shape[0] = 0)")
        if self.max_features is not None and n_features > self.max_features:
            raise LibsvmLimitError(
                f"{n_features} features, more than the {self.max_features} accepted "
                "(MAX_FEATURES)",
                None,
            )
        self.n_rows, self.n_features = n_rows, n_features
        indptr, indices, data, y = (arrays[k] for k in ("indptr", "indices", "data", "y"))
        nnz = data.length
        if indptr.length != n_rows + 1 or y.length != n_rows:
            raise ValueError(
                f"npz: expected {n_rows + 1} row pointers and {n_rows} labels for "
                f"shape[0] = {n_rows}"
            )
        if indices.length != nnz:
            raise ValueError("npz: members indices and data differ in length")
        start, before = 0, 0
        while start < n_rows:
            stop = min(start + self.chunk_rows, n_rows)
            ptr = indptr.read(start, stop + 1)
            if ptr[0] != before or np.any(np.diff(ptr) < 0):
                raise ValueError("npz: member indptr: row pointers must not decrease")
            if ptr[-1] - ptr[0] > self.chunk_nnz and stop - start > 1:
                fits = int(np.searchsorted(ptr - ptr[0], self.chunk_nnz, "right")) - 1
                stop = start + max(1, fits)
                ptr = ptr[: stop - start + 1]
            widest = int(np.diff(ptr).max()) if len(ptr) > 1 else 0
            if widest > self.max_row:
                row = start + int(np.argmax(np.diff(ptr))) + 1
                raise LibsvmLimitError(
                    f"row {row}: {widest} entries, more than the {self.max_row} accepted in "
                    "one row (MAX_LINE_MB / 4, as for a text line)",
                    row,
                )
            if ptr[-1] > nnz:
                raise ValueError(f"npz: member indptr: row pointers beyond the {nnz} entries")
            yield self._chunk(arrays, start, stop, ptr, n_features)
            before, start = int(ptr[-1]), stop
        if before != nnz:
            raise ValueError(f"npz: member indptr: expected the last row pointer to be {nnz}")

    def _chunk(self, arrays, start, stop, ptr, n_features):
        lo, hi = int(ptr[0]), int(ptr[-1])
        cols = arrays["indices"].read(lo, hi)
        if cols.size and (cols.min() < 0 or cols.max() >= n_features):
            raise ValueError(
                f"npz: member indices: column indices must lie in [0, {n_features})"
            )
        values = arrays["data"].read(lo, hi).astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError("npz: member data: values must be finite")
        labels = arrays["y"].read(start, stop)
        where = lambda r: f"row {start + r + 1}"  # noqa: E731
        if labels.dtype.kind == "U":  # class names (`formats.labels`)
            _check_code_points(labels, where)
            labels = self.labels.cells(labels.tolist(), where)
        else:
            labels = self.labels.numeric(labels.astype(np.float64), where)
        X = sp.csr_matrix(
            (values, cols.astype(np.int32), ptr - lo), shape=(stop - start, n_features)
        )
        X.sum_duplicates()  # sorted indices, one entry per (row, column)
        qids = np.zeros(stop - start, dtype=np.int64)
        return X.indptr.astype(np.int64), X.indices, X.data, labels, qids


def _check_code_points(labels: np.ndarray, where) -> None:
    """Every character of a unicode y is a Unicode scalar value: numpy keeps any 32-bit code,
    and a surrogate (U+D800-U+DFFF) made a class name that cannot be written as UTF-8 (the
    dataset was stored, then every answer naming it was a 500), one beyond U+10FFFF killed the
    parser."""
    width = labels.dtype.itemsize // 4
    if not width or not labels.size:
        return
    codes = labels.view(labels.dtype.str[0] + "u4")
    bad = np.flatnonzero((codes > 0x10FFFF) | ((codes >= 0xD800) & (codes <= 0xDFFF)))
    if bad.size:
        raise ValueError(
            f"{where(int(bad[0]) // width)}: the label is not Unicode text (the code "
            f"{int(codes[bad[0]]):#x} is no character)"
        )


class _Extracted:
    """A 1-d member written to its own file, read back a slice at a time."""

    def __init__(self, path: Path, dtype: np.dtype, length: int):
        self.path, self.dtype, self.length = path, dtype, length

    def read(self, start: int, stop: int) -> np.ndarray:
        with open(self.path, "rb") as file:
            file.seek(start * self.dtype.itemsize)
            out = np.fromfile(file, dtype=self.dtype, count=stop - start)
        if out.size != stop - start:
            raise ValueError("npz: a member is shorter than its header declares")
        return out


def _members(archive: zipfile.ZipFile, max_expanded: int, workdir: Path) -> dict:
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
        name: _read_array(archive, info, name, workdir)
        for name, info in zip(names, infos, strict=True)
        if name in REQUIRED
    }


def _read_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, workdir: Path):
    """One ``.npy`` member, its header checked before its data is read: small members in
    memory, the CSR arrays and labels streamed to a file (`_Extracted`)."""
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
        if any(extent < 0 for extent in shape):  # a negative extent made a negative length,
            # which read the whole member: refused before any data is read
            raise ValueError(f"npz: member {name}: its header declares a negative shape {shape}")
        count = math.prod(shape)  # Python's integers: a product of huge extents cannot wrap
        nbytes = count * dtype.itemsize
        if nbytes > info.file_size:
            raise ValueError(f"npz: member {name}: its header declares more data than it holds")
        if name in SMALL:
            data = member.read(min(nbytes, 1024))
            if len(data) != nbytes:
                raise ValueError(f"npz: member {name}: truncated or too large")
            array = np.frombuffer(data, dtype=dtype, count=count)
            return array.reshape(shape, order="F" if fortran else "C")
        text = name == "y" and dtype.kind == "U"  # text labels: fixed-width UTF-32
        if len(shape) != 1 or (dtype.kind not in "iuf" and not text):
            raise ValueError(
                f"npz: member {name}: expected a 1-d numeric array"
                + (" (or, for y, text labels: a unicode array)" if name == "y" else "")
            )
        if text and dtype.itemsize // 4 > MAX_LABEL_CHARS:  # bounds every label, unread
            raise ValueError(
                f"npz: member y: a unicode array of {dtype.itemsize // 4} characters a label "
                f"(its width), more than the {MAX_LABEL_CHARS} accepted; numpy makes it as wide "
                "as the longest name (np.asarray(names) or y.astype(str))"
            )
        path = workdir / name
        with open(path, "wb") as out:
            left = nbytes
            while left:
                block = member.read(min(left, 1 << 20))
                if not block:
                    raise ValueError(f"npz: member {name}: truncated")
                out.write(block)
                left -= len(block)
    return _Extracted(path, dtype, count)


def _integers(array: np.ndarray, name: str, ndim: int = 1) -> np.ndarray:
    if array.dtype.kind not in "iu" or array.ndim != ndim:
        raise ValueError(f"npz: member {name}: expected a {ndim}-d integer array")
    return array.astype(np.int64)


def _format_name(array: np.ndarray) -> str | None:
    if array.ndim != 0 or array.dtype.kind not in "SU":
        return None
    value = array.item()
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


def _check_header(arrays: dict) -> tuple[int, int]:
    """(n_rows, n_features) from the small members ``format`` and ``shape``."""
    if _format_name(arrays["format"]) != "csr":
        raise ValueError("npz: member format: expected 'csr' (save a CSR matrix)")
    shape = _integers(arrays["shape"], "shape")
    if shape.shape != (2,) or shape.min() < 0 or shape[1] >= 2**31:
        raise ValueError("npz: member shape: expected (n_rows, n_features) below 2**31 features")
    return int(shape[0]), int(shape[1])
