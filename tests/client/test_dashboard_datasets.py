"""The dashboard's datasets in a real browser: upload through the page, train and use the model
(the whole way from a file to predictions), a table uploaded with its parse options, and names
holding markup shown as text."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import expect

from margin_client import Client
from tests.client.conftest import HEART
from tests.client.dashboard import open_ui, points, shot


def test_upload_train_and_use_a_model(page):
    open_ui(page)
    expect(page.locator("nav a[aria-current=page]")).to_have_text("Datasets")
    # every format the service reads is named (before: "LIBSVM file ... or npz")
    for fmt in ("LIBSVM", "CSV", "TSV", "Parquet", "npz"):
        expect(page.locator("label[for=upload-file]")).to_contain_text(fmt)
    page.set_input_files("#upload-file", str(HEART))
    page.fill("#upload-name", "heart (browser)")
    page.click("#upload-submit")
    page.wait_for_url(re.compile(r"#/datasets/ds_"))
    page.wait_for_selector("main[data-view=datasets-page][data-ready=true]")
    assert page.locator("#upload-progress").count() == 0  # moved on to the dataset's page
    expect(page.locator("dl.facts")).to_contain_text("270")
    expect(page.locator("[aria-label='Label histogram']")).to_contain_text("150")
    shot(page, "dataset")

    page.select_option("#param-loss", "hinge")
    page.fill("#param-C", "0.5")
    page.fill("#param-tol", "0.001")
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=succeeded]")
    page.wait_for_function(
        "() => Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    job_id = page.url.rsplit("/", 1)[-1]
    with Client(page.service.url) as client:
        records = client.jobs.get(job_id).progress()
    plotted = points(page, "plot-iteration")
    assert plotted == points(page, "plot-time")
    # the live plot saw every report; the stored history is the same until it grows past
    # app.jobs.history.PRUNE_EVERY rows, then log-spaced (fewer rows than reports)
    assert len(records) <= plotted <= records[-1]["iteration"], (len(records), plotted)
    expect(page.locator("#job-cancel")).to_be_disabled()

    page.click("#job-model")
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    expect(page.locator("#model-status")).to_have_text("converged")
    expect(page.locator("[aria-label='Largest weights by magnitude'] .bar")).to_have_count(13)
    with page.expect_download() as download:
        page.click("#export-liblinear")
    assert Path(download.value.path()).read_text().startswith("solver_type L2R_L1LOSS_SVC_DUAL")

    lines = HEART.read_text().splitlines()[:4]
    page.fill("#predict-input", "\n".join(lines))
    page.click("#predict-submit")
    rows = page.locator("#predict-output tbody tr")
    expect(rows).to_have_count(4)
    model_id = page.url.rsplit("/", 1)[-1]
    with Client(page.service.url) as client:
        expected = client.models.predict(model_id, lines).labels
    shown = [float(rows.nth(i).locator("td").nth(1).inner_text()) for i in range(4)]
    assert shown == list(expected)
    shot(page, "model")
    for section in ("jobs", "models"):
        open_ui(page, f"#/{section}")
        listed = job_id if section == "jobs" else model_id
        expect(page.locator("main table")).to_contain_text(listed)
        shot(page, section)


def test_names_holding_markup_are_shown_as_text(page, tmp_path, heart_model):
    """A dataset named with an <img onerror> and a <script> is shown literally on the list and
    on its page (the pages build text nodes, never HTML); nothing of it runs."""
    hostile = '<img src=x onerror="document.title=\'ran\'"><script>document.title="ran"</script>'
    own = tmp_path / "own.txt"  # bytes of its own: a repeated upload keeps its first name
    own.write_bytes(HEART.read_bytes() + b"1 1:0.125\n")
    with Client(page.service.url) as c:
        dataset = c.datasets.upload(own, name=hostile)["id"]
    open_ui(page, "#/datasets")
    expect(page.get_by_text(hostile).first).to_be_visible()
    open_ui(page, f"#/datasets/{dataset}")
    expect(page.get_by_text(hostile).first).to_be_visible()
    assert page.title() != "ran" and page.locator("main img").count() == 0
    open_ui(page, f"#/models/{heart_model}")  # the dataset selects of evaluate and runs
    expect(page.locator("#runs-dataset option", has_text=hostile)).to_have_count(1)
    assert page.title() != "ran" and page.locator("main img").count() == 0


def test_upload_a_table_with_its_options(page, tmp_path):
    """A CSV whose label column is the third, named .txt (so the format is the one chosen) and
    with an empty cell (read as 0): the stored dataset has its rows, classes and columns."""
    rows = [(0.5 * i, i % 4, (0, 1, 2)[i % 3], "" if i == 4 else 1.0 - 0.1 * i) for i in range(12)]
    table = tmp_path / "table.txt"
    table.write_text("f1,f2,target,f3\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    open_ui(page)
    page.set_input_files("#upload-file", str(table))
    page.select_option("#upload-format", "csv")
    page.fill("#upload-label-column", "target")
    page.select_option("#upload-empty-cells", "zero")
    page.click("#upload-submit")
    page.wait_for_url(re.compile(r"#/datasets/ds_"))
    page.wait_for_selector("main[data-view=datasets-page][data-ready=true]")
    dataset_id = page.url.rsplit("/", 1)[-1]
    with Client(page.service.url) as client:
        stored = client.datasets.get(dataset_id)
    assert stored["format"] == "csv" and stored["n_rows"] == 12
    assert stored["feature_names"] == ["f1", "f2", "f3"]
    assert {c["label"]: c["count"] for c in stored["labels"]["classes"]} == {0: 4, 1: 4, 2: 4}
    expect(page.locator("#dataset-columns")).to_have_text("f1, f2, f3")
    histogram = page.locator("[aria-label='Label histogram'] [role=listitem]")
    expect(histogram).to_have_text(["0", "1", "2"])
    shot(page, "dataset-table")


def test_text_labels_are_shown_by_name(page, tmp_path):
    """A CSV of text labels: the dataset's histogram and the model's classes, its predictions
    and its confusion matrix show the names."""
    rows = [(i % 5 - 2.0, (i * 7) % 5 - 2.0) for i in range(40)]
    names = ["<b>spam</b>" if a > b else "ham" for a, b in rows]  # markup shown as text
    table = tmp_path / "mail.csv"
    lines = [f"{n},{a},{b}\n" for n, (a, b) in zip(names, rows, strict=True)]
    table.write_text("label,a,b\n" + "".join(lines))
    open_ui(page)
    page.set_input_files("#upload-file", str(table))
    page.click("#upload-submit")
    page.wait_for_url(re.compile(r"#/datasets/ds_"))
    page.wait_for_selector("main[data-view=datasets-page][data-ready=true]")
    histogram = page.locator("[aria-label='Label histogram'] [role=listitem]")
    expect(histogram).to_have_text(["<b>spam</b>", "ham"])
    dataset_id = page.url.rsplit("/", 1)[-1]
    with Client(page.service.url) as client:
        model = client.jobs.create(dataset_id, C=1.0, tol=1e-4).wait(check=True).model_id
        report = client.models.evaluate(model, dataset_id)
    open_ui(page, f"#/models/{model}")
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    expect(page.locator("dl.facts").first).to_contain_text("Classes<b>spam</b>, ham")
    page.select_option("#evaluate-dataset", dataset_id)
    page.click("#evaluate-submit")
    expect(page.locator("#evaluate-output table thead")).to_contain_text("<b>spam</b>")
    assert report["labels"] == ["<b>spam</b>", "ham"]
    # CSV rows by feature name; the label column (text here) is left out
    page.fill("#predict-input", "label,a,b\nx,2,-1\ny,-1,2")
    page.click("#predict-submit")
    cells = page.locator("#predict-output tbody tr td:nth-child(2)")
    expect(cells).to_have_count(2)
    with Client(page.service.url) as client:
        expected = client.models.predict(model, [[2.0, -1.0], [-1.0, 2.0]]).labels.tolist()
    assert cells.all_inner_texts() == expected
    assert page.locator("main b").count() == 0
    shot(page, "text-labels")
