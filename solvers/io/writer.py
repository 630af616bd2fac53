"""Writing a sparse matrix and its labels as LIBSVM/SVMlight text.

Numbers are written in their shortest form that reads back to the same value (integers without
a decimal point), so a file written and read again with the same dtype gives identical arrays.
A path ending in .gz, .bz2 or .xz is compressed accordingly.
"""

import bz2
import gzip
import lzma
import os

import numpy as np
import scipy.sparse as sp

_ROWS_PER_BLOCK = 4096
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def write_libsvm(path, X, y, qid=None, zero_based=False):
    """Write ``X`` and ``y`` (and ``qid``) as LIBSVM/SVMlight text, one line per row.

    Parameters
    ----------
    path : path (".gz", ".bz2" or ".xz" suffix compresses) or a binary file object.
    X : sparse matrix or 2-D array (n_samples, n_features); stored zeros of a sparse X are
        written as explicit entries, zeros of a dense X are omitted.
    y : (n_samples,) finite labels.
    qid : optional (n_samples,) integers, written as ``qid:q`` after each label.
    zero_based : write indices from 0 instead of LIBSVM's 1.
    """
    X, y, qid = _check(X, y, qid)
    shift = 0 if zero_based else 1
    sink, owned = _open(path)
    try:
        for start in range(0, X.shape[0], _ROWS_PER_BLOCK):
            stop = min(start + _ROWS_PER_BLOCK, X.shape[0])
            sink.write(_format_block(X, y, qid, start, stop, shift).encode("ascii"))
    finally:
        if owned:
            sink.close()


def _check(X, y, qid):
    X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got {X.ndim} dimensions")
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X.data):
        raise ValueError(f"X must hold real numbers, got dtype {X.dtype}")
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X holds NaN or infinite values, which LIBSVM text cannot carry")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y holds NaN or infinite values, which LIBSVM text cannot carry")
    if qid is not None:
        qid = np.asarray(qid)
        if qid.shape != (X.shape[0],) or not np.issubdtype(qid.dtype, np.integer):
            raise ValueError(
                f"qid must be integers of shape ({X.shape[0]},), got {qid.dtype} {qid.shape}"
            )
    return X, y, qid


def _open(path):
    if hasattr(path, "write"):
        return path, False
    opener = _OPENERS.get(os.path.splitext(os.fspath(path))[1].lower(), open)
    return opener(path, "wb"), True


def _numbers(values):
    """Shortest round-trip text of each value; integral values without '.0'."""
    integral = (values == np.trunc(values)) & (np.abs(values) < 1e15)
    text = values.astype(str)
    if integral.any():
        text = text.astype(object)
        text[integral] = np.where(integral, values, 0)[integral].astype(np.int64).astype(str)
    return text


def _format_block(X, y, qid, start, stop, shift):
    lo, hi = X.indptr[start], X.indptr[stop]
    pairs = np.char.add(
        np.char.add((X.indices[lo:hi].astype(np.int64) + shift).astype(str), ":"),
        _numbers(X.data[lo:hi]).astype(str),
    ).tolist()
    heads = _numbers(y[start:stop]).astype(str)
    if qid is not None:
        heads = np.char.add(np.char.add(heads, " qid:"), qid[start:stop].astype(str))
    heads = heads.tolist()
    lines = []
    for r in range(start, stop):
        a, b = X.indptr[r] - lo, X.indptr[r + 1] - lo
        lines.append(" ".join([heads[r - start], *pairs[a:b]]) if b > a else heads[r - start])
    lines.append("")
    return "\n".join(lines)
