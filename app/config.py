"""Service settings, read from the environment (and `--data-dir` style flags) by pydantic-settings.

Every role (`margin serve|api|worker|migrate`) builds the same `Settings`; nothing is read at import
time. `get_settings()` caches the environment's settings for code that has no app at hand.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """One deployment's configuration; environment names are the field names in upper case."""

    # a number setting is finite: "inf" (or 1e400) passed `gt=0`, then the service died at
    # start converting it to bytes, or a timeout of inf waited for ever
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False, allow_inf_nan=False)

    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default: SQLite file margin.db in DATA_DIR"
    )
    data_dir: Path = Field(Path("margin-data"), description="datasets, uploads and predictions")
    workers: int | None = Field(None, ge=1, description="local worker processes (default: cores)")
    max_upload_mb: float = Field(2048, gt=0, description="largest accepted upload, in MB")
    max_predict_batch: int = Field(10_000, ge=1, description="most instances in one predict call")
    max_evaluate_rows: int = Field(
        1_000_000,
        ge=1,
        description="most rows of a dataset one evaluate request scores (it runs in the API "
        "process while the client waits: a quarter of a second of a core for a million rows "
        "of two classes and a few features, longer with more); beyond, 422 (a background "
        "prediction run reads any number)",
    )
    max_evaluations_per_tenant: int = Field(
        2,
        ge=1,
        description="evaluate requests one tenant may have running at once on one API process; "
        "beyond, 429 (each holds a thread of the process's pool for as long as it scores)",
    )
    progress_interval_s: float = Field(0.5, gt=0, description="seconds between progress writes")
    model_cache_size: int = Field(32, ge=0, description="models kept unpacked for prediction")
    model_cache_mb: float = Field(
        1024,
        gt=0,
        description="most MB of weights the model cache keeps (the newest model stays even if "
        "larger)",
    )
    worker_backend: Literal["local", "procrastinate"] = "local"
    worker_concurrency: int = Field(1, ge=1, description="jobs one `margin worker` runs at once")
    solver_threads: int | None = Field(
        None, ge=1, description="solver threads per job (default: cores / concurrent jobs)"
    )
    blas_threads: int = Field(
        1, ge=1, description="BLAS threads per process (dense predictions): one, so that a "
        "busy server's BLAS calls do not wait for cores its requests and solvers hold",
    )
    job_retries: int = Field(0, ge=0, description="times a job whose worker died is re-queued")
    max_job_seconds: float | None = Field(
        None,
        gt=0,
        description="bound on every job's running time, in seconds, over all its attempts: a "
        "job without a time_limit gets it, one asking more is refused (unset or empty: no bound)",
    )
    job_stall_s: float = Field(
        60.0, gt=0, description="a running job without heartbeat for this long is orphaned"
    )
    poll_interval_s: float = Field(0.05, gt=0, description="idle local workers look for jobs")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    auth_mode: Literal["required", "off", "auto"] = Field(
        "auto", description="API keys: required, off, or auto (required unless bound to loopback)"
    )
    auth_cache_s: float = Field(5.0, ge=0, description="seconds a verified API key is cached")
    quota_storage_mb: float | None = Field(
        None, gt=0, description="default per-tenant stored MB (unset or empty: no bound)"
    )
    quota_active_jobs: int | None = Field(
        None, ge=1, description="default per-tenant queued or running jobs (unset or empty: no "
        "bound)",
    )
    quota_active_prediction_runs: int | None = Field(
        100, ge=1, description="default per-tenant queued or running prediction runs (empty: no "
        "bound)",
    )
    max_request_kb: float = Field(1024, gt=0, description="largest JSON request body, in KB")
    max_predict_body_mb: float = Field(64, gt=0, description="largest predict body, in MB")
    max_expanded_mb: float | None = Field(
        None, gt=0, description="largest decompressed upload, in MB (default MAX_UPLOAD_MB)"
    )
    max_line_mb: float = Field(16, gt=0, description="longest line of an uploaded file, in MB")
    max_features: int = Field(
        2**24, ge=1, le=2**31 - 1, description="most features (columns) of a dataset"
    )
    max_model_weights: int = Field(
        2**27,
        ge=1,
        description="most weights (features x outputs) of a model a job may train; the "
        "solvers hold them densely (2^27 float64: 1 GiB). A search or probability=true holds "
        "several copies at once, one per fold, one for the refit and, along a path of several "
        "Cs, three per fold solving at once (SOLVER_THREADS of them; unset: every fold): they "
        "must fit it together",
    )
    max_dual_variables: int = Field(
        2**27,
        ge=1,
        description="most dual variables (rows x outputs, times the folds of a search or of "
        "probability=true) a job may hold, or one per stored non-zero of its dataset where that "
        "is more. Each copy of them is 8 bytes a variable (2^27: 1 GiB): a solve from scratch "
        "holds about one, and each segment of a checkpointed job (CHECKPOINT_S) after its first, "
        "started from the last iterate, about four (2^27: about 4 GiB)",
    )
    max_cache_mb: float = Field(
        1024,  # 1 GiB, as the weights' and the duals' bounds
        gt=0,
        description="largest `cache_size` (MiB) a structural job with `online` may ask: its "
        "worker allocates the whole cache before it reads a row",
    )
    max_header_kb: float = Field(64, gt=0, description="largest request line and headers, in KB")
    header_timeout_s: float = Field(
        10, gt=0, description="seconds a client has to send a request's line and headers"
    )
    body_timeout_s: float = Field(
        30,
        gt=0,
        description="seconds a request body may lag behind MIN_BODY_RATE_KB; beyond, 408",
    )
    min_body_rate_kb: float = Field(
        64, gt=0, description="slowest sustained request body, in KB per second"
    )
    max_uploads_per_tenant: int = Field(
        2,
        ge=1,
        description="uploads one tenant may send at once to one API process; beyond, 429 (fewer"
        " than MAX_UPLOADS_IN_FLIGHT)",
    )
    max_uploads_in_flight: int = Field(
        4,
        ge=2,
        description="uploads one API process receives at once, of all tenants; beyond, 429 (the "
        "process runs this many upload parsers, one for each)",
    )
    max_connections: int = Field(
        1000, ge=1, description="open connections; beyond, the slowest to send headers is closed"
    )
    max_event_streams: int = Field(
        200, ge=1, description="open job event streams per API process; beyond, 503"
    )
    max_event_streams_per_tenant: int = Field(
        50, ge=1, description="open job event streams of one tenant per API process; beyond, 429"
    )
    send_timeout_s: float = Field(
        60,
        gt=0,
        validation_alias=AliasChoices("send_timeout_s", "event_send_timeout_s"),
        description="seconds a streamed response (event stream, LIBLINEAR export, prediction "
        "CSV) waits for a client that reads nothing; EVENT_SEND_TIMEOUT_S is its former name",
    )
    rate_limit: str | None = Field(
        None,
        description="default per-key request rate, e.g. '100/second;2000/minute' (unset: none)",
    )
    alias_cache_s: float = Field(
        1.0, ge=0, description="seconds a resolved model alias is trusted by an API process"
    )
    rate_limit_storage: str = Field(
        "memory://", description="where request counts live (a `limits` storage URI)"
    )
    auth_failure_rate: str | None = Field(
        "30/minute",
        description="failed API key lookups per client address, e.g. '30/minute'; beyond, 429 "
        "without asking the database (unset or empty: no bound)",
    )

    db_pool_timeout_s: float = Field(
        10.0, gt=0, description="seconds a request waits for a database connection before 503"
    )
    prediction_concurrency: int = Field(
        2, ge=1, description="background prediction runs executed at once by one API process"
    )
    disk_reserve_mb: float = Field(
        4.0, ge=0, description="MB kept aside in DATA_DIR so that a job can record a full disk"
    )
    dask_scheduler_address: str | None = Field(
        None,
        description="Dask scheduler that runs jobs with the `distributed` option, e.g. "
        "tcp://scheduler:8786 (unset: such jobs are refused); its workers read the stored "
        "datasets themselves (the same STORAGE_URL)",
    )
    storage_url: str | None = Field(
        None,
        description="where datasets, prediction CSVs and checkpoints live: file:///path (default:"
        " DATA_DIR) or s3://bucket/prefix (endpoint and credentials from the AWS_* variables)",
    )
    storage_timeout_s: float = Field(
        30.0, gt=0, description="seconds an object-storage request may take before it fails"
    )
    cache_dir: Path | None = Field(
        None, description="local copies of stored datasets (default: DATA_DIR/cache)"
    )
    cache_max_mb: float = Field(
        10240, gt=0, description="size of the local dataset cache; least recently used go first"
    )
    metrics_token: str | None = Field(
        None, description="a bearer token for /metrics where keys are required (else: a key "
        "with the admin scope)",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as text, or as JSON objects with request and job ids"
    )
    checkpoint_s: float = Field(
        60.0, ge=0, description="seconds between checkpoints of a running job's iterate in "
        "storage (a retried job resumes from the last one); 0: none",
    )
    job_retention_days: float | None = Field(
        None, gt=0, description="ended jobs older than this are deleted with their progress "
        "(their models stay); unset: kept",
    )
    idempotency_ttl_hours: float = Field(
        24.0, gt=0, description="hours an Idempotency-Key is remembered; a request reusing it "
        "later is a fresh request",
    )
    worker_shutdown_timeout_s: float = Field(
        20.0, ge=0, description="seconds a stopping worker lets its jobs finish, then hands "
        "them back to the queue",
    )
    worker_orphan_exit_s: float = Field(
        10.0, gt=0, description="seconds a local worker whose pool process died has to hand "
        "its job back (finish its pass, store its checkpoint) before it exits hard",
    )

    @field_validator("data_dir", "cache_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @field_validator(
        "quota_storage_mb", "quota_active_jobs", "quota_active_prediction_runs", mode="before"
    )
    @classmethod
    def _quota(cls, value):
        """Empty: no bound. Zero is refused: a tenant's own limit of 0 (`margin keys quota`)
        allows none, so 0 cannot mean "no bound" here, and a service-wide default allowing
        none would refuse every tenant (QUOTA_ACTIVE_PREDICTION_RUNS=0 once meant no bound:
        such a setting stops the start instead of turning into "none")."""
        if isinstance(value, str) and not value.strip():
            return None
        try:
            zero = float(value) == 0
        except (TypeError, ValueError):
            return value  # the field's own validation says what is wrong
        if zero:
            raise ValueError("0 is not a service-wide quota; leave it empty for no bound")
        return value

    @field_validator("max_job_seconds", mode="before")
    @classmethod
    def _no_bound(cls, value):
        """Empty: no bound, as for the quotas (0 is refused by the field itself)."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        """A URL SQLAlchemy can read (`postgres-db` stopped every command with ArgumentError's
        traceback); the message does not repeat it, as it may hold a password."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        if value:
            try:
                make_url(value)
            except ArgumentError:
                raise ValueError(
                    "not a SQLAlchemy URL: expected dialect+driver://user:password@host/database"
                ) from None
        return value

    @field_validator("storage_url")
    @classmethod
    def _storage_scheme(cls, value: str | None) -> str | None:
        from app.storage import check_storage_url

        if value:
            check_storage_url(value)
        return value or None

    @model_validator(mode="after")
    def _upload_share(self) -> Settings:
        """A tenant holding all its uploads leaves a slot to the others."""
        if self.max_uploads_per_tenant >= self.max_uploads_in_flight:
            raise ValueError(
                f"MAX_UPLOADS_PER_TENANT ({self.max_uploads_per_tenant}) must be less than "
                f"MAX_UPLOADS_IN_FLIGHT ({self.max_uploads_in_flight}), so that one tenant "
                "cannot take every upload slot"
            )
        return self

    @property
    def storage(self) -> str:
        """The storage URL, defaulting to the data directory."""
        return self.storage_url or f"file://{self.data_dir}"

    @property
    def uses_object_storage(self) -> bool:
        return self.storage.startswith("s3://")

    @property
    def cache_path(self) -> Path:
        return self.cache_dir or self.data_dir / "cache"

    @property
    def cache_max_bytes(self) -> int:
        return int(self.cache_max_mb * 1024 * 1024)

    @property
    def db_url(self) -> str:
        """The database URL, defaulting to SQLite inside the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'margin.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.db_url.startswith("sqlite")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    @property
    def max_expanded_bytes(self) -> int:
        return int((self.max_expanded_mb or self.max_upload_mb) * 1024 * 1024)

    def upload_limits(self, budget: int | None = None) -> dict:
        """What the parser of an upload may read and store (see dataset_files.parse_to_arrays)."""
        return {
            "max_expanded": self.max_expanded_bytes,
            "max_line": int(self.max_line_mb * 1024 * 1024),
            "max_features": self.max_features,
            "budget": budget,
        }

    @property
    def quota_storage_bytes(self) -> int | None:
        return int(self.quota_storage_mb * 1024 * 1024) if self.quota_storage_mb else None

    @property
    def disk_reserve_bytes(self) -> int:
        return int(self.disk_reserve_mb * 1024 * 1024)

    def local_workers(self) -> int:
        """Size of the local pool: WORKERS, or the number of cores."""
        return self.workers or os.cpu_count() or 1

    def threads_per_job(self, concurrent_jobs: int) -> int:
        """Solver threads for one job so that `concurrent_jobs` jobs never oversubscribe the CPU."""
        if self.solver_threads:
            return self.solver_threads
        return max(1, (os.cpu_count() or 1) // max(1, concurrent_jobs))

    def ensure_dirs(self) -> None:
        for sub in ("", "datasets", "tmp", "predictions"):
            (self.data_dir / sub).mkdir(parents=True, exist_ok=True)


@lru_cache
def get_settings() -> Settings:
    """The settings of this process's environment (built once, on first use)."""
    return Settings()
