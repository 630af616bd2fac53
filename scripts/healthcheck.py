"""Container health check: exit 0 when the API answers GET /healthz with 200, else 1.

The image has no curl; this uses only the standard library. It reads the port the API listens on
from PORT (default 8000), as `margin api` does.
"""

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
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


if __name__ == "__main__":
    sys.exit(main())
