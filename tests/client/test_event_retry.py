"""The client's event stream waits and retries where the service answers 503 (an API process
at MAX_EVENT_STREAMS), instead of failing `Job.wait()` while the job runs on."""

from __future__ import annotations

import json

import httpx
import pytest

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


def test_wait_blocks_until_the_end_through_streams_closed_without_one(monkeypatch):
    """A stream that closes without an `end` event (an API process restarted, a proxy that
    recycles connections) while a job waits in the queue: after 6 such closes `wait()`
    returned the job still queued, and `wait(check=True)` raised JobFailed for it ("job job_1
    queued: queued"); `margin jobs follow` exited 1 on a job that went on to succeed."""
    opened, slept = [], []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            opened.append(1)
            if len(opened) <= 10:  # closed at once, no event
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, text="")
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=STREAM)
        return httpx.Response(200, json={"id": "job_1", "status": "queued"})

    monkeypatch.setattr(jobs_module.time, "sleep", slept.append)
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    job = Job(client, {"id": "job_1", "status": "queued"}).wait(check=True)
    assert job.status == "succeeded" and len(opened) == 11
    assert slept and all(0 < s <= 2.0 for s in slept)  # paced, not a tight loop


def test_following_rides_out_an_api_restart_of_half_a_minute(monkeypatch):
    """The API unreachable (connection refused) for 30 s while the job runs on in its worker:
    `wait()` raised httpx.ConnectError after 6 tries within about 7 s."""
    clock = {"now": 0.0}

    def sleep(seconds):
        clock["now"] += seconds

    def answer(request: httpx.Request) -> httpx.Response:
        if clock["now"] < 30:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=STREAM)

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    assert Job(client, {"id": "job_1", "status": "running"}).wait().status == "succeeded"
    assert 30 <= clock["now"] < 33


def test_following_gives_up_on_an_api_gone_for_longer(monkeypatch):
    clock = {"now": 0.0}

    def sleep(seconds):
        clock["now"] += seconds

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    client = Client("http://margin.test", transport=httpx.MockTransport(refused))
    with pytest.raises(httpx.ConnectError):
        Job(client, {"id": "job_1", "status": "running"}).wait()
    assert jobs_module.RECONNECT_S <= clock["now"] <= jobs_module.RECONNECT_S + 2


class _CutStream(httpx.SyncByteStream):
    """A stream body whose connection closes before its first event is whole."""

    def __iter__(self):
        yield b"event: progress\n"
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


def test_wait_asks_the_job_through_streams_cut_mid_body(monkeypatch):
    """Each stream answers, then its connection is cut before an event (a proxy that cuts
    idle streams): the cut counted as an unreachable API whose 60 s began again at each
    answer, so the job was never asked and `wait()` went on for ever on a job long ended."""
    opened = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            opened.append(1)
            if len(opened) > 100:
                raise AssertionError("the job was never asked")
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=_CutStream()
            )
        return httpx.Response(200, json={"id": "job_1", "status": "succeeded"})

    monkeypatch.setattr(jobs_module.time, "sleep", lambda seconds: None)
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    job = Job(client, {"id": "job_1", "status": "running"}).wait()
    assert job.status == "succeeded" and len(opened) <= jobs_module.RECONNECTS + 1


def test_asking_the_job_rides_out_an_api_gone_at_that_moment(monkeypatch):
    """Streams keep closing without an `end`, so the job itself is asked, just as the API goes
    down for 20 s: that question was outside the reconnect handler and raised
    httpx.ConnectError at once, where a stream opened then waited the outage out."""
    clock = {"now": 0.0}
    asked = []

    def sleep(seconds):
        clock["now"] += seconds

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            if asked and clock["now"] < 20:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text="")
        asked.append(clock["now"])
        if clock["now"] < 20:  # the API went away as the job was asked
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"id": "job_1", "status": "succeeded"})

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    job = Job(client, {"id": "job_1", "status": "running"}).wait()
    assert job.status == "succeeded" and clock["now"] >= 20
    assert clock["now"] < jobs_module.RECONNECT_S


def test_asking_the_job_gives_up_on_an_api_gone_for_longer(monkeypatch):
    clock = {"now": 0.0}

    def sleep(seconds):
        clock["now"] += seconds

    asked = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events") and not asked:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text="")
        if not request.url.path.endswith("/events"):
            asked.append(clock["now"])
        raise httpx.ConnectError("connection refused", request=request)  # gone from then on

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    with pytest.raises(httpx.ConnectError):
        Job(client, {"id": "job_1", "status": "running"}).wait()
    gone_for = clock["now"] - asked[0]
    assert jobs_module.RECONNECT_S <= gone_for <= jobs_module.RECONNECT_S + 3, gone_for


def test_asking_the_job_after_its_stream_ended_rides_out_an_api_gone_then(monkeypatch):
    """The stream ends without the job (its `end` carries none), and the API goes down for 20 s
    as `wait()` then asks the job: that one question raised httpx.ConnectError at once."""
    clock = {"now": 0.0}

    def sleep(seconds):
        clock["now"] += seconds

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"},
                                  text="event: end\ndata: null\n\n")  # fmt: skip
        if clock["now"] < 20:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"id": "job_1", "status": "succeeded"})

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    client = Client("http://margin.test", transport=httpx.MockTransport(answer))
    job = Job(client, {"id": "job_1", "status": "running"}).wait(check=True)
    assert job.status == "succeeded" and 20 <= clock["now"] < 23
    clock["now"] = 0.0  # gone for longer than a follower waits: the error is raised
    monkeypatch.setattr(jobs_module, "RECONNECT_S", 10.0)
    with pytest.raises(httpx.ConnectError):
        Job(client, {"id": "job_1", "status": "running"}).wait()
    assert 10 <= clock["now"] <= 12
