"""What build of the code is running: the package version and the commit it was built from.

The commit is stamped at build time into ``app/BUILD_COMMIT`` (the Dockerfile writes it from its
``COMMIT`` build argument); a source checkout (an editable install) reads it from git instead.
An installed wheel or image built without the stamp has no commit: None, never a guess.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

STAMP = Path(__file__).with_name("BUILD_COMMIT")
_SHA = re.compile(r"[0-9a-f]{7,64}")


@lru_cache
def package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("margin")
    except PackageNotFoundError:
        return None


@lru_cache
def commit() -> str | None:
    """The commit of the running code (40 hex digits), or None when unknown."""
    try:
        stamped = STAMP.read_text().strip()
    except OSError:
        stamped = ""
    if _SHA.fullmatch(stamped):
        return stamped
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out if _SHA.fullmatch(out) else None
