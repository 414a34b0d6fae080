"""Schema migrations, run in code: no ``alembic.ini`` is needed at run time.

The migration scripts ship inside the package (``fusesched/store/migrations``). To write a new
revision during development::

    from alembic import command
    from fusesched.store.migrate import alembic_config
    command.revision(alembic_config("sqlite:///dev.db"), "add x", autogenerate=True)

(against a database upgraded to the previous head), then review the generated file.
"""

from __future__ import annotations

import functools
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


@functools.cache
def shipped_revisions() -> frozenset[str]:
    """Every revision the package ships."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return frozenset(s.revision for s in script.walk_revisions())


class NewerSchema(ValueError):
    """The database is at a revision this package does not ship: a newer release of fusesched
    has migrated it (an upgrade rolled back without restoring the database). Alembic alone
    would answer with a traceback of its own."""

    def __init__(self, revision: str) -> None:
        super().__init__(
            f"the store's schema is at revision {revision!r}, which this release of fusesched "
            f"does not know (its newest is {head_revision()!r}): a newer release has migrated "
            "it; run that release, or restore the database backed up before the upgrade"
        )
        self.revision = revision


def upgrade_engine(engine: Engine, revision: str = "head") -> None:
    """:func:`upgrade` through an existing engine (needed for in-memory SQLite);
    :class:`NewerSchema` when the database is ahead of the package."""
    with writer(engine).connect() as connection:
        config = alembic_config(engine.url.render_as_string(hide_password=False))
        current = MigrationContext.configure(connection).get_current_revision()
        if current is not None and current not in shipped_revisions():
            raise NewerSchema(current)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
        connection.commit()
