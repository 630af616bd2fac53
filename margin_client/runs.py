"""``client.runs``: background prediction runs of a model over a stored dataset (start, list,
show, cancel, download the CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from margin_client._http import answer_json, resource_id, segment
from margin_client.datasets import dataset_id
from margin_client.models import model_id

if TYPE_CHECKING:
    from margin_client._http import Client


class PredictionRuns:
    def __init__(self, client: Client):
        self._client = client

    def _path(self, model: str | dict[str, Any], run: str | None = None) -> str:
        path = f"/v1/models/{segment(model_id(model))}/predictions"
        return path if run is None else f"{path}/{segment(resource_id('prediction run', run))}"

    def start(
        self, model: str | dict[str, Any], dataset: str | dict[str, Any],
        probabilities: bool = False,
    ) -> dict[str, Any]:
        """Queue a run predicting every row of a stored dataset; its status document.
        `probabilities`: its CSV adds a calibrated model's class probabilities (a
        ``probability_<class>`` column per class); MarginError 422 for a model without."""
        body: dict[str, Any] = {"dataset_id": dataset_id(dataset)}
        if probabilities:  # only when asked: a server without the field refuses it (strict bodies)
            body["probabilities"] = True
        return self._client.post_json(self._path(model), body)

    def list(self, model: str | dict[str, Any], limit: int | None = None) -> list[dict[str, Any]]:
        """The model's runs, newest first (every status, cancelled ones too)."""
        return list(self._client.paginate(self._path(model), None, limit))

    def get(self, model: str | dict[str, Any], run: str) -> dict[str, Any]:
        """The run's status document."""
        return self._client.get_json(self._path(model, run), params={"format": "json"})

    def cancel(self, model: str | dict[str, Any], run: str) -> dict[str, Any]:
        """Cancel a queued or running run (a running one stops between two chunks); a run
        that has already ended raises MarginError 409."""
        return answer_json(self._client.request("POST", f"{self._path(model, run)}/cancel"))

    def download(self, model: str | dict[str, Any], run: str, path: str | Path) -> Path:
        """Write a succeeded run's CSV to `path` (MarginError 409 for a failed or cancelled
        run; a run still active answers 202, raised as a RuntimeError)."""
        response = self._client.download(self._path(model, run), path, params={"format": "csv"})
        if response.status_code == 202:
            raise RuntimeError(f"prediction run {run} is still {answer_json(response)['status']}")
        return Path(path)
