"""Dataset representations."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class ClassCount(BaseModel):
    label: int | float | str = Field(
        description="the label as it appears in the file: a number, or the class name of a "
        "text label column (csv, tsv, parquet)"
    )
    count: int


class ClassLabels(BaseModel):
    kind: Literal["classes"] = "classes"
    classes: list[ClassCount]


class RealTarget(BaseModel):
    kind: Literal["real"] = "real"
    min: int | float
    max: int | float
    mean: float


class DatasetOut(BaseModel):
    id: str
    name: str
    filename: str | None
    n_rows: int
    n_features: int = Field(description="the largest feature index (one-based) or index + 1")
    nnz: int
    zero_based: bool = Field(description="the file's feature indices start at 0")
    has_qid: bool
    format: str | None = Field(None, description="libsvm, csv, tsv, parquet or npz")
    feature_names: list[str] | None = Field(
        None, description="the columns' names, feature j first (csv, tsv, dense parquet)"
    )
    labels: ClassLabels | RealTarget = Field(discriminator="kind")
    sha256: str
    size_bytes: int = Field(description="the upload as received")
    stored_bytes: int | None = Field(
        None,
        description="what is stored (the parsed arrays, and a table's feature names and text "
        "class names as JSON); counted by the storage quota",
    )
    created_at: datetime
