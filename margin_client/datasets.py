"""``client.datasets``: upload (files streamed, or in-memory arrays as npz), list, get, delete."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from margin_client._encode import npz_bytes
from margin_client._http import answer_json, resource_id, segment

if TYPE_CHECKING:
    from margin_client._http import Client

CHUNK = 1 << 20


class DatasetInfo(TypedDict, total=False):
    """A stored dataset, as the service describes it (more keys may appear)."""

    id: str
    name: str
    filename: str | None
    n_rows: int
    n_features: int
    nnz: int
    zero_based: bool
    has_qid: bool
    labels: dict[str, Any]
    sha256: str
    size_bytes: int
    created_at: str


class UploadedDataset(dict):
    """The dataset an upload answers (a `DatasetInfo` dict), with `created`: True when the
    upload stored it (201), False when the same bytes read the same way were stored already
    and that dataset is answered (200)."""

    created: bool

    def __init__(self, info: DatasetInfo, created: bool):
        super().__init__(info)
        self.created = created


def _file_chunks(path: Path, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            if on_bytes is not None:
                on_bytes(len(chunk))
            yield chunk


def dataset_id(dataset: str | dict[str, Any]) -> str:
    return resource_id("dataset", dataset if isinstance(dataset, str) else dataset["id"])


class Datasets:
    def __init__(self, client: Client):
        self._client = client

    def upload(
        self,
        data: str | os.PathLike | tuple[Any, Any],
        *,
        name: str | None = None,
        format: str | None = None,
        label_column: str | None = None,
        empty_cells: str | None = None,
        idempotency_key: str | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> UploadedDataset:
        """Store a dataset: a file (streamed as it is on disk: LIBSVM/SVMlight, CSV or TSV with
        a header row, compressed or not, Parquet or npz; `format` is "libsvm", "csv", "tsv",
        "parquet" or "npz", by default recognised) or an in-memory ``(X, y)`` (numpy or scipy
        sparse X, sent as npz: column j is feature j of a zero-based dataset). For tables,
        `label_column` names the label (default "label", else the first column) and
        `empty_cells="zero"` reads empty cells as 0 (default: an error). `on_bytes(n)` is
        called as file bytes are sent. The answer's `created` says whether this upload
        stored it or found it stored already."""
        headers = {"content-type": "application/octet-stream"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        params: dict[str, Any] = {
            "format": format, "label_column": label_column, "empty_cells": empty_cells,
        }
        if isinstance(data, tuple):
            X, y = data
            content: Any = npz_bytes(X, y)
            params.update(format="npz", name=name or "arrays")
        else:
            path = Path(data)
            size = path.stat().st_size
            headers["content-length"] = str(size)
            content = _file_chunks(path, on_bytes)
            params.update(name=name or path.name, filename=path.name)
        params = {k: v for k, v in params.items() if v is not None}
        response = self._client.request(
            "POST", "/v1/datasets", content=content, params=params, headers=headers
        )
        return UploadedDataset(answer_json(response), response.status_code == 201)

    def list(self, limit: int | None = None) -> list[DatasetInfo]:
        """Stored datasets, newest first (all of them, or the first `limit`)."""
        return list(self._client.paginate("/v1/datasets", limit=limit))

    def get(self, dataset: str | dict[str, Any]) -> DatasetInfo:
        return self._client.get_json(f"/v1/datasets/{segment(dataset_id(dataset))}")

    def stats(self, dataset: str | dict[str, Any]) -> dict[str, Any]:
        """Density, label histogram and the distribution of non-zeros per row."""
        return self._client.get_json(f"/v1/datasets/{segment(dataset_id(dataset))}/stats")

    def delete(self, dataset: str | dict[str, Any]) -> None:
        """Remove a dataset (409 while a queued or running job uses it)."""
        self._client.request("DELETE", f"/v1/datasets/{segment(dataset_id(dataset))}")
