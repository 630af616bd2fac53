"""One dispatch from an upload's format to its reader.

Every reader takes the upload as it arrives (already decompressed and bounded by
`app.limits.open_expanded`) and gives the same thing, a source of row chunks that
`app.services.dataset_store.DatasetWriter` stores as they come (see `chunks`). Readers raise
ValueError (a 422 naming the problem), `solvers.io.LibsvmLimitError` or
`app.limits.ExpansionTooLarge` (a 413).

Formats:
  libsvm  LIBSVM/SVMlight text (gzip, bzip2 or xz compressed as sent), parsed while it streams;
  npz     a ``scipy.sparse.save_npz`` CSR archive plus a member ``y`` (see `.npz`).

A format is named by the upload (`?format=`) or recognised from the first bytes: a zip archive
is npz, anything else LIBSVM text.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

FORMATS = ("libsvm", "npz")
ZIP_MAGIC = b"PK\x03\x04"


def resolve(declared: str | None, head: bytes) -> str:
    """The upload's format: the declared one, else npz for a zip archive, else libsvm."""
    if declared is not None:
        if declared not in FORMATS:
            raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {declared!r}")
        return declared
    return "npz" if head.startswith(ZIP_MAGIC) else "libsvm"


def chunks(fmt: str, stream: BinaryIO, source: str, limits: dict, chunk_rows: int, chunk_nnz: int):
    """The upload in `fmt` as a chunk source for `app.services.dataset_store.DatasetWriter`.

    `stream` is the upload's plain bytes, `source` the stored file. Iterating the source yields
    ``(indptr, indices, data, labels, qids)`` row chunks (as `solvers.io.LibsvmChunks` does);
    once iterated, its ``n_rows``, ``n_features``, ``zero_based`` and ``has_qid`` describe the
    dataset. `limits` holds ``max_expanded``, ``max_line`` and ``max_features`` (each optional).
    """
    if fmt == "npz":
        from app.services.formats.npz import read_npz

        data = read_npz(stream, source, limits.get("max_expanded") or 2**62)
        return RowChunks(data, chunk_rows, limits.get("max_features"))
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
