"""Chunk sources for the online shared-slack solver (`solvers.structural.stream`).

A chunk source is a callable returning a fresh iterator of ``(X, margins, qid)`` chunks (a matrix
the input door takes, (rows,), (rows,)) per pass: a qid-grouped LIBSVM file read by
`solvers.io.iter_libsvm`, or a problem stored as raw .npy arrays read memory-mapped.
`whole_examples` passes every chunk through the door and re-cuts the chunks so that no example
(a run of equal qid) is split, copying only the example a chunk boundary cuts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np
import scipy.sparse as sp

from solvers._core.problem import check_csr, csr_arrays


def _examples(qid):
    """Row offsets of the runs of equal qid (one example each)."""
    starts = np.flatnonzero(np.diff(qid)) + 1
    return np.concatenate([[0], starts, [len(qid)]]).astype(np.int64)


def _rows(X, r0, r1):
    """Rows r0..r1 of a CSR matrix as a view of its arrays (no copy of the values)."""
    p0, p1 = X.indptr[r0], X.indptr[r1]
    return sp.csr_matrix(
        (X.data[p0:p1], X.indices[p0:p1], X.indptr[r0 : r1 + 1] - p0),
        shape=(r1 - r0, X.shape[1]),
        copy=False,
    )


def whole_examples(chunks: Iterator, n_features, reparam):
    """Whole examples (X as the door's `CSRArrays`, l̂, example offsets) from chunks that may
    split an example.

    The bulk of each chunk is passed on as a view; only the example cut by a chunk boundary is
    copied (and joined with its rest from the next chunk).
    """
    for X, margins, ex in _whole_examples(chunks, n_features):
        X = csr_arrays(X)
        yield X, reparam.margins(X, margins), ex


def _whole_examples(chunks: Iterator, n_features):
    tail = None  # (X, margins, qid) of the last, possibly incomplete, example
    for X, margins, qid in chunks:
        X = check_csr(X)
        if X.shape[1] != n_features:
            raise ValueError(f"chunks must have {n_features} columns, got {X.shape[1]}")
        margins = np.asarray(margins, dtype=np.float64)
        qid = np.asarray(qid)
        if X.shape[0] == 0:
            continue
        ex = _examples(qid)
        start = 0
        if tail is not None:
            if qid[0] == tail[2][0]:
                start = int(ex[1])
                tail = (
                    sp.vstack([tail[0], _rows(X, 0, start)], format="csr"),
                    np.concatenate([tail[1], margins[:start]]),
                    np.concatenate([tail[2], qid[:start]]),
                )
                ex = ex[1:]
            if start < X.shape[0]:  # the example is complete
                yield tail[0], tail[1], np.array([0, len(tail[1])])
                tail = None
        if start == X.shape[0]:
            continue
        cut = int(ex[-2])
        if cut > start:
            yield _rows(X, start, cut), margins[start:cut], ex[:-1] - start
        tail = (_rows(X, cut, X.shape[0]).copy(), margins[cut:].copy(), qid[cut:].copy())
    if tail is not None:
        yield tail[0], tail[1], _examples(tail[2])


def save_npy_problem(directory, X, margins, qid):
    """Store a problem as raw .npy arrays that `npy_chunks` reads back memory-mapped."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    X = check_csr(X)
    arrays = {
        "data": X.data,
        "indices": X.indices,
        "indptr": X.indptr,
        "margins": np.asarray(margins, dtype=np.float64),
        "qid": np.asarray(qid),
    }
    for name, arr in arrays.items():
        np.save(os.path.join(directory, f"{name}.npy"), arr)
    np.save(os.path.join(directory, "shape.npy"), np.array(X.shape, dtype=np.int64))


def npy_chunks(directory, chunk_rows):
    """A chunk source over a problem stored by `save_npy_problem` (memory-mapped, no full load).

    Returns a callable giving a fresh iterator of (X, margins, qid) chunks of ``chunk_rows`` rows.
    """
    directory = os.fspath(directory)
    if int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows!r}")

    def chunks():
        def load(name):
            return np.load(os.path.join(directory, f"{name}.npy"), mmap_mode="r")

        n_rows, n_features = (int(v) for v in load("shape"))
        indptr, data, indices = load("indptr"), load("data"), load("indices")
        margins, qid = load("margins"), load("qid")
        for r0 in range(0, n_rows, int(chunk_rows)):
            r1 = min(n_rows, r0 + int(chunk_rows))
            ptr = np.array(indptr[r0 : r1 + 1], dtype=np.int64)
            p0, p1 = int(ptr[0]), int(ptr[-1])
            X = sp.csr_matrix(
                (np.array(data[p0:p1]), np.array(indices[p0:p1]), ptr - p0),
                shape=(r1 - r0, n_features),
            )
            yield X, np.array(margins[r0:r1]), np.array(qid[r0:r1])

    return chunks


def chunk_source(source, chunk_rows, n_features, zero_based) -> Callable[[], Iterator]:
    if callable(source):
        return source
    if isinstance(source, (str, os.PathLike)):
        from solvers.io import iter_libsvm

        if n_features is None:
            raise ValueError(
                "n_features is required to stream a file (the stream cannot look ahead)"
            )

        def chunks():
            return iter_libsvm(
                source,
                chunk_rows=chunk_rows,
                n_features=n_features,
                zero_based=zero_based,
                query_id=True,
            )

        return chunks
    raise TypeError(
        "source must be a path or a callable returning chunk iterators, "
        f"got {type(source).__name__}"
    )
