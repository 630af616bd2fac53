"""Alembic environment: runs the migrations on the service's database.

The connection comes from `config.attributes["connection"]` when the caller passes one (tests,
`app.migrate`), else from `sqlalchemy.url`, else from the service settings.
"""

from alembic import context

from app.db import make_engine

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.config import Settings

    settings = Settings()
    settings.ensure_dirs()
    return settings.db_url


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=None,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
