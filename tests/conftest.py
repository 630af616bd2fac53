"""Shared fixtures: where the real datasets live, and what happens when they are absent.

Tests that compare against LIBLINEAR or scikit-learn on the shared LIBSVM datasets skip when the
data are not on the machine, unless MARGIN_REQUIRE_DATA=1 (set by `.ci/run`): then a missing
dataset fails the test, and a missing data folder fails the whole run at its start.
"""

import ctypes
import os
from pathlib import Path

import pytest

from tests.shared_dask import SharedDask

ROOT = Path(__file__).resolve().parents[1]
TEST_DATA = ROOT / "tests" / "data"
SHARED_DATA = Path(os.environ.get("MARGIN_SHARED_DATA", ROOT.parent / "shared" / "data"))
REQUIRE_DATA = os.environ.get("MARGIN_REQUIRE_DATA", "") not in ("", "0")


def pytest_configure(config):
    if REQUIRE_DATA and not SHARED_DATA.is_dir():
        raise pytest.UsageError(
            f"MARGIN_REQUIRE_DATA is set but the shared datasets are missing: {SHARED_DATA} "
            "is not a folder (set MARGIN_SHARED_DATA to where they are)"
        )


def shared_file(*parts: str) -> Path:
    """Path of a file under the shared data folder; skips the test when it is absent, or
    fails it under MARGIN_REQUIRE_DATA=1."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        message = f"{path} not found: the shared LIBSVM datasets are not on this machine"
        if REQUIRE_DATA:
            pytest.fail(f"{message} (MARGIN_REQUIRE_DATA=1)", pytrace=False)
        pytest.skip(message)
    return path


def raw_wine():
    """scikit-learn's wine data unscaled (proline runs to 1,680), class 0 against the rest: X, y
    as ±1, and the rows as LIBSVM text. Where the stopping rule holds at C = 1024, tol 0.1,
    while the objective is still far from the optimum."""
    import io

    import numpy as np
    from sklearn.datasets import dump_svmlight_file, load_wine

    X, labels = load_wine(return_X_y=True)
    y = np.where(labels == 0, 1.0, -1.0)
    text = io.BytesIO()
    dump_svmlight_file(X, y, text)
    return X, y, text.getvalue()


_C_LIBRARY = ctypes.CDLL(None)


@pytest.fixture(autouse=True)
def _same_c_rand_state_in_every_test():
    """LIBLINEAR (liblinear-official) draws its pass orders from the C library's rand(), whose
    state every earlier LIBLINEAR solve in the process advances: where a reference stopped short
    of the optimum depended on which tests ran before. Each test starts from the same state, so
    a -k selection, another order or a new test elsewhere changes no reference (the bounds are
    meant to hold for any order; this makes a failure reproducible). scikit-learn's copy of
    LIBLINEAR draws from its own generator, seeded by `random_state`."""
    _C_LIBRARY.srand(1)


@pytest.fixture
def shared_data():
    return shared_file


# `make test` runs on two pytest-xdist workers. These run one after another on one of them: tests
# that start services, worker pools, clusters or a browser, kill processes or stop the database,
# and wait on clocks (two of them at once on two cores made each other's deadlines). The other
# worker takes the rest (solvers, the API in-process, the client, the attacks' own checks) a
# file at a time, so that a module's fixtures are built once.
SERIAL = (
    "tests/reliability/", "tests/deploy/", "tests/cocoa/", "tests/client/test_dashboard_",
    "tests/client/test_cli_pipes.py", "tests/client/test_cli_terminal.py",
    "tests/client/test_client_only_install.py", "tests/client/test_job_time_bound.py",
    "tests/app/test_checkpoint_", "tests/app/test_distributed_jobs.py",
    "tests/app/test_dual_memory.py", "tests/app/test_e2e.py", "tests/app/test_event_streams.py",
    "tests/app/test_job_feed.py", "tests/app/test_job_history.py",
    "tests/app/test_job_time_bound.py", "tests/app/test_local_pool_recovery.py",
    "tests/app/test_orphaned_worker.py", "tests/app/test_serving_processes.py",
    "tests/app/test_job_cancel_recovery.py", "tests/app/test_lifecycle.py",
)  # fmt: skip


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SerialAndFiles(LoadScopeScheduling):
        """pytest-xdist's scope scheduling with two kinds of scope: the SERIAL tests, all in one
        (sent first, as the largest), and every other test file. (Its `xdist_group` marks do
        not work under pytest 9, which no longer reads the node id they rewrite.)"""

        def _split_scope(self, nodeid: str) -> str:
            return "serial" if nodeid.startswith(SERIAL) else nodeid.split("::", 1)[0]

    return SerialAndFiles(config, log)


@pytest.hookimpl(trylast=True)  # after -k, -m and any reordering
def pytest_collection_modifyitems(items):
    users = [item.nodeid for item in items if "dask_cluster" in getattr(item, "fixturenames", ())]
    SharedDask.last_user = users[-1] if users else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's own fixtures first
    if item.nodeid == SharedDask.last_user:
        SharedDask.close()


def pytest_sessionfinish(session):
    SharedDask.close()  # a run stopped before its last user (-x, a failure, Ctrl-C)


@pytest.fixture
def dask_cluster():
    """The shared LocalCluster (`SharedDask`)."""
    return SharedDask.get_cluster()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server, started once for the session (benchmarks/_s3server.py)."""
    from benchmarks._s3server import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The AWS variables of the test server in this process's environment, and a new bucket;
    returns (server, bucket). Storage clients built before are forgotten."""
    from app import storage

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    storage._cached.cache_clear()
    yield s3_server, s3_server.new_bucket()
    storage._cached.cache_clear()
