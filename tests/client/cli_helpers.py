"""Helpers of the CLI tests (tests/client/test_cli*.py): run `margin` against the test service
in a subprocess, and read its `--json` output (plain JSON, no control codes)."""

from __future__ import annotations

import json
import subprocess

from tests.client.conftest import ROOT, Service

ESC = "\x1b"


def margin(service, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**service.env, "MARGIN_URL": service.url}
    return subprocess.run(
        Service.margin(*args), cwd=ROOT, env=env, input=stdin, capture_output=True, text=True,
        timeout=120,
    )


def as_json(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr
    assert ESC not in result.stdout
    return json.loads(result.stdout)
