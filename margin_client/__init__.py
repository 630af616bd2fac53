"""Python client of the Margin service: datasets, training jobs with live progress, models.

    from margin_client import Client

    client = Client("http://127.0.0.1:8000")          # or MARGIN_URL / MARGIN_API_KEY
    ds = client.datasets.upload("a9a.bz2")             # or (X, y) arrays
    job = client.jobs.create(ds["id"], C=1.0, loss="hinge")
    job.wait(progress=True)                            # a progress bar with the gap
    client.models.predict(job.model_id, X_test).labels

Needs only httpx, httpx-sse and rich beside numpy and scipy (`pip install 'margin[client]'`);
it never imports the service's stack (FastAPI, SQLAlchemy, pydantic).
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from margin_client._http import Client, MarginError
    from margin_client.estimator import RemoteLinearSVC
    from margin_client.jobs import Job, JobFailed
    from margin_client.models import Prediction

__all__ = ["Client", "Job", "JobFailed", "MarginError", "Prediction", "RemoteLinearSVC"]
_WHERE = {
    "Client": "_http",
    "MarginError": "_http",
    "RemoteLinearSVC": "estimator",
    "Job": "jobs",
    "JobFailed": "jobs",
    "Prediction": "models",
}


def __getattr__(name: str):
    # loaded on first use, so that `margin_client.cli` imports where httpx is not installed
    if name in _WHERE:
        return getattr(import_module(f"margin_client.{_WHERE[name]}"), name)
    if name == "__version__":
        from importlib.metadata import version

        return version("margin")
    raise AttributeError(name)
