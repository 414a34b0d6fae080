"""Alembic environment of the store. :func:`fusesched.store.migrate.upgrade` runs it in code
with an open connection; ``alembic_config(url)`` lets Alembic's commands run it by URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from fusesched.store.engine import make_engine, writer
from fusesched.store.schema import Base

#: Any fixed number: concurrent upgrades of one PostgreSQL database take turns on this lock.
PG_LOCK_KEY = 0x66757365


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({PG_LOCK_KEY})")
        context.run_migrations()


def main() -> None:
    config = context.config
    if context.is_offline_mode():
        context.configure(
            url=config.get_main_option("sqlalchemy.url"),
            target_metadata=Base.metadata,
            literal_binds=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = writer(make_engine(config.get_main_option("sqlalchemy.url") or ""))
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


main()
