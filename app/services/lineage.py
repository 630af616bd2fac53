"""Where a model came from: recorded when the model is stored, shown by
``GET /v1/models/{id}/lineage``.

The record (`models.lineage`) is written once, in the worker, from what the job used: the
training and validation datasets (their ids, names, content hashes and parse format), and the
code that trained it (package version and commit, `app.build_info`). The view adds what the
model row itself holds: the job's parameters, the solver's status and final gap, the metrics,
and the registered names and versions that point at the model.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app import build_info
from app.tables import Dataset, Model, ModelAlias, ModelVersion, RegisteredModel


def _dataset(dataset: Dataset | None) -> dict[str, Any] | None:
    if dataset is None:
        return None
    return {
        "id": dataset.id,
        "name": dataset.name,
        "sha256": dataset.sha256,
        "content_key": dataset.content_key,
        "format": dataset.format,
        "n_rows": dataset.n_rows,
        "n_features": dataset.n_features,
    }


def record(dataset: Dataset, validation: Dataset | None) -> dict[str, Any]:
    """The lineage stored with a new model (run in the worker that trained it)."""
    return {
        "dataset": _dataset(dataset),
        "validation_dataset": _dataset(validation),
        "package_version": build_info.package_version(),
        "commit": build_info.commit(),
    }


def view(session: Session, model: Model) -> dict[str, Any]:
    """The lineage document of a model (the current tenant's session)."""
    stored = model.lineage or {}
    dataset = stored.get("dataset")
    if dataset is None and model.dataset_id:  # a model stored before lineage was recorded
        dataset = _dataset(session.get(Dataset, model.dataset_id))
    return {
        "model_id": model.id,
        "job_id": model.job_id,
        "estimator": model.estimator,
        "params": model.trained_params,
        "dataset": dataset,
        "validation_dataset": stored.get("validation_dataset"),
        "package_version": stored.get("package_version"),
        "commit": stored.get("commit"),
        "solver": {"status": model.status, "gap": model.gap,
                   "duality_gap": model.duality_gap, "n_iter": model.n_iter,
                   "train_time_s": model.train_time_s},
        "metrics": {"train_accuracy": model.train_accuracy,
                    "validation_accuracy": model.validation_accuracy},
        "registered": _registered(session, model.id),
        "created_at": model.created_at,
    }  # fmt: skip


def _registered(session: Session, model_id: str) -> list[dict[str, Any]]:
    rows = session.execute(
        select(RegisteredModel.id, RegisteredModel.name, ModelVersion.version)
        .join(ModelVersion, ModelVersion.registered_model_id == RegisteredModel.id)
        .where(ModelVersion.model_id == model_id)
        .order_by(RegisteredModel.name, ModelVersion.version)
    ).all()
    out = []
    for registered_id, name, version in rows:
        aliases = session.scalars(
            select(ModelAlias.alias).where(
                ModelAlias.registered_model_id == registered_id, ModelAlias.version == version
            ).order_by(ModelAlias.alias)
        ).all()
        out.append({"name": name, "version": version, "aliases": list(aliases)})
    return out
