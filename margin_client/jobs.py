"""``client.jobs``: create training jobs and follow them (`Job`: refresh, events, wait, cancel)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypedDict

import httpx

from margin_client._http import MarginError, answer_json, resource_id, segment
from margin_client.datasets import dataset_id

if TYPE_CHECKING:
    from margin_client._http import Client

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
RECONNECTS = 5  # streams closed without an `end` in a row before the job itself is asked
# How long a follower keeps reconnecting to an API it cannot reach (a restart of `margin serve`
# takes seconds to tens of seconds) before it gives up: the job runs on in its worker meanwhile.
RECONNECT_S = 60.0


def retry_after(response: httpx.Response) -> float:
    """Seconds a 503 or 429 asks the client to wait (its Retry-After), between 1 and 30."""
    try:
        return min(30.0, max(1.0, float(response.headers.get("Retry-After", 5))))
    except ValueError:
        return 5.0


class JobInfo(TypedDict, total=False):
    """A job as the service describes it (more keys may appear)."""

    id: str
    dataset_id: str | None
    estimator: str
    params: dict[str, Any]
    status: str
    progress: dict[str, Any] | None
    percent: float | None
    eta_s: float | None
    elapsed_s: float | None
    tol: float | None
    converged: bool | None
    stop_reason: str | None
    model_id: str | None
    error: str | None


class JobFailed(Exception):
    """`Job.wait(check=True)` on a job that failed or was cancelled."""

    def __init__(self, job: Job):
        self.job = job
        reason = job.info.get("error") or job.status
        super().__init__(f"job {job.id} {job.status}: {reason}")


class Job:
    """A training job on the service. ``info`` holds its latest representation."""

    def __init__(self, client: Client, info: dict[str, Any]):
        self._client = client
        self.info: dict[str, Any] = info

    @property
    def id(self) -> str:
        return self.info["id"]

    @property
    def status(self) -> str:
        return self.info["status"]

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def model_id(self) -> str | None:
        return self.info.get("model_id")

    def refresh(self) -> Job:
        """Fetch the job's current state."""
        self.info = self._client.get_json(f"/v1/jobs/{self.id}")
        return self

    def progress(self) -> list[dict[str, Any]]:
        """Every progress record written so far (oldest first)."""
        return list(self._client.paginate(f"/v1/jobs/{self.id}/progress"))

    def events(self) -> Iterator[dict[str, Any]]:
        """The job's progress records as they are written (from the start), until it ends;
        ``info`` then holds the final job. Reconnects after a dropped stream where it left off,
        for up to RECONNECT_S while the API cannot be reached; a stream that keeps closing
        without an `end` has the job itself asked now and then."""
        from httpx_sse import connect_sse

        last_id: str | None = None
        failures = 0
        unreachable_since: float | None = None
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            answered = False
            try:
                with connect_sse(
                    self._client.http, "GET", f"/v1/jobs/{self.id}/events", headers=headers
                ) as source:
                    unreachable_since, answered = None, True
                    if source.response.status_code in (429, 503):  # streams at a cap: wait
                        time.sleep(retry_after(source.response))
                        continue
                    if source.response.status_code >= 400:
                        source.response.read()
                        raise MarginError.from_response(source.response)
                    for event in source.iter_sse():
                        if event.event == "progress":
                            last_id = event.id or last_id
                            failures = 0
                            yield json.loads(event.data)
                        elif event.event == "end":
                            data = json.loads(event.data)
                            if data is not None:
                                self.info = data
                            return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                # 6 tries (about 7 s) gave up on an API restarting while the job ran on
                unreachable_since = _outage_began(unreachable_since)
                if time.monotonic() - unreachable_since >= RECONNECT_S:
                    raise
                if not answered:
                    failures += 1
                    time.sleep(min(2.0, 0.2 * 2**failures))
                    continue
            # the stream closed or was cut without an `end` event: ask again, paced; now and
            # then ask the job (returning here made wait() end on a job still queued or
            # running; a stream cut after its answer, each time, had it never asked)
            failures += 1
            if failures > RECONNECTS:
                failures = 0
                # the API may go down just then, as during a stream: ridden out alike
                unreachable_since = self._ask(unreachable_since)
                if unreachable_since is None and self.done:
                    return
            time.sleep(min(2.0, 0.2 * 2**failures))

    def _ask(self, unreachable_since: float | None) -> float | None:
        """Refresh the job: None once the API answers, else when it became unreachable
        (`unreachable_since`, or now); the error is raised once that is RECONNECT_S ago."""
        try:
            self.refresh()
        except httpx.TransportError:
            unreachable_since = _outage_began(unreachable_since)
            if time.monotonic() - unreachable_since >= RECONNECT_S:
                raise
            return unreachable_since
        return None

    def wait(self, progress: bool = False, check: bool = False) -> Job:
        """Block until the job ends; with `progress`, draw a progress bar (gap on a log scale,
        iteration, elapsed, ETA; for a search, the solves done of its path, the fold and C, and
        the current solve's gap). Ctrl-C then asks whether to cancel the job. With `check`,
        raise `JobFailed` unless it succeeded."""
        if progress:
            from margin_client.progress import follow

            follow(self)
        else:
            for _ in self.events():
                pass
        tries = 0
        unreachable_since = None if self.done else self._ask(None)
        while unreachable_since is not None:  # an outage just as the stream ended: ridden out
            tries += 1
            time.sleep(min(2.0, 0.2 * 2**tries))
            unreachable_since = self._ask(unreachable_since)
        if check and self.status != "succeeded":
            raise JobFailed(self)
        return self

    def cancel(self) -> Job:
        """Cancel: a queued job at once, a running one within one outer iteration."""
        self.info = answer_json(self._client.request("POST", f"/v1/jobs/{self.id}/cancel"))
        return self

    def __repr__(self) -> str:
        return f"Job({self.id!r}, status={self.status!r})"


def _outage_began(since: float | None) -> float:
    """When the API became unreachable: ``since``, or now if it just did."""
    return time.monotonic() if since is None else since


class Jobs:
    def __init__(self, client: Client):
        self._client = client

    def create(
        self,
        dataset: str | dict[str, Any],
        estimator: str = "LinearSVC",
        params: dict[str, Any] | None = None,
        *,
        validation_dataset: str | dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        **more_params: Any,
    ) -> Job:
        """Queue a job: `estimator` (LinearSVC, LinearSVR, structural; see ``GET /v1/solvers``)
        on a stored dataset with its constructor parameters, as `params` or keywords."""
        body: dict[str, Any] = {
            "dataset_id": dataset_id(dataset),
            "estimator": estimator,
            "params": {**(params or {}), **more_params},
        }
        if validation_dataset is not None:
            body["validation_dataset_id"] = dataset_id(validation_dataset)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Job(self._client, self._client.post_json("/v1/jobs", body, headers=headers))

    def get(self, job_id: str) -> Job:
        path = f"/v1/jobs/{segment(resource_id('job', job_id))}"
        return Job(self._client, self._client.get_json(path))

    def list(
        self,
        status: str | list[str] | None = None,
        dataset: str | dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[JobInfo]:
        """Jobs, newest first; filter by status (one or several) and dataset."""
        params = {"status": status, "dataset_id": dataset_id(dataset) if dataset else None}
        return list(self._client.paginate("/v1/jobs", params, limit))
