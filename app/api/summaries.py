"""Summaries for people (the dashboard): a dataset's statistics and a model's largest weights."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query

from app.deps import DatasetDep, ModelDep, SettingsDep
from app.schemas.summaries import DatasetStats, TopFeatures
from app.services.datasets import dataset_arrays
from app.services.model_cache import model_from_row

router = APIRouter()
BINS = 20


def _histogram(values: np.ndarray, integral: bool) -> dict:
    low, high = float(values.min()), float(values.max())
    if integral and high - low < BINS:
        edges = np.arange(low, high + 2)
    else:
        edges = _even_edges(low, high)
    counts, edges = np.histogram(values, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def _even_edges(low: float, high: float) -> np.ndarray:
    """BINS + 1 evenly spaced edges from low to high (from a single value to that value + 1).
    Labels may be any finite float: the span of -1e308 and 1e308 overflows to inf, so such
    edges are spaced over the halves (exact for floats this large) and doubled."""
    if high <= low:
        if low + 1.0 == low:  # too large for + 1 to change it: one bin holding the value
            return np.array([low, low])
        high = low + 1.0
    if np.isfinite(high - low):
        return np.linspace(low, high, BINS + 1)
    return np.linspace(low / 2, high / 2, BINS + 1) * 2


@router.get("/datasets/{dataset_id}/stats", response_model=DatasetStats, tags=["datasets"])
def get_dataset_stats(dataset: DatasetDep, settings: SettingsDep):
    """Density, the label histogram and the distribution of non-zeros per row."""
    directory = dataset_arrays(settings, dataset)
    row_nnz = np.diff(np.load(directory / "indptr.npy", mmap_mode="r", allow_pickle=False))
    target = None
    if dataset.label_kind != "classes":
        target = _histogram(np.load(directory / "y.npy", allow_pickle=False), integral=False)
    cells = dataset.n_rows * max(dataset.n_features, 1)
    return {
        "id": dataset.id,
        "n_rows": dataset.n_rows,
        "n_features": dataset.n_features,
        "nnz": dataset.nnz,
        "density": dataset.nnz / cells if cells else 0.0,
        "label_kind": dataset.label_kind,
        "classes": dataset.classes,
        "target": target,
        "row_nnz": {
            "min": int(row_nnz.min()),
            "max": int(row_nnz.max()),
            "mean": float(row_nnz.mean()),
            "median": float(np.median(row_nnz)),
            **_histogram(row_nnz, integral=True),
        },
    }


@router.get("/models/{model_id}/coefficients", response_model=TopFeatures, tags=["models"])
def get_model_coefficients(
    model: ModelDep, top: Annotated[int, Query(ge=1, le=1000)] = 20
):
    """The `top` largest weights by magnitude, each with its feature index (in the training
    file's numbering), its column name when the training data named its columns, and the class
    it scores."""
    loaded = model_from_row(model)
    coef = loaded.coef
    flat = np.abs(coef).ravel()
    k = min(top, flat.size)
    best = np.argpartition(-flat, k - 1)[:k] if k < flat.size else np.arange(flat.size)
    best = best[np.argsort(-flat[best], kind="stable")]
    rows, cols = np.unravel_index(best, coef.shape)
    one_output = coef.shape[0] == 1
    columns = loaded.columns  # a sparse model's coef holds only these columns
    names = loaded.feature_names
    items = []
    for row, col in zip(rows, cols, strict=True):
        column = int(col if columns is None else columns[col])  # the model's column
        items.append({
            "feature": column + loaded.offset,
            "name": str(names[column]) if names else None,
            "output": None if one_output else loaded.classes[row] if loaded.classes else None,
            "weight": float(coef[row, col]),
        })  # fmt: skip
    return {
        "model_id": model.id,
        "n_features": loaded.n_features,
        "intercept": loaded.intercept.tolist(),
        "items": items,
    }
