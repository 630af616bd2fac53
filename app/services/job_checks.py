"""Whether a job request can run: its estimator and params (422 naming the field), and how they
fit its dataset: labels, class weights, folds, and the service's bounds on a job's model, dual
variables, time and cache. `app.services.jobs.create_job` applies them before queueing a job."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.errors import MAX_LISTED_ERRORS, ProblemError, describe_validation_errors, errors_detail
from app.schemas.jobs import JobCreate
from app.schemas.params import ESTIMATORS, EstimatorSpec
from app.services.dataset_store import MAX_EXACT_CLASS, inexact_class
from app.services.formats.labels import class_name, text_classes
from app.tables import Dataset

# Weights (features x outputs) of a model a job may train, by default (MAX_MODEL_WEIGHTS): 1 GiB
# of float64. The solvers hold them as a dense (features, outputs) array, however few features
# the rows use. A search or probability=true holds several such arrays at once (`fold_copies`).
MAX_MODEL_WEIGHTS = 1 << 27
# Copies of the model's weights that one running solve of a warm-started path over C holds beyond
# its fold's kept solution (`solvers.selection.search`): its working weights, the start handed
# to it (for two classes a copy of the previous C's w̃, which the solver copies again), and a
# finished C's weights, kept until every fold has finished that C. Measured with tracemalloc on
# the dual solvers: about 2.75 for two classes and 1.5 beyond. A 424-byte upload of 2^24
# features and 3 classes took a worker from 300 MB to 4.25 GB with a 10-fold search.
PATH_SOLVE_COPIES = 3
# Dual variables (rows x outputs, for each fold of a search) a job may hold, by default
# (MAX_DUAL_VARIABLES), or one per stored non-zero where that is more. One copy of them is 1 GiB
# of float64; a solve from scratch holds about one, each segment of a checkpointed job after its
# first (started from the last iterate) about four (the iterate, the solver's copy of it, its
# working state): about 4 GiB (`tests/app/test_dual_memory.py`). A 1 MB upload of 50,000 rows
# of 1,000 classes took a worker 1.4 GB, and 8.5 GB with a 20-fold search.
MAX_DUAL_VARIABLES = 1 << 27


def invalid(field: str, message: str) -> ProblemError:
    """A 422 naming the field of the job request that cannot run, and why."""
    return ProblemError(
        422, "Invalid job", f"{field}: {message}", errors=[{"field": field, "message": message}]
    )


def validate_request(body: JobCreate) -> tuple[EstimatorSpec, dict[str, Any]]:
    """The estimator's spec and its full params (defaults filled in), or 422 naming the field."""
    spec = ESTIMATORS.get(body.estimator)
    if spec is None:
        names = ", ".join(ESTIMATORS)
        raise invalid("estimator", f"expected one of {names}, got {body.estimator!r}")
    if not spec.available:
        raise invalid("estimator", f"{body.estimator!r} is not available in this installation")
    try:
        params = spec.validate(body.params)
    except ValidationError as exc:
        all_errors = exc.errors()
        errors = describe_validation_errors(
            [{**e, "loc": ("params", *e["loc"])} for e in all_errors[:MAX_LISTED_ERRORS]],
            known={("params",): list(spec.params.model_fields)},
        )
        detail = errors_detail(errors, len(all_errors))
        raise ProblemError(422, "Invalid job", detail, errors=errors) from None
    full = params.model_dump(mode="json")
    _check_calibration_used(full)
    return spec, full


def _check_calibration_used(params: dict[str, Any]) -> None:
    """422 when a calibration method is asked of a job that fits none: without a search or
    probability=true it was accepted and ignored, and the model had no probabilities."""
    method = params.get("calibration")
    if method in (None, "auto", "none"):
        return
    if params.get("search") is None and not params.get("probability"):
        raise invalid(
            "params.calibration",
            f"{method!r} calibrates the held-out decision values of a search or of "
            "probability=true, and this job has neither: set probability true (or a search), "
            "or leave calibration out",
        )


def check_dataset_fits(
    spec: EstimatorSpec,
    params: dict[str, Any],
    dataset: Dataset,
    max_weights: int = MAX_MODEL_WEIGHTS,
    max_dual: int = MAX_DUAL_VARIABLES,
    solver_threads: int | None = None,
) -> None:
    """422 when the estimator cannot train on this dataset's labels, or its model, folds or
    dual variables exceed the service's bounds (``solver_threads``: SOLVER_THREADS, the folds
    a job solves at once; None: as many as it has folds)."""
    if dataset.n_features == 0:  # accepted, then failed in the worker: "Found array with 0
        raise invalid(  # feature(s) ... a minimum of 1 is required by LinearSVC"
            "dataset_id",
            f"dataset {dataset.id!r} has no features (every row holds a label only): a linear "
            "model needs at least one",
        )
    if spec.kind != "classifier" and text_classes(dataset.classes) is not None:
        raise invalid(
            "dataset_id",
            f"dataset {dataset.id!r} has text labels (classes {_few(dataset.classes)}); "
            f"{spec.name} needs numeric targets: train a classifier on it, or upload the "
            "targets as numbers",
        )
    if spec.kind == "classifier":
        _check_classifier(spec, params, dataset)
    if spec.kind == "structural":
        if not dataset.has_qid:
            raise invalid("dataset_id", "the structural estimator needs a qid-grouped dataset")
    check_model_size(spec, dataset, max_weights)
    check_folds(spec, params, dataset)
    check_fold_weights(spec, params, dataset, max_weights, solver_threads)
    check_dual_size(spec, params, dataset, max_dual)


def _check_classifier(spec: EstimatorSpec, params: dict[str, Any], dataset: Dataset) -> None:
    """422 when a classifier cannot train on the dataset: no class labels, fewer than two
    classes, class weights or a loss that do not fit them."""
    if dataset.label_kind != "classes":
        raise invalid(
            "dataset_id",
            f"{spec.name} needs class labels, but dataset {dataset.id!r} has a real-valued "
            f"target{_inexact_note(dataset) or ' (train LinearSVR on it)'}",
        )
    labels = [c["label"] for c in dataset.classes or []]
    if len(labels) < 2:
        raise invalid(
            "dataset_id",
            f"a classifier needs at least two classes, dataset {dataset.id!r} has "
            f"{len(labels)} ({', '.join(map(str, labels))})",
        )
    weights = params.get("class_weight")
    if isinstance(weights, dict):
        _check_class_weights(weights, labels, dataset)
    _check_weighted_c(params, dataset)
    _check_least_squares(params, len(labels))


def _check_class_weights(weights: dict[str, float], labels: list, dataset: Dataset) -> None:
    """422 when a class_weight key is no class of the dataset, or two keys name one class."""
    named = text_classes(dataset.classes) is not None  # keyed by the class names
    if named:
        unknown = [k for k in weights if k not in set(labels)]
    else:
        classes = {float(v) for v in labels}
        unknown = [k for k in weights if _as_float(k) not in classes]
    if unknown:
        raise invalid(
            "params.class_weight",
            f"labels {unknown} are not classes of the dataset (its classes: {labels})",
        )
    if not named:  # names are distinct keys; numbers may be spelled twice ("1", "1.0")
        _check_one_weight_per_class(weights)


def _check_least_squares(params: dict[str, Any], n_classes: int) -> None:
    """422 when loss 'squared_error' is asked of more than two classes or of a joint
    formulation: the solvers train it for two classes one-vs-rest only, and such a job was
    accepted, then failed in the worker with their ValueError."""
    if params.get("loss") != "squared_error":
        return
    if params.get("multi_class") != "ovr" or n_classes != 2:
        raise invalid(
            "params.loss",
            f"'squared_error' is for two classes with multi_class 'ovr'; this job has "
            f"{n_classes} classes and multi_class {params.get('multi_class')!r}: choose "
            "'squared_hinge' or 'hinge'",
        )


def _check_weighted_c(params: dict[str, Any], dataset: Dataset) -> None:
    """422 when C times a class's weight is not a finite float: each row's C is their product,
    and a job with C 1e300 and a weight of 1e300 (each finite) failed in the worker."""
    import math

    weights = params.get("class_weight")
    if isinstance(weights, dict):
        weight = max(weights.values())
    elif weights == "balanced":  # n / (classes x count): largest for the smallest class
        counts = [int(c.get("count", 0)) for c in dataset.classes or []]
        weight = dataset.n_rows / (len(counts) * max(1, min(counts)))
    else:
        return
    search = params.get("search")
    grid = (search or {}).get("Cs")
    if isinstance(grid, list):
        largest = max(grid)
    elif isinstance(grid, dict):
        largest = grid.get("max") or 1024.0  # the library's grid ends at 1024
    else:
        largest = params["C"]
    if not math.isfinite(largest * weight):
        field = "params.search.Cs" if search is not None else "params.C"
        raise invalid(
            field,
            f"C {largest:g} times the class weight {weight:g} is beyond the largest float: a "
            "row's C is their product; use a smaller C or weight",
        )


def _check_one_weight_per_class(weights: dict[str, float]) -> None:
    """422 when two keys spell the same class ("1" and "1.0", "+1"): the trainer reads the keys
    as numbers, and the last of them silently took the class's weight."""
    seen: dict[float, str] = {}
    for key in weights:
        first = seen.setdefault(float(key), key)
        if first != key:
            raise invalid(
                "params.class_weight",
                f"labels {first!r} and {key!r} name the same class: give each class one weight",
            )


def _as_float(key: str) -> float | None:
    try:
        return float(key)
    except ValueError:
        return None


def _few(classes: list[dict], shown: int = 5) -> str:
    names = [repr(c["label"]) for c in classes[:shown]]
    return ", ".join(names) + (", ..." if len(classes) > shown else "")


def check_time_limit(params: dict[str, Any], max_job_seconds: float | None) -> None:
    """422 when the job asks a time_limit above MAX_JOB_SECONDS: the service would not honour
    it, and a job silently cut shorter than it asked could pass for one that had its time (a job
    that asks none gets the bound; `app.jobs.budget`)."""
    asked = params.get("time_limit")
    if max_job_seconds is not None and asked is not None and asked > max_job_seconds:
        raise invalid(
            "params.time_limit",
            f"{asked:g} seconds is more than the {max_job_seconds:g} this service allows a job "
            "(MAX_JOB_SECONDS); ask at most that, or leave time_limit out to get it",
        )


def check_cache_size(params: dict[str, Any], max_cache_mb: float) -> None:
    """422 when an online structural job asks a cache above MAX_CACHE_MB: the worker allocates
    the whole cache before it reads a row (`solvers.structural.cache`), so a 30-row dataset with
    cache_size 65536 asked 64 GiB and failed in the worker with numpy's "Unable to allocate"."""
    asked = params.get("cache_size")
    if params.get("online") and asked is not None and asked > max_cache_mb:
        raise invalid(
            "params.cache_size",
            f"{asked:.12g} MiB is more than the {max_cache_mb:.12g} MiB this service allows an "
            "online cache (MAX_CACHE_MB): the worker allocates all of it up front; ask at most "
            "that",
        )


def _outputs(spec: EstimatorSpec, dataset: Dataset) -> int:
    classes = len(dataset.classes or []) if spec.kind == "classifier" else 1
    return 1 if classes <= 2 else classes  # one-vs-rest and the joint formulations alike


def check_model_size(spec: EstimatorSpec, dataset: Dataset, max_weights: int) -> None:
    """422 when the model would hold more than ``max_weights`` weights: a few hundred bytes
    of LIBSVM text can declare 2^24 features and 1000 classes (134 GB of weights)."""
    outputs = _outputs(spec, dataset)
    weights = dataset.n_features * outputs
    if weights > max_weights:
        raise invalid(
            "dataset_id",
            f"the model would hold {dataset.n_features} features x {outputs} outputs = "
            f"{weights} weights, more than the {max_weights} a job may train (the "
            "features are the dataset's largest index)",
        )


def fold_copies(params: dict[str, Any], solver_threads: int | None) -> tuple[int, int, int]:
    """(folds, folds solved at once, copies of the model's weights held at once) of a search or
    of probability=true; (1, 1, 1) without folds. Every fold keeps its latest solution (the next
    C starts from it), the refit adds one, and where the path has more than one C each running
    solve holds `PATH_SOLVE_COPIES` more. The folds run in parallel threads, as many as the
    job's threads (SOLVER_THREADS); unset, the workers' cores decide, unknown here: all of
    them."""
    folds = _folds(params)
    if folds is None:
        return 1, 1, 1
    k = folds[1]
    at_once = min(k, solver_threads) if solver_threads else k
    warm_started = _path_length(params) > 1
    return k, at_once, k + 1 + (PATH_SOLVE_COPIES * at_once if warm_started else 0)


def _path_length(params: dict[str, Any]) -> int:
    """The Cs of the path: a list's length, a grid's num (the library's grid stops at most
    there), one for probability=true (its C)."""
    search = params.get("search")
    if search is None:
        return 1
    grid = search.get("Cs")
    if isinstance(grid, list):
        return len(grid)
    return int((grid or {}).get("num", 10))


def check_fold_weights(
    spec: EstimatorSpec,
    params: dict[str, Any],
    dataset: Dataset,
    max_weights: int,
    solver_threads: int | None = None,
) -> None:
    """422 when the folds of a search or of probability=true would hold more than
    ``max_weights`` weights at once (`fold_copies`): `check_model_size` counts one model, and
    a 10-fold search of a model within it took a worker to 4.25 GB."""
    folds = _folds(params)
    if folds is None:
        return
    field = folds[0]
    k, at_once, copies = fold_copies(params, solver_threads)
    outputs = _outputs(spec, dataset)
    held = dataset.n_features * outputs * copies
    if held > max_weights:
        raise invalid(
            field,
            f"the {k} folds would hold {dataset.n_features} features x {outputs} outputs x "
            f"{copies} copies = {held} weights at once (each fold keeps its latest solution, "
            f"{at_once} solve at once, and the refit), more than the {max_weights} a job may "
            "hold (MAX_MODEL_WEIGHTS): use fewer folds, a dataset with fewer features, or no "
            f"{'search' if field.startswith('params.search') else 'probability'}",
        )


def _inexact_note(dataset: Dataset) -> str:
    """Why integer labels are a real-valued target when one reaches 2^53 ("" otherwise)."""
    bounds = dataset.target or {}
    largest = max((float(bounds.get(k) or 0) for k in ("min", "max")), key=abs)
    if abs(largest) < MAX_EXACT_CLASS:
        return ""
    return f" ({inexact_class(largest)}; or train LinearSVR on it)"


def check_dual_size(
    spec: EstimatorSpec, params: dict[str, Any], dataset: Dataset, max_dual: int
) -> None:
    """422 when training would hold more than ``max_dual`` dual variables (or more than one per
    stored non-zero, where that is more): one per row and output, for each fold of a search or
    of probability=true, whose folds run together. Their cost grows with the classes and the
    folds, not with the upload: 1 MB of 50,000 rows of 1,000 classes asked 400 MB of them."""
    outputs = _outputs(spec, dataset)
    field, k = _folds(params) or ("dataset_id", 1)
    dual = dataset.n_rows * outputs * k
    allowed = max(max_dual, dataset.nnz)
    if dual > allowed:
        folds = f" x {k} folds" if k > 1 else ""
        raise invalid(
            field if k > 1 and dual // k <= allowed else "dataset_id",
            f"training would hold {dataset.n_rows} rows x {outputs} outputs{folds} = {dual} "
            f"dual variables, more than the {allowed} a job may hold (MAX_DUAL_VARIABLES, or "
            "one per stored non-zero where that is more): use fewer folds, or a dataset with "
            "fewer rows or classes",
        )


def _folds(params: dict[str, Any]) -> tuple[str, int] | None:
    """(field, k) of the k-fold a search or probability=true runs; None without one."""
    from solvers.estimators.linear_svc import PROBABILITY_FOLDS

    search = params.get("search")
    if search is not None:
        return "params.search.cv", int(search["cv"])
    if params.get("probability") and params.get("calibration") != "none":
        return "params.probability", PROBABILITY_FOLDS
    return None


def check_folds(spec: EstimatorSpec, params: dict[str, Any], dataset: Dataset) -> None:
    """422 when the k-fold of a search (or of probability=true) cannot split the dataset: fewer
    rows than folds, or, stratified, no class with a row for every fold."""
    folds = _folds(params)
    if folds is None:
        return
    field, k = folds
    search = params.get("search")
    if dataset.n_rows < k:
        raise invalid(field, f"{k} folds need at least {k} rows; the dataset has {dataset.n_rows}")
    counts = [int(c.get("count", 0)) for c in dataset.classes or []]
    if spec.kind == "classifier" and counts and max(counts) < k:
        raise invalid(
            field,
            f"stratified {k}-fold needs a class with at least {k} rows; the dataset's largest "
            f"class has {max(counts)}",
        )
    roc_auc = search is not None and search.get("scoring") == "roc_auc"
    if roc_auc and len(counts) > 2:  # before: accepted, then failed in the worker with
        raise invalid(  # scikit-learn's "multi_class must be in ('ovo', 'ovr')"
            "params.search.scoring",
            f"roc_auc scores two classes; the dataset has {len(counts)}: choose accuracy, "
            "balanced_accuracy or f1_macro",
        )
    if roc_auc and counts and min(counts) < k:
        raise invalid(
            "params.search.scoring",
            f"roc_auc is undefined on a test fold of one class: stratified {k}-fold gives "
            f"every fold both classes only when each has at least {k} rows; the smallest "
            f"has {min(counts)}",
        )


def check_distributed(
    body: JobCreate, params: dict[str, Any], dataset: Dataset, dask_address: str | None
) -> None:
    """422 when a distributed job cannot run: another estimator or formulation, a search or
    probability=true, no cluster configured, or more partitions than rows."""
    if body.distributed is None:
        return
    field = "distributed"
    if body.estimator != "LinearSVC" or params.get("multi_class") != "ovr":
        raise invalid(field, "distributed training is for LinearSVC with multi_class 'ovr'")
    if params.get("loss") not in ("hinge", "squared_hinge"):
        raise invalid(field, "distributed training takes loss 'hinge' or 'squared_hinge'")
    # the cluster solves at one C: a search or calibration was accepted, then silently skipped
    for name in ("search", "probability"):
        if params.get(name):
            raise invalid(
                f"params.{name}",
                "distributed training solves at one C, without a search or calibrated "
                f"probabilities: leave {name} out, or train without the distributed option",
            )
    if not dask_address:
        raise invalid(field, "this service has no Dask cluster (set DASK_SCHEDULER_ADDRESS)")
    if body.distributed.partitions > dataset.n_rows:
        raise invalid(
            "distributed.partitions",
            f"{body.distributed.partitions} partitions exceed the dataset's {dataset.n_rows} rows",
        )


def check_validation_labels(spec: EstimatorSpec, dataset: Dataset, valid: Dataset) -> None:
    """422 when a classifier's validation set is unrelated to its training set: its label kind
    differs, or none of its labels is a class of the training set; or for a regressor or
    structural job, which has no validation score (text labels named first: their stored codes
    0..k-1 were once scored as targets)."""
    if spec.kind != "classifier":
        if text_classes(valid.classes) is not None:
            raise invalid(
                "validation_dataset_id",
                f"the validation set has text labels (classes {_few(valid.classes)}); "
                f"{spec.name} is validated on numeric targets",
            )
        # only an accuracy is scored: the set was accepted, named in the lineage, never scored
        raise invalid(
            "validation_dataset_id",
            f"a validation set is scored by its accuracy, which only a classifier has; score "
            f"the {spec.name} model on it once trained: POST /v1/models/{{id}}/evaluate",
        )
    if valid.label_kind != dataset.label_kind:
        raise invalid(
            "validation_dataset_id",
            f"the validation set's labels are {valid.label_kind}, the training set's are "
            f"{dataset.label_kind}",
        )
    train = {class_name(c["label"]) for c in dataset.classes or []}  # by name: 1 is "1"
    if not any(class_name(c["label"]) in train for c in valid.classes or []):
        raise invalid(
            "validation_dataset_id",
            "none of the validation set's labels is a class of the training set",
        )

