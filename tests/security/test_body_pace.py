"""A request body must keep arriving (`app.limits`): the time spent waiting for it may not exceed
BODY_TIMEOUT_S plus one second per MIN_BODY_RATE_KB received. Before, two uploads trickling a few
bytes held both upload parser processes, and every other upload waited for as long as their
senders liked (tests/reliability/test_attacks_uploads.py -k trickled shows it against `margin
serve`). Here the middleware is driven directly, with a client whose pace is set by the test."""

from __future__ import annotations

import asyncio

import pytest

from app.config import Settings
from app.limits import BodySizeLimit, BodyTooSlow, RouteLimits

TIMEOUT_S = 0.5
RATE_KB = 1.0  # 1024 bytes per second
pytestmark = pytest.mark.timeout(30)


def serve(tmp_path, parts: list[tuple[float, int]], read_pause_s=0.0, then_wait_s=0.0) -> int:
    """Send a body as `parts` of (delay before it, size) through BodySizeLimit to an endpoint
    that reads it all (pausing `read_pause_s` before each read) and then listens for the
    client's disconnect, which comes `then_wait_s` later. Returns the bytes the endpoint read;
    raises BodyTooSlow."""
    settings = Settings(data_dir=tmp_path, body_timeout_s=TIMEOUT_S, min_body_rate_kb=RATE_KB)
    sent = iter(enumerate(parts))

    async def client() -> dict:
        step = next(sent, None)
        if step is None:
            await asyncio.sleep(then_wait_s)
            return {"type": "http.disconnect"}
        index, (delay, size) = step
        await asyncio.sleep(delay)
        more = index < len(parts) - 1
        return {"type": "http.request", "body": b"x" * size, "more_body": more}

    async def endpoint(scope, receive, send) -> None:
        more = True
        while more:
            await asyncio.sleep(read_pause_s)
            message = await receive()
            scope["read"] += len(message["body"])
            more = message["more_body"]
        assert (await receive())["type"] == "http.disconnect"

    scope = {"type": "http", "method": "POST", "path": "/v1/datasets", "query_string": b"",
             "headers": [(b"transfer-encoding", b"chunked")], "read": 0}  # fmt: skip
    middleware = BodySizeLimit(endpoint, RouteLimits(settings))
    asyncio.run(middleware(scope, client, None))
    return scope["read"]


def test_a_body_that_stops_coming_is_408(tmp_path):
    with pytest.raises(BodyTooSlow) as info:
        serve(tmp_path, [(0.0, 100), (5.0, 100)])
    assert info.value.status_code == 408 and "MIN_BODY_RATE_KB" in info.value.detail


def test_a_body_just_slower_than_the_rate_is_408(tmp_path):
    # 256 bytes every 0.3 s (0.83 KB/s): each part costs 0.05 s of the 0.5 s allowance; the
    # sixth finds 0.25 s left
    with pytest.raises(BodyTooSlow):
        serve(tmp_path, [(0.3, 256)] * 8)


def test_a_body_at_the_rate_is_read_whole(tmp_path):
    # 256 bytes every 0.2 s (1.25 KB/s) for 2 s, four times BODY_TIMEOUT_S
    assert serve(tmp_path, [(0.2, 256)] * 10) == 2560


def test_only_the_time_spent_waiting_for_the_client_counts(tmp_path):
    # the endpoint's own pauses between reads, and the wait for the disconnect after the body,
    # are not the client's
    assert serve(tmp_path, [(0.0, 10)] * 3, read_pause_s=0.4, then_wait_s=1.0) == 30
