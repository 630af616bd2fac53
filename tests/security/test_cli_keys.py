"""`margin keys create|list|revoke|quota` as users run it: the key is printed once on stdout and
works against a service on the same settings; list never shows keys; revoke ends a key."""

from __future__ import annotations

import os
import subprocess
import sys

from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.tables import Tenant

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def margin_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`margin ...` in a child process, as users run it."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def margin(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`margin ...` in this process (faster); stdout and stderr captured the same way."""
    import contextlib
    import io

    from app import cli

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_keys_commands(tmp_path, shared_parser):  # noqa: F811
    data = tmp_path / "data"
    created = margin_process(
        "keys", "create", "--data-dir", str(data), "--tenant", "acme", "--name", "ci",
        "--scope", "read", "--scope", "train",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgn_")  # only the key on stdout
    key = lines[0]
    # before: Alembic's INFO log of the upgrade (a dozen lines) came first
    assert created.stderr.splitlines() == [
        next(line for line in created.stderr.splitlines() if line.startswith("created key"))
    ], created.stderr
    # DATA_DIR from the environment works the same as --data-dir
    listed = margin("keys", "list", env={"DATA_DIR": str(data)})
    assert listed.returncode == 0, listed.stderr
    assert "acme" in listed.stdout and "read,train" in listed.stdout
    assert key not in listed.stdout and key[12:] not in listed.stdout
    quota = margin("keys", "quota", "--data-dir", str(data), "--tenant", "acme", "--jobs", "3",
                   "--prediction-runs", "7")  # fmt: skip
    assert quota.returncode == 0, quota.stderr

    # a limit left out stays as it is (before: it went back to the service-wide default)
    rate = margin("keys", "quota", "--data-dir", str(data), "--tenant", "acme", "--rate",
                  "50/second", "--storage-mb", "default")  # fmt: skip
    assert rate.returncode == 0, rate.stderr
    assert "active jobs 3, active prediction runs 7, rate 50/second" in rate.stderr

    app = create_app(Settings(data_dir=data, auth_mode="required", auth_cache_s=0))
    app.state.parser = shared_parser
    with app.state.db.session() as session:
        tenant = session.get(Tenant, "acme")
        assert (tenant.max_active_jobs, tenant.max_active_prediction_runs) == (3, 7)
        assert (tenant.rate_limit, tenant.max_storage_bytes) == ("50/second", None)
    reset = margin("keys", "quota", "--data-dir", str(data), "--tenant", "acme", "--rate",
                   "default", "--jobs", "default")  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    with app.state.db.session() as session:
        tenant = session.get(Tenant, "acme")
        assert (tenant.max_active_jobs, tenant.rate_limit) == (None, None)
        assert tenant.max_active_prediction_runs == 7
    headers = {"Authorization": f"Bearer {key}"}
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        assert client.get("/v1/datasets", headers=headers).status_code == 200
        revoked = margin("keys", "revoke", "--data-dir", str(data), key[:12])
        assert revoked.returncode == 0, revoked.stderr
        assert client.get("/v1/datasets", headers=headers).status_code == 401
    assert key[:12] not in margin("keys", "list", "--data-dir", str(data)).stdout
    assert key[:12] in margin("keys", "list", "--all", "--data-dir", str(data)).stdout


def test_bad_requests_exit_non_zero_with_a_message(tmp_path):
    bad_scope = margin(
        "keys", "create", "--data-dir", str(tmp_path), "--tenant", "t", "--name", "n",
        "--scope", "root",
    )  # fmt: skip
    assert bad_scope.returncode == 2 and "root" in bad_scope.stderr
    bad_tenant = margin(
        "keys", "create", "--data-dir", str(tmp_path), "--tenant", "../x", "--name", "n",
        "--scope", "read",
    )  # fmt: skip
    assert bad_tenant.returncode == 2 and "tenant" in bad_tenant.stderr
    assert bad_tenant.stdout == ""
    missing = margin("keys", "revoke", "--data-dir", str(tmp_path), "key_nope")
    assert missing.returncode == 2 and "no key" in missing.stderr
    for option, value in (("--storage-mb", "-5"), ("--jobs", "-1")):  # before: stored
        negative = margin("keys", "quota", "--data-dir", str(tmp_path), "--tenant", "t",
                          option, value)  # fmt: skip
        assert negative.returncode == 2 and "expected a number >= 0" in negative.stderr


def test_quota_help_says_what_0_and_default_mean():
    """0 is "none allowed" for a tenant's own limit, which the service-wide
    QUOTA_ACTIVE_PREDICTION_RUNS once read as "no bound": the help says which."""
    usage = margin("keys", "quota", "--help")
    assert usage.returncode == 0
    text = " ".join(usage.stdout.split())
    assert "0 allows none" in text and "'default' puts it back to the service-wide one" in text
    assert "unset or empty: no bound" in text
    options = text.split("options:")[1]
    for flag in ("--storage-mb", "--jobs", "--prediction-runs"):
        described = options.split(f"{flag} ")[1].split(" --")[0]  # its metavar and help
        assert "(0: none), or default" in described, described
