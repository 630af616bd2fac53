"""Container health check for every role of the one image (the image's HEALTHCHECK).

The role is the command the container runs (PID 1's arguments, `margin <role>`; MARGIN_ROLE
overrides): `api` and `serve` are healthy when GET /healthz on PORT answers 200; `worker` when a
warm worker process of this container beat into the database lately (`margin worker --check`,
also the exec probe to use on Kubernetes, which ignores HEALTHCHECK); one-shot roles (`migrate`,
`warm`, `storage`) are always healthy. The image has no curl: only the standard library.
"""

import os
import subprocess
import sys
import urllib.error
import urllib.request

HTTP_ROLES = ("api", "serve")


def role() -> str:
    if os.environ.get("MARGIN_ROLE"):
        return os.environ["MARGIN_ROLE"]
    try:
        with open("/proc/1/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "api"
    for arg in args:
        name = os.path.basename(arg)
        if name in (*HTTP_ROLES, "worker", "migrate", "warm", "storage", "keys"):
            return name
    return "api"


def check_http() -> int:
    url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            ok = response.status == 200
    except (OSError, urllib.error.URLError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print(f"{url}: expected status 200, got {response.status}", file=sys.stderr)
    return 0 if ok else 1


def check_worker() -> int:
    command = [sys.executable, "-m", "app.cli", "worker", "--check"]
    return subprocess.run(command, timeout=30).returncode


def main() -> int:
    current = role()
    if current in HTTP_ROLES:
        return check_http()
    if current == "worker":
        return check_worker()
    return 0


if __name__ == "__main__":
    sys.exit(main())
