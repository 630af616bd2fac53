"""An integer in a URL (a query or path parameter) is plain ASCII decimal digits: pydantic's lax
int took `limit=5_0` as 50, and `+5`, ` 5`, `5 ` and `5.0` as 5, so a typo listed a page the
client did not ask for. Anything else is a 422 naming the parameter, on every route."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts

pytestmark = pytest.mark.one_database

NOT_PLAIN = ["5_0", "+5", " 5", "5 ", "5.0", "٥", "-5", "0x5", "1e1"]


def _integers(dependant) -> list[tuple[str, str]]:
    found = []
    for kind in ("path", "query"):
        params = getattr(dependant, f"{kind}_params")
        found += [(kind, p.alias) for p in params if int in (p.field_info.annotation, *_args(p))]
    for sub in dependant.dependencies:
        found += _integers(sub)
    return found


def _args(param) -> tuple:
    return getattr(param.field_info.annotation, "__args__", ())


def _routes_with_integers(app) -> list[tuple[RouteContext, str, str]]:
    found = []
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, APIRoute):
            integers = sorted(set(_integers(route.original_route.dependant)))
            found += [(route, kind, name) for kind, name in integers]
    return found


def _url(route: RouteContext, kind: str, name: str, value: str) -> str:
    path = route.path_format
    for param in route.original_route.dependant.path_params:
        filler = value if (kind, param.alias) == ("path", name) else "1"
        path = path.replace("{" + param.alias + "}", quote(filler, safe=""))
    return path if kind == "path" else f"{path}?{name}={quote(value, safe='')}"


def test_every_integer_of_a_url_is_found(app):
    found = {(route.path, kind, name) for route, kind, name in _routes_with_integers(app)}
    assert ("/v1/datasets", "query", "limit") in found
    assert ("/v1/jobs/{job_id}/progress", "query", "limit") in found
    assert ("/v1/models/{model_id}/coefficients", "query", "top") in found
    assert ("/v1/registered-models/{name}/versions/{version}", "path", "version") in found
    assert len(found) >= 9


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_an_integer_not_in_plain_digits_is_refused_on_every_route(app, client, value):
    for route, kind, name in _routes_with_integers(app):
        method = sorted(route.original_route.methods)[0]
        answer = client.request(method, _url(route, kind, name, value))
        where = f"{method} {route.path} {name}={value!r}"
        assert answer.status_code == 422, f"{where}: {answer.status_code} {answer.text[:200]}"
        assert [e["field"] for e in answer.json()["errors"]] == [name], where
        assert "plain decimal digits" in answer.json()["detail"], where


def test_plain_digits_are_taken(client, binary):
    for n in range(3):
        text = f"1 1:0.5 2:{n + 1}\n-1 1:1 3:2\n".encode()
        assert client.post(f"/v1/datasets?name=d{n}", content=text).status_code == 201
    page = client.get("/v1/datasets?limit=02")
    assert page.status_code == 200 and len(page.json()["items"]) == 2
    top = client.get(f"/v1/models/{binary[0]}/coefficients?top=1")
    assert top.status_code == 200, top.text
