"""API keys and authentication: `Authorization: Bearer <key>` → a tenant with scopes.

A key is `mgn_` followed by 32 random bytes (URL-safe base64, 256 bits). Only its SHA-256 is
stored: a fast hash is right for high-entropy random tokens (nothing to brute-force), where a slow
password hash would dominate prediction latency. Verified keys are kept in a small in-process
cache for AUTH_CACHE_S seconds, so a revoked key stops working within that bound in every process
(at once in the process that revoked it).

AUTH_MODE:
  required  every /v1 request needs a valid key (health, readiness and docs stay open);
  off       keys are ignored; everything belongs to the tenant 'local';
  auto      `required` when the service binds a non-loopback address, else `off` — but a key that
            is sent is still checked and used.
Without a key (off, and auto on loopback), a change (POST, PUT, PATCH, DELETE) that a browser
says comes from a page of another origin is a 403 (`refuse_cross_site`): any site the user
visits could otherwise upload, train or cancel through their browser. Without a key on loopback
(auto), a request must name the service by a loopback address or `localhost` in its Host
(`refuse_foreign_host`): a site whose name is pointed at 127.0.0.1 (DNS rebinding) is otherwise
of the service's own origin to the browser.

Scopes: read (GET), train (upload, create/cancel jobs, delete), predict (predict, background
predictions, evaluate), admin (everything). A missing or unknown key → 401; a valid key without
the scope → 403; another tenant's resources → 404 (see `app.tenancy`). A key found in neither
cache is looked up in the database only while its client address is within AUTH_FAILURE_RATE
failed lookups (`app.rate_limits.AuthFailures`), else 429: made-up keys cannot make every request
cost a query.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
import threading
import time
from collections import OrderedDict

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from limits.storage import Storage, storage_from_string
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app import tenancy
from app.config import Settings
from app.db import Database
from app.errors import ProblemError, database_problem, error_response, protocol_of
from app.rate_limits import AuthFailures, RateLimiter
from app.tables import LOCAL_TENANT, ApiKey, Tenant
from app.tenancy import SCOPES, Principal

log = logging.getLogger("margin.auth")
KEY_PREFIX = "mgn_"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PREDICT_ACTIONS = frozenset({"predict", "predictions", "evaluate", "invocations"})
AUTH_HEADER = 'Bearer realm="margin"'


def generate_key() -> str:
    """A new random API key (shown once, never stored)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def is_loopback(host: str) -> bool:
    """True when binding `host` exposes the service to this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything, so treat it as exposed


def effective_mode(settings: Settings) -> str:
    """'required', 'optional' (auto on loopback: a key is used when sent) or 'off'."""
    mode = settings.auth_mode
    if mode == "auto":
        return "optional" if is_loopback(settings.host) else "required"
    return mode


def gated(path: str) -> bool:
    """Whether a path needs a key: /v1, and the inference protocol's model routes (/v2/models;
    its server metadata and health stay open, like /healthz)."""
    return path.startswith(("/v1/", "/v2/models"))


def required_scope(method: str, path: str) -> str:
    """The scope a request needs: model use `predict` (the inference protocol's model routes
    included, metadata too), other reads `read`, the rest `train`."""
    if path.startswith("/v2/"):
        return "predict"
    if method.upper() in READ_METHODS:
        return "read"
    parts = path.strip("/").split("/")
    if len(parts) >= 4 and parts[1] == "models" and parts[3] in PREDICT_ACTIONS:
        return "predict"
    return "train"


KNOWN_KEYS_CACHED = 10_000
UNKNOWN_KEYS_CACHED = 1_000


class KeyCache:
    """LRU of verified key hashes → Principal (or None for unknown keys), each valid `ttl_s`."""

    def __init__(self, ttl_s: float, size: int):
        self.ttl_s = ttl_s
        self.size = size
        self._items: OrderedDict[str, tuple[Principal | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> tuple[bool, Principal | None]:
        """(found, principal); found is False when the entry is absent or expired."""
        with self._lock:
            entry = self._items.get(key_hash)
            if entry is None or time.monotonic() - entry[1] > self.ttl_s:
                return False, None
            return True, entry[0]

    def put(self, key_hash: str, principal: Principal | None) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            self._items[key_hash] = (principal, time.monotonic())
            self._items.move_to_end(key_hash)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class Authenticator:
    """Resolves a request's principal for one app (its settings, database and key cache)."""

    def __init__(self, settings: Settings, db: Database, storage: Storage | None = None):
        self.settings = settings
        self.db = db
        self.mode = effective_mode(settings)
        self.cache = KeyCache(settings.auth_cache_s, KNOWN_KEYS_CACHED)
        # unknown keys apart: a flood of made-up keys must not push the live ones out
        self.unknown = KeyCache(settings.auth_cache_s, UNKNOWN_KEYS_CACHED)
        storage = storage or storage_from_string(settings.rate_limit_storage)
        self.failures = AuthFailures(settings.auth_failure_rate, storage)
        self.local = self._principal(LOCAL_TENANT, SCOPES, None)

    def _principal(
        self, tenant: str, scopes, key_id: str | None, rate_limit: str | None = None
    ) -> Principal:
        return Principal(
            tenant=tenant,
            scopes=frozenset(scopes),
            key_id=key_id,
            quota_storage_bytes=self.settings.quota_storage_bytes,
            quota_active_jobs=self.settings.quota_active_jobs,
            quota_active_prediction_runs=self.settings.quota_active_prediction_runs,
            rate_limit=rate_limit or self.settings.rate_limit,
        )

    def lookup(self, key_hash: str) -> Principal | None:
        """The principal of a live key with this hash (blocking: run it off the event loop)."""
        token = tenancy.set_current(None)  # keys are not tenant-owned rows; never filter them
        try:
            with self.db.session() as session:
                row = session.scalar(
                    select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
                )
                tenant = session.get(Tenant, row.tenant) if row else None
        finally:
            tenancy.reset_current(token)
        rate = tenant.rate_limit if tenant is not None else None
        principal = self._principal(row.tenant, row.scopes, row.id, rate) if row else None
        (self.cache if principal is not None else self.unknown).put(key_hash, principal)
        return principal

    async def principal_for(
        self, authorization: str | None, client: str | None = None
    ) -> Principal:
        """The principal of an Authorization header sent from the address `client`."""
        if self.mode == "off":
            return self.local
        if authorization is None:
            if self.mode == "optional":
                return self.local
            raise unauthorized("this endpoint needs an API key: send 'Authorization: Bearer <key>'")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("expected 'Authorization: Bearer <key>'")
        key_hash = hash_key(token)
        found, principal = self.cache.get(key_hash)
        if not found:
            found, principal = self.unknown.get(key_hash)
        if not found:
            self.failures.check(client)  # before the database: a flood of made-up keys
            principal = await run_in_threadpool(self.lookup, key_hash)
            if principal is None:
                self.failures.count(client)
        if principal is None:
            raise unauthorized("the API key is unknown or revoked")
        return principal

    async def authenticate(self, request: Request, scope: str) -> Principal:
        """The request's principal, checked for `scope`; also made current for the ORM."""
        principal = await self.principal_for(
            request.headers.get("authorization"), client_address(request)
        )
        if principal.key_id is None and self.mode == "optional":
            refuse_foreign_host(request)
        if principal.key_id is None and request.method.upper() not in READ_METHODS:
            refuse_cross_site(request)
        if not principal.allows(scope):
            raise ProblemError(
                403,
                "Forbidden",
                f"this API key lacks the scope {scope!r} (it has: "
                f"{', '.join(sorted(principal.scopes)) or 'none'})",
            )
        tenancy.set_current(principal)
        request.state.principal = principal
        return principal


# What a browser says of where a request comes from (Fetch Metadata; a page cannot forge it):
# only the service's own pages, or the user typing a URL, may act without a key.
OWN_SITE = frozenset({"same-origin", "none"})


def refuse_cross_site(request: Request) -> None:
    """403 for a change sent by a page of another origin. Without keys (AUTH_MODE off, or auto
    on loopback) nothing else tells a user's own request from one a page they merely visit
    makes their browser send (a form posting a file, a fetch that needs no preflight). A
    request that names no origin comes from a client that is no browser (the CLI, curl)."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if site is not None:
        foreign = site.lower() not in OWN_SITE
    elif origin is not None:
        host = request.headers.get("host", "").lower()
        foreign = origin.lower().partition("://")[2] != host or not host
    else:
        return
    if foreign:
        raise ProblemError(
            403,
            "Forbidden",
            f"a change sent by a page of another site ({origin or site}) without an API key; "
            "the service runs without keys, so only its own pages and clients that are no "
            "browser may change anything",
        )


def refuse_foreign_host(request: Request) -> None:
    """403 for a keyless request to a service bound to loopback (AUTH_MODE auto) whose Host is
    no loopback name. Such a service answers only this machine, but a page of a site whose name
    the attacker points at 127.0.0.1 after it has loaded (DNS rebinding) is, to the browser, of
    the same origin as the service under that name: it could read and change everything. A
    user's own clients name the service by a loopback address or `localhost`."""
    host = request.headers.get("host", "")
    name = host.rpartition(":")[0] if host.rpartition(":")[2].isdigit() else host
    if not is_loopback(name.rstrip(".")):  # `localhost.`: the same name, fully qualified
        raise ProblemError(
            403,
            "Forbidden",
            f"a request for the host {host!r} without an API key; the service runs without keys "
            "on a loopback address, so it answers only requests that name it by a loopback "
            "address or localhost",
        )


def client_address(request: Request) -> str | None:
    """The client's address as uvicorn gives it (behind a trusted proxy, the forwarded one)."""
    return request.client.host if request.client is not None else None


def _retry(response) -> dict[str, str] | None:
    after = response.headers.get("retry-after")
    return {"Retry-After": after} if after else None


def unauthorized(detail: str) -> ProblemError:
    return ProblemError(401, "Unauthorized", detail, headers={"WWW-Authenticate": AUTH_HEADER})


async def authorize(request: Request) -> Principal:
    """FastAPI dependency of every /v1 route: authenticate and check the route's scope.

    Async on purpose: the context variable it sets must live in the request's own task, where
    the route (and the threads it starts) inherit it.
    """
    principal = getattr(request.state, "principal", None)  # set by AuthGate before the body
    if principal is not None:
        tenancy.set_current(principal)
        return principal
    auth: Authenticator = request.app.state.auth
    return await auth.authenticate(request, required_scope(request.method, request.url.path))


async def authenticate(request: Request, scope: str) -> Principal:
    """For plain Starlette routes that skip FastAPI's dependencies (predict)."""
    principal = getattr(request.state, "principal", None)
    if principal is not None:
        return principal
    return await request.app.state.auth.authenticate(request, scope)


class AuthGate:
    """ASGI middleware: every /v1 request is authenticated, checked for its scope and counted
    against its rate before its body is read or its route resolved (so that a malformed body
    without a key is a 401, not a 422). Errors here are answered here: this runs outside the
    app's exception handlers."""

    def __init__(self, app, auth: Authenticator, limiter: RateLimiter):
        self.app = app
        self.auth = auth
        self.limiter = limiter

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not gated(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            principal = await self.auth.authenticate(
                request, required_scope(scope["method"], scope["path"])
            )
            self.limiter.check(principal)
        except ProblemError as exc:
            response = error_response(
                scope["path"], exc.status, exc.title, exc.detail, headers=exc.headers, **exc.extra
            )
            await response(scope, receive, send)
            return
        except (DBAPIError, PoolTimeout) as exc:
            response = database_problem(exc)
            if protocol_of(scope["path"]) != "problem":
                response = error_response(
                    scope["path"], response.status_code, None,
                    "the database is unavailable; retry shortly", headers=_retry(response),
                )  # fmt: skip
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def install(app: FastAPI, settings: Settings, db: Database) -> Authenticator:
    """Set up authentication (and request rates) for `app`; say at start-up how it runs. Add it
    after every other middleware, so that it runs first."""
    tenancy.install()
    storage = storage_from_string(settings.rate_limit_storage)  # the counts of both
    auth = Authenticator(settings, db, storage)
    app.state.auth = auth
    app.add_middleware(AuthGate, auth=auth, limiter=RateLimiter(storage))
    if auth.mode == "optional":
        log.warning(
            "AUTH_MODE=auto on loopback address %s: running WITHOUT API keys (requests without "
            "a key act as tenant %r); bind a public address or set AUTH_MODE=required to "
            "require keys",
            settings.host,
            LOCAL_TENANT,
        )
    elif auth.mode == "off":
        log.warning("AUTH_MODE=off: running WITHOUT API keys; every request is tenant 'local'")
    else:
        log.info("AUTH_MODE=%s: every /v1 request needs an API key", settings.auth_mode)
    return auth
