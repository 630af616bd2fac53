"""Apply or revert the Alembic migrations programmatically (`margin migrate`, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

SCRIPT_LOCATION = Path(migrations.__file__).resolve().parent


def alembic_config(url: str) -> Config:
    """An Alembic config for `url` that needs no alembic.ini (works from an installed package)."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The database's revision (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    from app.db import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
