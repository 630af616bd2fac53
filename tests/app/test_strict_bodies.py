"""Every integer field of a JSON request body refuses a JSON boolean: `{"version": true}` was taken
as version 1 (pydantic's lax mode reads `true` as 1), while the training parameters refused it.
Request bodies now share one strict base (app.schemas.common.RequestBody)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.tables import Job

pytestmark = pytest.mark.one_database


@pytest.fixture
def alias_target(client, binary) -> str:
    """The aliases of the registered name `m`, whose version 1 is the binary model."""
    assert client.post("/v1/registered-models", json={"name": "m"}).status_code == 201
    versions = client.post("/v1/registered-models/m/versions", json={"model_id": binary[0]})
    assert versions.status_code == 201, versions.text
    return "/v1/registered-models/m/aliases"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"version": True}, "version"),  # an alias's version: was 200, version 1
        ({"version": "1"}, "version"),  # was 200 as well
        ({"distributed": {"partitions": True}}, "distributed.partitions"),
        ({"params": {"max_iter": True}}, "params.max_iter"),
        ({"params": {"random_state": True}}, "params.random_state"),
        ({"params": {"search": {"cv": True}}}, "params.search.cv"),
    ],
)
def test_an_integer_field_refuses_a_boolean(client, db, heart, alias_target, body, field):
    if "version" in body:
        response = client.put(f"{alias_target}/production", json=body)
    else:
        response = client.post("/v1/jobs", json={"dataset_id": heart["id"], **body})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == field
    assert "valid integer" in response.json()["detail"]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert client.get(f"{alias_target}/production").status_code == 404


def test_an_integer_version_is_still_taken(client, alias_target):
    response = client.put(f"{alias_target}/production", json={"version": 1})
    assert response.status_code == 200 and response.json()["version"] == 1


@pytest.mark.parametrize(
    ("body", "words"),
    [
        # Python reads a JSON integer of more than 4300 digits as a ValueError, not as a JSON
        # error: the answer was a 400 "There was an error parsing the body", naming nothing
        (b'{"version": ' + b"9" * 5000 + b"}", "integer of more than 4300 digits"),
        # and lists nested beyond the parser's recursion limit raised a RecursionError
        (b'{"version": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    ],
    ids=["huge_integer", "deep_nesting"],
)
def test_a_body_json_cannot_read_is_a_422_saying_why(client, alias_target, body, words):
    response = client.put(
        f"{alias_target}/production", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]
    assert client.get(f"{alias_target}/production").status_code == 404


def _put_version_digits(client, alias_target, digits: int):
    body = b'{"version": ' + b"9" * digits + b"}"
    return client.put(
        f"{alias_target}/production", content=body, headers={"Content-Type": "application/json"}
    )


def test_an_integer_of_4301_digits_is_one_over_the_readers_limit(client, alias_target):
    # Python reads at most 4300 digits of an integer from text (sys.int_max_str_digits)
    response = _put_version_digits(client, alias_target, 4301)
    assert response.status_code == 422, response.text
    assert "integer of more than 4300 digits" in response.json()["detail"]
    assert client.get(f"{alias_target}/production").status_code == 404


def test_an_integer_of_4300_digits_is_read_and_judged_by_its_field(client, alias_target):
    # read as a number: the answer is the version's own bound, not the reader's limit
    response = _put_version_digits(client, alias_target, 4300)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == "version"
    detail = response.json()["detail"]
    assert detail.startswith("version: Input should be less than or equal to 1000000000"), detail
    assert "4300 digits" not in detail
    assert client.get(f"{alias_target}/production").status_code == 404
