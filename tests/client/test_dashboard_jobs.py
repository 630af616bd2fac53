"""The dashboard's job pages in a real browser: the plot gains points while a job runs and cancel
stops it, the page waits out a busy event stream, and a job's history and delete."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from margin_client import Client, MarginError
from tests.client.dashboard import open_ui, points, shot


def test_the_plot_grows_while_a_job_runs_and_cancel_stops_it(page, slow_dataset):
    open_ui(page, f"#/datasets/{slow_dataset}")
    page.select_option("#param-loss", "hinge")
    for name, value in {"C": "1000", "tol": "1e-12", "max_iter": "10000000",
                        "time_limit": "60"}.items():
        page.fill(f"#param-{name}", value)
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=running]")
    page.wait_for_function(
        "() => Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    first = points(page, "plot-iteration")
    page.wait_for_function(
        f"() => Number(document.querySelector('#plot-iteration').dataset.points) > {first + 5}"
    )
    assert points(page, "plot-time") > first
    shot(page, "job-running")
    page.click("#job-cancel")
    page.wait_for_selector("main[data-status=cancelled]")
    expect(page.locator("#job-summary")).to_contain_text("cancelled")
    shot(page, "job-cancelled")


def test_the_job_page_waits_out_a_busy_event_stream(page, heart_dataset):
    with Client(page.service.url) as client:
        job = client.jobs.create(heart_dataset, C=1.0, tol=1e-3).wait()
    refused = []

    def busy_once(route):  # an API process at MAX_EVENT_STREAMS answers 503 with Retry-After
        if refused:
            return route.continue_()
        refused.append(route.request.url)
        route.fulfill(status=503, headers={"Retry-After": "1"},
                      content_type="application/problem+json",
                      body='{"title": "Too many event streams", "status": 503}')  # fmt: skip

    page.route("**/v1/jobs/*/events", busy_once)
    open_ui(page, f"#/jobs/{job.id}")
    page.wait_for_function(
        "() => Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    # before: the 503 ended the stream for good and the page showed the error
    assert refused and page.locator("main .error[role=alert]").count() == 0


def test_a_jobs_history_and_delete(page, heart_dataset):
    with Client(page.service.url) as client:
        job = client.jobs.create(heart_dataset, C=2.0, tol=1e-3).wait(check=True)
        history = client.get_json(f"/v1/jobs/{job.id}/history")["items"]
    open_ui(page, f"#/jobs/{job.id}")
    rows = page.locator("#job-history tbody tr")
    expect(rows).to_have_count(len(history))
    assert [rows.nth(i).locator("td").nth(3).inner_text() for i in range(len(history))] == [
        e["to_status"] for e in history]
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#job-delete")
    page.wait_for_url(re.compile(r"#/jobs$"))
    with Client(page.service.url) as client:
        with pytest.raises(MarginError) as gone:
            client.jobs.get(job.id)
        assert gone.value.status == 404
        assert client.models.get(job.model_id)["job_id"] is None  # the model stays


def test_a_job_cancelled_elsewhere_while_watched_ends_on_the_page(page, slow_dataset):
    with Client(page.service.url) as client:
        job = client.jobs.create(slow_dataset, loss="hinge", C=1000, tol=1e-12,
                                 max_iter=10_000_000, time_limit=60)  # fmt: skip
        open_ui(page, f"#/jobs/{job.id}")
        page.wait_for_selector("main[data-status=running]")
        page.wait_for_function(
            "() => Number(document.querySelector('#plot-iteration').dataset.points) > 2")
        job.cancel()  # from the client, not the page's button
        page.wait_for_selector("main[data-status=cancelled]", timeout=30_000)
        expect(page.locator("#job-cancel")).to_be_disabled()
        expect(page.locator("#job-delete")).to_be_enabled()
        expect(page.locator("#job-history")).to_contain_text("cancelled")
        assert page.locator("main .error[role=alert]").count() == 0
        # the page stays at the end: the refresh of the job stops with it (after the tick
        # that was due)
        page.wait_for_timeout(1500)
        expect(page.locator("main")).to_have_attribute("data-status", "cancelled")
        requests = []
        page.on("request", lambda request: requests.append(request.url))
        page.wait_for_timeout(2500)
        assert not [url for url in requests if f"/v1/jobs/{job.id}" in url], requests
