"""Schema migrations, run in code: no ``alembic.ini`` is needed at run time.

The migration scripts ship inside the package (``fusesched/store/migrations``). To write a new
revision during development::

    from alembic import command
    from fusesched.store.migrate import alembic_config
    command.revision(alembic_config("sqlite:///dev.db"), "add x", autogenerate=True)

(against a database upgraded to the previous head), then review the generated file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from fusesched.store.engine import make_engine, writer

MIGRATIONS: Final = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the database at ``url``, built in code."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest revision the package ships."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None, "the store ships no migrations"
    return head


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at (``None`` for an empty database)."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Create the schema in the database at ``url``, or bring it up to ``revision``.
    Running it again on an up-to-date database changes nothing."""
    engine = make_engine(url)
    try:
        upgrade_engine(engine, revision)
    finally:
        engine.dispose()


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """:func:`upgrade` through an existing engine (needed for in-memory SQLite)."""
    with writer(engine).connect() as connection:
        config = alembic_config(engine.url.render_as_string(hide_password=False))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        connection.commit()
