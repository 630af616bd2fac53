"""The dashboard in a real browser: Playwright driving Debian's Chromium (/usr/bin/chromium,
never a downloaded browser). Upload through the page (a table with its parse options too),
train (a search, probabilities), watch the plot gain points while the job runs, cancel one,
open the model card, export (ONNX, skops), predict with probabilities, evaluate, and start,
download and cancel background predictions, register a model under a name and alias; keys
asked once; keyboard use and labelled fields; /docs and /redoc offline. Screenshots go to
test-artifacts/ui/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from margin_client import Client, MarginError
from tests.client.conftest import HEART, artifact_dir

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = artifact_dir("ui")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    with sync_playwright() as playwright:
        # Playwright gives the browser a new, empty profile directory of its own
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, service):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    elsewhere = []

    def only_the_service(route):
        if route.request.url.startswith(service.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_service)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.service = service
    yield page
    context.close()
    assert not elsewhere, f"the page reached outside the service: {elsewhere}"
    assert not errors, errors


def open_ui(page, fragment: str = "#/datasets"):
    page.goto(f"{page.service.url}/ui/{fragment}")
    page.wait_for_selector("main[data-ready=true]")


def shot(page, name: str):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def points(page, figure: str) -> int:
    return int(page.get_attribute(f"figure#{figure}", "data-points"))


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
    page.wait_for_function("Number(document.querySelector('#plot-iteration').dataset.points) > 3")
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


def test_the_plot_grows_while_a_job_runs_and_cancel_stops_it(page, slow_dataset):
    open_ui(page, f"#/datasets/{slow_dataset}")
    page.select_option("#param-loss", "hinge")
    for name, value in {"C": "1000", "tol": "1e-12", "max_iter": "10000000",
                        "time_limit": "60"}.items():
        page.fill(f"#param-{name}", value)
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=running]")
    page.wait_for_function("Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    first = points(page, "plot-iteration")
    page.wait_for_function(
        f"Number(document.querySelector('#plot-iteration').dataset.points) > {first + 5}"
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
    page.wait_for_function("Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    # before: the 503 ended the stream for good and the page showed the error
    assert refused and page.locator("main .error[role=alert]").count() == 0


def test_keyboard_use_and_labelled_fields(page, heart_dataset, heart_model):
    unlabelled = """() => [...document.querySelectorAll('input, select, textarea')]
        .filter(e => e.type !== 'hidden' && !e.closest('dialog')
                && !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
        .map(e => e.id || e.name)"""
    for fragment in ("#/datasets", f"#/datasets/{heart_dataset}", f"#/models/{heart_model}"):
        open_ui(page, fragment)
        assert page.evaluate(unlabelled) == [], fragment
    # the predict box, by keyboard only
    page.focus("#predict-input")
    page.keyboard.type(HEART.read_text().splitlines()[0])
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "predict-submit"
    page.keyboard.press("Enter")
    expect(page.locator("#predict-output tbody tr")).to_have_count(1)
    # the sections are reached from the navigation by keyboard
    page.goto("about:blank")
    open_ui(page)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("main[data-view=jobs-list][data-ready=true]")


def test_the_key_is_asked_once(browser, keyed_service):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{keyed_service.url}/ui/#/datasets")
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    page.fill("#api-key", "mgn_wrong")
    page.keyboard.press("Enter")
    expect(page.locator("#key-reason")).to_contain_text("refused")
    page.fill("#api-key", keyed_service.key)
    page.keyboard.press("Enter")
    page.wait_for_selector("main[data-view=datasets-list][data-ready=true]")
    expect(dialog).to_be_hidden()
    for section in ("jobs", "models", "datasets"):
        page.click(f"nav a[data-section={section}]")
        page.wait_for_selector(f"main[data-view={section}-list][data-ready=true]")
        expect(dialog).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('margin.apiKey')") == keyed_service.key
    shot(page, "keyed-datasets")
    context.close()


def test_api_docs_render_offline(page):
    page.goto(f"{page.service.url}/docs")
    page.wait_for_selector(".opblock")
    assert page.locator(".opblock").count() >= 20
    expect(page.locator("button.authorize")).to_be_visible()
    expect(page.locator("#operations-datasets-upload_dataset")).to_be_visible()
    shot(page, "docs")
    page.goto(f"{page.service.url}/redoc")
    page.wait_for_selector("h1:has-text('Margin')")
    expect(page.locator("a[href$='operation/upload_dataset']").first).to_be_attached()
    shot(page, "redoc")


def test_a_search_models_card_shows_the_table_the_chosen_C_and_probabilities(page, heart_dataset):
    Cs = [0.01, 0.1, 1.0]
    with Client(page.service.url) as client:
        job = client.jobs.create(heart_dataset, tol=1e-3, search={"Cs": Cs, "cv": 3})
        model_id = job.wait(check=True).model_id
        model = client.models.get(model_id)
    open_ui(page, f"#/models/{model_id}")
    section = page.locator("section[aria-labelledby=cv-title]")
    expect(section.locator("table:not(.u-legend) > tbody > tr")).to_have_count(len(Cs))
    assert model["selection"]["C"] in Cs
    assert float(section.locator("#cv-chosen-C").inner_text()) == pytest.approx(
        model["selection"]["C"], rel=1e-5)
    expect(page.locator("dl.facts").first).to_contain_text("calibrated (sigmoid)")
    lines = HEART.read_text().splitlines()[:3]
    page.fill("#predict-input", "\n".join(lines))
    page.click("#predict-submit")
    rows = page.locator("#predict-output tbody tr")
    expect(rows).to_have_count(3)
    shown = [float(x) for x in rows.nth(0).locator("td").nth(3).inner_text().split(", ")]
    assert len(shown) == 2 and abs(sum(shown) - 1.0) < 1e-2
    shot(page, "model-search")


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


def test_a_search_job_from_the_form_shows_its_progress_and_table(page, heart_dataset):
    open_ui(page, f"#/datasets/{heart_dataset}")
    expect(page.locator("#search-details")).to_be_hidden()
    page.check("#search-enabled")
    expect(page.locator("#param-C")).to_be_disabled()
    page.select_option("#search-cs-kind", "list")
    page.fill("#search-cs", "0.01, 0.1, 1")
    page.fill("#search-cv", "3")
    page.select_option("#search-scoring", "balanced_accuracy")
    page.select_option("#param-calibration", "none")
    page.fill("#param-tol", "0.001")
    shot(page, "train-search")
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=succeeded]")
    expect(page.locator("#cv-chosen-C")).to_be_visible()
    job_id = page.url.rsplit("/", 1)[-1]
    with Client(page.service.url) as client:
        raw = client.get_json(f"/v1/jobs/{job_id}")
        model = client.models.get(raw["model_id"])
    asked = {"Cs": [0.01, 0.1, 1], "cv": 3, "scoring": "balanced_accuracy"}
    assert raw["params"]["search"] == asked
    assert raw["params"]["calibration"] == "none" and model["calibration"] is None
    chosen = model["selection"]["C"]
    assert model["params"]["C"] == chosen  # the trained parameters carry the chosen C
    assert float(page.locator("#cv-chosen-C").inner_text()) == pytest.approx(chosen, rel=1e-5)
    section = page.locator("#cv-section")
    expect(section.locator("table:not(.u-legend) > tbody > tr")).to_have_count(3)
    expect(section.locator("tbody strong")).to_have_count(1)
    progress = raw["progress"]
    expect(page.locator("#job-solves")).to_have_text(
        f"{progress['solves_done']} of {progress['solves_total']}")
    expect(page.locator("#job-stage")).to_contain_text("refit" if progress["stage"] == "refit"
                                                      else "path")
    shot(page, "job-search")


def _fold_lines(records: list[dict]) -> dict[str, list[int]]:
    """The iterations each line of the search plot holds after `records`: per fold the reports
    of its latest solve (a new C, or iterations that start again, start the line again; a
    solve's end repeats its last iteration, which adds no point), and the refit's."""
    lines: dict[str, tuple[object, list[int]]] = {}
    for r in records:
        label = "refit" if r["stage"] == "refit" else f"fold {r['fold'] + 1}"
        solve = "refit" if r["stage"] == "refit" else r["c_index"]
        held = lines.get(label)
        if held is None or held[0] != solve or r["iteration"] < held[1][-1]:
            held = lines[label] = (solve, [])
        if not held[1] or r["iteration"] != held[1][-1]:
            held[1].append(r["iteration"])
    return {label: its for label, (_, its) in lines.items()}


def test_a_search_jobs_page_shows_its_path_and_each_folds_current_solve(page, heart_dataset):
    with Client(page.service.url) as client:
        job = client.jobs.create(heart_dataset, tol=1e-4, calibration="none",
                                 search={"Cs": [0.01, 0.1, 1.0], "cv": 3}).wait(check=True)
        records = list(client.jobs.get(job.id).events())  # what the page's stream replays
        chosen = client.models.get(job.model_id)["selection"]["C"]
    lines = _fold_lines(records)
    assert sorted(lines) == ["fold 1", "fold 2", "fold 3", "refit"]
    open_ui(page, f"#/jobs/{job.id}")
    page.wait_for_selector("main[data-status=succeeded]")
    expected = sum(len(its) for its in lines.values())
    # before: the gap of every solve on one line, against an iteration count that starts again
    # at each of the path's ten solves
    page.wait_for_function(
        f"document.querySelector('#plot-search').dataset.points === '{expected}'")
    assert expected < len(records)  # the earlier solves of each fold are no longer drawn
    assert page.get_attribute("#plot-search", "data-lines") == "4"
    assert page.locator("#plot-iteration").count() == 0
    legend = page.locator("#plot-search .u-legend")
    for fold in (1, 2, 3):
        expect(legend).to_contain_text(f"fold {fold} · C 1")  # each fold's last solve: C = 1
    expect(legend).to_contain_text("refit · C ")
    # the path: every solve finished at its last record, the refit's end, and the job succeeded
    expect(page.locator("#job-solves")).to_have_text("10 of 10")
    expect(page.locator("#job-path-percent")).to_have_text("100 %")
    assert page.get_attribute("#job-path", "value") == "100"
    expect(page.locator("#job-stage")).to_have_text("refit at the chosen C")
    assert float(page.locator("#job-C").inner_text()) == pytest.approx(chosen, rel=1e-3)
    expect(page.locator("#job-gap")).to_have_text(re.compile(r"\d"))
    shot(page, "job-search-path")


def test_a_search_over_a_log_grid_from_the_form(page, heart_dataset):
    open_ui(page, f"#/datasets/{heart_dataset}")
    page.select_option("#train-estimator", "LinearSVR")
    expect(page.locator("#search-fields")).to_be_hidden()  # a search is for LinearSVC only
    page.select_option("#train-estimator", "LinearSVC")
    page.check("#search-enabled")
    page.fill("#search-num", "4")
    page.fill("#search-min", "0.01")
    page.fill("#search-max", "10")
    page.fill("#search-cv", "2")
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=succeeded]")
    expect(page.locator("#cv-section table:not(.u-legend) > tbody > tr")).to_have_count(4)
    with Client(page.service.url) as client:
        job = client.get_json(f"/v1/jobs/{page.url.rsplit('/', 1)[-1]}")
        selection = client.models.get(job["model_id"])["selection"]
    assert job["params"]["search"] == {"Cs": {"num": 4, "min": 0.01, "max": 10}, "cv": 2,
                                       "scoring": "accuracy"}
    assert [r["C"] for r in selection["table"]] == pytest.approx([0.01, 0.1, 1, 10])
    shown = page.locator("#cv-section table:not(.u-legend) > tbody > tr td:first-child")
    assert [float(c) for c in shown.all_inner_texts()] == pytest.approx([0.01, 0.1, 1, 10])


def test_probability_from_the_form_and_predict_with_or_without_probabilities(page, heart_dataset):
    open_ui(page, f"#/datasets/{heart_dataset}")
    page.check("#param-probability")
    page.fill("#param-C", "0.25")
    page.click("#train-submit")
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    page.wait_for_selector("main[data-status=succeeded]")
    page.click("#job-model")
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    model_id = page.url.rsplit("/", 1)[-1]
    lines = HEART.read_text().splitlines()[:5]
    with Client(page.service.url) as client:
        assert client.models.get(model_id)["params"]["probability"] is True
        expected = client.models.predict(model_id, lines, probabilities=True).probabilities
    expect(page.locator("#predict-probabilities")).to_be_checked()
    page.fill("#predict-input", "\n".join(lines))
    page.click("#predict-submit")
    rows = page.locator("#predict-output tbody tr")
    expect(rows).to_have_count(5)
    expect(page.locator("#predict-output thead")).to_contain_text("Probabilities")
    for i in range(5):
        shown = [float(x) for x in rows.nth(i).locator("td").nth(3).inner_text().split(", ")]
        assert sum(shown) == pytest.approx(1.0, abs=1e-3)
        assert shown == pytest.approx(list(expected[i]), abs=1e-3)
    page.uncheck("#predict-probabilities")
    page.click("#predict-submit")
    expect(page.locator("#predict-output thead")).not_to_contain_text("Probabilities")
    expect(page.locator("#predict-output thead th")).to_have_count(3)


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
    registry = page.locator("section[aria-labelledby=registry-title]")
    expect(registry).to_contain_text("heart-svm")
    registry.get_by_role("link", name="heart-svm@production").click()
    page.wait_for_url(re.compile(r"#/models/heart-svm%40production$"))
    expect(page.locator("#model-status")).to_have_text("converged")
    expect(page.locator("h1")).to_have_text("Model heart-svm@production")


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
