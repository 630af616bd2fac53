"""Model selection and probabilities in the dashboard, in a real browser: a search from the form
(a list of Cs or a log grid), its job page following the whole path, the model card's table and
chosen C, and probability=true from the form with predictions with or without probabilities."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from app.schemas.params import SearchSpec
from margin_client import Client, MarginError
from tests.client.conftest import HEART
from tests.client.dashboard import open_ui, shot


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
    # one name=value pair per parameter (before: one JSON object broken mid-word), and the C
    # the job was sent with says that the search chose another
    pairs = page.locator("#job-params code").all_inner_texts()
    assert [pair.split("=", 1)[0] for pair in pairs] == list(raw["params"])
    assert f"C={raw['params']['C']:g} (unused: the search chooses C)" in pairs
    assert "tol=0.001" in pairs and "calibration=none" in pairs
    assert float(page.locator("#cv-chosen-C").inner_text()) == pytest.approx(chosen, rel=1e-5)
    section = page.locator("#cv-section")
    expect(section.locator("table:not(.u-legend) > tbody > tr")).to_have_count(3)
    expect(section.locator("tbody strong")).to_have_count(1)
    expect(page.locator("#cv-iterations-note")).to_contain_text("previous C's solution")
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
        f"() => document.querySelector('#plot-search').dataset.points === '{expected}'")
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
    page.fill("#search-min", "0.01")
    page.fill("#search-max", "10")
    page.fill("#search-cv", "2")
    _num_has_the_api_s_fewest(page, heart_dataset)
    page.fill("#search-num", "4")
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


def _num_has_the_api_s_fewest(page, dataset_id):
    """The form's least number of C values is the API's: with both bounds, one under it is a 422
    and the browser refuses to send it (the form let 1 through, and the service answered 422);
    without bounds the library's grid takes 1, and so does the form."""
    fewest = int(page.get_attribute("#search-num", "min"))
    page.fill("#search-num", str(fewest - 1))
    page.click("#train-submit")
    assert page.eval_on_selector("#search-num", "input => input.validity.rangeUnderflow")
    assert "#/jobs/" not in page.url  # not sent
    grid = {"num": fewest - 1, "min": 0.01, "max": 10}
    with Client(page.service.url) as client, pytest.raises(MarginError) as refused:
        client.post_json("/v1/jobs", {"dataset_id": dataset_id, "params": {"search": {"Cs": grid}}})
    assert refused.value.status == 422 and "Cs.num must be at least" in str(refused.value)
    assert SearchSpec.model_validate({"Cs": {**grid, "num": fewest}})  # the least it takes
    page.fill("#search-max", "")
    assert page.get_attribute("#search-num", "min") == "1"
    assert SearchSpec.model_validate({"Cs": {"num": 1}})
    page.fill("#search-max", "10")
    assert page.get_attribute("#search-num", "min") == str(fewest)


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
    # the headers name the classes the columns follow (before: "Decision values", "Probabilities")
    expect(page.locator("#predict-output thead th")).to_have_text(
        ["Line", "Label", "Decision value (> 0: 1)", "Probabilities (-1, 1)"])
    for i in range(5):
        shown = [float(x) for x in rows.nth(i).locator("td").nth(3).inner_text().split(", ")]
        assert sum(shown) == pytest.approx(1.0, abs=1e-3)
        assert shown == pytest.approx(list(expected[i]), abs=1e-3)
    page.uncheck("#predict-probabilities")
    page.click("#predict-submit")
    expect(page.locator("#predict-output thead")).not_to_contain_text("Probabilities")
    expect(page.locator("#predict-output thead th")).to_have_count(3)


def test_the_score_axis_tells_close_scores_apart(page):
    # before: uPlot's labels keep three decimals, so the mean scores of a9a's search (0.8472 to
    # 0.8475) read "0.848, 0.847, 0.847, 0.847" on the axis
    open_ui(page)
    labels = page.evaluate("""async () => {
        const { scorePlot } = await import("/ui/static/js/plot.js");
        const el = document.createElement("figure");
        document.body.append(el);
        const plot = scorePlot(el, [0.01, 0.1, 1, 10], [0.8472, 0.8475, 0.8474, 0.8474]);
        await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 50)));
        return plot.axes[1]._values.filter((t) => t !== "");  // drawn on the canvas
    }""")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert all(0.8471 <= float(t) <= 0.8476 for t in labels), labels


def test_the_train_form_offers_a_validation_set_to_a_classifier_only(page, heart_dataset,
                                                                      tmp_path):
    """A validation set is scored by its accuracy, which only LinearSVC has: the service
    answers a LinearSVR or structural job that names one 422. The form offered the choice to
    every estimator and sent it, so a LinearSVR job with the set chosen (or kept from LinearSVC
    when the estimator changed) was always refused; it hides the choice as it hides the search."""
    with Client(page.service.url) as client:
        part = tmp_path / "part.txt"
        part.write_text("\n".join(HEART.read_text().splitlines()[:40]) + "\n")
        other = client.datasets.upload(part, name="part of heart")["id"]
    open_ui(page, f"#/datasets/{heart_dataset}")
    page.wait_for_selector("main[data-view=datasets-page][data-ready=true]")
    validation = page.locator("#train-validation")
    expect(validation).to_be_visible()
    page.select_option("#train-validation", other)
    page.select_option("#train-estimator", "LinearSVR")
    expect(page.locator("#search-fields")).to_be_hidden()
    assert validation.is_hidden() or validation.is_disabled()
    page.click("#train-submit")  # the choice kept from LinearSVC is not sent
    page.wait_for_url(re.compile(r"#/jobs/job_"))
    with Client(page.service.url) as client:
        job = client.get_json(f"/v1/jobs/{page.url.rsplit('/', 1)[-1]}")
    assert job["estimator"] == "LinearSVR" and job["validation_dataset_id"] is None
