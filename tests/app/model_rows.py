"""Rows for the model route tests (`tests/app/test_models_*.py`, `test_prediction_run*.py`):
models and datasets written directly into the app's migrated database (SQLite; PostgreSQL too when
MARGIN_TEST_POSTGRES_URL is set), so that no training is needed, and the reference each answer is
checked against (the decision function computed here with NumPy). The fixtures `service` and
`binary` (tests/app/conftest.py) hand them to a test."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sqlalchemy import func, select

from app.services.dataset_files import summarize_labels
from app.services.model_store import pack_weights
from app.tables import Dataset, Model, new_id

N_FEATURES = 30


class Service:
    """The app of the shared fixtures (migrated SQLite, or PostgreSQL when configured), its
    client, and helpers that write model and dataset rows directly."""

    def __init__(self, app, client):
        self.app, self.client = app, client
        self.settings = app.state.settings
        self.db = app.state.db

    def add_model(
        self,
        coef,
        intercept,
        classes,
        kind="classifier",
        zero_based=False,
        params=None,
        n_features=None,
        tenant="local",
        feature_names=None,
    ):
        coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
        model_id = new_id("model")
        with self.db.write() as session:
            session.add(
                Model(
                    id=model_id,
                    tenant=tenant,
                    job_id=None,
                    dataset_id=None,
                    estimator="LinearSVC",
                    params=params or {"C": 1.0},
                    kind=kind,
                    classes=list(classes),
                    n_features=n_features or coef.shape[1],
                    zero_based=zero_based,
                    weights=pack_weights(coef, intercept),
                    status="converged",
                    gap=1e-3,
                    n_iter=7,
                    train_time_s=0.25,
                    train_accuracy=0.9,
                    validation_accuracy=None,
                    feature_names=feature_names,
                )
            )
        return model_id

    def add_dataset(self, X, y, zero_based=False, label_kind="classes", tenant="local"):
        """Store arrays the way the upload path does (raw .npy files under datasets/<id>/)."""
        X = sp.csr_matrix(X)
        dataset_id = new_id("ds")
        directory = self.settings.data_dir / "datasets" / dataset_id
        directory.mkdir(parents=True)
        for name, array in (
            ("data", X.data),
            ("indices", X.indices),
            ("indptr", X.indptr),
            ("y", np.asarray(y, dtype=np.float64)),
        ):
            np.save(directory / f"{name}.npy", array)
        with self.db.write() as session:
            session.add(
                Dataset(
                    id=dataset_id,
                    tenant=tenant,
                    name="test",
                    filename="test.svm",
                    n_rows=X.shape[0],
                    n_features=X.shape[1],
                    nnz=X.nnz,
                    zero_based=zero_based,
                    has_qid=False,
                    label_kind=label_kind,
                    classes=summarize_labels(np.asarray(y, float))["classes"]
                    if label_kind == "classes"
                    else None,
                    target={},
                    sha256="0" * 64,
                    size_bytes=1,
                )
            )
        return dataset_id

    def count(self, table) -> int:
        with self.db.session() as session:
            return session.scalar(select(func.count()).select_from(table))


def rng_problem(n=40, d=N_FEATURES, seed=0):
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed)
    X.data = X.data * 4 - 2
    return X


def sparse_instances(X, base=1):
    return [
        {"indices": (X[i].indices + base).tolist(), "values": X[i].data.tolist()}
        for i in range(X.shape[0])
    ]


def libsvm_lines(X, base=1, labels=None):
    out = []
    for i in range(X.shape[0]):
        row = X[i]
        feats = " ".join(
            f"{j + base}:{float(v)!r}" for j, v in zip(row.indices, row.data, strict=True)
        )
        out.append((f"{labels[i]} " if labels is not None else "") + feats)
    return "\n".join(out) + "\n"


def reference(X, coef, intercept):
    return X.toarray() @ coef.T + intercept


def tenant_key(service, tenant: str) -> dict[str, str]:
    """Headers of a new key of `tenant` (AUTH_MODE=auto on loopback: a key sent is used)."""
    from app.services import keys

    return {"Authorization": f"Bearer {keys.create_key(service.db, tenant, 't', ['admin'])[1]}"}


def tenant_model(service, tenant: str, n_rows: int = 10) -> tuple[str, str]:
    """A model and a dataset of `tenant`: (model id, dataset id)."""
    coef = np.random.default_rng(2).standard_normal((1, N_FEATURES))
    model_id = service.add_model(coef, [0.0], classes=[-1, 1], tenant=tenant)
    X = rng_problem(n=n_rows, seed=5)
    return model_id, service.add_dataset(X, np.ones(n_rows), tenant=tenant)
