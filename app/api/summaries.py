"""Summaries for people (the dashboard): a dataset's statistics and a model's largest weights."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request

from app.api.model_lookup import unpacked
from app.api.prediction_runs import deleted_meanwhile
from app.deps import DatasetDep, ModelDep, SessionDep, SettingsDep
from app.schemas.summaries import DatasetStats, TopFeatures
from app.services.datasets import dataset_arrays

router = APIRouter()
BINS = 20
BLOCK = 1 << 20  # weights whose magnitudes are ranked at once


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
    try:
        directory = dataset_arrays(settings, dataset, tries=1)  # a 503 within the timeout
        row_nnz = np.diff(np.load(directory / "indptr.npy", mmap_mode="r", allow_pickle=False))
        target = None
        if dataset.label_kind != "classes":
            target = _histogram(np.load(directory / "y.npy", allow_pickle=False), integral=False)
    except FileNotFoundError:  # a DELETE removed the arrays after the row was read: was a 500
        raise deleted_meanwhile(dataset.id) from None
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


def _largest(flat: np.ndarray, top: int, block: int = BLOCK) -> np.ndarray:
    """Positions of the `top` largest magnitudes of `flat`, largest first, found a block at a
    time: the magnitudes, their negation and argpartition's positions of a
    whole model took 3 copies of its weights (+234 MB per request for 82 MB of weights)."""
    positions, values = [], []
    for start in range(0, flat.size, block):
        part = np.abs(flat[start : start + block])
        np.negative(part, out=part)  # ascending order of the negation: largest first
        k = min(top, part.size)
        local = np.argpartition(part, k - 1)[:k].copy() if k < part.size else np.arange(part.size)
        positions.append(local + start)
        values.append(-part[local])
        del part, local  # the next block's arrays take their place
    if not positions:
        return np.zeros(0, dtype=np.int64)
    positions, values = np.concatenate(positions), np.concatenate(values)
    order = np.lexsort((positions, -values))[:top]
    return positions[order]


@router.get("/models/{model_id}/coefficients", response_model=TopFeatures, tags=["models"])
def get_model_coefficients(
    model: ModelDep,
    session: SessionDep,
    request: Request,
    top: Annotated[int, Query(ge=1, le=1000)] = 20,
):
    """The `top` largest weights by magnitude, each with its feature index (in the training
    file's numbering), its column name when the training data named its columns, and the class
    it scores."""
    loaded = unpacked(request.app, session, model.id)
    coef = loaded.coef
    best = _largest(coef.reshape(-1), top)
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
