"""The client's event stream waits and retries where the service answers 503 (an API process
at MAX_EVENT_STREAMS), instead of failing `Job.wait()` while the job runs on."""

from __future__ import annotations

import json

import httpx

from margin_client import Client
from margin_client import jobs as jobs_module
from margin_client.jobs import Job

STREAM = (
    'event: progress\nid: 7\ndata: {"iteration": 1, "gap": 0.5}\n\n'
    'event: end\ndata: {"id": "job_1", "status": "succeeded"}\n\n'
)


def test_a_503_on_events_is_waited_out(monkeypatch):
    calls, slept = [], []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("Last-Event-ID"))
        if len(calls) < 3:
            return httpx.Response(503, headers={"Retry-After": "2"},
                                  json={"title": "Too many event streams"})  # fmt: skip
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=STREAM)

    monkeypatch.setattr(jobs_module.time, "sleep", slept.append)
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    job = Job(client, {"id": "job_1", "status": "running"})
    records = list(job.events())
    # before: the first 503 raised MarginError
    assert records == [json.loads(STREAM.split("data: ")[1].split("\n")[0])]
    assert job.status == "succeeded" and slept == [2.0, 2.0] and len(calls) == 3
