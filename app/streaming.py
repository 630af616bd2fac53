"""Streamed responses that give up on a client that reads nothing.

A streamed response (a LIBLINEAR or JSON model export, a prediction run's CSV, a job's event stream)
waits in each send until the client's socket has room; a client that stops reading kept the
response, and what it holds (an open file, an object-store connection, the generator's state, a
database session), for as long as it kept the connection open. Here a send that waits longer
than SEND_TIMEOUT_S ends the response, and the connection is dropped at once
(`http_guard.ABORT`, where the server offers it): the response cannot be completed, its last
chunk would wait behind the unread ones.

Symbols: `TimedStreamingResponse` (the streamed response with a send timeout), `drop_connection`
(what a response given up on does with its connection, the event streams' too).
"""

from __future__ import annotations

import logging

import anyio
from starlette.responses import StreamingResponse

from app.http_guard import ABORT

log = logging.getLogger("margin.api")


class SendTimeout(TimeoutError):
    """A send waited longer than the response's send timeout."""


def drop_connection(scope) -> None:
    """Drop the request's connection with its unsent bytes (a graceful close would wait for the
    client to read them); a no-op under a server without the ABORT extension."""
    abort = scope.get("extensions", {}).get(ABORT)
    if abort is not None:
        abort()


class TimedStreamingResponse(StreamingResponse):
    """A StreamingResponse whose sends wait at most `send_timeout` seconds each; past that the
    response ends, its content iterator is closed (its file or connection with it), and the
    connection is dropped."""

    def __init__(self, content, *, send_timeout: float, **kwargs):
        super().__init__(content, **kwargs)
        self.content = content
        self.send_timeout = send_timeout

    async def __call__(self, scope, receive, send) -> None:
        async def timed_send(message) -> None:
            with anyio.move_on_after(self.send_timeout) as waited:
                await send(message)
            if waited.cancelled_caught:
                raise SendTimeout

        try:
            await super().__call__(scope, receive, timed_send)
        except SendTimeout:
            log.info("response closed: its client read nothing for %g s", self.send_timeout)
            drop_connection(scope)
            close = getattr(self.content, "close", None)
            if close is not None:  # suspended in a yield (the send awaited), so closable now
                close()
