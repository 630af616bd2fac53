"""Dataset routes: upload, list, show, delete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response, status

from app.deps import DatabaseDep, DatasetDep, SessionDep, SettingsDep
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page
from app.schemas.datasets import DatasetOut
from app.services import datasets as service
from app.services.dataset_upload import UploadOptions, create_dataset
from app.services.formats import FORMATS
from app.services.idempotency import check_key

router = APIRouter(tags=["datasets"])

UPLOAD_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "name": {"type": "string", "maxLength": 255},
                        "format": {"type": "string", "enum": list(FORMATS)},
                        "label_column": {"type": "string", "maxLength": 255},
                        "empty_cells": {"type": "string", "enum": ["error", "zero"]},
                        "file": {"type": "string", "format": "binary"},
                    },
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


@router.post(
    "/datasets",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    openapi_extra=UPLOAD_DOC,
    responses={
        200: {"description": "the same file was already stored: that dataset", "model": DatasetOut},
        413: {"description": "upload too large"},
        422: {"description": "malformed file"},
        429: {"description": "storage quota exceeded, or the uploads in progress at their "
              "bound: the tenant's (MAX_UPLOADS_PER_TENANT) or the server's "
              "(MAX_UPLOADS_IN_FLIGHT)"},
    },
)
async def upload_dataset(
    request: Request,
    response: Response,
    db: DatabaseDep,
    settings: SettingsDep,
    name: Annotated[
        str | None, Query(max_length=255, description="for raw (non-multipart) bodies")
    ] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
    format: Annotated[
        Literal["libsvm", "csv", "tsv", "parquet", "npz"] | None,
        Query(description="libsvm text, csv or tsv text with a header row, parquet, or npz "
              "(scipy.sparse.save_npz CSR plus y); default: from the file name's extension, "
              "else recognised from the file's first bytes"),
    ] = None,
    label_column: Annotated[
        str | None,
        Query(max_length=255, description="csv, tsv, parquet: the label column (default "
              "'label', else the first column); numbers, or text class names (a 422 for "
              "libsvm and npz)"),
    ] = None,
    empty_cells: Annotated[
        Literal["error", "zero"] | None,
        Query(description="csv, tsv, parquet: an empty (null) cell is an error (default) or 0"),
    ] = None,
):
    """Upload a LIBSVM/SVMlight file, a CSV or TSV file with a header row (each optionally
    gzip, bzip2 or xz compressed), a Parquet file or an npz archive, as the multipart field
    `file` or as the raw request body. Parse options come in the query string or as multipart
    fields sent before `file` (the file is parsed while it arrives), each once: an option sent
    twice in either, or in both with different values, is a 422 naming it.

    Labels of csv, tsv and parquet (a numeric, string or dictionary column): a label column
    whose every cell reads as a number is numeric; otherwise every label is text, a class
    named by it (a number among them by its value: 1 and 1.0 are the class "1"). Text labels
    make a classification dataset whose classes are listed by name, sorted; at most 255
    characters a name and 1000 classes, an empty label is an error (422 naming the line or
    row). LIBSVM and npz labels are numbers.

    The same bytes uploaded again with the same parse options answer the stored dataset (200);
    a format recognised (from the file name or the first bytes) counts as the same format
    named."""
    options = UploadOptions(format=format, label_column=label_column, empty_cells=empty_cells)
    with request.app.state.upload_slots.hold():  # before the body is read
        dataset, how = await create_dataset(
            request, db, settings, request.app.state.parser, name, check_key(idempotency_key),
            options,
        )  # fmt: skip
    response.headers["Location"] = f"/v1/datasets/{dataset.id}"
    if how == "replayed":
        response.headers["Idempotent-Replayed"] = "true"
    elif how == "duplicate":  # the tenant already stores these bytes: that dataset, 200
        response.status_code = status.HTTP_200_OK
    return service.dataset_view(dataset)


@router.get("/datasets", response_model=Page[DatasetOut])
def list_datasets(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    items, nxt = service.list_datasets(session, limit, cursor)
    return {"items": [service.dataset_view(d) for d in items], "next": nxt}


@router.get("/datasets/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset: DatasetDep):
    return service.dataset_view(dataset)


@router.delete("/datasets/{dataset_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_dataset(dataset_id: str, db: DatabaseDep, settings: SettingsDep) -> Response:
    service.delete_dataset(db, settings, dataset_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
