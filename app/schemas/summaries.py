"""Schemas of the summaries the dashboard draws: dataset statistics and a model's top weights."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Histogram(BaseModel):
    edges: list[float] = Field(description="bin edges (one more than counts)")
    counts: list[int]


class RowNnz(Histogram):
    min: int
    max: int
    mean: float
    median: float


class DatasetStats(BaseModel):
    id: str
    n_rows: int
    n_features: int
    nnz: int
    density: float = Field(description="nnz / (n_rows * n_features)")
    label_kind: str = Field(description="classes or real")
    classes: list[dict[str, Any]] | None = Field(
        description="[{label, count}] for class labels"
    )
    target: Histogram | None = Field(description="histogram of real-valued targets")
    row_nnz: RowNnz = Field(description="distribution of the non-zeros per row")


class Weight(BaseModel):
    feature: int = Field(description="feature index in the training file's numbering")
    name: str | None = Field(
        None, description="the feature's column name (a CSV, TSV or Parquet upload's header); "
        "null when the training data named no columns",
    )
    output: Any = Field(description="the class this weight scores (null: binary or regression)")
    weight: float


class TopFeatures(BaseModel):
    model_id: str
    n_features: int
    intercept: list[float]
    items: list[Weight] = Field(description="largest weights by magnitude, largest first")
