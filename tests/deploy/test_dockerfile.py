"""The Dockerfile: hadolint clean, and the properties the deployment relies on."""

import http.server
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from tests.deploy.conftest import ROOT, venv_tool

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "ARG" and not result:  # a global ARG before the first stage
            continue
        if keyword == "FROM":
            result.append([])
        result[-1].append((keyword, rest))
    return result


def test_hadolint_reports_nothing():
    hadolint = venv_tool("hadolint")
    # The strictest threshold: even `info` findings fail, so none is left unexplained.
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_hadolint_is_not_silenced():
    # Findings are fixed, not ignored: no inline ignore pragmas and no config that ignores rules.
    assert "hadolint ignore" not in DOCKERFILE.read_text()
    config = ROOT / ".hadolint.yaml"
    if config.exists():
        assert "ignored" not in config.read_text()


def test_multi_stage_on_a_base_image_argument():
    """The base is `ARG PYTHON_IMAGE=python:3.11-slim` (pin a digest with --build-arg)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    froms = [rest for keyword, rest in instructions() if keyword == "FROM"]
    assert len(froms) >= 2, froms
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms), froms
    assert any("COPY --from=" in f"{k} {r}" for k, r in stages()[-1]), "runtime copies the build"


def test_layers_put_the_code_after_the_dependencies_and_kernels():
    """A change to the service's code rebuilds only the layers after `COPY app`: no dependency
    install and no kernel compile comes after it, only a no-deps install of the project."""
    final = stages()[-1]
    steps = [f"{k} {r}" for k, r in final]
    copy_deps = next(i for i, s in enumerate(steps) if s.startswith("COPY --from="))
    warm = next(i for i, s in enumerate(steps) if s.startswith("RUN") and "warm_kernels" in s)
    copy_app = next(i for i, s in enumerate(steps) if s.startswith("COPY app "))
    copy_solvers = next(i for i, s in enumerate(steps) if s.startswith("COPY solvers "))
    assert copy_deps < copy_solvers < warm < copy_app
    after = [s for s in steps[copy_app:] if s.startswith("RUN")]
    assert len(after) == 1 and "--no-deps" in after[0], after
    deps = [f"{k} {r}" for k, r in stages()[0] if k == "RUN"]
    assert any("--require-hashes" in r and "requirements/service.txt" in r for r in deps), deps


def test_lock_files_pin_every_dependency_with_hashes():
    """requirements/*.txt pin every package with its hashes, satisfy pyproject's bounds, and
    hold the versions installed here (the ones the tests ran against)."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in ("service", "test"):
        text = (ROOT / "requirements" / f"{extra}.txt").read_text()
        pins = dict(
            (canonicalize_name(m[0]), m[1])
            for m in re.findall(r"^([A-Za-z0-9._-]+)==(\S+) \\$", text, re.M)
        )
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text)
        for block in blocks:
            if "==" in block.split("\n", 1)[0]:
                assert "--hash=sha256:" in block, block.split("\n", 1)[0]
        wanted = list(project["dependencies"])
        for name in ("sklearn", "service", *(["test"] if extra == "test" else [])):
            wanted += project["optional-dependencies"][name]
        for spec in wanted:
            req = Requirement(spec)
            if req.name == "margin":
                continue
            name = canonicalize_name(req.name)
            assert name in pins, f"{name} is not in requirements/{extra}.txt"
            assert req.specifier.contains(pins[name], prereleases=True), (spec, pins[name])
        if extra == "test":
            for name, version in pins.items():
                try:
                    installed = metadata.version(name)
                except metadata.PackageNotFoundError:
                    continue
                assert installed == version, f"{name}: {installed} installed, {version} locked"


def test_runtime_stage_runs_as_a_non_root_user():
    final = stages()[-1]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users
    # The kernels are compiled after switching user, so the cache belongs to that user.
    keywords = [k for k, _ in final]
    warm = next(i for i, (k, r) in enumerate(final) if k == "RUN" and "warm_kernels" in r)
    assert keywords.index("USER") < warm


def test_numba_cache_is_writable_and_warmed():
    final = stages()[-1]
    env = " ".join(rest for keyword, rest in final if keyword == "ENV")
    match = re.search(r"NUMBA_CACHE_DIR=(\S+)", env)
    assert match, "NUMBA_CACHE_DIR is not set in the runtime stage"
    cache = match.group(1)
    chown = [r for k, r in final if k == "RUN" and "chown" in r]
    assert chown and cache in chown[0], "the cache directory is not handed to the runtime user"


def test_healthcheck_runs_the_probe_script():
    checks = [rest for keyword, rest in instructions() if keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert '["python", "/app/scripts/healthcheck.py"]' in checks[0]


class _Handler(http.server.BaseHTTPRequestHandler):
    status_for = {"/healthz": 200}

    def do_GET(self):
        self.send_response(self.status_for.get(self.path, 404))
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status, expected_rc", [(200, 0), (503, 1)])
def test_healthcheck_script_follows_healthz(status, expected_rc, monkeypatch):
    monkeypatch.setattr(_Handler, "status_for", {"/healthz": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "PORT": str(server.server_address[1])}
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "healthcheck.py")], env=env, timeout=30
        )
    finally:
        server.shutdown()
    assert proc.returncode == expected_rc


def test_healthcheck_script_fails_when_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PORT": str(port)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "healthcheck.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert f"127.0.0.1:{port}/healthz" in proc.stderr


def test_one_image_for_every_role():
    pairs = dict(instructions())
    assert pairs["ENTRYPOINT"] == '["margin"]'
    assert pairs["CMD"] == '["api"]'


def test_requirements_script_rejects_an_unknown_extra():
    proc = subprocess.run(
        [sys.executable, "scripts/requirements_from_pyproject.py", "pyproject.toml", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "extra 'nope' not in pyproject.toml" in proc.stderr


@pytest.mark.parametrize(
    "path", ["solvers", "app", "migrations", "pyproject.toml", "README.md", "requirements"]
)
def test_build_context_keeps_what_the_image_needs(path):
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert path not in ignored
    for copied in ("scripts/healthcheck.py", "requirements/service.txt"):
        assert not any(copied.startswith(p.rstrip("/")) for p in ignored)


def _probe(role: str, tmp_path, **env) -> subprocess.CompletedProcess:
    with socket.socket() as sock:  # nothing listens on PORT: a worker serves no HTTP
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "healthcheck.py")],
        env={**os.environ, "PORT": str(port), "MARGIN_ROLE": role, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_healthcheck_of_a_worker_is_its_heartbeat(tmp_path):
    """A worker container is healthy while a worker process of its host beats into the database
    (it serves no HTTP, so probing the API port would mark every worker unhealthy)."""
    from datetime import timedelta

    from app import migrate
    from app.db import Database
    from app.jobs import workers
    from app.tables import Worker, utcnow

    url = f"sqlite:///{tmp_path / 'margin.db'}"
    migrate.upgrade(url)
    env = {"DATABASE_URL": url, "DATA_DIR": str(tmp_path)}
    assert _probe("worker", tmp_path, **env).returncode == 1  # no worker yet
    db = Database(url)
    worker_id = workers.new_worker_id()
    workers.register(db, worker_id, "procrastinate")
    checked = _probe("worker", tmp_path, **env)
    assert checked.returncode == 0, checked.stderr
    with db.write() as session:  # its heartbeat stopped a minute ago
        session.get(Worker, worker_id).heartbeat_at = utcnow() - timedelta(minutes=1)
    stale = _probe("worker", tmp_path, **env)
    assert stale.returncode == 1 and "no worker" in stale.stderr
    db.dispose()
    assert _probe("migrate", tmp_path, **env).returncode == 0  # a one-shot role
    assert _probe("api", tmp_path, **env).returncode == 1  # the API role still probes HTTP
