"""A search job's time_limit bounds the whole job, over real HTTP on a real `margin serve`: on a
problem whose large C keeps the solver busy for minutes, the job ends `succeeded` with stop reason
time_limit, its model predicts, its selection keeps only the Cs every fold finished, and the
dashboard's job page shows the bound and its model page says the search ended at the time limit."""

from __future__ import annotations

import numpy as np
from playwright.sync_api import expect

from margin_client import Client
from tests.client.conftest import slow_problem
from tests.client.dashboard import open_ui

# C = 1e-4 converges in a few passes; C = 1000 with the hinge loss runs until the budget ends
CS = [1e-4, 1000.0]
PARAMS = {"loss": "hinge", "tol": 1e-2, "max_iter": 10_000_000, "time_limit": 3.0,
          "search": {"Cs": CS, "cv": 3}}  # fmt: skip


def test_a_search_job_ends_at_its_time_limit_with_a_usable_model(page, slow_dataset):  # noqa: F811
    with Client(page.service.url) as client:
        job = client.jobs.create(slow_dataset, **PARAMS).wait(check=True)
        info = job.refresh().info
        model = client.models.get(job.model_id)
        X, y = slow_problem()
        labels = client.models.predict(job.model_id, X[:50]).labels
    assert info["stop_reason"] == "time_limit" and info["converged"] is False
    selection = model["selection"]
    assert selection["search_status"] == "time_limit" and selection["C"] in CS
    # the C cut short by the deadline is left out: every row is finished by every fold
    assert [row["C"] for row in selection["table"]] == [CS[0]]
    assert all("time_limit" not in row["status"] for row in selection["table"])
    assert set(np.asarray(labels).tolist()) <= {-1, 1} and len(labels) == 50

    assert info["time_bound_s"] == PARAMS["time_limit"]
    open_ui(page, f"#/jobs/{job.id}")
    label = page.locator("dl.facts dt", has_text="Time bound")
    bound = label.locator("xpath=following-sibling::dd[1]")
    expect(bound).to_have_text("0:03")
    open_ui(page, f"#/models/{job.model_id}")
    expect(page.locator("#cv-section")).to_contain_text("ended at the job's time limit")
