"""`margin` — the service's command line.

  margin serve    migrate, then run the API and a local worker pool (one command, SQLite default)
  margin migrate  upgrade the database to the latest schema
  margin api      the API only (workers run elsewhere)
  margin worker   workers only (the local pool, or procrastinate with WORKER_BACKEND=procrastinate)

Every command reads the same settings: flags override the environment (DATA_DIR, DATABASE_URL, ...).
The client commands (datasets, train, jobs, models, registry, runs, predict, evaluate) talk to a
running service (margin_client/cli.py); they and `margin --version` work without the service's
stack installed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.config import Settings

DEMO_FILE = Path(__file__).resolve().parent / "demo" / "heart_scale"
log = logging.getLogger("margin")


def _settings(args: argparse.Namespace) -> Settings:
    from app.config import Settings

    overrides = {}
    for name in ("data_dir", "database_url", "host", "port", "workers"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    settings = Settings(**overrides)
    settings.ensure_dirs()
    return settings


def _problems(exc) -> str:
    """A settings ValidationError as one line: each variable and what is wrong with it (not
    its value, which may be a secret)."""
    problems = []
    for error in exc.errors():
        name = "_".join(str(part) for part in error["loc"]).upper()
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {message}" if name else message)
    return "; ".join(problems)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="data directory (DATA_DIR; ./margin-data)")
    parser.add_argument("--database-url", help="SQLAlchemy URL (DATABASE_URL; SQLite in data dir)")


def _http(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (HOST; 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind (PORT; 8000)")


def _service_installed() -> bool:
    """Whether the service's stack is installed (a client-only install, margin[client], has
    none), found without importing it: every command builds the parser, and the client
    commands would otherwise wait for SQLAlchemy and pydantic to load."""
    try:
        return all(find_spec(name) is not None for name in ("sqlalchemy", "pydantic_settings"))
    except ImportError:  # a finder that refuses the name
        return False


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="margin", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"margin {version('margin')}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="migrate, then run the API and local workers")
    _common(serve)
    _http(serve)
    serve.add_argument("--workers", type=int, help="local worker processes (WORKERS; cores)")
    serve.add_argument("--demo", action="store_true", help="load the demo dataset heart_scale")
    migrate = commands.add_parser("migrate", help="upgrade the database schema")
    _common(migrate)
    migrate.add_argument("--revision", default="head", help="target revision (default head)")
    api = commands.add_parser("api", help="run the API only")
    _common(api)
    _http(api)
    worker = commands.add_parser("worker", help="run workers only")
    _common(worker)
    worker.add_argument("--workers", type=int, help="local worker processes (WORKERS; cores)")
    worker.add_argument(
        "--check",
        action="store_true",
        help="health check: exit 0 if a worker of this host beat into the database recently",
    )
    commands.add_parser("warm", help="compile the solver kernels into Numba's cache (once)")
    storage = commands.add_parser("storage", help="object storage (STORAGE_URL)")
    storage_commands = storage.add_subparsers(dest="storage_command", required=True)
    copy = storage_commands.add_parser(
        "migrate", help="copy a data directory's datasets and results into STORAGE_URL"
    )
    _common(copy)
    copy.add_argument(
        "--from", dest="source", required=True, help="the old storage, e.g. file:///old/dir"
    )
    if _service_installed():
        from app import cli_keys

        cli_keys.add_parser(commands, _common)
    try:
        from margin_client import cli as client_cli
    except ImportError:  # an install without the client package
        return parser
    client_cli.add_commands(commands)
    return parser


def cmd_migrate(settings: Settings, revision: str = "head") -> None:
    from app import migrate
    from app.storage import get_storage

    migrate.upgrade(settings.db_url, revision)
    log.info("database at revision %s", migrate.current(settings.db_url))
    get_storage(settings).ensure_bucket()  # a new deployment's bucket, made on first start


def cmd_storage_migrate(settings: Settings, source_url: str) -> int:
    """Copy every stored object (datasets, prediction CSVs, checkpoints) from `source_url` to
    STORAGE_URL, skipping those already there; safe to run again."""
    from app.storage import check_storage_url, copy_between, get_storage, open_storage

    try:
        check_storage_url(source_url)
    except ValueError as exc:  # was open_storage's traceback
        print(f"margin storage: --from: {str(exc).removeprefix('STORAGE_URL: ')}", file=sys.stderr)
        return 2
    source = open_storage(source_url, settings.storage_timeout_s)
    target = get_storage(settings)
    if source.url.rstrip("/") == target.url.rstrip("/"):
        raise SystemExit(f"--from is STORAGE_URL itself ({target.url}): nothing to copy")
    target.ensure_bucket()
    copied = skipped = 0
    prefixes = ("datasets/", "predictions/", "checkpoints/")
    for key, done in copy_between(source, target, prefixes, settings.data_dir / "tmp"):
        copied, skipped = copied + done, skipped + (not done)
        if done:
            log.info("copied %s", key)
    log.info("%d objects copied to %s, %d already there", copied, target.url, skipped)
    return 0


def _load_demo(settings: Settings) -> None:
    """Store the demo dataset, parsing it in a child process so that the API process stays small."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(
        target=_load_demo_child, args=(settings.model_dump(mode="json"),)
    )
    child.start()
    child.join()
    if child.exitcode != 0:
        raise SystemExit(f"loading the demo dataset failed (exit code {child.exitcode})")


def _load_demo_child(settings_data: dict) -> None:
    from app import logs
    from app.config import Settings
    from app.db import Database
    from app.services.dataset_commit import import_file

    settings = Settings(**settings_data)
    logs.configure(settings.log_format)
    db = Database(settings.db_url)
    try:
        dataset, how = import_file(db, settings, DEMO_FILE, "heart_scale")
    finally:
        db.dispose()
    log.info("demo dataset %s %s", dataset.id, how if how == "created" else "already present")


def _run_api(settings: Settings) -> None:
    import uvicorn

    from app.http_guard import guarded_protocol, raise_open_files_limit
    from app.main import create_app

    raise_open_files_limit(settings.max_connections + 256)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        # JSON lines: uvicorn's loggers write through the root handler (app.logs)
        **({"log_config": None} if settings.log_format == "json" else {}),
        http=guarded_protocol(settings),  # header size and read-time limits, connection cap
    )


def cmd_serve(settings: Settings, demo: bool) -> None:
    from app.jobs.local_pool import LocalPool

    cmd_migrate(settings)
    if demo:
        _load_demo(settings)
    pool = None
    if settings.worker_backend == "local":
        pool = LocalPool(settings)
        pool.start()
    else:
        log.info("WORKER_BACKEND=%s: run `margin worker` for the workers", settings.worker_backend)
    try:
        _run_api(settings)
    finally:
        if pool is not None:
            pool.stop()


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "client_handler", None) is not None:
        from margin_client import cli as client_cli

        return client_cli.run(args)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        from pydantic import ValidationError

        settings = _settings(args)
    except ImportError as exc:
        raise SystemExit(f"margin {args.command} needs margin[service] installed ({exc})") from None
    except ValidationError as exc:  # was pydantic's traceback
        print(f"margin {args.command}: invalid setting: {_problems(exc)}", file=sys.stderr)
        return 2
    from app import logs
    from app.blas import limit_blas_threads

    logs.configure(settings.log_format)
    limit_blas_threads(settings.blas_threads)
    try:
        return _dispatch(args, settings)
    except Exception as exc:
        from app.db import is_unavailable
        from app.storage import StorageUnavailable

        if isinstance(exc, StorageUnavailable):  # was boto's traceback: the bucket, a copy
            again = "; run it again (it skips what is copied)" if args.command == "storage" else ""
            print(f"margin {args.command}: cannot reach the object storage: {exc}{again}",
                  file=sys.stderr)  # fmt: skip
            return 1
        if not is_unavailable(exc):
            raise
        # was the driver's traceback: `margin migrate` (or serve, keys) with the database down
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"margin {args.command}: cannot reach the database: {reason}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "serve":
        cmd_serve(settings, args.demo)
    elif args.command == "migrate":
        cmd_migrate(settings, args.revision)
    elif args.command == "api":
        _run_api(settings)
    elif args.command == "worker" and args.check:
        from app.jobs.workers import check_health

        return check_health(settings)
    elif args.command == "worker":
        from app.jobs.queue import run_worker

        run_worker(settings, args.workers)
    elif args.command == "warm":
        from app.warmup import main as warm

        return warm()
    elif args.command == "storage":
        return cmd_storage_migrate(settings, args.source)
    elif args.command == "keys":
        from app import cli_keys

        return cli_keys.run(args, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
