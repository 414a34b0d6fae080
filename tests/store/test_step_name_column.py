"""Migration 0010 on a database with rows (SQLite and PostgreSQL): the tasks stored before
keep no step name, new ones keep theirs; its downgrade drops the column and keeps every
task."""

from __future__ import annotations

from alembic import command

from fusesched.store import Store
from fusesched.store.migrate import alembic_config
from store.rows import task
from store.test_step_tasks_column import seeded_then_upgraded, task_columns


def test_0010_with_rows_up_and_down(url: str) -> None:
    seeded_then_upgraded(url, "0009")
    with Store(url) as store:
        store.add_tasks([task("1", 1, group="remote", step_id=0, step_name="train.py")])
        found = {t.task_id: t.step_name for t in store.tasks_of_jobs(["1"])["1"]}
        assert found == {"1.main.0": None, "1.remote.1": "train.py"}
    names, count = task_columns(url)
    assert "step_name" in names and count == 2
    command.downgrade(alembic_config(url), "0009")
    names, count = task_columns(url)
    assert "step_name" not in names and count == 2
