"""MARGIN_REQUIRE_DATA=1 (set by .ci/run) turns missing reference data into failures."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, shared_file

PROBE = "tests/test_require_data.py::test_probe_needs_one_shared_file"


def test_probe_needs_one_shared_file():
    """Stands for every reference test: it needs a shared dataset."""
    assert shared_file("heart_scale", "heart_scale").stat().st_size > 0


def run_probe(shared_data, require):
    # no third-party plugins: they are not needed here and cost seconds to load
    env = {
        **os.environ,
        "MARGIN_SHARED_DATA": str(shared_data),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    env.pop("MARGIN_REQUIRE_DATA", None)
    if require:
        env["MARGIN_REQUIRE_DATA"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", PROBE],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("folder", "require", "code", "says"),
    [
        ("missing", False, 0, "not found: the shared LIBSVM datasets are not on this machine"),
        ("missing", True, 4, "MARGIN_REQUIRE_DATA is set but the shared datasets are missing"),
        ("empty", True, 1, "not found: the shared LIBSVM datasets are not on this machine"),
    ],
)
def test_missing_data_skips_or_fails(tmp_path, folder, require, code, says):
    shared = tmp_path / "data"
    if folder == "empty":
        shared.mkdir()
    out = run_probe(shared, require)
    assert out.returncode == code, out.stdout + out.stderr
    assert says in out.stdout + out.stderr
    if not require:
        assert "1 skipped" in out.stdout
