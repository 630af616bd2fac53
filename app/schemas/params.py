"""Training parameters: one pydantic model per estimator, mirroring its constructor.

The same models validate `POST /v1/jobs` (unknown keys and invalid values are 422 naming the
field) and describe the estimators at `GET /v1/solvers`. Defaults equal the estimators' own
(tests compare them with the constructors' signatures).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, model_validator

from app.schemas.common import RequestBody
from app.services.dataset_store import MAX_CLASSES
from solvers._core.sparse import MAX_ABS_VALUE

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]

Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
# intercept_scaling is the value of a constant feature: bounded as the solvers bound the data's
# values, since its square enters every row's squared norm (1e160 overflowed them, and the job
# succeeded with an all-zero model)
MAX_BIAS_VALUE = MAX_ABS_VALUE


def _bias_value(value: float) -> float:
    if value > MAX_BIAS_VALUE:
        raise ValueError(
            f"must be at most {MAX_BIAS_VALUE:g}, as a feature's value must (its square enters "
            f"every row's squared norm), got {value!r}"
        )
    return value


BiasValue = Annotated[float, Field(gt=0, allow_inf_nan=False), AfterValidator(_bias_value)]
JOB_TIME_LIMIT = (
    "wall-clock budget in seconds of the whole job (a search: its path and refit), counted over "
    "all its attempts; at most the service's MAX_JOB_SECONDS, which a job without one gets"
)


class _Params(RequestBody):
    pass


GRID_MIN_NUM = 2  # values of a log grid with bounds (the dashboard's form mirrors it)


class CGrid(_Params):
    """``num`` values of C evenly spaced in log scale from ``min`` to ``max``; with neither
    bound, the library's grid (LIBLINEAR's start value up to 1024, stopped early once the score
    has not improved for 3 values). One bound alone is a 422, as are min >= max and num 1 with
    bounds."""

    num: int = Field(10, ge=1, le=50)
    min: PositiveFloat | None = None
    max: PositiveFloat | None = None


class SearchSpec(_Params):
    """Choose C by k-fold cross-validation over a warm-started path (`solvers.LinearSVCCV`)."""

    Cs: Annotated[list[PositiveFloat], Field(min_length=1, max_length=50)] | CGrid = Field(
        default_factory=CGrid,
        description="explicit values (distinct, at most 50), or a log grid {num, min, max} "
        "(min < max, 2 <= num <= 50 with bounds); the search makes cv x len(Cs) solves and a "
        "refit: at most 20 x 50 + 1",
    )
    cv: int = Field(5, ge=2, le=20, description="stratified folds (seeded by random_state)")
    scoring: Literal["accuracy", "balanced_accuracy", "f1_macro", "roc_auc"] = "accuracy"

    @model_validator(mode="after")
    def _grid_bounds_together(self) -> SearchSpec:
        # one bound alone was ignored: the library's grid ran, far outside the bound asked for
        grid = self.Cs
        if isinstance(grid, CGrid) and (grid.min is None) != (grid.max is None):
            given, other = ("min", "max") if grid.min is not None else ("max", "min")
            raise ValueError(
                f"Cs.{given} without Cs.{other}: a log grid needs both bounds (or neither, "
                "for the library's grid)"
            )
        if isinstance(grid, CGrid) and grid.min is not None:
            _check_grid_span(grid)
        if isinstance(grid, list) and len(set(grid)) < len(grid):
            # each repeat cost cv more solves and could not change the choice
            repeated = sorted({c for c in grid if grid.count(c) > 1})
            raise ValueError(f"Cs repeats {repeated}: give each value of C once")
        return self


def _check_grid_span(grid: CGrid) -> None:
    """A log grid with bounds spans min < max in at least two values: min > max was silently
    swapped, min == max solved the same C num times over, and num 1 dropped max unseen."""
    if grid.min >= grid.max:
        raise ValueError(
            f"Cs.min must be less than Cs.max, got min {grid.min:g} and max {grid.max:g} (for one "
            "C, give Cs as a list)"
        )
    if grid.num < GRID_MIN_NUM:
        raise ValueError(
            f"Cs.num must be at least {GRID_MIN_NUM} with min and max (got {grid.num}): a grid of "
            "one value would try min only; for one C, give Cs as a list"
        )


class LinearSVCParams(_Params):
    """`solvers.LinearSVC`: L1-/L2-loss (or least-squares) linear SVM classification."""

    multi_class: Literal["ovr", "crammer_singer", "weston_watkins"] = Field(
        "ovr", description="one-vs-rest binary problems, or a joint multi-class formulation"
    )
    loss: Literal["squared_hinge", "hinge", "squared_error"] = Field(
        "squared_hinge", description="L2-loss, L1-loss or least-squares (binary and ovr)"
    )
    C: PositiveFloat = Field(1.0, description="inverse regularization strength")
    tol: PositiveFloat = Field(0.1, description="stopping tolerance on the optimality gap")
    max_iter: int = Field(1000, ge=1, le=10_000_000, description="outer iterations at most")
    fit_intercept: bool = True
    intercept_scaling: BiasValue = Field(
        1.0, description="value of the bias feature, at most 1e100 (its square must not overflow)"
    )
    class_weight: (
        Literal["balanced"]
        | Annotated[dict[str, PositiveFloat], Field(max_length=MAX_CLASSES)]
        | None
    ) = Field(
        None,
        description='"balanced", or {"label": weight} multiplying C per class (the keys are the '
        "dataset's classes: numbers as text, e.g. \"-1\", or the class names of text labels)",
    )
    random_state: Seed | None = Field(0, description="seed of the coordinate order")
    shrinking: bool = True
    order: Literal["permute", "cyclic", "random"] = Field(
        "permute", description="coordinate order within a pass"
    )
    time_limit: PositiveFloat | None = Field(None, description=JOB_TIME_LIMIT)
    probability: bool = Field(
        False,
        description="calibrate probabilities by an internal 5-fold at this C (the method: "
        "calibration)",
    )
    search: SearchSpec | None = Field(
        None, description="choose C by cross-validation (C is then ignored)"
    )
    calibration: Literal["auto", "sigmoid", "softmax", "isotonic", "none"] = Field(
        "auto",
        description="probabilities of a search (or probability=true) from the held-out decision "
        "values: auto is Platt per class for ovr, a softmax temperature for the joint "
        "formulations; none: no probabilities. sigmoid, softmax or isotonic without a search "
        "or probability=true is a 422 (it would calibrate nothing)",
    )


class LinearSVRParams(_Params):
    """`solvers.LinearSVR`: L1-/L2-loss epsilon-insensitive linear support vector regression."""

    epsilon: float = Field(0.0, ge=0, allow_inf_nan=False, description="insensitive-zone width")
    tol: PositiveFloat = 1e-4
    C: PositiveFloat = 1.0
    loss: Literal["epsilon_insensitive", "squared_epsilon_insensitive"] = "epsilon_insensitive"
    fit_intercept: bool = True
    intercept_scaling: BiasValue = 1.0
    max_iter: int = Field(1000, ge=1, le=10_000_000)
    random_state: Seed | None = 0
    shrinking: bool = True
    time_limit: PositiveFloat | None = Field(None, description=JOB_TIME_LIMIT)


class StructuralParams(_Params):
    """`solvers.fit_structural`: shared-slack structural SVM over qid-grouped constraint rows
    (each line `l_ij qid:i idx:val ...`: its label is the margin l_ij, its qid the example i).
    With `online`, `solvers.fit_structural_stream` reads the stored rows in chunks and keeps
    only a cache of support vectors in memory."""

    C: PositiveFloat = Field(1.0, description="weight of the loss term")
    tol: PositiveFloat = Field(
        1e-3, description="stop when upper bound - lower bound <= tol * max(1, |upper bound|)"
    )
    max_iter: int = Field(
        1000,
        ge=1,
        le=10_000_000,
        description="passes over the rows (batch), or over the cache per optimization (online)",
    )
    nonneg: bool = Field(False, description="constrain the weights to be >= 0")
    random_state: Seed | None = Field(0, description="seed of the coordinate order")
    time_limit: PositiveFloat | None = Field(None, description=JOB_TIME_LIMIT)
    pairwise: bool = Field(True, description="pairwise updates on active examples (batch only)")
    shrinking: bool = Field(True, description="skip rows whose constraint holds (batch only)")
    online: bool = Field(
        False,
        description="stream the stored rows in chunks through a bounded cache of support "
        "vectors (needs each qid's rows contiguous)",
    )
    cache_size: float = Field(
        256.0,
        gt=0,
        le=65536,
        allow_inf_nan=False,
        description="memory budget in MiB of the online cache of support vectors, allocated "
        "whole when the job starts; at most the service's MAX_CACHE_MB (1024 by default); "
        "chunks read from the dataset are sized to a quarter of it (online only)",
    )
    passes: int = Field(
        3, ge=1, le=10_000, description="passes over the stored rows at most (online only)"
    )


@dataclass(frozen=True)
class EstimatorSpec:
    """What the service knows about one estimator."""

    name: str
    kind: Literal["classifier", "regressor", "structural"]
    params: type[_Params]
    module: str  # the solvers module that must be importable to train it
    formulations: dict[str, list[str]] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    def validate(self, params: dict[str, Any]) -> _Params:
        return self.params.model_validate(params)


ESTIMATORS: dict[str, EstimatorSpec] = {
    spec.name: spec
    for spec in (
        EstimatorSpec(
            "LinearSVC",
            "classifier",
            LinearSVCParams,
            "solvers.estimators.linear_svc",
            {
                "multi_class": ["ovr", "crammer_singer", "weston_watkins"],
                "loss": ["squared_hinge", "hinge", "squared_error"],
            },
        ),
        EstimatorSpec(
            "LinearSVR",
            "regressor",
            LinearSVRParams,
            "solvers.estimators.linear_svr",
            {"loss": ["epsilon_insensitive", "squared_epsilon_insensitive"]},
        ),
        EstimatorSpec("structural", "structural", StructuralParams, "solvers.structural"),
    )
}


def describe_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    """Each parameter's name, JSON type, default, allowed values and bounds, from the schema."""
    schema = model.model_json_schema()
    out = []
    for name, prop in schema["properties"].items():
        entry: dict[str, Any] = {"name": name, "default": prop.get("default")}
        options = prop.get("anyOf", [prop])
        entry["type"] = [_type_of(o) for o in options] if len(options) > 1 else _type_of(prop)
        for option in options:
            for key in ("enum", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
                if key in option:
                    entry[key] = option[key]
            if "const" in option:
                entry.setdefault("enum", []).append(option["const"])
        if "description" in prop:
            entry["description"] = prop["description"]
        out.append(entry)
    return out


def _type_of(prop: dict[str, Any]) -> str:
    if "enum" in prop or "const" in prop:
        return "string"
    return prop.get("type", "object")
