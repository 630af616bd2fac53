"""The service's tables (SQLAlchemy 2 ORM). Alembic migrations create them; this module never does.

Identifiers are strings that sort by creation time (`new_id`), so lists page by id alone.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from app import clock


def utcnow() -> datetime:
    """Now on the service's clock, the database server's (`app.clock`)."""
    return clock.now()


_last_id = [0, 0]  # (milliseconds, random part) of this process's latest id
_id_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """`prefix_` + 12 hex digits of milliseconds + 10 random hex digits (time-ordered, unique).

    Within one process the ids only grow: an id made in the same millisecond as the one before
    (or after the clock stepped back) reuses its time and adds one to its random part, so rows
    one process creates list in the order it created them. Across processes the order is the
    clocks' to the millisecond (after a step back, one process's ids sort after the others' until
    its clock catches up).
    """
    now = int(time.time() * 1000)
    with _id_lock:
        if now > _last_id[0]:
            _last_id[:] = [now, int.from_bytes(os.urandom(5)) >> 1]  # half the range left to grow
        else:
            _last_id[1] += 1
        millis, rest = _last_id
    return f"{prefix}_{millis:012x}{rest:010x}"


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every backend (SQLite stores naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


LOCAL_TENANT = "local"  # the tenant of rows made without one (AUTH_MODE=off, older rows)


class JobStatus(StrEnum):
    QUEUED = "queued"  # waiting for a worker
    RUNNING = "running"  # a worker claimed it and is training
    SUCCEEDED = "succeeded"  # a model was stored (in the same transaction as this status)
    FAILED = "failed"  # an error ended it; `error` says why
    CANCELLED = "cancelled"  # stopped on request, before or during training


ACTIVE_STATUSES = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
TERMINAL_STATUSES = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)


# Ids that every progress report or status change takes from one sequence: 64-bit on PostgreSQL
# (migration 0012); SQLite's INTEGER PRIMARY KEY is a 64-bit rowid already, and only INTEGER
# (not BIGINT) makes the column that rowid.
EVENT_ID = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    # owning tenant (migration 0003); rows made without one belong to "local"
    tenant: Mapped[str] = mapped_column(String(64), server_default="local", index=True)
    filename: Mapped[str | None] = mapped_column(String(255))
    n_rows: Mapped[int] = mapped_column(Integer)
    n_features: Mapped[int] = mapped_column(Integer)
    nnz: Mapped[int] = mapped_column(BigInteger)
    zero_based: Mapped[bool] = mapped_column(Boolean)
    has_qid: Mapped[bool] = mapped_column(Boolean, default=False)
    label_kind: Mapped[str] = mapped_column(String(16))  # "classes" | "real"
    classes: Mapped[list[Any] | None] = mapped_column(JSON)  # [{"label": 1.0, "count": 10}, ...]
    target: Mapped[dict[str, Any]] = mapped_column(JSON)  # {"min", "max", "mean"} of the labels
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # the upload as received
    # what is stored (the parsed arrays), counted by the storage quota (migration 0006)
    stored_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # the upload's content hash and parse options: a repeated upload returns this dataset
    content_key: Mapped[str | None] = mapped_column(String(64))
    # the upload's format and its column names (csv, tsv, dense parquet; migration 0007)
    format: Mapped[str | None] = mapped_column(String(16))
    feature_names: Mapped[list[Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        Index("ux_datasets_tenant_content_key", "tenant", "content_key", unique=True),
    )


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # owning tenant (migration 0003); rows made without one belong to "local"
    tenant: Mapped[str] = mapped_column(String(64), server_default="local", index=True)
    dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("datasets.id", ondelete="SET NULL"), index=True
    )
    validation_dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("datasets.id", ondelete="SET NULL"), index=True
    )
    estimator: Mapped[str] = mapped_column(String(40))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    distributed: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # migration 0010
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value, index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # claims so far (1 on first run)
    worker: Mapped[str | None] = mapped_column(String(255))  # worker id of the current claim
    heartbeat_at: Mapped[datetime | None]
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the latest record
    first_gap: Mapped[float | None] = mapped_column(Float)  # gap of the first full pass
    percent: Mapped[float | None] = mapped_column(Float)
    eta_s: Mapped[float | None] = mapped_column(Float)
    converged: Mapped[bool | None] = mapped_column(Boolean)
    stop_reason: Mapped[str | None] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # the latest stored iterate of the running attempt (migration 0008), and the iteration an
    # attempt resumed from (None: it started cold)
    checkpoint_at: Mapped[datetime | None]
    checkpoint_iteration: Mapped[int | None] = mapped_column(Integer)
    resumed_from: Mapped[int | None] = mapped_column(Integer)
    # cancel?keep_model=true: the stopped solve's iterate is stored as an unconverged model
    keep_model: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    model: Mapped[Model | None] = relationship(
        back_populates="job", uselist=False, viewonly=True, lazy="selectin"
    )

    @property
    def model_id(self) -> str | None:
        return self.model.id if self.model is not None else None


class JobProgress(Base):
    __tablename__ = "job_progress"
    __table_args__ = (Index("ix_job_progress_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(EVENT_ID, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    iteration: Mapped[int] = mapped_column(Integer)
    elapsed_s: Mapped[float] = mapped_column(Float)
    # the solver's stopping measure; its own name among the fields below (solvers.Progress)
    gap: Mapped[float | None] = mapped_column(Float)
    pg_max: Mapped[float | None] = mapped_column("max_pg", Float)
    pg_min: Mapped[float | None] = mapped_column("min_pg", Float)
    pg_range: Mapped[float | None] = mapped_column(Float)  # migration 0005
    max_violation: Mapped[float | None] = mapped_column(Float)  # migration 0005
    active: Mapped[int | None] = mapped_column(Integer)
    primal: Mapped[float | None] = mapped_column(Float)
    dual: Mapped[float | None] = mapped_column(Float)
    duality_gap: Mapped[float | None] = mapped_column(Float)  # migration 0005
    lower_bound: Mapped[float | None] = mapped_column(Float)
    upper_bound: Mapped[float | None] = mapped_column(Float)
    # a search job's place on its path (solvers.selection.search.SearchProgress; migration 0013)
    stage: Mapped[str | None] = mapped_column(String(8))
    fold: Mapped[int | None] = mapped_column(Integer)
    folds_total: Mapped[int | None] = mapped_column(Integer)
    c_index: Mapped[int | None] = mapped_column(Integer)
    cs_total: Mapped[int | None] = mapped_column(Integer)
    C: Mapped[float | None] = mapped_column("c", Float)
    solves_done: Mapped[int | None] = mapped_column(Integer)
    solves_total: Mapped[int | None] = mapped_column(Integer)

    RECORD_FIELDS = (
        "iteration",
        "elapsed_s",
        "gap",
        "pg_max",
        "pg_min",
        "pg_range",
        "max_violation",
        "active",
        "primal",
        "dual",
        "duality_gap",
        "lower_bound",
        "upper_bound",
        "stage",
        "fold",
        "folds_total",
        "c_index",
        "cs_total",
        "C",
        "solves_done",
        "solves_total",
    )

    def as_record(self) -> dict[str, Any]:
        record = {name: getattr(self, name) for name in self.RECORD_FIELDS}
        return {**record, "percent": path_percent(record)}


def path_percent(record: dict[str, Any]) -> float | None:
    """A search's share of its path done at a record: its solves finished of all (the refit
    included), in percent; None for a single solve (its job estimates it from the gap)."""
    if not record.get("solves_total"):
        return None
    return 100.0 * record["solves_done"] / record["solves_total"]


class JobEvent(Base):
    """One change of a job's status (written by `app.jobs.lifecycle.transition` only): the job's
    history, attempt by attempt."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(EVENT_ID, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)  # the job's attempt after the change
    at: Mapped[datetime] = mapped_column(default=utcnow)
    from_status: Mapped[str | None] = mapped_column(String(16))  # None: the job was created
    to_status: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str | None] = mapped_column(String(255))  # the worker, "api", a reaper, ...
    reason: Mapped[str | None] = mapped_column(Text)


class Model(Base):
    __tablename__ = "models"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # owning tenant (migration 0003); rows made without one belong to "local"
    tenant: Mapped[str] = mapped_column(String(64), server_default="local", index=True)
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="SET NULL"), unique=True
    )
    dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    estimator: Mapped[str] = mapped_column(String(40))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    kind: Mapped[str] = mapped_column(String(16))  # "classifier" | "regressor"
    classes: Mapped[list[Any] | None] = mapped_column(JSON)  # labels in classes_ order
    n_features: Mapped[int] = mapped_column(Integer)
    zero_based: Mapped[bool] = mapped_column(Boolean)
    weights: Mapped[bytes] = mapped_column(LargeBinary)  # services.model_store.pack_weights
    # for the quota: len(weights) and the JSON kept with them (feature names, classes, params,
    # calibration, selection: jobs.runner._model_row); older rows counted less of it
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))  # the solver's status_
    gap: Mapped[float | None] = mapped_column(Float)
    # (primal − dual) / max(1, |primal|) of the stored weights (migration 0016)
    duality_gap: Mapped[float | None] = mapped_column(Float)
    n_iter: Mapped[int] = mapped_column(Integer)
    train_time_s: Mapped[float] = mapped_column(Float)
    train_accuracy: Mapped[float | None] = mapped_column(Float)
    validation_accuracy: Mapped[float | None] = mapped_column(Float)
    # the training dataset's column names, so that predict accepts records by name; and where
    # the model came from (services.lineage): migration 0007
    feature_names: Mapped[list[Any] | None] = mapped_column(JSON)
    lineage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # probabilities (solvers.selection.Calibration.to_dict) and the search that chose C: its
    # cross-validation table and choice (migration 0009)
    calibration: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    selection: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    job: Mapped[Job | None] = relationship(back_populates="model", viewonly=True)

    @staticmethod
    def without_weights():
        """Loader option for reads that do not need the weights: the blob may be a GiB (2^27
        float64), and every model read used to load it, a list of them each one (a tiny
        GET /v1/models cost 300 MB of API memory per 76 MB model). Read `weights` in the same
        session to load it."""
        from sqlalchemy.orm import defer

        return defer(Model.weights)

    @property
    def trained_params(self) -> dict[str, Any]:
        """The parameters the weights were trained with: the job's, with the C a search chose
        in place of the ``C`` it asked for (which the search does not use)."""
        params = dict(self.params or {})
        if self.selection:
            params["C"] = self.selection["C"]
        return params


class RegisteredModel(Base):
    """A tenant's name for a line of model versions (services.registry)."""

    __tablename__ = "registered_models"
    __table_args__ = (Index("ux_registered_models_tenant_name", "tenant", "name", unique=True),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), server_default="local")
    name: Mapped[str] = mapped_column(String(128))
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    latest_version: Mapped[int] = mapped_column(Integer, default=0)  # versions made so far
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelVersion(Base):
    """Version N of a registered name: one stored model."""

    __tablename__ = "model_versions"

    registered_model_id: Mapped[str] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), server_default="local")
    model_id: Mapped[str] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), index=True
    )
    description: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelAlias(Base):
    """A movable name (``production``, ``staging``, ...) for one version of a registered name."""

    __tablename__ = "model_aliases"

    registered_model_id: Mapped[str] = mapped_column(
        ForeignKey("registered_models.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), server_default="local")
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class PredictionRun(Base):
    __tablename__ = "prediction_runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    # owning tenant (migration 0003); rows made without one belong to "local"
    tenant: Mapped[str] = mapped_column(String(64), server_default="local", index=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # claims so far
    worker: Mapped[str | None] = mapped_column(String(255))  # the process running it
    started_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    n_rows: Mapped[int | None] = mapped_column(Integer)
    # the CSV's size, for the quota; while queued or running, its estimate (held for it)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # the CSV has the calibrated class probabilities too (migration 0015)
    probabilities: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


class IdempotencyKey(Base):
    """A client's Idempotency-Key on a creating POST, and the resource it created."""

    __tablename__ = "idempotency_keys"

    # "datasets" | "jobs", qualified by tenant (migration 0003 widened it)
    scope: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str | None] = mapped_column(String(64))
    resource_id: Mapped[str] = mapped_column(String(40))
    # indexed: the expiry sweep deletes by age alone (migration 0014)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class Worker(Base):
    """A live worker process (local pool child or distributed worker) and its heartbeat."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # "host:pid"
    backend: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(40))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """An API key: only the SHA-256 of the token is stored; `prefix` identifies it in lists."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class Tenant(Base):
    """A tenant's own quotas (None: the service-wide default from the settings)."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    max_storage_bytes: Mapped[int | None] = mapped_column(BigInteger)
    max_active_jobs: Mapped[int | None] = mapped_column(Integer)
    max_active_prediction_runs: Mapped[int | None] = mapped_column(Integer)  # migration 0011
    # requests per key, in the `limits` notation ("100/second;2000/minute"); None: the default
    rate_limit: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
