"""`GET /v1/datasets/{id}/stats`: the label and row histograms of any dataset an upload accepts,
labels at the ends of the float range included."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.conftest import upload

pytestmark = pytest.mark.timeout(60)
MAX = float(np.finfo(np.float64).max)


def stats_of(client, content: bytes) -> dict:
    created = upload(client, content, "labels.txt")
    assert created.status_code == 201, created.text
    response = client.get(f"/v1/datasets/{created.json()['id']}/stats")
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    "labels",
    [[-1e308, 1e308, 0.5], [-MAX, MAX, 0.25]],
    ids=["wide", "whole_range"],
)
def test_labels_whose_span_overflows_a_float_get_a_histogram(client, labels):
    # The span of -1e308 and 1e308 is inf: the edges were nan and the route a 500.
    lines = "".join(f"{label!r} {i + 1}:1\n" for i, label in enumerate(labels))
    target = stats_of(client, lines.encode())["target"]
    edges, counts = np.array(target["edges"]), np.array(target["counts"])
    assert np.all(np.isfinite(edges)) and np.all(np.diff(edges) > 0)
    assert (edges[0], edges[-1]) == (min(labels), max(labels)) and len(edges) == 21
    assert np.array_equal(counts, np.histogram(labels, bins=edges)[0]) and counts.sum() == 3


def test_ordinary_labels_keep_their_histogram(client):
    labels = [-3.0, 0.25, 7.0, 7.0, 1.5]
    lines = "".join(f"{label!r} 1:1\n" for label in labels)
    target = stats_of(client, lines.encode())["target"]
    assert target["edges"] == np.linspace(-3.0, 7.0, 21).tolist()
    assert target["counts"] == np.histogram(labels, bins=np.linspace(-3.0, 7.0, 21))[0].tolist()


def test_a_dataset_deleted_while_its_stats_are_read_is_404(client, monkeypatch):
    """A DELETE that lands after the stats route read the dataset's row removes its arrays
    before the route opens them: the route answered 500 (FileNotFoundError), as evaluate and a
    prediction run answer 404. The race is made certain by deleting the arrays where the route
    looks them up."""
    import shutil

    from app.api import summaries

    created = upload(client, b"1 1:1\n-1 2:1\n", "gone.txt").json()
    found = summaries.dataset_arrays

    def removed_meanwhile(settings, dataset, **tries):
        directory = found(settings, dataset, **tries)
        shutil.rmtree(directory)  # as the concurrent DELETE does
        return directory

    monkeypatch.setattr(summaries, "dataset_arrays", removed_meanwhile)
    response = client.get(f"/v1/datasets/{created['id']}/stats")
    assert response.status_code == 404, response.text
    assert "deleted while it was being read" in response.json()["detail"]
