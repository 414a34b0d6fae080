"""Migration 0009 on a database with rows (SQLite and PostgreSQL): the tasks stored before keep
no step and no step size, new ones keep both; its downgrade drops both columns and keeps
every task."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from fusesched.store import Store, upgrade
from fusesched.store.engine import make_engine
from fusesched.store.migrate import alembic_config
from store.rows import task

JOB = (
    'INSERT INTO jobs (id, seq, name, "user", tenant, queue, type, state, phase, reason, '
    "priority, submit_time, request, nodes) VALUES ('1', 1, 'j', 'alice', 'default', "
    "'default', 'batch', 'Completed', 'completed', '', 0, 1.0, '{}', '[]')"
)
TASK = (
    'INSERT INTO tasks (task_id, job_id, "group", "index", state, devices) '
    "VALUES ('1.main.0', '1', 'main', 0, 'Completed', '[]')"
)


def task_columns(url: str) -> tuple[set[str], int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            names = {c["name"] for c in inspect(conn).get_columns("tasks")}
            count = conn.execute(text("SELECT count(*) FROM tasks")).scalar_one()
        return names, int(count)
    finally:
        engine.dispose()


def seeded_then_upgraded(url: str, revision: str) -> None:
    """The database at migration ``revision`` with one job and its task, then at the head."""
    command.upgrade(alembic_config(url), revision)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(JOB))
            conn.execute(text(TASK))
    finally:
        engine.dispose()
    upgrade(url)


def test_0009_with_rows_up_and_down(url: str) -> None:
    seeded_then_upgraded(url, "0008")
    with Store(url) as store:
        (old,) = store.tasks_for_job("1")
        assert (old.step_id, old.step_tasks) == (None, None)
        store.add_tasks([task("1", 1, group="remote", step_id=0, step_tasks=4)])
        found = {t.task_id: (t.step_id, t.step_tasks) for t in store.tasks_of_jobs(["1"])["1"]}
        assert found == {"1.main.0": (None, None), "1.remote.1": (0, 4)}
    names, count = task_columns(url)
    assert {"step_id", "step_tasks"} <= names and count == 2
    command.downgrade(alembic_config(url), "0008")
    names, count = task_columns(url)
    assert not {"step_id", "step_tasks"} & names and count == 2
