"""`margin jobs follow` and `cancel` through pipes: a followed job's one-line summary (whether it
converged, the chosen C, a loose certificate), its exit status, and a cancel on its way."""

from __future__ import annotations

import json

from margin_client import Client
from tests.client.cli_helpers import as_json, margin
from tests.client.conftest import SLOW_PARAMS
from tests.deploy.cluster import wait_for


def test_a_followed_jobs_summary_is_one_line(service, heart_model):
    with Client(service.url) as client:
        job_id = client.models.get(heart_model)["job_id"]
    followed = margin(service, "jobs", "follow", job_id)  # before: the model id wrapped
    assert followed.stdout.splitlines()[0].endswith(f"-> model {heart_model}"), followed.stdout


def test_a_followed_jobs_summary_says_when_it_did_not_converge_and_the_chosen_C(
    service, heart_dataset
):
    # before: "succeeded after 2 iterations, gap 1.3", as for a converged job, and a search's
    # line gave the refit's iterations without the C they were at
    capped = margin(service, "train", heart_dataset, "--max-iter", "2", "--tol", "1e-9",
                    "--follow")
    assert capped.returncode == 0, capped.stderr
    assert "; not converged (max_iter: gap above tol 1e-09) -> model" in capped.stdout
    searched = margin(service, "train", heart_dataset, "--Cs", "0.5,2", "--cv", "3", "--follow",
                      "--json")
    job = as_json(searched)
    with Client(service.url) as client:
        chosen = client.models.get(job["model_id"])["selection"]["C"]
    human = margin(service, "jobs", "follow", job["id"])
    assert f"(refit at the chosen C {chosen:g})" in human.stdout, human.stdout


def test_following_a_job_that_did_not_succeed_exits_non_zero(service, slow_dataset):
    with Client(service.url) as client:
        job = client.jobs.create(slow_dataset, params=SLOW_PARAMS).cancel()
        result = margin(service, "jobs", "follow", job.id, "--json")
        assert result.returncode == 1
        assert json.loads(result.stdout)["status"] == "cancelled"


def test_cancelling_a_running_job_says_the_cancel_is_on_its_way(service, slow_dataset):
    with Client(service.url) as client:
        job = client.jobs.create(slow_dataset, params=SLOW_PARAMS)
        wait_for(lambda: job.refresh().status == "running", 60, "the job to start")
        result = margin(service, "jobs", "cancel", job.id)
        # before: "job_... running after 1506 iterations", as if the cancel had not taken
        assert result.returncode == 0, result.stderr
        assert "cancel requested" in result.stdout or " cancelled" in result.stdout
        assert job.wait().status == "cancelled"


def test_a_followed_job_says_when_its_models_certificate_is_loose(service, tmp_path):
    # the stopping rule holds on unscaled features while the objective is far from the optimum:
    # before, nothing but the model view's figures said so
    from tests.conftest import raw_wine

    (tmp_path / "wine_raw").write_bytes(raw_wine()[2])
    with Client(service.url) as client:
        dataset = client.datasets.upload(tmp_path / "wine_raw")["id"]
    loose = margin(service, "train", dataset, "--C", "1024", "--tol", "0.1", "--follow")
    assert loose.returncode == 0, loose.stderr
    assert "note: the model's duality gap is" in loose.stderr
    assert "scale the features" in loose.stderr
    tight = margin(service, "train", dataset, "--C", "0.001", "--tol", "1e-6", "--follow")
    assert tight.returncode == 0 and "note:" not in tight.stderr, tight.stderr


def test_a_loose_model_cut_short_by_max_iter_is_told_to_raise_it(service, heart_dataset):
    # before: "scale the features or lower --tol", though the solve stopped at --max-iter and
    # a lower tol changes nothing
    cut = margin(service, "train", heart_dataset, "--tol", "1e-12", "--max-iter", "1", "--follow")
    assert cut.returncode == 0, cut.stderr
    assert "note: the model's duality gap is" in cut.stderr
    assert "raise --max-iter" in cut.stderr and "lower --tol" not in cut.stderr


def test_a_search_jobs_view_shows_C_as_the_searchs(capsys):
    """A search job's params.C is the default 1.0, which the search never trains: `jobs show`
    printed it beside the chosen C as if it had been."""
    from margin_client.cli_jobs import job_fields

    params = {"C": 1.0, "tol": 0.1, "search": {"Cs": [0.5, 2.0], "cv": 3}}
    job = {"id": "job_1", "status": "running", "params": params,
           "progress": {"stage": "path", "C": 0.5, "iteration": 3}}
    job_fields(job)
    queued = capsys.readouterr().out
    assert '"C": "chosen by the search"' in queued and '"C": 1.0' not in queued, queued
    job_fields({**job, "progress": {"stage": "refit", "C": 2.0, "iteration": 4}})
    refit = capsys.readouterr().out
    assert '"C": "chosen by the search: 2"' in refit, refit
    assert params["C"] == 1.0  # the job's own params are left as the API gave them
    job_fields({**job, "params": {"C": 1.0, "tol": 0.1}})
    assert '"C": 1.0' in capsys.readouterr().out
