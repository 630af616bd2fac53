"""The CLI against a service that is not there, is not Margin, or cuts an answer short, and
with settings it cannot send: one line on stderr and a non-zero status, never a traceback, and
no file left half-written."""

from __future__ import annotations

import http.server
import socket
import struct
import threading
import time

import pytest

from margin_client.cli import main


class Answers(http.server.BaseHTTPRequestHandler):
    """`/html/...`: a 200 that is an HTML page (a proxy's login page, another service);
    `/cut/...`: a 200 whose body stops after 400 of its 100,000 bytes; `/reset/...`: the same,
    its connection then reset (a TCP RST, as a proxy or a killed process's kernel sends)."""

    def do_GET(self):
        if self.path.startswith(("/cut/", "/reset/")):
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"a,b\n" * 100)
            self.wfile.flush()
            self.close_connection = True
            if self.path.startswith("/reset/"):
                time.sleep(0.2)  # the client has read the head and the first bytes
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()  # closed with no lingering: an RST, not a FIN
            return
        body = b"<html>sign in</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def answers():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == "", captured
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "http://"])
def test_a_url_that_is_not_one_is_named(capsys, monkeypatch, url):
    # before: httpx.InvalidURL's traceback
    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    assert main(["models", "list", "--url", url]) == 2
    assert url in one_line(capsys)


@pytest.mark.parametrize("key", ["k\udce9y", "caf\u00e9", "a\nb", "a b"])
def test_an_api_key_that_cannot_be_a_header_is_named(capsys, monkeypatch, key):
    # before: a non-ASCII key (from MARGIN_API_KEY) was a UnicodeEncodeError's traceback, a
    # key holding a newline or a space "cannot reach" the service
    monkeypatch.setenv("MARGIN_API_KEY", key)
    assert main(["models", "list", "--url", "http://127.0.0.1:1"]) == 2
    err = one_line(capsys)
    assert "API key" in err and key not in err  # a secret is not printed


def test_an_answer_that_is_not_json_says_so(capsys, monkeypatch, answers):
    # before: json.JSONDecodeError's traceback
    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    assert main(["models", "list", "--url", f"{answers}/html"]) == 1
    err = one_line(capsys)
    assert "not JSON" in err and "text/html" in err


@pytest.mark.parametrize("command", [["models", "export", "m1"], ["runs", "download", "m1", "r1"]])
def test_a_download_cut_short_leaves_no_file(capsys, monkeypatch, answers, tmp_path, command):
    # before: the partial `<file>.part` stayed next to where the file would have been
    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    target = tmp_path / "out"
    assert main([*command, "-o", str(target), "--url", f"{answers}/cut"]) == 1
    assert "cut short" in one_line(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["models", "export", "m1"], ["runs", "download", "m1", "r1"]])
def test_a_download_whose_connection_is_reset_says_so_and_leaves_no_file(
    capsys, monkeypatch, answers, tmp_path, command
):
    # before: "cannot reach <url>: [Errno 104] Connection reset by peer", for a service that
    # had answered and sent part of the file
    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    target = tmp_path / "out"
    assert main([*command, "-o", str(target), "--url", f"{answers}/reset"]) == 1
    err = one_line(capsys)
    assert "cut short" in err and "cannot reach" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_service_too_slow_to_answer_is_not_called_unreachable(capsys, monkeypatch, answers):
    # before: "cannot reach <url>: timed out" for a service that had taken the request (an
    # upload it may still store): the user took it for down and sent it again
    import httpx

    def slow(self, method, url, **kwargs):
        raise httpx.ReadTimeout("timed out")

    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    monkeypatch.setattr(httpx.Client, "request", slow)
    assert main(["models", "list", "--url", answers]) == 1
    err = one_line(capsys)
    assert "cannot reach" not in err and "did not answer within 60 s" in err, err
    assert "may still" in err


def _with_password(url: str) -> str:
    return url.replace("http://", "http://user:s3cr%40t@", 1)


@pytest.mark.parametrize(
    ("where", "command", "status", "said"),
    [
        ("closed", ["models", "list"], 1, "cannot reach"),
        ("answers", ["models", "list"], 1, "not JSON"),  # the request's URL
        ("answers", ["models", "export", "m1", "-o", "OUT"], 1, "cut short"),
        ("slow", ["models", "list"], 1, "did not answer"),
        ("bad port", ["models", "list"], 2, "port"),
        ("not a url", ["models", "list"], 2, "not a URL"),
    ],
)  # fmt: skip
def test_a_password_in_the_url_is_masked_in_every_message(
    capsys, monkeypatch, answers, tmp_path, where, command, status, said
):
    # before: `http://user:secret@host` was printed whole in each of these messages
    import httpx

    monkeypatch.delenv("MARGIN_API_KEY", raising=False)
    url = {
        "closed": "http://127.0.0.1:1", "answers": f"{answers}/html", "slow": answers,
        "bad port": "http://127.0.0.1:99999", "not a url": "http://[::1:5",
    }[where]  # fmt: skip
    if "export" in command:
        url = f"{answers}/cut"
    if where == "slow":
        def slow(self, method, url, **kwargs):
            raise httpx.ReadTimeout("timed out")

        monkeypatch.setattr(httpx.Client, "request", slow)
    command = [str(tmp_path / "out") if arg == "OUT" else arg for arg in command]
    assert main([*command, "--url", _with_password(url)]) == status
    err = one_line(capsys)
    assert said in err, err
    assert "s3cr" not in err and "user:***@" in err, err
    monkeypatch.setenv("MARGIN_URL", _with_password(url))
    assert main(command) == status
    assert "s3cr" not in one_line(capsys)


@pytest.mark.parametrize("limit", ["5_0", "+5", " 5", "٥"])
@pytest.mark.parametrize(
    "command",
    [["datasets", "list"], ["jobs", "list"], ["models", "list"], ["runs", "list", "m1"],
     ["registry", "list"], ["registry", "show", "r"]],
)  # fmt: skip
def test_a_limit_not_in_plain_digits_is_refused_before_any_request(capsys, command, limit):
    # before: int() read `--limit 5_0` as 50 (and `+5`, ` 5` or `٥` as 5), as the service did
    with pytest.raises(SystemExit) as refused:
        main([*command, "--limit", limit, "--url", "http://127.0.0.1:1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "argument --limit: expected a whole number in plain digits" in err, err
    assert "cannot reach" not in err



@pytest.mark.parametrize("value", ["5_0", "+5", " 5", "٥"])
@pytest.mark.parametrize(
    ("command", "option"),
    [(["predict", "m1", "FILE"], "--batch-size"), (["train", "ds_1"], "--cv"),
     (["train", "ds_1"], "--max-iter")],
)  # fmt: skip
def test_an_integer_option_not_in_plain_digits_is_refused_before_any_request(
    capsys, tmp_path, command, option, value
):
    # before: int() read `5_0` as 50 (and `+5`, ` 5` or `٥` as 5), as --limit once did
    file = tmp_path / "rows.txt"
    file.write_text("1 1:0.5\n")
    argv = [str(file) if word == "FILE" else word for word in command]
    with pytest.raises(SystemExit) as refused:
        main([*argv, option, value, "--url", "http://127.0.0.1:1"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: expected a whole number in plain digits" in err, err
