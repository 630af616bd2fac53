"""A real `margin serve` on loopback for the client, CLI and browser tests (one per session),
plus one that requires API keys, a dataset whose training runs until it is cancelled, and the
dashboard tests' browser and page (helpers of those tests: `tests.client.dashboard`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import scipy.sparse as sp

from tests.deploy.cluster import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
HEART = ROOT / "app" / "demo" / "heart_scale"
MAX_PREDICT_BATCH = 50  # small, so that clients must batch under it
ARTIFACTS = Path(os.environ.get("MARGIN_TEST_ARTIFACTS", ROOT / "test-artifacts"))


class Service:
    """`margin serve` in a subprocess on a free loopback port, with its own data directory."""

    def __init__(self, data_dir: Path, **env: str):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PROGRESS_INTERVAL_S": "0.05",
            "MAX_PREDICT_BATCH": str(MAX_PREDICT_BATCH),
            "SOLVER_THREADS": "1",
            **env,
        }
        for name in ("DATABASE_URL", "MARGIN_URL", "MARGIN_API_KEY", "AUTH_MODE"):
            if name not in env:
                self.env.pop(name, None)
        self.log = open(data_dir / "serve.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.margin("serve", "--data-dir", str(data_dir), "--port", str(self.port),
                        "--workers", "1"),
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:  # a first start compiles the solver kernels: minutes on a loaded machine
            wait_for(self._ready, 240, f"margin serve on {self.url}", every=0.2)
        except BaseException:
            self.stop()  # a server that never became ready is not left running
            raise

    @staticmethod
    def margin(*args: str) -> list[str]:
        return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())",
                *args]

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.logs()
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def logs(self) -> str:
        return (self.data_dir / "serve.log").read_text(errors="replace")[-4000:]

    def create_key(self, *scopes: str) -> str:
        out = subprocess.run(
            self.margin("keys", "create", "--data-dir", str(self.data_dir), "--tenant", "acme",
                        "--name", "tests", *[f"--scope={s}" for s in scopes]),
            cwd=ROOT, env=self.env, capture_output=True, text=True, check=True,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    live = Service(tmp_path_factory.mktemp("served"))
    yield live
    live.stop()


@pytest.fixture(scope="session")
def keyed_service(tmp_path_factory):
    live = Service(tmp_path_factory.mktemp("keyed"), AUTH_MODE="required", HOST="127.0.0.1")
    live.key = live.create_key("admin")
    yield live
    live.stop()


@pytest.fixture
def client(service):
    from margin_client import Client

    with Client(service.url) as c:
        yield c


def slow_problem(seed: int = 0):
    """Noisy labels on random sparse rows: hinge loss at a large C with a tiny tolerance keeps
    the solver busy (each pass takes about a millisecond) until its time limit."""
    rng = np.random.default_rng(seed)
    X = sp.random(20_000, 400, density=0.02, random_state=seed, format="csr")
    y = np.where(rng.random(20_000) < 0.5, -1.0, 1.0)
    return X, y


SLOW_PARAMS = {"loss": "hinge", "C": 1000.0, "tol": 1e-12, "max_iter": 10_000_000,
               "time_limit": 60.0}


@pytest.fixture(scope="session")
def slow_dataset(service) -> str:
    from margin_client import Client

    with Client(service.url) as c:
        return c.datasets.upload(slow_problem(), name="slow")["id"]


@pytest.fixture(scope="session")
def heart_dataset(service) -> str:
    from margin_client import Client

    with Client(service.url) as c:
        return c.datasets.upload(HEART, name="heart")["id"]


@pytest.fixture(scope="session")
def heart_model(service, heart_dataset) -> str:
    from margin_client import Client

    with Client(service.url) as c:
        job = c.jobs.create(heart_dataset, C=0.5, tol=1e-3).wait(check=True)
        return job.model_id


def heart_table(path, delimiter: str = ",", names=None) -> list[str]:
    """heart_scale as a table with a header (label first), and the feature names."""
    names = names or [f"f{j}" for j in range(1, 14)]
    lines = [delimiter.join(["label", *names])]
    for line in HEART.read_text().splitlines():
        label, *pairs = line.split()
        row = ["0"] * 13
        for pair in pairs:
            index, value = pair.split(":")
            row[int(index) - 1] = value
        lines.append(delimiter.join([label, *row]))
    path.write_text("\n".join(lines) + "\n")
    return names


def artifact_dir(name: str) -> Path:
    path = ARTIFACTS / name
    path.mkdir(parents=True, exist_ok=True)
    return path


# the dashboard tests' browser: Debian's Chromium driven by Playwright (never a downloaded
# browser), one per test module, and a page per test that may reach the service only
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # Playwright gives the browser a new, empty profile directory of its own
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, service):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    elsewhere = []

    def only_the_service(route):
        if route.request.url.startswith(service.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_service)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.service = service
    yield page
    context.close()
    assert not elsewhere, f"the page reached outside the service: {elsewhere}"
    assert not errors, errors
