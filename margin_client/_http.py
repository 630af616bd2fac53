"""The HTTP core: one `httpx.Client` per `Client`, errors as `MarginError`, pagination."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
# `scheme://user:` then the password, up to the last `@` before the path: a password may hold an
# `@` of its own, and a URL that httpx cannot parse is shown in a message too
PASSWORD_IN_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*:)[^/?#]*@")


def shown_url(url: str) -> str:
    """`url` as a message may show it: a password it carries (``http://user:secret@host``)
    replaced by ``***``."""
    return PASSWORD_IN_URL.sub(r"\1***@", str(url))


class MarginError(Exception):
    """An error answer of the service, with its problem document (RFC 7807).

    Attributes: ``status`` (HTTP status), ``title``, ``detail`` (names the field or line at
    fault), ``errors`` (one ``{"field", "message"}`` per invalid field, possibly empty) and
    ``problem`` (the whole document).
    """

    def __init__(self, status: int, problem: dict[str, Any]):
        self.status = status
        self.problem = problem
        self.title = str(problem.get("title") or "Error")
        self.detail = problem.get("detail")
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        super().__init__(f"{status} {self.title}" + (f": {self.detail}" if self.detail else ""))

    @classmethod
    def from_response(cls, response: httpx.Response) -> MarginError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = response.text.strip()[:500]
            body = {"title": response.reason_phrase or "Error", "detail": text or None}
        return cls(response.status_code, body)


class NotJSON(ValueError):
    """A success answer that is not the JSON the service sends: the URL names another server
    (a proxy's sign-in page, another service on the port)."""


def answer_json(response: httpx.Response) -> Any:
    """The JSON of a success answer; `NotJSON` naming the request and what came instead (it
    was json.JSONDecodeError's traceback)."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type") or "no content type"
        raise NotJSON(
            f"{response.request.method} {shown_url(response.request.url)} answered "
            f"{response.status_code} with {kind} that is not JSON: is this a Margin service?"
        ) from None


class InvalidId(ValueError):
    """An id given to the client that names no resource (empty, or not a string)."""


class InvalidLimit(ValueError):
    """A list's `limit` under 1 (the service answers limit=0 with a 422)."""


class InvalidSetting(ValueError):
    """A service URL or an API key that no request can carry (``--url``, ``MARGIN_URL``,
    ``--api-key``, ``MARGIN_API_KEY``)."""


def service_url(url: str) -> str:
    """``url`` without its trailing slash, refused unless it is an http(s) URL with a host and
    a port in range (httpx took ``http://`` and port 99999, and failed at the request)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidSetting(f"the service URL {shown_url(url)!r} is not a URL: {exc}") from None
    port_ok = parsed.port is None or 0 < parsed.port < 65536
    if parsed.scheme not in ("http", "https") or not parsed.host or not port_ok:
        raise InvalidSetting(
            f"the service URL {shown_url(url)!r} is not an http:// or https:// URL with a host "
            "and a port "
            "between 1 and 65535"
        )
    return url.rstrip("/")


def check_api_key(key: str) -> str:
    """``key`` as a header value: printable ASCII without spaces (a non-ASCII key failed in
    httpx's encoder with a traceback). The message does not repeat the secret."""
    if not re.fullmatch(r"[\x21-\x7e]+", key):
        raise InvalidSetting(
            "the API key (--api-key or MARGIN_API_KEY) holds a space, a control character or "
            "a character beyond ASCII: keys are printable ASCII"
        )
    return key


class NotFinite(ValueError):
    """A request body holding nan or an infinity (JSON has no such number)."""


def json_body(body: Any) -> bytes:
    """``body`` as JSON, as httpx writes it; a nan or an infinity (``--C 1e400``) is a
    `NotFinite` naming the problem, not the encoder's "Out of range float values"."""
    import json

    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:
        raise NotFinite(
            "the request holds a number that is not finite (nan or an infinity; a number "
            "beyond 1.8e308 reads as one): the service takes finite numbers only"
        ) from None


def resource_id(kind: str, value: Any) -> str:
    """``value`` as the id of a ``kind`` (dataset, model, job), refused when it is empty: an
    empty id would address the collection instead (``GET /v1/models/`` lists them)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidId(f"a {kind} id must be a non-empty string, got {value!r}")
    return value


def segment(ident: str) -> str:
    """An id as one path segment, percent-encoded: ``../jobs`` must name no other resource. The
    dots of a ``.`` or ``..`` id are encoded too, or httpx would resolve them as the parent."""
    encoded = quote(ident, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


class Client:
    """A connection to a Margin service.

    Parameters
    ----------
    url : the service's base URL (default: ``MARGIN_URL``, else http://127.0.0.1:8000).
    api_key : an API key sent as ``Authorization: Bearer`` (default: ``MARGIN_API_KEY``; none
        is needed by a service on loopback with ``AUTH_MODE=auto``).
    timeout : seconds for connecting and for each read.
    transport : an httpx transport (tests).

    ``client.datasets``, ``client.jobs``, ``client.models``, ``client.runs`` (background
    prediction runs) and ``client.registry`` (names, versions, aliases) hold the operations.
    Errors are raised as `MarginError`. Use as a context manager, or call `close`.
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ):
        from margin_client.datasets import Datasets
        from margin_client.jobs import Jobs
        from margin_client.models import Models
        from margin_client.registry import Registry
        from margin_client.runs import PredictionRuns

        self.url = service_url(url or os.environ.get("MARGIN_URL") or DEFAULT_URL)
        key = api_key if api_key is not None else os.environ.get("MARGIN_API_KEY")
        headers = {"User-Agent": "margin-client"}
        if key:
            headers["Authorization"] = f"Bearer {check_api_key(key)}"
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport
        )
        self.datasets = Datasets(self)
        self.jobs = Jobs(self)
        self.models = Models(self)
        self.runs = PredictionRuns(self)
        self.registry = Registry(self)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send a request; an answer other than 2xx raises `MarginError` (the service's API
        never redirects, so a 3xx means the path named no resource)."""
        if "json" in kwargs:
            headers = {**(kwargs.pop("headers", None) or {}), "Content-Type": "application/json"}
            kwargs.update(content=json_body(kwargs.pop("json")), headers=headers)
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 300:
            raise MarginError.from_response(response)
        return response

    def download(self, path: str, target: str | Path, **kwargs: Any) -> httpx.Response:
        """GET `path` streamed into the file `target`, written whole or not at all (a large
        export or prediction CSV is never held in memory). An answer other than 2xx raises
        `MarginError`; another 2xx than 200 (a run still active) is returned, nothing written."""
        target = Path(target)
        with self.http.stream("GET", path, **kwargs) as response:
            if response.status_code != 200:
                response.read()
                if response.status_code >= 300:
                    raise MarginError.from_response(response)
                return response
            partial = target.with_name(target.name + ".part")
            try:
                with partial.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
            except BaseException:  # an answer cut short, a full disk, Ctrl-C: no part left
                partial.unlink(missing_ok=True)
                raise
            partial.replace(target)
        return response

    def get_json(self, path: str, **kwargs: Any) -> Any:
        return answer_json(self.request("GET", path, **kwargs))

    def post_json(self, path: str, body: Any, **kwargs: Any) -> Any:
        return answer_json(self.request("POST", path, json=body, **kwargs))

    def paginate(
        self, path: str, params: dict[str, Any] | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """The items of a list endpoint, following its cursors (at most `limit` items, at least
        1: each page asks for one or more, so that 0 listed one)."""
        if limit is not None and limit < 1:
            raise InvalidLimit(f"limit must be at least 1, got {limit}")
        query = {k: v for k, v in (params or {}).items() if v is not None}
        count = 0
        while True:
            page_size = 100 if limit is None else max(1, min(100, limit - count))
            page = self.get_json(path, params={**query, "limit": page_size})
            for item in page["items"]:
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            if not page.get("next"):
                return
            query["cursor"] = page["next"]

    def health(self) -> dict[str, Any]:
        """``/healthz`` (the process is up)."""
        return self.get_json("/healthz")

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __deepcopy__(self, memo: dict) -> Client:
        return self  # a connection is shared, not copied (sklearn.base.clone deep-copies params)

    def __repr__(self) -> str:
        return f"Client({shown_url(self.url)!r})"
