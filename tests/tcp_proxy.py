"""A small TCP proxy for the tests: forwards loopback connections to a server, at a limited rate
(to catch a download half-way)."""

from __future__ import annotations

import socket
import threading
import time


class ThrottledProxy:
    """Listens on 127.0.0.1:<port> and forwards to `target`, at most `rate` bytes a second in
    each direction (None: unlimited)."""

    def __init__(self, target: tuple[str, int], rate: float | None = None):
        self.target, self.rate = target, rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        chunk = 16384 if self.rate is None else max(1024, int(self.rate / 20))
        try:
            while data := source.recv(chunk):
                sink.sendall(data)
                if self.rate:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
