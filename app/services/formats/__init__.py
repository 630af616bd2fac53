"""One dispatch from an upload's format to its reader.

Every reader takes the upload as it arrives (already decompressed and bounded by
`app.limits.open_expanded`) and gives the same thing, a source of row chunks that
`app.services.dataset_store.DatasetWriter` stores as they come (see `chunks`). Readers raise
ValueError (a 422 naming the problem), `solvers.io.LibsvmLimitError` or
`app.limits.ExpansionTooLarge` (a 413).

Formats:
  libsvm   LIBSVM/SVMlight text, parsed while it streams;
  csv/tsv  a header row, a label column and numeric features, parsed while it streams
           (`.delimited`);
  parquet  a label column and numeric or sparse columns, read row group by row group once the
           file has arrived (`.parquet`);
  npz      a ``scipy.sparse.save_npz`` CSR archive plus a member ``y`` (see `.npz`).
Text formats may be gzip, bzip2 or xz compressed as sent.

A format is named by the upload (``format``), else recognised from the file name's extension,
else from the first bytes: a zip archive is npz, ``PAR1`` Parquet, a first line with commas
(and no ``index:value`` pair) CSV, with tabs and no colon TSV, anything else LIBSVM text.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

FORMATS = ("libsvm", "csv", "tsv", "parquet", "npz")
ZIP_MAGIC = b"PK\x03\x04"
PARQUET_MAGIC = b"PAR1"
EXTENSIONS = {
    ".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet",
    ".npz": "npz", ".svm": "libsvm", ".libsvm": "libsvm", ".svmlight": "libsvm",
}  # fmt: skip
COMPRESSED = (".gz", ".bz2", ".xz")


def from_name(filename: str | None) -> str | None:
    """The format a file name's extension names (a compression suffix is looked through)."""
    if not filename:
        return None
    name = filename.lower()
    for suffix in COMPRESSED:
        name = name.removesuffix(suffix)
    dot = name.rfind(".")
    return EXTENSIONS.get(name[dot:]) if dot >= 0 else None


def check(declared: str | None) -> str | None:
    if declared is not None and declared not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {declared!r}")
    return declared


def resolve(declared: str | None, head: bytes) -> str:
    """The upload's format: the declared one, else recognised from its first bytes (`head`)."""
    if check(declared) is not None:
        return declared
    if head.startswith(ZIP_MAGIC):
        return "npz"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    first = head.split(b"\n", 1)[0]
    if b":" not in first:
        if b"," in first:
            return "csv"
        if b"\t" in first:
            return "tsv"
    return "libsvm"


TABLES = ("csv", "tsv", "parquet")  # the formats whose columns the parse options name
LABELS_OF = {
    "libsvm": " (its labels are the first field of each line)",
    "npz": " (its labels are its array y)",
}


def chunks(fmt: str, stream: BinaryIO, source: str, limits: dict, chunk_rows: int, chunk_nnz: int,
           options: dict | None = None):
    """The upload in `fmt` as a chunk source for `app.services.dataset_store.DatasetWriter`.

    `stream` is the upload's plain bytes, `source` the stored file. Iterating the source yields
    ``(indptr, indices, data, labels, qids)`` row chunks (as `solvers.io.LibsvmChunks` does);
    once iterated, its ``n_rows``, ``n_features``, ``zero_based``, ``has_qid`` and
    ``feature_names`` (None unless the format names its columns) describe the dataset.
    `limits` holds ``max_expanded``, ``max_line`` and ``max_features`` (each optional);
    `options` the parse options ``label_column`` and ``empty_cells`` of csv, tsv and parquet.
    """
    options = options or {}
    if fmt not in TABLES:
        for name in options:  # a table's option on a file without columns: said, not ignored
            raise ValueError(
                f"{name}: applies to {', '.join(TABLES)} uploads, not to this {fmt} file"
                + (LABELS_OF.get(fmt, "") if name == "label_column" else "")
            )
    if fmt == "npz":
        from app.services.formats.npz import NpzChunks

        return NpzChunks(stream, source, limits, chunk_rows, chunk_nnz)
    if fmt in ("csv", "tsv"):
        from app.services.formats.delimited import DelimitedChunks

        return DelimitedChunks(stream, "," if fmt == "csv" else "\t", limits, **options)
    if fmt == "parquet":
        from app.services.formats.parquet import ParquetChunks

        return ParquetChunks(stream, source, limits, chunk_rows, chunk_nnz, **options)
    from solvers.io import LibsvmChunks

    return LibsvmChunks(
        stream,
        chunk_rows=chunk_rows,
        chunk_nnz=chunk_nnz,
        max_line_bytes=limits.get("max_line"),
        max_features=limits.get("max_features"),
    )


class RowChunks:
    """A dataset already in memory (`solvers.io.LibsvmData`) as row chunks, like LibsvmChunks."""

    feature_names = None

    def __init__(self, data, chunk_rows: int, max_features: int | None = None):
        from solvers.io import LibsvmLimitError

        if max_features is not None and data.n_features > max_features:
            raise LibsvmLimitError(
                f"{data.n_features} features, more than the {max_features} accepted "
                "(MAX_FEATURES)",
                None,
            )
        self.data = data
        self.chunk_rows = chunk_rows
        self.n_rows, self.n_features = data.X.shape
        self.zero_based = data.zero_based
        self.has_qid = data.qid is not None

    def __iter__(self):
        X, y = self.data.X, self.data.y
        qid = self.data.qid if self.has_qid else np.zeros(self.n_rows, dtype=np.int64)
        for start in range(0, self.n_rows, self.chunk_rows):
            stop = min(start + self.chunk_rows, self.n_rows)
            lo, hi = X.indptr[start], X.indptr[stop]
            indptr = X.indptr[start : stop + 1].astype(np.int64) - lo
            yield indptr, X.indices[lo:hi], X.data[lo:hi], y[start:stop], qid[start:stop]
