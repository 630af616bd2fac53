"""The client and the `margin` client commands work where only `margin[client]` is installed:
nothing they import reaches the service's stack, and the extra does not depend on it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

from packaging.requirements import Requirement

from tests.client.conftest import HEART, ROOT

SERVICE_STACK = ("fastapi", "starlette", "sqlalchemy", "pydantic", "pydantic_settings",
                 "alembic", "uvicorn", "sse_starlette", "procrastinate", "psycopg", "sklearn")

BLOCKER = f"""
import sys
BLOCKED = {SERVICE_STACK!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed (blocked)")
sys.meta_path.insert(0, Blocker())
"""


def run_blocked(code: str, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + code, *args], cwd=ROOT, capture_output=True, text=True,
        timeout=180, env=env,
    )


CLI = """
from app.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
sys.exit(code)
"""


def test_cli_without_the_service_stack(service, tmp_path):
    env = {**service.env, "MARGIN_URL": service.url}
    version = run_blocked(CLI, "--version", env=env)
    assert version.returncode == 0 and version.stdout.startswith("margin "), version.stderr
    job = run_blocked(CLI, "train", str(HEART), "--C", "0.5", "--follow", "--json", env=env)
    assert job.returncode == 0, job.stderr
    model_id = json.loads(job.stdout)["model_id"]
    out = tmp_path / "p.csv"
    predicted = run_blocked(CLI, "predict", model_id, str(HEART), "-o", str(out), env=env)
    assert predicted.returncode == 0, predicted.stderr
    assert len(out.read_text().splitlines()) == 271
    serve = run_blocked(CLI, "serve", env=env)
    assert serve.returncode != 0 and "margin[service]" in serve.stderr


def test_python_client_without_the_service_stack(service):
    code = f"""
import numpy as np
from margin_client import Client, RemoteLinearSVC
X = np.random.default_rng(0).normal(size=(80, 5)); y = np.where(X[:, 0] > 0, 1, -1)
with Client({service.url!r}) as client:
    clf = RemoteLinearSVC(client, C=1.0).fit(X, y)
    assert clf.score(X, y) > 0.9
    assert client.models.predict(clf.model_id_, X[:3]).labels.shape == (3,)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("ok")
"""
    result = run_blocked(code)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def _requirements(dist: str, extras: set[str]) -> list[Requirement]:
    out = []
    for text in metadata.requires(dist) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
            out.append(req)
    return out


def test_the_client_extra_does_not_depend_on_the_service_stack():
    """The installed `margin[client]` requirement closure holds none of the service stack."""
    seen: set[str] = set()
    queue = [(r, set(r.extras)) for r in _requirements("margin", {"client"})
             if r.name != "margin" or "client" in r.extras]
    names = {re.sub(r"[-_.]+", "-", r.name.lower()) for r, _ in queue}
    assert {"httpx", "httpx-sse", "rich", "numpy", "scipy", "numba"} <= names
    while queue:
        req, extras = queue.pop()
        name = re.sub(r"[-_.]+", "-", req.name.lower())
        if name in seen or name == "margin":
            continue
        seen.add(name)
        queue.extend((r, set(r.extras)) for r in _requirements(req.name, extras))
    stack = {n.replace("_", "-") for n in SERVICE_STACK} | {"scikit-learn"}
    assert not seen & stack, seen & stack


BASE_BLOCKER = BLOCKER.replace(
    "BLOCKED = ", "BLOCKED = ('httpx', 'httpx_sse', 'rich', 'boto3', 'prometheus_client') + "
)


def test_base_install_help_and_the_extra_each_command_needs():
    """`pip install margin` (numpy, scipy, numba only): `margin --help` works, and each command
    that needs more names the extra to install."""
    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", BASE_BLOCKER + CLI.replace("assert not loaded, loaded", ""),
             *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout and "worker" in helped.stdout
    for command, extra in (("serve", "margin[service]"), ("worker", "margin[service]"),
                           ("datasets", "margin[client]")):  # fmt: skip
        args = (command, "list") if command == "datasets" else (command,)
        failed = run(*args)
        assert failed.returncode != 0 and extra in failed.stderr, (command, failed.stderr)
        assert "Traceback" not in failed.stderr


def test_client_commands_leave_the_installed_service_stack_unloaded(service):
    """Where the service is installed too, a client command loads none of its stack: every
    `margin` command builds the whole parser, and `keys`'s part of it once imported SQLAlchemy
    and pydantic (seconds of every client command's start on a busy machine)."""
    env = {**service.env, "MARGIN_URL": service.url}
    code = f"import sys\nBLOCKED = {SERVICE_STACK!r}\n" + CLI  # the check, not the blocker
    listed = subprocess.run([sys.executable, "-c", code, "datasets", "list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=180, env=env)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "keys" in subprocess.run([sys.executable, "-m", "app.cli", "--help"], cwd=ROOT,
                                    capture_output=True, text=True, timeout=180).stdout  # fmt: skip


def test_commands_that_send_no_matrix_do_not_load_scipy(service):
    # Every CLI test and every script pays each command's start: scipy's import was 0.6 s of a
    # 1 s `margin datasets list`, though only the commands that build a matrix need it.
    env = {**service.env, "MARGIN_URL": service.url}
    code = CLI.replace("loaded = sorted(", "assert 'scipy' not in sys.modules\nloaded = sorted(")
    for args in (("datasets", "list"), ("jobs", "list", "--json"), ("models", "list")):
        result = run_blocked(code, *args, env=env)
        assert result.returncode == 0, (args, result.stderr)
