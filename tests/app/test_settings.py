"""Settings: every variable is validated once, in `app.config.Settings` (nothing reads the
environment elsewhere)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings

APP = Path(__file__).resolve().parents[2] / "app"


def test_worker_shutdown_timeout_is_a_validated_setting(monkeypatch):
    monkeypatch.setenv("WORKER_SHUTDOWN_TIMEOUT_S", "7.5")
    assert Settings().worker_shutdown_timeout_s == 7.5
    monkeypatch.setenv("WORKER_SHUTDOWN_TIMEOUT_S", "soon")
    with pytest.raises(ValidationError, match="worker_shutdown_timeout_s"):
        Settings()
    with pytest.raises(ValidationError):
        Settings(worker_shutdown_timeout_s=-1)


def test_the_orphaned_worker_exit_is_a_validated_setting(monkeypatch):
    """WORKER_ORPHAN_EXIT_S: 10 s by default (the pool's constant it replaces), more than 0 (at
    0 an orphaned worker could not hand back even a job that hears the shutdown at once)."""
    assert Settings().worker_orphan_exit_s == 10.0
    monkeypatch.setenv("WORKER_ORPHAN_EXIT_S", "120")
    assert Settings().worker_orphan_exit_s == 120.0
    assert Settings(worker_orphan_exit_s=0.001).worker_orphan_exit_s == 0.001
    monkeypatch.setenv("WORKER_ORPHAN_EXIT_S", "0")
    with pytest.raises(ValidationError, match="worker_orphan_exit_s"):
        Settings()


@pytest.mark.parametrize("name", ["SEND_TIMEOUT_S", "EVENT_SEND_TIMEOUT_S"])
def test_the_send_timeout_is_read_under_its_name_and_its_former_one(monkeypatch, name):
    """SEND_TIMEOUT_S bounds every streamed response; it was EVENT_SEND_TIMEOUT_S when only the
    event streams had one, and a deployment that sets the old name keeps its value."""
    monkeypatch.setenv(name, "7")
    assert Settings().send_timeout_s == 7
    assert Settings(send_timeout_s=3).send_timeout_s == 3
    monkeypatch.setenv(name, "0")
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.parametrize(
    "name", ["QUOTA_STORAGE_MB", "QUOTA_ACTIVE_JOBS", "QUOTA_ACTIVE_PREDICTION_RUNS"]
)
def test_a_service_wide_quota_is_at_least_1_and_empty_is_no_bound(monkeypatch, name):
    """A tenant's own quota of 0 allows none (`margin keys quota`), while
    QUOTA_ACTIVE_PREDICTION_RUNS=0 meant no bound: 0 is refused at start, saying how "no bound"
    is spelt, and that is the same for every service-wide quota."""
    monkeypatch.setenv(name, "0")
    with pytest.raises(ValidationError, match="0 is not a service-wide quota; leave it empty"):
        Settings()
    monkeypatch.setenv(name, "")
    assert getattr(Settings(), name.lower()) is None
    monkeypatch.setenv(name, "3")
    assert getattr(Settings(), name.lower()) == 3
    monkeypatch.setenv(name, "-1")
    with pytest.raises(ValidationError, match=name.lower()):
        Settings()


def test_a_tenant_cannot_hold_every_upload_slot():
    assert Settings(max_uploads_per_tenant=3, max_uploads_in_flight=4).max_uploads_in_flight == 4
    with pytest.raises(ValidationError, match="must be less than MAX_UPLOADS_IN_FLIGHT"):
        Settings(max_uploads_per_tenant=4, max_uploads_in_flight=4)


@pytest.mark.parametrize(
    # before: s3:// (no bucket), file://host/path and file:// passed here, and stopped
    # `margin migrate`, `serve` and `api` with open_storage's ValueError traceback
    "url", ["http://bucket", "bucket/prefix", "s4://b", "s3://", "s3:///prefix", "file://host/d",
            "file://"],
)
def test_storage_url_is_validated(url):
    with pytest.raises(ValidationError, match="storage_url"):
        Settings(storage_url=url)


def test_storage_defaults_to_the_data_directory(tmp_path):
    settings = Settings(data_dir=tmp_path)
    assert settings.storage == f"file://{tmp_path}"
    assert not settings.uses_object_storage
    assert settings.cache_path == tmp_path / "cache"
    assert Settings(storage_url="s3://b/p").uses_object_storage


def test_no_module_reads_a_setting_from_the_environment():
    """Only app/config.py reads settings; `os.environ` elsewhere in app/ only sets variables
    for child processes or libraries (Numba's thread count)."""
    names = {name.upper() for name in Settings.model_fields}
    offenders = []
    for path in sorted(APP.rglob("*.py")):
        if path.name == "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "os.environ.get", "os.getenv", "environ.get", "getenv",
            ) and node.args:  # fmt: skip
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                key = node.slice
            if isinstance(key, ast.Constant) and key.value in names:
                offenders.append(f"{path.relative_to(APP)}:{node.lineno} {key.value}")
    assert offenders == []


def _readme_settings_table() -> dict[str, str]:
    """Each variable of the README's settings table with its default cell."""
    readme = (APP.parent / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        row = re.match(r"\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \| ([^|]*) \|", line)
        if row:
            for name in re.findall(r"`([A-Z_]+)`", row.group(1)):
                rows[name] = row.group(2)
    return rows


def test_the_readme_settings_table_lists_every_setting_with_its_default():
    rows = _readme_settings_table()
    missing = sorted(name.upper() for name in Settings.model_fields if name.upper() not in rows)
    assert missing == []
    wrong = []
    for name, field in Settings.model_fields.items():
        default = field.default
        if default is None or isinstance(default, Path):
            continue  # derived defaults (cores, DATA_DIR/...) are stated in words
        if isinstance(default, float) and default.is_integer():
            default = int(default)
        if str(default) not in re.findall(r"[\w./:]+", rows[name.upper()]):
            wrong.append(f"{name.upper()}: README {rows[name.upper()]!r}, config {default!r}")
    assert wrong == []


FLOAT_SETTINGS = [
    name for name, field in Settings.model_fields.items() if "float" in str(field.annotation)
]


@pytest.mark.parametrize("value", ["inf", "1e400", "-inf", "nan"])
def test_a_number_setting_is_finite(monkeypatch, value):
    """MAX_UPLOAD_MB=inf (or 1e400, which reads as inf) passed `gt=0`: `margin serve` then died
    at start with "OverflowError: cannot convert float infinity to integer", and a timeout or
    a bound of inf was no bound at all. Every number setting must be a finite number, refused
    with its name."""
    assert len(FLOAT_SETTINGS) > 20
    for name in FLOAT_SETTINGS:
        monkeypatch.setenv(name.upper(), value)
        with pytest.raises(ValidationError, match=f"(?s)\\b{name}\n.*(finite|greater)"):
            Settings()
        monkeypatch.delenv(name.upper())


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("MAX_UPLOAD_MB", "inf", "finite number"),
        ("STORAGE_URL", "s3://", "names a bucket"),
        ("PORT", "http", "valid integer"),
        ("DATABASE_URL", "postgres-db", "not a SQLAlchemy URL"),
    ],
)
def test_a_command_with_a_bad_setting_names_it_without_a_traceback(
    monkeypatch, capsys, tmp_path, name, value, says
):
    """Before: `margin migrate` (and serve, api, worker) printed pydantic's ValidationError, or
    SQLAlchemy's ArgumentError for DATABASE_URL, as a traceback of 30 lines."""
    from app.cli import main

    monkeypatch.setenv(name, value)
    assert main(["migrate", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("margin migrate: invalid setting"), err
    assert f"{name}: " in err and says in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "margin.db").exists()


def test_a_command_whose_database_is_down_says_so_in_one_line(capsys, tmp_path):
    """Before: `margin migrate` (and serve, keys) with PostgreSQL down printed psycopg's
    OperationalError as a traceback of 60 lines."""
    import socket

    from app.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://margin:secret@127.0.0.1:{port}/margin"
    assert main(["migrate", "--data-dir", str(tmp_path), "--database-url", url]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("margin migrate: cannot reach the database: ") and str(port) in err
    assert "secret" not in err


def test_a_command_whose_object_store_is_away_says_so_in_one_line(
    capsys, monkeypatch, tmp_path
):
    """Before: `margin migrate` (which makes the bucket) and `margin storage migrate` with the
    store unreachable printed boto's and StorageUnavailable's traceback; `--from s3://` a
    ValueError's."""
    import socket

    from app import storage
    from app.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1",
        "STORAGE_URL": "s3://bucket/margin", "STORAGE_TIMEOUT_S": "1",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    storage._cached.cache_clear()
    try:
        assert main(["migrate", "--data-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err  # the migration's log lines, then the error
        assert "Traceback" not in err, err
        assert err.splitlines()[-1].startswith("margin migrate: cannot reach the object storage: ")
        source = f"file://{tmp_path}"
        assert main(["storage", "migrate", "--data-dir", str(tmp_path), "--from", source]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        last = err.splitlines()[-1]
        assert last.startswith("margin storage: cannot reach the object storage: "), err
        assert "run it again" in last
        bad = ["storage", "migrate", "--data-dir", str(tmp_path), "--from", "s3://"]
        assert main(bad) == 2
        err = capsys.readouterr().err
        assert err == "margin storage: --from: s3://bucket/prefix names a bucket, got 's3://'\n"
    finally:
        storage._cached.cache_clear()
