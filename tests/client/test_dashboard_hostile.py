"""The dashboard against what a hostile tenant stores or links to, in a real browser: markup in
the texts a tenant chooses (registry descriptions, feature names, an error message quoting an
upload's option; dataset names and text labels: test_dashboard_datasets) shown literally with
nothing run; a fragment that would send the
page's requests (and its Delete button) to another route; the headers of the browser's pages (a
Content-Security-Policy that runs no inline script, no framing, no sniffing, no Referer); a
dataset of the store's most classes, shown without a table of a million cells, and the class list
and the confusion matrix just at and just over their bounds; and the longest
name and a long label, each one word, wrapped within the window."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from margin_client import Client
from tests.client.dashboard import open_ui

RAN = "document.title='ran'"
HOSTILE = f'<img src=x onerror="{RAN}"><script>{RAN}</script>'


# the elements that reach past the window's right edge, for a failure's message
PAST_THE_WINDOW = """() => [...document.querySelectorAll('main *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth).slice(0, 8)
    .map((e) => `${e.tagName}#${e.id}.${e.className} ${e.getBoundingClientRect().width}`)"""


def nothing_ran(page):
    assert page.title() != "ran"
    assert page.locator("main img, main script, main b, main i").count() == 0


def test_browser_pages_send_protective_headers(service):
    for path in ("/ui/", "/ui/static/js/app.js", "/docs", "/redoc", "/docs/oauth2-redirect"):
        headers = httpx.get(f"{service.url}{path}").headers
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["referrer-policy"] == "no-referrer", path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
    policy = httpx.get(f"{service.url}/ui/").headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe" not in policy
    # the API's answers are left as they were
    assert "content-security-policy" not in httpx.get(f"{service.url}/v1/solvers").headers


def test_the_dashboard_runs_under_its_policy(page, heart_dataset, heart_model):
    """Every view works with the policy in force (no refused script, style or request), and an
    inline script put into the page is refused."""
    said = []
    page.on("console", lambda message: said.append(message.text))
    open_ui(page, f"#/datasets/{heart_dataset}")
    # the histogram's bars are sized through the CSSOM, which the policy allows
    widths = page.locator("[aria-label='Label histogram'] .bar").evaluate_all(
        "bars => bars.map(b => b.getBoundingClientRect().width)")
    assert len(widths) == 2 and max(widths) > 100 and min(widths) > 1
    open_ui(page, f"#/models/{heart_model}")
    page.wait_for_selector("#lineage")
    job = httpx.get(f"{page.service.url}/v1/models/{heart_model}").json()["job_id"]
    open_ui(page, f"#/jobs/{job}")  # uPlot's plots
    page.wait_for_selector("main[data-view=jobs-page] #plot-iteration")
    page.wait_for_function(
        "() => Number(document.querySelector('#plot-iteration').dataset.points) > 3")
    open_ui(page, "#/jobs")
    page.evaluate("""() => { const s = document.createElement('script');
                             s.textContent = "document.title='ran'"; document.body.append(s); }""")
    assert page.title() != "ran"
    refused = [text for text in said if "Content Security Policy" in text]
    assert len(refused) == 1 and "inline script" in refused[0], refused


def test_a_fragment_cannot_send_the_page_to_another_route(page, heart_model):
    """#/jobs/..%2Fmodels%2FID%3F made the job page read GET /v1/models/ID (fetch resolves the
    dot segment, and the ? cut the rest off): a link that showed a model as a job, whose
    'Delete job' button sent DELETE /v1/models/ID."""
    asked = []
    page.on("request", lambda r: asked.append(httpx.URL(r.url).path))
    open_ui(page, f"#/jobs/..%2Fmodels%2F{heart_model}%3F")
    expect(page.locator("main .error")).to_contain_text("404")
    assert page.locator("#job-delete").count() == 0
    assert not [p for p in asked if p.startswith("/v1/models")], asked
    open_ui(page, "#/models/%2E%2E")
    expect(page.locator("main .error")).to_have_text("'..' is not an id")
    assert not [p for p in asked if p.startswith("/v1/") and p.rstrip("/") in ("/v1", "/v1/models")]
    # a section named by an Object property is no view (was: "view.list is not a function")
    open_ui(page, "#/constructor")
    expect(page.locator("main h1")).to_have_text("Datasets")


def test_registry_text_is_shown_literally(page, heart_dataset):
    """A registered name's description holding markup (the name itself is letters, digits,
    '.', '_' and '-'), on the models list and the model's page; its alias's link opens the
    model. A model of its own: the session's shared one is shown registered by other tests."""
    name = "team.hostile-1"
    with Client(page.service.url) as client:
        model = client.jobs.create(heart_dataset, C=0.25, tol=1e-3).wait(check=True).model_id
        client.registry.create(name, description=f"desc {HOSTILE}")
        client.registry.add_version(name, model)
        client.registry.set_alias(name, "prod", 1)
    open_ui(page, "#/models")
    registry = page.locator("section[aria-labelledby=registry-title] table")
    expect(registry).to_contain_text(f"desc {HOSTILE}")
    nothing_ran(page)
    registry.get_by_role("link", name=f"{name}@prod").click()
    page.wait_for_selector("main[data-view=models-page][data-ready=true]")
    expect(page.locator("main h1")).to_have_text(f"Model {name}@prod")
    expect(page.locator("#lineage-registered")).to_contain_text(f"{name}@v1 (prod)")
    nothing_ran(page)


def test_feature_names_and_quoted_options_are_shown_literally(page, tmp_path):
    """Feature names from a CSV header on the dataset's and the model's pages, and an upload's
    error quoting the label column it was sent, shown as text."""
    names = [f"<i>a</i>{HOSTILE}", "<b>b</b>"]
    rows = [(i % 5 - 2.0, (i * 7) % 5 - 2.0) for i in range(40)]
    table = tmp_path / "named.csv"
    header = ",".join('"' + n.replace('"', '""') + '"' for n in names)
    table.write_text(f"label,{header}\n" + "".join(f"{int(a > b)},{a},{b}\n" for a, b in rows))
    with Client(page.service.url) as client:
        dataset = client.datasets.upload(table, name="named")["id"]
        model = client.jobs.create(dataset, C=1.0, tol=1e-4).wait(check=True).model_id
    open_ui(page, f"#/datasets/{dataset}")
    expect(page.locator("#dataset-columns")).to_have_text(", ".join(names))
    nothing_ran(page)
    open_ui(page, f"#/models/{model}")
    weights = page.locator("[aria-label='Largest weights by magnitude'] [role=listitem]")
    expect(weights).to_have_count(2)
    assert sorted(weights.all_inner_texts()) == sorted(names)
    nothing_ran(page)
    open_ui(page)
    page.set_input_files("#upload-file", str(table))
    page.select_option("#upload-format", "csv")
    page.fill("#upload-label-column", HOSTILE)
    page.click("#upload-submit")
    expect(page.locator("#upload-status .error")).to_contain_text(f"no column named {HOSTILE!r}")
    nothing_ran(page)


def test_a_thousand_classes_stay_bounded(page, tmp_path):
    """A text label column of the store's MAX_CLASSES (1000) names: the list's row names the
    first ten and the count, and the evaluation of a model of them shows no confusion matrix
    (a million cells, which hung the tab)."""
    classes = 1000
    table = tmp_path / "many.csv"
    lines = [f"<i>c{k}</i>,{k % 7 - 3},{k // 7 % 11 - 5}\n" for k in range(classes) for _ in (0, 1)]
    table.write_text("label,a,b\n" + "".join(lines))
    with Client(page.service.url) as client:
        dataset = client.datasets.upload(table, name="many classes")["id"]
        model = client.jobs.create(dataset, C=1.0, tol=0.1, max_iter=20).wait(check=True).model_id
    open_ui(page, "#/datasets")
    row = page.locator("main table tr", has=page.locator(f"a[href='#/datasets/{dataset}']"))
    summary = row.locator("td").nth(5).inner_text()
    assert summary.startswith("<i>c0</i>: 2, ") and summary.endswith(", … (1000 classes)")
    assert summary.count(": 2") == 10
    open_ui(page, f"#/models/{model}")
    page.select_option("#evaluate-dataset", dataset)
    page.click("#evaluate-submit")
    expect(page.locator("#evaluate-matrix-note")).to_contain_text("1000 classes")
    assert page.locator("#evaluate-output table").count() == 0
    expect(page.locator("#evaluate-accuracy")).to_have_text(re.compile(r"^[0-9.e-]+$"))
    nothing_ran(page)


def _classes_table(tmp_path, classes):
    table = tmp_path / f"classes{classes}.csv"
    lines = [f"c{k},{k % 7 - 3},{k // 7 % 11 - 5}\n" for k in range(classes) for _ in (0, 1)]
    table.write_text("label,a,b\n" + "".join(lines))
    return table


def test_the_class_list_and_the_confusion_matrix_at_their_bounds(page, tmp_path):
    """Just at and just over each bound of the dashboard: a dataset's row lists 10 classes in
    full and names the count from 11; the evaluation draws the confusion matrix of 50 classes and
    not of 51."""
    made = {}
    with Client(page.service.url) as client:
        for classes in (10, 11, 50, 51):
            dataset = client.datasets.upload(_classes_table(tmp_path, classes), name=f"k{classes}")
            made[classes] = dataset["id"]
        models = {k: client.jobs.create(made[k], C=1.0, tol=0.1, max_iter=20)
                  .wait(check=True).model_id for k in (50, 51)}  # fmt: skip
    open_ui(page, "#/datasets")
    for classes, dataset in made.items():
        row = page.locator("main table tr", has=page.locator(f"a[href='#/datasets/{dataset}']"))
        summary = row.locator("td").nth(5).inner_text()
        assert summary.count(": 2") == 10, summary
        assert summary.endswith(f", … ({classes} classes)") == (classes > 10), summary
    for classes, model in models.items():
        open_ui(page, f"#/models/{model}")
        page.select_option("#evaluate-dataset", made[classes])
        page.click("#evaluate-submit")
        expect(page.locator("#evaluate-accuracy")).to_have_text(re.compile(r"^[0-9.e-]+$"))
        drawn = page.locator("#evaluate-output table")
        if classes == 50:
            expect(drawn).to_have_count(1)
            assert drawn.locator("tbody tr").count() == 50
            assert page.locator("#evaluate-matrix-note").count() == 0
        else:
            expect(page.locator("#evaluate-matrix-note")).to_contain_text("51 classes")
            assert drawn.count() == 0


def test_long_words_wrap_within_the_window(page, tmp_path):
    """A 255-character dataset name and a 200-character class label, each one word: every view
    stays as wide as the window (before: the list was 4476 pixels wide in a 1280 window)."""
    label = "L" * 200
    table = tmp_path / "long.csv"
    rows = [f"{label if i % 2 else 'b'},{i % 4}\n" for i in range(20)]
    table.write_text("label,a\n" + "".join(rows))
    with Client(page.service.url) as client:
        dataset = client.datasets.upload(table, name="x" * 255)["id"]  # the longest name
        model = client.jobs.create(dataset, C=1.0, tol=1e-3).wait(check=True).model_id
    name = "x" * 255
    views = {"#/datasets": ("datasets-list", name), "#/models": ("models-list", name),
             f"#/datasets/{dataset}": ("datasets-page", label),
             f"#/models/{model}": ("models-page", label)}
    for fragment, (view, shown) in views.items():
        open_ui(page, fragment)
        page.wait_for_selector(f"main[data-view={view}][data-ready=true]")
        if view == "models-page":
            page.select_option("#evaluate-dataset", dataset)
            page.click("#evaluate-submit")
            expect(page.locator("#evaluate-output table thead")).to_contain_text(label)
        expect(page.locator("main")).to_contain_text(shown)
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], (fragment, width, page.evaluate(PAST_THE_WINDOW))
