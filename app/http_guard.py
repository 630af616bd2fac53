"""Bounds on what a client may do before its request exists: the request line and headers.

uvicorn's httptools protocol (the fast one) has no header-size limit and no header-read timeout,
so one slow or endless header can hold a connection, and its memory, for ever. `guarded_protocol`
returns a subclass that, per connection:

- counts the bytes of the request line and headers and answers 431 once they exceed
  MAX_HEADER_KB (the bytes are counted before the parser buffers them, so a 100 MB header costs
  64 KB, not 100 MB);
- gives the client HEADER_TIMEOUT_S from the connection's start (or the end of the previous
  response) to finish them, then answers 408 and closes, however slowly bytes trickle in;
- holds the rest of a body whose request was answered before it ended (a 401, a 404, a 429:
  uvicorn discards it) to the pace of any body, at most BODY_TIMEOUT_S behind MIN_BODY_RATE_KB,
  and closes the connection once it lags more (without it, a client trickling that rest held
  the connection for ever); a rest that keeps the pace ends, and the connection serves the next
  request;
- refuses trailer fields (headers after a chunked body, which httptools hands over as headers
  and uvicorn appended to the request's, without a bound) with a 400 and closes, and answers
  431 once MAX_HEADER_KB of a chunked body's bytes come without a byte of body (a trailer line
  that never ends, chunk extensions);
- keeps at most MAX_CONNECTIONS open: a new connection beyond that closes the one that has been
  waiting longest for its headers (a slow client's, never one whose request is being served);
- gives each request the ASGI extension ABORT (`scope["extensions"]`), a callable that drops
  the connection at once: for a response the app gives up on because its client reads nothing
  (a streamed response past SEND_TIMEOUT_S, app.streaming). uvicorn would otherwise report
  that response as "ASGI callable returned without completing response" (an error, for a
  client's doing) and close the transport gracefully, which waits for the client to read the
  bytes still buffered, maybe never, keeping the socket and its buffers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from collections import OrderedDict

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings

log = logging.getLogger("margin.http")
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
ABORT = "margin.abort"


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a header-size limit, a header-read deadline and a connection cap
    (the class attributes; `guarded_protocol` sets them from the settings)."""

    max_header_bytes = 64 * 1024
    header_timeout_s = 10.0
    max_connections = 1000
    body_timeout_s = 30.0
    min_body_rate = 64 * 1024.0  # bytes per second

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._header_bytes = 0
        self._in_headers = True  # waiting for, or reading, a request's line and headers
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False
        self._bodiless_bytes = 0  # of a request's body, received since its last byte of body
        self._body_seen = False
        self._rest_start = 0.0  # when the request was answered before its body ended
        self._rest_bytes = 0  # of its body, received since

    @property
    def _waiting(self) -> OrderedDict:
        """The server's connections waiting for headers (or for the rest of a body whose request
        was answered), oldest first."""
        waiting = getattr(self.server_state, "margin_waiting", None)
        if waiting is None:
            waiting = self.server_state.margin_waiting = OrderedDict()
        return waiting

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.max_connections:
            for victim in list(self._waiting):
                if victim is not self:
                    victim._refuse(408, "too many connections: the slowest client was closed")
                    break

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_headers:
            self._body_received(data)
            return
        room = self.max_header_bytes - self._header_bytes
        if len(data) <= room:
            self._header_bytes += len(data)
            super().data_received(data)
            return
        # feed what the limit allows; the rest only if the headers ended within it
        super().data_received(data[:room])
        self._header_bytes += room
        if self._in_headers:
            self._refuse(431, f"the request line and headers exceed {self.max_header_bytes} bytes")
        elif not self._refused:
            self._body_received(data[room:])

    def _body_received(self, data: bytes) -> None:
        """Feed what follows the headers, counting the bytes that bring no body: only chunk
        framing and trailers do, a few bytes a chunk unless a client abuses them."""
        self._body_seen = False
        if self._answered_early():
            self._rest_bytes += len(data)
        super().data_received(data)
        if self._in_headers or self._refused:  # the request ended, or was refused, in `data`
            return
        self._bodiless_bytes = 0 if self._body_seen else self._bodiless_bytes + len(data)
        if self._bodiless_bytes > self.max_header_bytes:
            self._refuse(
                431, f"the chunked body's framing or trailer exceeds {self.max_header_bytes} bytes"
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        if not self._in_headers:
            self._refuse(400, "trailer fields (headers after a chunked body) are not accepted")
            return
        super().on_header(name, value)

    def on_body(self, body: bytes) -> None:
        self._body_seen = True
        super().on_body(body)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm()
        self.scope.setdefault("extensions", {})[ABORT] = self._abort
        super().on_headers_complete()

    def _abort(self) -> None:
        """Drop the connection now, with the bytes not sent yet (see ABORT). The request's cycle
        counts as disconnected at once, as the transport's loss (reported on the loop's next
        turn) would make it: the app returns before that."""
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
        self.transport.abort()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_headers = True  # what comes next is the next request's headers
        self._header_bytes = 0
        self._bodiless_bytes = 0
        if self.cycle is not None and self.cycle.response_complete:  # answered before its body
            self._arm()  # ended: the rest's timer is running; the next headers get their own

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._answered_early():  # before its body ended: the rest keeps a body's pace
            self._rest_start, self._rest_bytes = self.loop.time(), 0
            self._arm(self._rest_lag_left())
        elif self._in_headers:  # (not while a pipelined request's body is read)
            self._arm()

    def _answered_early(self) -> bool:
        return not self._in_headers and self.cycle is not None and self.cycle.response_complete

    def _rest_lag_left(self) -> float:
        """Seconds until the rest of an answered body lags BODY_TIMEOUT_S behind its pace."""
        due = self._rest_start + self._rest_bytes / self.min_body_rate + self.body_timeout_s
        return due - self.loop.time()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)

    def _arm(self, seconds: float | None = None) -> None:
        self._disarm()
        delay = self.header_timeout_s if seconds is None else max(seconds, 0.0)
        self._deadline = self.loop.call_later(delay, self._timed_out)
        self._waiting[self] = None

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting.pop(self, None)

    def _timed_out(self) -> None:
        self._deadline = None
        if self._in_headers:
            self._refuse(408, f"the request headers took longer than {self.header_timeout_s:g} s")
        elif self._answered_early():
            if (left := self._rest_lag_left()) > 0:
                self._arm(left)  # it kept the pace so far
            else:  # closed without a second answer
                self._refuse(408, "the body of a request already answered came too slowly")

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` (unless nothing was sent yet, or the request's app has begun its
        answer) and close the connection."""
        self._refused = True
        self._disarm()
        if self.transport.is_closing():
            return
        answered = False
        if not self._in_headers and self.cycle is not None:  # its app runs: it may write no more
            answered = self.cycle.response_started or bool(self.pipeline)  # or an earlier one's
            if not self.cycle.response_complete:
                self.cycle.disconnected = True
            self.cycle.message_event.set()
        if not answered and (self._header_bytes or status != 408):
            body = json.dumps({"type": "about:blank", "status": status, "detail": detail}).encode()
            head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
            head += b"content-type: application/problem+json\r\nconnection: close\r\n"
            head += b"content-length: %d\r\n\r\n" % len(body)
            self.transport.write(head + body)
        self.transport.close()


def guarded_protocol(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's `http=`, with the limits of `settings`."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "max_header_bytes": int(settings.max_header_kb * 1024),
            "header_timeout_s": float(settings.header_timeout_s),
            "max_connections": int(settings.max_connections),
            "body_timeout_s": float(settings.body_timeout_s),
            "min_body_rate": float(settings.min_body_rate_kb * 1024),
        },
    )


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards `wanted` (within the hard limit), so that
    MAX_CONNECTIONS, not the descriptor limit, decides which connection is closed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft
