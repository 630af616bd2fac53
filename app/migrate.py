"""Apply or revert the Alembic migrations programmatically (`margin migrate`, tests)."""

from __future__ import annotations

import logging
from pathlib import Path

# Alembic logs each of its own plugins at INFO as it imports them ("setup plugin
# alembic.autogenerate.schemas", seven lines opening every start); the revisions applied stay
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)

from alembic import command  # noqa: E402 (after the level above)
from alembic.config import Config  # noqa: E402

import migrations  # noqa: E402

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
