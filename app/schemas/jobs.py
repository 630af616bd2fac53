"""Job requests and representations."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.schemas.common import RequestBody

JobStatusName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
StopReason = Literal["converged", "max_iter", "time_limit", "cancelled"]


class DistributedOption(RequestBody):
    """Train on rows split over the Dask cluster at DASK_SCHEDULER_ADDRESS (CoCoA+)."""

    partitions: int = Field(ge=1, le=4096, description="row partitions, one Dask actor each")


class JobCreate(RequestBody):
    dataset_id: str = Field(max_length=40)
    estimator: str = Field("LinearSVC", description="see GET /v1/solvers")
    params: dict[str, Any] = Field(
        default_factory=dict, description="the estimator's constructor parameters"
    )
    validation_dataset_id: str | None = Field(
        None,
        max_length=40,
        description="a dataset scored by the trained model's accuracy (validation_accuracy); "
        "LinearSVC only: a regressor or structural model is evaluated once trained",
    )
    distributed: DistributedOption | None = Field(
        None,
        description="run on the Dask cluster, rows split in partitions (LinearSVC, one-vs-rest, "
        "hinge or squared hinge, at one C: no search nor probability); tol is then the target "
        "relative duality gap",
    )


class ProgressRecord(BaseModel):
    """One solver iteration; the names are those of `solvers.Progress`, and for a search job
    (or probability=true, whose internal folds make a path at one C) those of
    `solvers.selection.search.SearchProgress`: where on the path the solve is."""

    iteration: int
    elapsed_s: float
    gap: float | None = Field(
        description="the solver's stopping measure, compared with tol: pg_range for dual "
        "coordinate descent, max_violation for the sequential dual method, the relative sum of "
        "violations for SVR, upper_bound - lower_bound for structural"
    )
    pg_max: float | None = Field(None, description="largest projected gradient of the pass")
    pg_min: float | None = Field(None, description="smallest projected gradient of the pass")
    pg_range: float | None = Field(None, description="pg_max - pg_min")
    max_violation: float | None = Field(None, description="largest optimality violation")
    active: int | None = None
    primal: float | None = None
    dual: float | None = None
    duality_gap: float | None = Field(
        None, description="(primal - dual objective) / max(1, |primal|), when both are known"
    )
    lower_bound: float | None = None
    upper_bound: float | None = None
    stage: Literal["path", "refit"] | None = Field(
        None, description="a search job: solving the folds along the C path, or the refit on "
        "all rows at the chosen C (null for a single solve, as are the fields below)"
    )
    fold: int | None = Field(
        None, description="a search job: the fold being solved, from 0 (null at the refit)"
    )
    folds_total: int | None = Field(None, description="a search job: the number of folds")
    c_index: int | None = Field(
        None, description="a search job: the index of C on the path, from 0 (null at the refit)"
    )
    cs_total: int | None = Field(
        None, description="a search job: the number of C values on the path; a log grid "
        "without min and max stops once the score has not improved for 3 values, and from then "
        "on this is the number it visited"
    )
    C: float | None = Field(None, description="a search job: the C being solved")
    solves_done: int | None = Field(
        None, description="a search job: solves finished when the record was sent (a solve is "
        "one fold at one C, or the refit). Each solve's end is a record of its own, its last "
        "pass again, that counts it"
    )
    solves_total: int | None = Field(
        None, description="a search job: solves on the whole path, the refit included; once "
        "a grid stops early, the solves it finished (any a fold had finished past the stop "
        "point included) and the refit"
    )
    percent: float | None = Field(
        None, description="a search job: the share of the path done, 100 · solves_done / "
        "solves_total (the gap above is the current solve's, which starts again at every solve)."
        " It never moves back: when a grid stops early its total shrinks to the path visited, "
        "so the percent rises then, and it is 100 in the last record of a finished search. "
        "Null for a single solve: the job's `percent` estimates its progress from the gap"
    )


class JobOut(BaseModel):
    id: str
    dataset_id: str | None
    validation_dataset_id: str | None
    estimator: str
    params: dict[str, Any]
    distributed: dict[str, Any] | None = Field(None, description="the job's distributed option")
    status: JobStatusName
    progress: ProgressRecord | None = Field(description="the latest progress record")
    percent: float | None = Field(
        description="how far the solve has come, on a log scale of its optimality gap: 0 at the "
        "first full pass's gap, 100 at `tol` (reached when it converges). It estimates the share "
        "of the remaining gap reduction done, not of the time; it never moves back (the gap of "
        "a one-vs-rest or shrinking solve may rise for a while). A job that ends at max_iter or "
        "time_limit keeps the percent it reached. For a search job, the share of the path's "
        "solves finished (refit included; a grid that stops early counts the path it visited), "
        "100 once the search is done."
    )
    eta_s: float | None = Field(
        description="seconds left if the gap keeps falling at its average rate so far (null "
        "while unknown)"
    )
    elapsed_s: float | None
    tol: float | None
    time_bound_s: float | None = Field(
        None,
        description="the bound on the job's running time over all its attempts, in seconds: its "
        "time_limit, or the server's MAX_JOB_SECONDS where the job asked none (null: no bound). "
        "A job that reaches it ends with stop_reason time_limit and the model it had",
    )
    converged: bool | None
    stop_reason: StopReason | None
    attempt: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    model_id: str | None
    error: str | None
    checkpoint_iteration: int | None = Field(
        None,
        description="the iteration of the latest checkpoint (CHECKPOINT_S), recorded as it is"
        " stored (if the store then fails, a retry resumes from the previous one: resumed_from)",
    )
    resumed_from: int | None = Field(
        None, description="the checkpoint's iteration this attempt resumed from (null: it started"
        " from scratch)",
    )
    waiting: str | None = Field(
        None,
        description="why a queued job has not started, where the service can tell (no worker "
        "has reported ready: workers warm their solver kernels before taking jobs); null "
        "otherwise",
    )


class ProgressPage(BaseModel):
    items: list[ProgressRecord]
    next: str | None = None


class JobEventOut(BaseModel):
    """One change of a job's status."""

    at: datetime
    attempt: int = Field(description="the job's attempt after the change (claims so far)")
    from_status: JobStatusName | None = Field(description="null when the job was created")
    to_status: JobStatusName
    by: Literal["api", "worker", "recovery"] | None = Field(
        description="who made the change: a request, the worker running the job, or the recovery "
        "of a job whose worker was lost"
    )
    reason: str | None


class JobHistory(BaseModel):
    items: list[JobEventOut]
