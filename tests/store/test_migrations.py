"""The shipped migrations: from empty, idempotent, reversible, and equal to the models."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

from fusesched.store import NoStore, Store, current_revision, head_revision, upgrade
from fusesched.store.engine import make_engine, sqlite_file
from fusesched.store.migrate import alembic_config
from fusesched.store.schema import Base
from store.rows import job

TABLES = {
    "environments",
    "jobs",
    "tasks",
    "nodes",
    "events",
    "counters",
    "tokens",
    "reservations",
    "alembic_version",
}


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_the_schema_in_an_empty_database(url: str) -> None:
    assert current_revision(url) is None
    assert table_names(url) == set()
    upgrade(url)
    assert current_revision(url) == head_revision()
    assert table_names(url) == TABLES


def test_upgrade_is_idempotent_and_keeps_data(url: str) -> None:
    with Store(url) as store:
        store.add_jobs([job(1)])
        assert store.next_job_seq() == range(2, 3)
    upgrade(url)
    upgrade(url)
    with Store(url) as store:
        assert store.get_job("1") is not None
        assert store.next_job_seq() == range(3, 4)
    assert current_revision(url) == head_revision()


def test_the_migrations_create_exactly_the_models(url: str) -> None:
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def index_definitions(engine: Engine) -> dict[str, str]:
    """Each index of the store's tables by name, as the database has it: its columns and, for
    a partial index, its condition (which Alembic's comparison does not look at)."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            query = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        else:
            query = (
                "SELECT indexname, split_part(indexdef, ' USING ', 2) FROM pg_indexes "
                "WHERE schemaname = current_schema() AND tablename <> 'alembic_version'"
            )
        return {name: " ".join(sql.split()) for name, sql in conn.exec_driver_sql(query)}


def test_the_migrations_create_the_models_indexes_with_their_conditions(url: str) -> None:
    """The migrated database's indexes are those the models create, partial indexes'
    conditions included (a condition that differs would not be compared above)."""
    upgrade(url)
    engine = make_engine(url)
    try:
        migrated = index_definitions(engine)
        command.downgrade(alembic_config(url), "base")
        Base.metadata.create_all(engine)
        assert index_definitions(engine) == migrated
        assert "WHERE" in migrated["ix_jobs_waiting_members"]
    finally:
        engine.dispose()


def test_downgrade_to_empty_and_back(url: str) -> None:
    upgrade(url)
    command.downgrade(alembic_config(url), "base")
    assert table_names(url) == {"alembic_version"}
    assert current_revision(url) is None
    upgrade(url)
    assert table_names(url) == TABLES


def test_a_store_opened_without_migrate_leaves_the_database_alone(url: str) -> None:
    Store(url, migrate=False).close()
    assert table_names(url) == set()


def test_an_existing_store_is_opened_as_it_is_and_a_missing_one_is_not_created(
    url: str,
) -> None:
    file = sqlite_file(url)
    if file is not None:  # SQLite: no file yet, and opening it to read creates none
        with pytest.raises(NoStore, match=f"no store at {file}"):
            Store.existing(url)
        assert not file.exists()
        file.touch()
    with pytest.raises(NoStore, match="holds no fusesched tables"):
        Store.existing(url)
    assert table_names(url) == set()
    with Store(url) as store:
        store.add_jobs([job(1)])
    with Store.existing(url) as store:
        assert store.get_job("1") is not None


def test_sqlite_runs_in_wal_mode_with_foreign_keys(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    try:
        with engine.connect() as conn:
            pragma = conn.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        engine.dispose()


def test_in_memory_sqlite_keeps_its_schema_across_calls() -> None:
    with Store("sqlite://") as store:
        store.add_jobs([job(1)])
        assert [j.id for j in store.list_jobs()] == ["1"]


def test_other_databases_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported database URL"):
        make_engine("mysql://localhost/x")


def test_sqlite_plans_use_the_intended_indexes(tmp_path: object) -> None:
    """SQLite keeps no value statistics, so the queries steer it: recovery never walks the
    whole table (the partial index of live jobs, or the state index), and a user's listing
    walks the user's index whatever else is asked. Checked before and after ``optimize``."""
    url = f"sqlite:///{tmp_path}/plans.db"
    with Store(url) as store:
        store.add_jobs(job(s, user=f"u{s % 7}", state="Completed") for s in range(1, 300))
        store.add_jobs([job(300, state="Running"), job(301)])
        engine = make_engine(url)
        for _ in ("without statistics", "with statistics"):
            with engine.connect() as conn:

                def plan(sql: str) -> str:
                    rows = conn.exec_driver_sql(
                        f"EXPLAIN QUERY PLAN {sql}", ("x",) * sql.count("?")
                    )
                    return " | ".join(r[3] for r in rows)

                live = "SELECT * FROM jobs WHERE state IN ('Pending', 'Running') ORDER BY seq"
                assert plan(live) in (
                    "SCAN jobs USING INDEX ix_jobs_unfinished",
                    "SEARCH jobs USING INDEX ix_jobs_state_seq (state=?) | "
                    "USE TEMP B-TREE FOR ORDER BY",
                )
                mine = (
                    "SELECT * FROM jobs WHERE user = ? AND queue || '' = ? AND state || '' IN (?) "
                    "ORDER BY seq DESC LIMIT 50"
                )
                assert plan(mine) == "SEARCH jobs USING INDEX ix_jobs_user_seq (user=?)"
            store.optimize()
        engine.dispose()
        assert [d.job.id for d in store.unfinished_jobs()] == ["300", "301"]


def test_a_plain_postgresql_url_means_psycopg_3() -> None:
    engine = make_engine("postgresql://postgres@127.0.0.1:5432/test")
    assert engine.dialect.driver == "psycopg"
    engine.dispose()
