"""The long fuzzing profile: schemathesis against the service's own OpenAPI schema, a few thousand
generated requests (no 5xx, no schema violation). The short profile runs in the test suite.

    .venv/bin/python scripts/fuzz_long.py [--examples 300] [--seed 0]
    .venv/bin/python scripts/fuzz_long.py --stateful [--examples 300]   # two tenants, linked calls
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from fastapi.testclient import TestClient

    from tests.security import fuzz_service

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per operation")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default random)")
    parser.add_argument(
        "--stateful", action="store_true", help="stateful mode, keys for two tenants"
    )
    args = parser.parse_args()
    if args.stateful:
        return stateful(args)
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        app = fuzz_service.build_app(Path(tmp) / "data")
        start = time.perf_counter()
        with TestClient(app, raise_server_exceptions=False) as client:
            fuzz_service.seed(client)
            calls, failures = fuzz_service.fuzz(app, args.examples, seed=args.seed)
        elapsed = time.perf_counter() - start
    print(f"{calls} requests in {elapsed:.0f} s, {len(failures)} failing operations")
    for operation, message in failures.items():
        print(f"\n{operation}\n{message}")
    return 1 if failures else 0


def stateful(args) -> int:
    from fastapi.testclient import TestClient

    from tests.security import fuzz_service

    with tempfile.TemporaryDirectory() as tmp:
        app = fuzz_service.build_app(Path(tmp) / "data", auth_mode="required")
        start = time.perf_counter()
        with TestClient(app, raise_server_exceptions=False):
            headers = fuzz_service.two_tenant_headers(app)
            calls, failure = fuzz_service.fuzz_stateful(app, headers, args.examples, seed=args.seed)
        elapsed = time.perf_counter() - start
    print(f"{calls} requests in {elapsed:.0f} s (stateful, two tenants), "
          f"{'1 failure' if failure else 'no failure'}")  # fmt: skip
    if failure:
        print(failure)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
