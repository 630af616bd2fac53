"""The dashboard's model page for a model trained on a table (a CSV upload, its columns named),
in a real browser: the largest weights named by their columns, and the predict box taking CSV
rows under a header of the feature names, in any order, with the label column left out."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import expect

from margin_client import Client
from tests.client.conftest import HEART, heart_table
from tests.client.dashboard import open_ui, shot


@pytest.fixture(scope="module")
def table_model(service, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("table") / "heart.csv"
    heart_table(path)
    with Client(service.url) as client:
        dataset = client.datasets.upload(path, name="heart.csv")["id"]
        return client.jobs.create(dataset, C=0.5, tol=1e-3).wait(check=True).model_id


def test_the_weights_are_named_by_their_columns(page, table_model):
    # before: "feature 3", though the model knows its columns' names
    open_ui(page, f"#/models/{table_model}")
    labels = page.locator("[aria-label='Largest weights by magnitude'] [role=listitem]")
    expect(labels.first).to_be_visible()
    assert all(re.fullmatch(r"f\d+", text) for text in labels.all_inner_texts())
    with Client(page.service.url) as client:
        top = client.request("GET", f"/v1/models/{table_model}/coefficients").json()
    assert labels.all_inner_texts() == [item["name"] for item in top["items"]]


def test_the_predict_box_takes_csv_rows_by_feature_name(page, table_model):
    # before: LIBSVM lines only, so a table's rows had to be rewritten by hand
    lines = HEART.read_text().splitlines()[:3]
    rows = [dict(p.split(":") for p in line.split()[1:]) for line in lines]
    names = [f"f{j}" for j in range(13, 0, -1)]  # the columns in another order
    csv = ",".join(["label", *names]) + "\n" + "\n".join(
        ",".join([line.split()[0], *(row.get(name[1:], "0") for name in names)])
        for line, row in zip(lines, rows, strict=True)
    )  # fmt: skip
    with Client(page.service.url) as client:
        records = [{name: float(row.get(name[1:], 0)) for name in names} for row in rows]
        expected = client.request(
            "POST", f"/v1/models/{table_model}/predict", json={"records": records}
        ).json()  # fmt: skip
    open_ui(page, f"#/models/{table_model}")
    assert page.input_value("#predict-format") == "csv"
    page.fill("#predict-input", csv)
    page.click("#predict-submit")
    cells = page.locator("#predict-output tbody tr")
    expect(cells).to_have_count(3)
    shown = [float(row.split("\t")[2]) for row in cells.all_inner_texts()]
    np.testing.assert_allclose(shown, np.ravel(expected["decision_values"]), rtol=1e-3)
    shot(page, "predict-csv")
    page.fill("#predict-input", "f1,extra\n1,2\n")
    page.click("#predict-submit")
    expect(page.locator("#predict-output .error[role=alert]")).to_contain_text(
        "the model's feature 'f2' is not a column"
    )
