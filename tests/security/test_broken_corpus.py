"""A corpus of broken LIBSVM files uploaded through the API: each answers 4xx with a message that
says what is wrong (and where, when there is a line), and leaves no row and no file behind."""

from __future__ import annotations

import bz2
import gzip

import pytest
from sqlalchemy import text

from tests.security.conftest import HEART, upload

GOOD = HEART.read_bytes()

# name -> (file content, words the message must contain)
CORPUS = {
    "truncated_pair": (b"1 1:0.5 2:0.25\n-1 1:0.1 2:", ["line 2", "numeric value"]),
    "truncated_mid_token": (b"1 1:0.5 2:0.25\n-1 1:0.1 2", ["line 2", "index:value"]),
    "truncated_gzip": (gzip.compress(GOOD)[:-40], ["gzip", "truncated"]),
    "truncated_bzip2": (bz2.compress(GOOD)[:300], ["bzip2"]),
    "binary_garbage": (bytes(range(256)) * 8, ["not a text file"]),
    "elf_header": (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 200, ["not a text file"]),
    "utf16_text": ("1 1:1\n-1 2:1\n".encode("utf-16"), ["not a text file"]),
    "huge_line": (b"1 " + b"x" * 600_000 + b"\n", ["line 1", "index:value"]),
    "huge_index": (b"1 99999999999999999999999:1\n", ["line 1", "index too large"]),
    "index_over_int32": (b"-1 1:1\n1 4294967296:1\n", ["line 2", "index too large"]),
    "negative_index": (b"1 -3:1\n", ["line 1", "non-negative"]),
    "nan_value": (b"1 1:nan 2:1\n-1 1:1\n", ["line 1", "finite"]),
    "inf_value": (b"-1 1:1\n1 1:inf\n", ["line 2", "finite"]),
    "nan_label": (b"nan 1:1\n1 2:1\n", ["line 1", "label"]),
    "duplicate_indices": (b"1 3:1 3:2\n-1 1:1\n", ["line 1", "duplicate index 3"]),
    "descending_indices": (b"1 3:1 2:2\n-1 1:1\n", ["line 1", "increasing"]),
    "comma_separators": (b"1 1:1,2:1\n-1 1:1\n", ["line 1"]),
    "equals_separator": (b"1 1=1\n", ["line 1", "index:value"]),
    "semicolon_separators": (b"1;1:1;2:1\n", ["line 1", "label"]),
    "missing_label": (b"1:1 2:1\n", ["line 1", "label"]),
    "word_label": (b"yes 1:1\n", ["line 1", "label"]),
    "word_value": (b"1 1:abc\n", ["line 1", "numeric value"]),
    "double_colon": (b"1 1::1\n", ["line 1"]),
    "bad_qid": (b"1 qid:x 1:1\n", ["line 1", "qid"]),
    "nul_inside": (b"1 1:1\x00\n-1 2:1\n", ["not a text file"]),
    "empty": (b"", ["empty"]),
    "only_comments": (b"# nothing here\n# still nothing\n", ["no data rows"]),
    "only_blank_lines": (b"\n\n   \n", ["no data rows"]),
    "bad_line_late": (GOOD + b"1 1:1 2:oops\n", ["line 271"]),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory, sqlite_template, shared_parser):  # noqa: F811
    import shutil

    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    data = tmp_path_factory.mktemp("corpus") / "data"
    data.mkdir()
    shutil.copy(sqlite_template, data / "margin.db")
    app = create_app(Settings(data_dir=data, max_upload_mb=1))
    app.state.parser = shared_parser
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        yield client, app


@pytest.mark.parametrize("name", list(CORPUS))
def test_broken_file_is_refused_with_a_message_and_leaves_nothing(service, name):
    client, app = service
    content, words = CORPUS[name]
    response = upload(client, content, filename=f"{name}.svm")
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    problem = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    for word in words:
        assert word in problem["detail"], (word, problem)
    if "line" in " ".join(words):
        assert problem.get("line") == int(words[0].split()[1])
    assert (
        "Traceback" not in response.text and str(app.state.settings.data_dir) not in response.text
    )
    data = app.state.settings.data_dir
    assert list((data / "datasets").iterdir()) == []
    assert list((data / "tmp").iterdir()) == []
    with app.state.db.session() as session:
        assert session.execute(text("SELECT count(*) FROM datasets")).scalar() == 0
