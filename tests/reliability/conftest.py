"""Fixtures shared with the service tests (a migrated SQLite template, one parser process)."""

from tests.app.conftest import shared_parser, sqlite_template  # noqa: F401
