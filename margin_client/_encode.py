"""Turning in-memory data into what the service reads: npz uploads and predict bodies."""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

Instances = Any  # ndarray | scipy sparse | list of {index or name: value} | LIBSVM lines


def is_sparse(X: Any) -> bool:
    """Whether X is a scipy sparse matrix. scipy is imported only where a matrix is built (its
    import was over half of the start of a CLI command that sends none, most of them), and an
    object can only be a scipy matrix once something has imported scipy."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(X)


def as_csr(X: Any) -> sp.csr_matrix:
    """X as a float64 CSR matrix (numpy arrays, nested lists and any scipy sparse matrix)."""
    import scipy.sparse as sp

    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    array = np.asarray(X, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise ValueError(f"X: expected a 2-d array, got {array.ndim} dimensions")
    return sp.csr_matrix(array)


def npz_bytes(X: Any, y: Any) -> bytes:
    """The npz upload of (X, y): the members of ``scipy.sparse.save_npz`` for X's CSR form, plus
    ``y``. Column j of X becomes feature j of a zero-based dataset."""
    X = as_csr(X)
    X.sum_duplicates()
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != X.shape[0]:
        raise ValueError(f"y: expected {X.shape[0]} labels (one per row of X), got {y.shape}")
    if y.dtype.kind == "O" and all(isinstance(v, str) for v in y.tolist()):
        y = y.astype(str)  # class names, sent as a unicode array
    if y.dtype.kind not in "iufU":
        raise ValueError("y: expected numeric labels or text class names")
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        indices=X.indices,
        indptr=X.indptr,
        format=np.array(b"csr"),
        shape=np.array(X.shape),
        data=X.data,
        y=y if y.dtype.kind == "U" else y.astype(np.float64),
    )
    return buffer.getvalue()


def is_libsvm_lines(X: Any) -> bool:
    return isinstance(X, str) or (
        isinstance(X, Sequence) and len(X) > 0 and all(isinstance(x, str) for x in X)
    )


def is_dicts(X: Any) -> bool:
    return isinstance(X, Sequence) and len(X) > 0 and all(isinstance(x, Mapping) for x in X)


def by_name(X: Sequence[Mapping]) -> bool:
    """Whether dict instances are keyed by feature name (a model trained on a table), not by
    feature index: some key is text that is no integer. The service reads them as records."""
    return any(isinstance(key, str) and not key.strip().lstrip("+-").isdigit()
               for row in X for key in row)  # fmt: skip


def count(X: Instances) -> int:
    if isinstance(X, str):
        return len(_lines(X))
    if is_sparse(X) or isinstance(X, np.ndarray):
        return X.shape[0] if X.ndim == 2 else 1
    return len(X)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def request_for(
    X: Instances, start: int, stop: int, offset: int, records: bool | None = None
) -> dict[str, Any]:
    """httpx keyword arguments of a predict request for rows [start, stop) of X. Matrix
    columns are sent as feature indices ``column + offset`` (1 for a one-based model).
    `records`: whether dicts of X are keyed by name (`by_name`), decided once by a caller that
    sends X in many batches (else each batch walked every row's keys again)."""
    if is_libsvm_lines(X):
        lines = _lines(X) if isinstance(X, str) else list(X)
        body = "\n".join(line.rstrip("\n") for line in lines[start:stop]) + "\n"
        return {"content": body.encode(), "headers": {"content-type": "text/plain"}}
    if records is None:
        records = is_dicts(X) and by_name(X)
    if records:
        named = [{str(k): float(v) for k, v in row.items()} for row in X[start:stop]]
        return {"json": {"records": named}}
    if is_dicts(X):
        instances = []
        for row in X[start:stop]:
            items = sorted((int(k), float(v)) for k, v in row.items())
            instances.append({"indices": [k for k, _ in items], "values": [v for _, v in items]})
        return {"json": {"instances": instances}}
    block = as_csr(X[start:stop] if is_sparse(X) else np.asarray(X)[start:stop])
    block.sum_duplicates()
    instances = [
        {
            "indices": (block.indices[a:b] + offset).tolist(),
            "values": block.data[a:b].tolist(),
        }
        for a, b in zip(block.indptr[:-1], block.indptr[1:], strict=True)
    ]
    return {"json": {"instances": instances}}
