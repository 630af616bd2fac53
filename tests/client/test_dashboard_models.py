"""The dashboard's model pages in a real browser: ONNX and skops exports, evaluate, background
predictions (start, download, cancel), and registering a model under a name and alias."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from margin_client import Client
from tests.client.dashboard import open_ui, shot


def test_onnx_and_skops_exports_download_the_files(page, heart_model):
    open_ui(page, f"#/models/{heart_model}")
    with page.expect_download() as download:
        page.click("#export-onnx")
    graph = Path(download.value.path()).read_bytes()
    assert download.value.suggested_filename == f"{heart_model}.onnx"
    onnx = pytest.importorskip("onnx")
    loaded = onnx.load_from_string(graph)
    assert [o.name for o in loaded.graph.output][:2] == ["label", "decision_values"]
    with page.expect_download() as download:
        page.click("#export-skops")
    assert Path(download.value.path()).read_bytes()[:2] == b"PK"  # a skops file is a zip
    assert page.locator("main .error[role=alert]").count() == 0


def test_evaluate_and_background_predictions(page, heart_model, heart_dataset):
    open_ui(page, f"#/models/{heart_model}")
    page.select_option("#evaluate-dataset", heart_dataset)
    page.click("#evaluate-submit")
    with Client(page.service.url) as client:
        report = client.models.evaluate(heart_model, heart_dataset)
    expect(page.locator("#evaluate-accuracy")).not_to_have_text("")
    assert float(page.locator("#evaluate-accuracy").inner_text()) == pytest.approx(
        report["accuracy"], abs=5e-4)
    confusion = page.locator("#evaluate-output table tbody tr")
    expect(confusion).to_have_count(2)
    shown = [[int(c) for c in row.locator("td.num").all_inner_texts()] for row in confusion.all()]
    assert shown == report["confusion_matrix"]

    # the model is shared with other tests, which may have runs of it: this run is the one the
    # page's click adds, the newest, and only its own Download button counts
    with Client(page.service.url) as client:
        before = {run["id"] for run in client.runs.list(heart_model)}
    page.select_option("#runs-dataset", heart_dataset)
    page.click("#runs-submit")
    expect(page.locator("#runs-list tbody tr")).to_have_count(len(before) + 1)
    with Client(page.service.url) as client:
        (run_id,) = {run["id"] for run in client.runs.list(heart_model)} - before
    download_button = page.locator(f"#runs-list button[data-run={run_id}]", has_text="Download CSV")
    expect(download_button).to_have_count(1)
    with page.expect_download() as download:
        download_button.click()
    with Client(page.service.url) as client:
        expected = client.request("GET", f"/v1/models/{heart_model}/predictions/{run_id}").content
        assert client.runs.get(heart_model, run_id)["n_rows"] == 270
    assert Path(download.value.path()).read_bytes() == expected
    expect(page.locator("#runs-list tbody tr").first).to_contain_text("270")
    shot(page, "model-runs")

    # a run reported active gets a Cancel button; this one has ended by the time it is clicked,
    # so the service's 409 is what the page shows
    def as_running(route):
        response = route.fetch()
        body = response.json()
        for item in body["items"]:
            item["status"] = "running"
        route.fulfill(response=response, json=body)

    page.route(re.compile(r".*/predictions\?limit=100$"), as_running)
    page.reload()
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    page.locator(f"#runs-list button[data-run={run_id}]", has_text="Cancel").click()
    expect(page.locator("#runs-title ~ [role=status] .error")).to_contain_text(
        "409 Prediction run already ended")
    page.unroute(re.compile(r".*/predictions\?limit=100$"))


def test_register_a_model_with_an_alias_and_open_it_by_the_alias(page, heart_model):
    open_ui(page, f"#/models/{heart_model}")
    page.fill("#register-name", "heart-svm")
    page.fill("#register-alias", "production")
    page.click("#register-submit")
    expect(page.locator("#registry-output")).to_contain_text("Registered as heart-svm version 1")
    with Client(page.service.url) as client:
        alias = client.get_json("/v1/registered-models/heart-svm/aliases/production")
    assert alias["model_id"] == heart_model and alias["version"] == 1
    page.reload()
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    expect(page.locator("#lineage-registered")).to_have_text("heart-svm@v1 (production)")
    with Client(page.service.url) as client:
        dataset = client.datasets.get(client.models.get(heart_model)["dataset_id"])
    expect(page.locator("#lineage")).to_contain_text(dataset["sha256"])
    open_ui(page, "#/models")
    # the stored models name their dataset (before: its id only), linked to its page
    link = page.locator(f"main table a[href='#/datasets/{dataset['id']}']").first
    expect(link).to_have_text(dataset["name"])
    registry = page.locator("section[aria-labelledby=registry-title]")
    expect(registry).to_contain_text("heart-svm")
    registry.get_by_role("link", name="heart-svm@production").click()
    page.wait_for_url(re.compile(r"#/models/heart-svm%40production$"))
    expect(page.locator("#model-status")).to_have_text("converged")
    expect(page.locator("h1")).to_have_text("Model heart-svm@production")


def test_the_model_page_says_when_its_certificate_is_loose(page, heart_model, tmp_path):
    from tests.conftest import raw_wine

    open_ui(page, f"#/models/{heart_model}")
    with Client(page.service.url) as client:
        tight = client.models.get(heart_model)["duality_gap"]
        (tmp_path / "wine_raw").write_bytes(raw_wine()[2])
        dataset = client.datasets.upload(tmp_path / "wine_raw")
        loose = client.jobs.create(dataset["id"], C=1024.0, tol=0.1).wait(check=True).model_id
        gap = client.models.get(loose)["duality_gap"]
    assert tight < 0.01 < gap
    expect(page.locator("#model-duality-gap")).to_have_text(re.compile(r"^\d"))
    assert page.locator("#model-certificate-note").count() == 0
    open_ui(page, f"#/models/{loose}")
    expect(page.locator("#model-status")).to_have_text("converged")
    expect(page.locator("#model-certificate-note")).to_contain_text("scale the features")
    shot(page, "model-loose-certificate")
