"""Schemas of the model resources (the predict body is read by hand: see services.prediction)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from app.schemas.common import RequestBody


def missing_calibration(
    kind: str, params: dict[str, Any], status: str, calibration: dict | None
) -> str | None:
    """Why a classifier whose job asked for probabilities (a search, or probability=true, with a
    calibration other than none) has no calibration: its job ran out of time, or was cancelled
    keeping the model, before the held-out folds were scored. None where there is nothing
    missing."""
    asked = params.get("search") is not None or bool(params.get("probability"))
    if kind == "regressor" or calibration is not None or not asked:
        return None
    if params.get("calibration") == "none":
        return None
    if status == "stopped":  # cancelled with keep_model=true
        return (
            "this model has no probability calibration: its job was cancelled (keeping the "
            "model) before its held-out folds were scored; train it again to the end"
        )
    return (
        "this model has no probability calibration: its training ran out of time before its "
        "held-out folds were scored; train it again with a larger time_limit"
    )


class ModelOut(BaseModel):
    """A stored model's metadata (its weights are fetched with ``/export``)."""

    model_config = ConfigDict(from_attributes=True, protected_namespaces=())

    id: str
    job_id: str | None
    dataset_id: str | None
    estimator: str
    params: dict[str, Any] = Field(
        validation_alias=AliasChoices("trained_params", "params"),
        description="the parameters the weights were trained with: the job's, with the C its "
        "search chose",
    )
    kind: Literal["classifier", "regressor"] | str
    classes: list[Any] | None = Field(
        description="labels in the order of decision_values columns: numbers, or the class "
        "names of a dataset with text labels (sorted)"
    )
    n_features: int = Field(description="the training file's feature count")
    zero_based: bool = Field(description="index base of the training file (and of predict input)")
    feature_names: list[str] | None = Field(
        None, description="the training columns' names (predict accepts records by them)"
    )
    status: str = Field(description="the solver's final status (converged, max_iter, ...)")
    gap: float | None = Field(description="the solver's stopping measure at its end (see tol)")
    duality_gap: float | None = Field(
        None, description="(primal - dual objective) / max(1, |primal|) of the stored weights: "
        "their objective is within this fraction of the optimum. The stopping rule (gap <= tol) "
        "can hold while it is large, most of all on unscaled features or at a loose tol; null "
        "where the solver does not measure it"
    )
    n_iter: int
    train_time_s: float
    train_accuracy: float | None
    validation_accuracy: float | None
    calibration: dict[str, Any] | None = Field(
        None, description="probability calibration ({method, ...parameters}); predict can return "
        "probabilities when present"
    )
    calibration_missing: str | None = Field(
        None, description="why a model whose job asked for probabilities (a search, or "
        "probability=true) has no calibration: the job's time_limit or a cancel came before "
        "the held-out folds were scored, so predict with probabilities is a 422 saying the "
        "same; null otherwise"
    )
    selection: dict[str, Any] | None = Field(
        None, description="the search that chose C: the chosen C, its score, the search's "
        "status (complete, or time_limit where the job's time bound ended the path: C is then "
        "the best of the values every fold finished) and the cross-validation table (per C: "
        "mean and std of the score, per-fold scores, iterations, seconds, solver status and "
        "duality gap; where a fold's solve ended by the primal Newton method, 'converged' means "
        "LIBLINEAR's own rule for it, ten times looser than the returned model's, whose "
        "held-out values also fit the calibration)"
    )
    created_at: datetime

    @model_validator(mode="after")
    def _say_what_calibration_is_missing(self) -> ModelOut:
        self.calibration_missing = missing_calibration(
            self.kind, self.params, self.status, self.calibration
        )
        return self


class DatasetRef(RequestBody):
    """A stored dataset to predict or evaluate."""

    dataset_id: str = Field(min_length=1, max_length=40)


class PredictionRunRequest(DatasetRef):
    """A stored dataset to predict in the background."""

    probabilities: bool = Field(
        False,
        description="also write the calibrated class probabilities, a `probability_<class>` "
        "column per class in the order of the model's classes (rows sum to 1); 422 for a model "
        "without calibration. `?probabilities=true` says the same; both with different "
        "values is a 422.",
    )


class PredictionRunOut(BaseModel):
    """A background prediction over a stored dataset; ``result`` is the CSV once it succeeded."""

    model_config = ConfigDict(from_attributes=True, protected_namespaces=())

    id: str
    model_id: str
    dataset_id: str | None
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | str
    n_rows: int | None
    probabilities: bool = Field(False, description="the CSV has the class probabilities")
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    result: str | None = Field(None, description="URL of the CSV (GET it) once succeeded")


class ClassificationEvaluation(BaseModel):
    model_id: str
    dataset_id: str
    n: int
    accuracy: float | None
    labels: list[Any] = Field(
        description="row and column order of the confusion matrix: the model's classes, then "
        "the dataset's labels the model lacks (matched by name: the number 1 is the text \"1\")"
    )
    confusion_matrix: list[list[int]] = Field(
        description="[i][j]: instances of true label labels[i] predicted as labels[j]"
    )
    log_loss: float | None = Field(
        None, description="calibrated models: mean -log p(true class), over the rows whose label "
        "is one of the model's classes"
    )
    brier_score: float | None = Field(
        None, description="calibrated models: mean over those rows of sum_k (p_k - [y = k])^2"
    )
    ignored_features: int = Field(
        0, description="features of the dataset beyond the model's (ignored, as in predict)"
    )


class RegressionEvaluation(BaseModel):
    model_id: str
    dataset_id: str
    n: int
    mse: float | None
    r2: float | None = Field(description="null when the true targets are constant")
    ignored_features: int = Field(
        0, description="features of the dataset beyond the model's (ignored, as in predict)"
    )


# the body's flag, beside `instances` or `records`
_BODY_FLAG = {
    "type": "boolean",
    "description": "also return `probabilities` (a calibrated model); the same as "
    "`?probabilities=`, and both with different values is a 422",
}

PREDICT_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"oneOf": [{
                    "type": "object",
                    "required": ["instances"],
                    "additionalProperties": False,
                    "properties": {
                        "instances": {
                            "type": "array",
                            "minItems": 1,
                            "description": "sparse instances (indices in the training file's "
                            "numbering) or dense rows (n_features numbers each)",
                            "items": {
                                "oneOf": [
                                    {
                                        "type": "object",
                                        "required": ["indices", "values"],
                                        "additionalProperties": False,
                                        "properties": {
                                            "indices": {
                                                "type": "array",
                                                "items": {"type": "integer"},
                                            },
                                            "values": {
                                                "type": "array",
                                                "items": {"type": "number"},
                                            },
                                        },
                                    },
                                    {"type": "array", "items": {"type": "number"}},
                                ]
                            },
                        },
                        "probabilities": _BODY_FLAG,
                    },
                }, {
                    "type": "object",
                    "required": ["records"],
                    "additionalProperties": False,
                    "properties": {
                        "records": {
                            "type": "array",
                            "minItems": 1,
                            "description": "rows by the model's feature names (models trained "
                            "on named columns): a missing name is 0, an unknown one a 422",
                            "items": {
                                "type": "object",
                                "additionalProperties": {"type": "number"},
                            },
                        },
                        "probabilities": _BODY_FLAG,
                    },
                }]},
                "example": {"instances": [{"indices": [1, 7], "values": [0.5, 1.0]}]},
            },
            "text/plain": {
                "schema": {"type": "string"},
                "example": "+1 1:0.5 7:1\n3:0.25\n",
            },
        },
    },
    "responses": {
        "200": {
            "description": "labels and decision values (classifiers) or values (regressors)",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "labels": {
                                "type": "array",
                                "items": {"oneOf": [{"type": "number"}, {"type": "string"}]},
                                "description": "the model's classes: numbers, or class names",
                            },
                            "decision_values": {
                                "type": "array",
                                "items": {"type": "array", "items": {"type": "number"}},
                            },
                            "values": {"type": "array", "items": {"type": "number"}},
                        },
                    }
                }
            },
        },
        "404": {"description": "no such model"},
        "413": {"description": "more instances than MAX_PREDICT_BATCH"},
        "415": {"description": "neither JSON nor text/plain"},
        "422": {"description": "an instance that cannot be read (the detail names it)"},
    },
}
