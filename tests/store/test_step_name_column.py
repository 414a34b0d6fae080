"""Migration 0010 on a database with rows (SQLite and PostgreSQL): the tasks stored before
keep no step name, new ones keep theirs; its downgrade drops the column and keeps every
task."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from fusesched.store import Store, upgrade
from fusesched.store.engine import make_engine
from fusesched.store.migrate import alembic_config
from store.rows import task
from store.test_step_tasks_column import JOB, TASK, task_columns


def test_0010_with_rows_up_and_down(url: str) -> None:
    command.upgrade(alembic_config(url), "0009")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(JOB))
            conn.execute(text(TASK))
    finally:
        engine.dispose()
    upgrade(url)
    with Store(url) as store:
        store.add_tasks([task("1", 1, group="remote", step_id=0, step_name="train.py")])
        found = {t.task_id: t.step_name for t in store.tasks_of_jobs(["1"])["1"]}
        assert found == {"1.main.0": None, "1.remote.1": "train.py"}
    names, count = task_columns(url)
    assert "step_name" in names and count == 2
    command.downgrade(alembic_config(url), "0009")
    names, count = task_columns(url)
    assert "step_name" not in names and count == 2
