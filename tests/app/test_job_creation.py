"""Creating jobs over HTTP: defaults and listing, and the requests
refused at creation (422 naming the field, nothing stored): bad parameters, datasets that do not
fit, folds that cannot split the dataset, models beyond the weight limit. A stand-in trainer plays
the solver here."""

from __future__ import annotations

import itertools
import string

import pytest

from app.errors import MAX_LISTED_ERRORS
from app.tables import Job
from tests.app.conftest import upload
from tests.app.job_helpers import STRUCTURAL, count

pytestmark = [pytest.mark.timeout(120), pytest.mark.one_database]


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"params": {"C": -1}}, "params.C", "greater than 0 (got -1)"),
        ({"params": {"Cee": 1}}, "params.Cee", "unknown field"),
        ({"params": {"loss": "log"}}, "params.loss", "'squared_hinge', 'hinge' or 'squared_error'"),
        ({"params": {"max_iter": 0}}, "params.max_iter", "greater than or equal to 1"),
        ({"params": {"tol": "0.1"}}, "params.tol", "valid number"),
        ({"params": {"class_weight": {"a": 1}}}, "params.class_weight", "'a'] are not classes"),
        ({"params": {"class_weight": {"7": 1}}}, "params.class_weight", "not classes"),
        # both keys read as the class 1: the last one's weight was taken silently
        ({"params": {"class_weight": {"1": 2, "1.0": 3}}}, "params.class_weight", "same class"),
        ({"params": {"class_weight": {"+1": 2, "1": 3}}}, "params.class_weight", "same class"),
        # each finite, their product not: the job failed in the worker
        ({"params": {"C": 1e300, "class_weight": {"1": 1e9}}}, "params.C", "largest float"),
        ({"params": {"C": 1.7e308, "class_weight": "balanced"}}, "params.C", "largest float"),
        ({"params": {"search": {"Cs": [1.0, 1e300]}, "class_weight": {"-1": 1e9}}},
         "params.search.Cs", "largest float"),
        ({"params": {"multi_class": "ovo"}}, "params.multi_class", "'ovr'"),
        # accepted, then failed in the worker with the solvers' ValueError
        ({"params": {"loss": "squared_error", "multi_class": "crammer_singer"}}, "params.loss",
         "two classes with multi_class 'ovr'; this job has 2 classes and multi_class "
         "'crammer_singer'"),
        # a constant feature of 1e160: its square overflowed, and the job succeeded with zeros
        ({"params": {"intercept_scaling": 1.0000000000000002e100}}, "params.intercept_scaling",
         "at most 1e+100"),
        ({"estimator": "LinearSVR", "params": {"intercept_scaling": 1e160}},
         "params.intercept_scaling", "at most 1e+100"),
        ({"estimator": "SVC"}, "estimator", "expected one of LinearSVC"),
        ({"extra": 1}, "extra", "unknown field"),
        ({"params": {"search": True}}, "params.search", "should be an object (got True)"),
        # one bound alone was ignored: the library's grid ran, far below the min asked for
        ({"params": {"search": {"Cs": {"min": 1}}}}, "params.search", "Cs.min without Cs.max"),
        ({"params": {"search": {"Cs": {"num": 3, "max": 1e-3}}}}, "params.search",
         "Cs.max without Cs.min"),
        # min > max was swapped silently, min == max solved one C num times over, and num 1
        # tried min alone: the job succeeded on a grid other than the one asked for
        ({"params": {"search": {"Cs": {"num": 3, "min": 1, "max": 0.1}}}}, "params.search",
         "Cs.min must be less than Cs.max, got min 1 and max 0.1"),
        ({"params": {"search": {"Cs": {"num": 3, "min": 1, "max": 1}}}}, "params.search",
         "Cs.min must be less than Cs.max"),
        ({"params": {"search": {"Cs": {"num": 1, "min": 0.1, "max": 10}}}}, "params.search",
         "Cs.num must be at least 2 with min and max (got 1)"),
        # each repeat cost cv more solves of a C already scored
        ({"params": {"search": {"Cs": [1, 0.1, 1.0]}}}, "params.search", "Cs repeats [1.0]"),
        # accepted and ignored: the model had no probabilities
        ({"params": {"calibration": "isotonic"}}, "params.calibration",
         "'isotonic' calibrates the held-out decision values of a search or of probability=true"),
        ({"params": {"calibration": "sigmoid", "probability": False}}, "params.calibration",
         "this job has neither"),
    ],
)
def test_invalid_jobs_are_422_naming_the_field(
    client, db, heart, fake_trainer, body, field, fragment
):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], **body})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == field
    assert fragment in problem["detail"]
    assert "Spec" not in problem["detail"]  # no class name of ours
    assert count(db, Job) == 0


@pytest.mark.parametrize(
    "params",
    [{"search": {"Cs": {"num": 2, "min": 0.1, "max": 0.2}, "cv": 2}},
     {"search": {"Cs": [0.1, 0.2], "cv": 2}},
     {"search": {"Cs": [0.1], "cv": 2}, "calibration": "isotonic"},
     {"probability": True, "calibration": "softmax"},
     {"calibration": "none"},
     {"calibration": "auto"}],
)  # fmt: skip
def test_search_grids_and_calibrations_just_inside_the_bounds_are_accepted(
    client, heart, fake_trainer, params
):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": params})
    assert response.status_code == 202, response.text


def test_least_squares_takes_two_classes(client, db, heart, fake_trainer):
    """loss 'squared_error' on three classes was accepted, then failed in the worker ("is
    available for two classes with multi_class='ovr'"); on two classes it trains."""
    fake_trainer()
    three = upload(client, b"".join(b"%d 1:%d\n" % (i % 3, i) for i in range(9))).json()
    body = {"dataset_id": three["id"], "params": {"loss": "squared_error"}}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "params.loss"
    assert "this job has 3 classes" in response.json()["detail"]
    assert count(db, Job) == 0
    body["dataset_id"] = heart["id"]
    accepted = client.post("/v1/jobs", json=body)
    assert accepted.status_code == 202, accepted.text


def test_unknown_dataset_is_404_and_labels_must_fit(client, db, fake_trainer):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": "ds_missing"})
    assert response.status_code == 404 and "dataset_id" in response.json()["detail"]
    one_class = upload(client, b"1 1:1\n1 2:1\n1 1:2\n").json()
    response = client.post("/v1/jobs", json={"dataset_id": one_class["id"]})
    assert response.status_code == 422 and "at least two classes" in response.json()["detail"]
    real = upload(client, b"0.5 1:1\n1.5 2:1\n2.25 1:2\n").json()
    response = client.post("/v1/jobs", json={"dataset_id": real["id"]})
    assert response.status_code == 422 and "real-valued" in response.json()["detail"]
    assert count(db, Job) == 0


def test_create_fills_defaults_and_lists(client, heart, fake_trainer):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"C": 2}})
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["estimator"] == "LinearSVC"
    assert job["params"]["C"] == 2.0 and job["params"]["tol"] == 0.1
    assert job["params"]["loss"] == "squared_hinge" and job["params"]["multi_class"] == "ovr"
    assert job["model_id"] is None and job["progress"] is None and job["attempt"] == 0
    assert client.get(f"/v1/jobs/{job['id']}").json()["id"] == job["id"]
    assert [j["id"] for j in client.get("/v1/jobs?status=queued").json()["items"]] == [job["id"]]
    assert client.get("/v1/jobs?status=running").json()["items"] == []
    assert client.get("/v1/jobs?status=bogus").status_code == 422
    assert client.get("/v1/jobs/job_missing").status_code == 404


def test_a_job_list_page_stops_before_its_params_pass_the_bound(client):
    """A job's params hold its class weights: 1,000 text classes of 255 characters make 264 kB
    of them, and 500 such jobs (made in 20 s) made one GET /v1/jobs?limit=500 a 131 MB answer
    and +390 MB of the API's memory. A page of jobs now ends before its params pass
    MAX_PAGE_BULK (4 MiB; a page holds one job at least), as one of datasets or models does."""
    import json

    from app.schemas.common import MAX_PAGE_BULK

    names = [f"c{i:04d}" + "x" * 250 for i in range(1000)]
    rows = "label,a\n" + "".join(f"{name},{i % 7}\n" for i, name in enumerate(names))
    dataset = upload(client, rows.encode(), "many.csv").json()
    body = {"dataset_id": dataset["id"], "params": {"class_weight": dict.fromkeys(names, 1.0)}}
    made = []
    for _ in range(20):
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 202, response.text
        made.append(response.json()["id"])
    pages, cursor = [], None
    while True:
        page = client.get("/v1/jobs", params={"limit": 500, "cursor": cursor}).json()
        pages.append([j["id"] for j in page["items"]])
        bulk = sum(len(json.dumps(j["params"])) for j in page["items"])
        assert bulk <= MAX_PAGE_BULK or len(page["items"]) == 1
        if not (cursor := page["next"]):
            break
    assert len(pages) > 1  # 20 jobs of 264 kB: 5.3 MB
    assert sorted(sum(pages, [])) == sorted(made)  # every job once, newest first
    assert sum(pages, []) == sorted(made, reverse=True)


def test_structural_online_mode_is_accepted(client, db):
    """The online mode is trained in tests/app/test_structural_service.py."""
    dataset = upload(client, STRUCTURAL).json()
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset["id"], "estimator": "structural", "params": {"online": True}},
    )
    assert response.status_code == 202, response.text
    assert response.json()["params"]["cache_size"] == 256.0
    assert count(db, Job) == 1


def test_a_misspelt_parameter_gets_a_suggestion(client, heart):
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"c": 1}})
    assert response.status_code == 422
    assert "params.c: unknown field; did you mean 'C'?" in response.json()["detail"]
    response = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"shrinkng": False}}
    )
    assert "did you mean 'shrinking'?" in response.json()["detail"]
    response = client.post("/v1/jobs", json={"dataset": heart["id"]})
    assert "dataset: unknown field; did you mean 'dataset_id'?" in response.json()["detail"]


def test_an_unrelated_validation_set_is_refused(client, heart):
    other = upload(client, b"2 1:1\n3 2:1\n2 3:1\n3 1:1\n", "other.svm")
    assert other.status_code == 201, other.text
    body = {"dataset_id": heart["id"], "validation_dataset_id": other.json()["id"]}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert "none of the validation set's labels" in response.json()["detail"]


@pytest.mark.parametrize("estimator", ["LinearSVR", "structural"])
def test_a_validation_set_of_a_model_without_accuracy_is_refused(client, estimator):
    """Only a classifier's validation set is scored (its accuracy): a regressor's or a
    structural job's was accepted (202), named in the model's lineage, and never scored."""
    rows = STRUCTURAL if estimator == "structural" else b"0.5 1:1\n1.5 1:2\n2.5 2:1\n"
    dataset = upload(client, rows, "train.svm").json()
    body = {"dataset_id": dataset["id"], "estimator": estimator,
            "validation_dataset_id": dataset["id"]}  # fmt: skip
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "validation_dataset_id"
    assert "evaluate" in response.json()["detail"]
    assert client.get("/v1/jobs").json()["items"] == []
    del body["validation_dataset_id"]
    assert client.post("/v1/jobs", json=body).status_code == 202


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [({"search": {"cv": 6}}, "params.search.cv", "6 folds need at least 6 rows"),
     ({"search": {"cv": 4}}, "params.search.cv", "largest class has 3"),
     ({"probability": True}, "params.probability", "largest class has 3"),
     ({"search": {"cv": 3, "scoring": "roc_auc"}}, "params.search.scoring", "smallest has 2")],
)  # fmt: skip
def test_folds_that_cannot_split_the_dataset_are_422_at_creation(client, params, field, words):
    rows = b"1 1:1\n1 1:2\n1 2:1\n-1 2:2\n-1 1:3\n"  # 5 rows: classes of 3 and 2
    dataset = upload(client, rows).json()
    response = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": params})
    # before: accepted (202), then failed in the worker with scikit-learn's own words
    assert response.status_code == 422, response.text
    assert field in response.text and words in response.text
    assert client.get("/v1/jobs").json()["items"] == []
    fits = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                          "params": {"search": {"cv": 3}}})  # fmt: skip
    assert fits.status_code == 202
    no_folds = {"probability": True, "calibration": "none"}  # runs no folds: nothing to split
    assert client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                         "params": no_folds}).status_code == 202  # fmt: skip


LABELS_ONLY = {"rows": b"1\n-1\n1\n-1\n", "qid": b"1 qid:1\n0 qid:1\n2 qid:2\n0 qid:2\n"}


@pytest.mark.parametrize(
    ("estimator", "params", "rows"),
    [("LinearSVC", {}, "rows"), ("LinearSVR", {}, "rows"), ("structural", {"online": True}, "qid"),
     ("structural", {}, "qid")],
)  # fmt: skip
def test_a_dataset_of_no_features_is_422_at_creation(client, db, estimator, params, rows):
    """Rows of labels only: a job was accepted, then failed in the worker ("Found array with 0
    feature(s) ... a minimum of 1 is required by LinearSVC"; the online structural solver's
    "n_features must be a positive integer, got 0")."""
    dataset = upload(client, LABELS_ONLY[rows]).json()
    assert dataset["n_features"] == 0
    body = {"dataset_id": dataset["id"], "estimator": estimator, "params": params}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "dataset_id"
    assert "has no features" in response.json()["detail"]
    assert count(db, Job) == 0
    first = LABELS_ONLY[rows].split(b"\n", 1)
    one = upload(client, first[0] + b" 1:0\n" + first[1]).json()  # one feature: accepted
    body["dataset_id"] = one["id"]
    accepted = client.post("/v1/jobs", json=body)
    assert accepted.status_code == 202, accepted.text


def test_roc_auc_on_more_than_two_classes_is_422_at_creation(client):
    """roc_auc scores two classes: on three it was accepted, then failed in the worker with
    scikit-learn's "multi_class must be in ('ovo', 'ovr')"."""
    rows = b"".join(b"%d 1:%d 2:1\n" % (i % 3, i) for i in range(30))
    dataset = upload(client, rows).json()
    search = {"search": {"cv": 3, "scoring": "roc_auc"}}
    response = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": search})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "params.search.scoring"
    assert "roc_auc scores two classes; the dataset has 3" in response.json()["detail"]
    assert client.get("/v1/jobs").json()["items"] == []
    search["search"]["scoring"] = "f1_macro"
    fits = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": search})
    assert fits.status_code == 202, fits.text


@pytest.mark.parametrize(("n_classes", "status"), [(9, 422), (8, 202)])
def test_a_model_beyond_the_weight_limit_is_422(client, db, n_classes, status):
    """A few hundred bytes declaring 2^24 features and 40 classes made a Crammer-Singer job
    allocate 5 GiB of weights in the worker. 2^24 features x 8 classes is the limit (2^27)."""
    lines = [f"{c} {1 + c}:1" for c in range(n_classes) for _ in range(2)] + ["0 16777216:1"]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    assert dataset["n_features"] == 2**24 and len(dataset["labels"]["classes"]) == n_classes
    body = {"dataset_id": dataset["id"], "params": {"multi_class": "crammer_singer"}}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == status, answer.text
    if status == 422:
        assert "134217728" in answer.json()["detail"]
        assert count(db, Job) == 0


def test_a_search_whose_folds_hold_too_many_weights_is_422(client, db, fake_trainer):
    """A 424-byte upload of 61 rows, 3 classes and 2^24 features fits MAX_MODEL_WEIGHTS as one
    model (3 x 2^24 weights), but a 10-fold search of it took a worker from 300 MB to 4.25 GB in
    13 s: every fold held weights of its own, and the check counted one model."""
    fake_trainer()
    lines = ["1 16777216:1"] + [f"{1 + row % 3} {1 + row % 5}:1" for row in range(60)]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    assert dataset["n_rows"] == 61 and dataset["n_features"] == 2**24

    def job(params):
        body = {"dataset_id": dataset["id"], "estimator": "LinearSVC", "params": params}
        return client.post("/v1/jobs", json=body)

    answer = job({"search": {"Cs": [1, 2], "cv": 10}})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["errors"][0]["field"] == "params.search.cv"
    assert "MAX_MODEL_WEIGHTS" in problem["detail"] and "use fewer folds" in problem["detail"]
    answer = job({"probability": True})  # its internal 5-fold at one C: 6 models at once
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "params.probability"
    assert count(db, Job) == 0
    assert job({}).status_code == 202  # one model fits


@pytest.mark.parametrize(
    ("params", "threads", "copies"),
    [
        ({"search": {"Cs": [1.0, 2.0], "cv": 10}}, None, 10 + 1 + 3 * 10),  # every fold at once
        ({"search": {"Cs": [1.0, 2.0], "cv": 10}}, 2, 10 + 1 + 3 * 2),  # SOLVER_THREADS 2
        ({"search": {"Cs": {"num": 4}, "cv": 3}}, 8, 3 + 1 + 3 * 3),
        ({"search": {"Cs": [1.0], "cv": 4}}, None, 4 + 1),  # one C: no warm starts
        ({"probability": True}, None, 5 + 1),
        ({}, None, 1),
    ],
)
def test_the_weight_limit_counts_every_copy_a_search_holds(params, threads, copies):
    """Every limit gets a test just over it: the folds' weights, at exactly the limit, pass."""
    from app.schemas.params import ESTIMATORS
    from app.services.job_checks import ProblemError, check_dataset_fits, fold_copies
    from app.tables import Dataset

    spec = ESTIMATORS["LinearSVC"]
    full = spec.validate(params).model_dump(mode="json")
    assert fold_copies(full, threads)[2] == copies
    classes = [{"label": c, "count": 10} for c in range(3)]
    dataset = Dataset(id="ds", n_features=1000, n_rows=30, nnz=30, classes=classes,
                      label_kind="classes", has_qid=False)  # fmt: skip
    held = 1000 * 3 * copies
    check_dataset_fits(spec, full, dataset, max_weights=held, solver_threads=threads)
    with pytest.raises(ProblemError) as refused:
        check_dataset_fits(spec, full, dataset, max_weights=held - 1, solver_threads=threads)
    assert f"more than the {held - 1}" in refused.value.detail


@pytest.mark.parametrize("n_classes", [2, 3])
def test_a_search_holds_no_more_weights_than_it_is_counted(n_classes):
    """The count (`fold_copies`) against the search's allocations: 4 folds on 4 threads, a
    path of 3 Cs on 2^16 features (each array of weights dwarfs the rest)."""
    import tracemalloc

    import numpy as np
    import scipy.sparse as sp

    from app.services.job_checks import fold_copies
    from solvers import LinearSVCCV

    n_features, n_rows = 1 << 16, 60
    X = sp.random(n_rows, 30, density=0.3, random_state=1, format="lil")
    X.resize((n_rows, n_features))
    X[0, n_features - 1] = 1.0
    y = np.arange(n_rows) % n_classes
    search = LinearSVCCV(Cs=[0.01, 0.05, 0.1], cv=4, n_jobs=4)
    search.fit(X[:20].tocsr(), y[:20])  # compiled before measuring
    tracemalloc.start()
    try:
        search.fit(X.tocsr(), y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    model = 8 * n_features * (1 if n_classes == 2 else n_classes)
    counted = fold_copies({"search": {"Cs": [0.01, 0.05, 0.1], "cv": 4}}, 4)[2]
    assert peak / model <= counted


@pytest.mark.parametrize(("n_labels", "fragment"), [(1001, "at most 1000"), (1000, "not classes")])
def test_class_weight_holds_at_most_as_many_labels_as_a_dataset_has_classes(
    client, heart, n_labels, fragment
):
    """85,000 labels in a 1 MB body took 14 s of the API's CPU (each label was looked up in a
    set of the dataset's classes built anew for it) and answered 1.5 MB listing them."""
    weights = {str(label): 1.0 for label in range(2, 2 + n_labels)}
    body = {"dataset_id": heart["id"], "params": {"class_weight": weights}}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert fragment in answer.json()["detail"] and "params.class_weight" in answer.text


@pytest.mark.parametrize(("n_rows", "status"), [(134_218, 422), (134_217, 202)])
def test_a_job_beyond_the_dual_limit_is_422(client, db, settings, fake_trainer, n_rows, status):
    """A 1 MB upload of 50,000 rows of 1,000 classes took a worker 1.4 GB for one-vs-rest (a dual
    variable per row and class), and 8.5 GB with a 20-fold search (one set per fold). 1,000
    classes x 134,218 rows is 272 dual variables over the limit (2^27)."""
    fake_trainer()
    settings.max_upload_mb = 4
    lines = [f"{row % 1000} 1:1" for row in range(n_rows)]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    assert dataset["n_rows"] == n_rows and len(dataset["labels"]["classes"]) == 1000
    answer = client.post("/v1/jobs", json={"dataset_id": dataset["id"]})
    assert answer.status_code == status, answer.text
    if status == 422:
        problem = answer.json()
        assert problem["errors"][0]["field"] == "dataset_id"
        assert "134218 rows x 1000 outputs = 134218000 dual variables" in problem["detail"]
        assert count(db, Job) == 0


def test_the_dual_limit_counts_the_folds_and_is_a_setting(app, client, fake_trainer):
    """MAX_DUAL_VARIABLES: rows x outputs, times the folds that a search or probability=true
    runs together; one per stored non-zero is always allowed."""
    fake_trainer()
    lines = [f"{row % 3} 1:1" for row in range(30)]  # 30 rows x 3 classes = 90; 30 non-zeros
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()

    def job(params, limit):
        app.state.settings.max_dual_variables = limit
        return client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": params})

    assert job({}, 89).status_code == 422
    assert job({}, 90).status_code == 202
    search = {"search": {"cv": 2, "Cs": [1.0]}}  # 2 folds: 180
    answer = job(search, 179)
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "params.search.cv"
    assert "x 2 folds = 180 dual variables" in answer.json()["detail"]
    assert job(search, 180).status_code == 202
    answer = job({"probability": True}, 449)  # its internal 5-fold: 450
    assert answer.status_code == 422 and "params.probability" in answer.text
    assert job({"probability": True, "calibration": "none"}, 90).status_code == 202  # no folds
    binary = upload(client, b"1 1:1 2:1\n-1 1:1 2:1\n1 2:1\n-1 1:2\n", "binary.txt").json()
    app.state.settings.max_dual_variables = 1  # 4 rows, but 6 stored non-zeros
    assert client.post("/v1/jobs", json={"dataset_id": binary["id"]}).status_code == 202


def test_the_weight_limit_is_a_setting(app, client):
    """MAX_MODEL_WEIGHTS: a deployment with the memory for larger models raises it."""
    lines = [f"{c} {1 + c}:1" for c in range(3) for _ in range(2)] + ["0 1000:1"]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    app.state.settings.max_model_weights = 2999  # 1000 features x 3 classes = 3000: one over
    answer = client.post("/v1/jobs", json={"dataset_id": dataset["id"]})
    assert answer.status_code == 422 and "more than the 2999" in answer.json()["detail"]
    app.state.settings.max_model_weights = 3000
    assert client.post("/v1/jobs", json={"dataset_id": dataset["id"]}).status_code == 202


def test_c_times_a_class_weight_up_to_the_largest_float_is_accepted(client, heart, fake_trainer):
    fake_trainer()
    body = {"dataset_id": heart["id"], "params": {"C": 1e299, "class_weight": {"1": 1e9}}}
    accepted = client.post("/v1/jobs", json=body)
    assert accepted.status_code == 202, accepted.text  # 1e308: finite
    body["params"]["C"] = 1.8e299  # 1.8e308: beyond the largest float (1.797...e308)
    assert client.post("/v1/jobs", json=body).status_code == 422


def test_a_queued_job_says_it_waits_while_no_worker_is_ready(client, db, heart, fake_trainer):
    """A worker registers only once its kernels are warm (minutes of compiling on a busy small
    machine); meanwhile a queued job sat with no hint why, and /readyz alone said 503."""
    from app.jobs import workers

    fake_trainer()
    created = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    assert created["status"] == "queued" and "no worker is ready" in created["waiting"]
    assert "no worker is ready" in client.get(f"/v1/jobs/{created['id']}").json()["waiting"]
    workers.register(db, workers.new_worker_id(), "local")
    assert client.get(f"/v1/jobs/{created['id']}").json()["waiting"] is None


def test_the_list_says_why_its_queued_jobs_wait(client, db, heart, fake_trainer, monkeypatch):
    """GET /v1/jobs left `waiting` null on every queued job, which GET /v1/jobs/{id} filled;
    the ready workers are counted once for the page, not once for each job."""
    from app.jobs import workers

    fake_trainer()
    for _ in range(3):
        assert client.post("/v1/jobs", json={"dataset_id": heart["id"]}).status_code == 202
    counted, ready_count = [], workers.ready_count

    def counting(*args):
        counted.append(args)
        return ready_count(*args)

    monkeypatch.setattr(workers, "ready_count", counting)
    items = client.get("/v1/jobs").json()["items"]
    assert len(items) == 3 and len(counted) == 1
    assert all("no worker is ready" in job["waiting"] for job in items)
    workers.register(db, workers.new_worker_id(), "local")
    assert [job["waiting"] for job in client.get("/v1/jobs").json()["items"]] == [None] * 3


def test_a_body_of_many_unknown_fields_lists_the_first_errors_and_counts_the_rest(client):
    """Each unknown field was described, with its "did you mean" search, on the event loop:
    120,000 of them (a 0.96 MB body) took 6 s and answered 7.4 MB. (20,000 here: what is left
    of the time is pydantic's, listing every error before the handler sees them.)"""
    letters = string.ascii_letters + string.digits
    names = ("".join(name) for name in itertools.product(letters, repeat=3))
    body = "{" + ",".join(f'"{name}":0' for name in itertools.islice(names, 20_000)) + "}"
    headers = {"Content-Type": "application/json"}
    response = client.post("/v1/jobs", content=body, headers=headers)
    assert response.status_code == 422
    assert len(response.content) < 20_000
    problem = response.json()
    assert len(problem["errors"]) == MAX_LISTED_ERRORS
    assert {"field": "aaa", "message": "unknown field"} in problem["errors"]
    assert problem["detail"].endswith(f"; and {20_001 - MAX_LISTED_ERRORS} more")
