"""Dataset routes: upload, list, show, delete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request, Response, status

from app.deps import DatabaseDep, DatasetDep, SessionDep, SettingsDep
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page
from app.schemas.datasets import DatasetOut
from app.services import datasets as service
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
                        "file": {"type": "string", "format": "binary"},
                        "name": {"type": "string", "maxLength": 255},
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
        429: {"description": "storage quota exceeded"},
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
        Literal["libsvm", "npz"] | None,
        Query(description="libsvm text, or npz (scipy.sparse.save_npz CSR plus y); default: "
              "recognised from the file's first bytes"),
    ] = None,
):
    """Upload a LIBSVM/SVMlight file (optionally gzip, bzip2 or xz compressed) or an npz
    archive, as the multipart field `file` (with an optional field `name`) or as the raw
    request body."""
    dataset, how = await service.create_dataset(
        request, db, settings, request.app.state.parser, name, check_key(idempotency_key), format
    )
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
