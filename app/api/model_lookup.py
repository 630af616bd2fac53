"""Finding the model a prediction request names, fast: the unpacked-model cache by id, and the
alias cache for registry references (`services.registry`). Shared by every prediction route
(v1 predict and invocations, the inference protocol), which map `ModelNotFound` to their own
error shapes."""

from __future__ import annotations

import threading

from fastapi.concurrency import run_in_threadpool
from starlette.requests import Request

from app import tenancy
from app.services import registry
from app.services.model_cache import ModelCache, fetch_model
from app.services.prediction import LinearModel
from app.tenancy import Principal

_lock = threading.Lock()


class ModelNotFound(LookupError):
    """No model by that id or reference for this tenant."""


def app_singleton(app, name: str, make):
    """`app.state.<name>`, made by `make()` on first use (once, under a lock)."""
    value = getattr(app.state, name, None)
    if value is None:
        with _lock:
            value = getattr(app.state, name, None)
            if value is None:
                value = make()
                setattr(app.state, name, value)
    return value


def model_cache(app) -> ModelCache:
    """The app's model cache (created on first use, sized by MODEL_CACHE_SIZE)."""
    settings = app.state.settings
    size, max_bytes = settings.model_cache_size, int(settings.model_cache_mb * 2**20)
    return app_singleton(app, "model_cache", lambda: ModelCache(size, max_bytes=max_bytes))


def alias_cache(app) -> registry.AliasCache:
    seconds = app.state.settings.alias_cache_s
    return app_singleton(app, "alias_cache", lambda: registry.AliasCache(seconds))


def _resolve(db, principal: Principal, ref: str, latest: bool) -> str | None:
    token = tenancy.set_current(principal)  # the tenant filter applies in this thread
    try:
        with db.session() as session:
            found = registry.resolve(session, ref, latest=latest)
    finally:
        tenancy.reset_current(token)
    # a bare name that is no registered name may be a model id
    return found if found is not None or registry.is_reference(ref) else ref


async def resolve_id(request: Request, principal: Principal, ref: str, latest=False) -> str:
    """The model id of `ref` (an id, ``name@alias``, ``name@vN``; a bare name too with
    `latest`), through the alias cache."""
    if not registry.plausible(ref):
        raise ModelNotFound(ref)
    if not registry.is_reference(ref) and not latest:
        return ref
    cache = alias_cache(request.app)
    found, model_id = cache.get(principal.tenant, ref)
    if not found:
        model_id = await run_in_threadpool(_resolve, request.app.state.db, principal, ref, latest)
        cache.put(principal.tenant, ref, model_id)
    if model_id is None:
        raise ModelNotFound(ref)
    return model_id


def unpacked(app, session, model_id: str) -> LinearModel:
    """The unpacked model of a route that computes with its weights (evaluate, export,
    coefficients, a prediction run), through the app's model cache as predict: each such request
    unpacked its own copy (+388 MB for 82 MB of weights, per request at once). `session`, the
    request's, is closed first (the model was found in it: it is the tenant's), so that the
    request never holds two connections. Blocking: call it from a worker thread."""
    from app.errors import ProblemError

    session.close()
    model = fetch_model(app.state.db, model_cache(app), model_id)
    if model is None:
        raise ProblemError(404, "Model not found", f"model {model_id!r} was deleted meanwhile")
    return model


async def load_model(request: Request, principal: Principal, ref: str, latest=False) -> LinearModel:
    """The unpacked model `ref` names, for `principal`'s tenant."""
    model_id = await resolve_id(request, principal, ref, latest)
    app = request.app
    cache = model_cache(app)
    model, due = cache.get(model_id)
    if model is not None and model.info.get("tenant") != principal.tenant:
        raise ModelNotFound(ref)  # another tenant's: absent, as in every other route
    if model is None or due:
        model = await run_in_threadpool(fetch_model, app.state.db, cache, model_id)
        if model is None or model.info.get("tenant") != principal.tenant:
            raise ModelNotFound(ref)
    return model
