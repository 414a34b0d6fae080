"""Migration 0011 on a database with rows (SQLite and PostgreSQL): the tasks stored before
keep no reason, new ones keep the one their agent gave when they ended; its downgrade drops
the column and keeps every task."""

from __future__ import annotations

from alembic import command

from fusesched.model.phases import OOM_REASON
from fusesched.store import Store, TaskChange
from fusesched.store.migrate import alembic_config
from store.rows import task
from store.test_step_tasks_column import seeded_then_upgraded, task_columns


def test_0011_with_rows_up_and_down(url: str) -> None:
    seeded_then_upgraded(url, "0010")
    with Store(url) as store:
        store.add_tasks([task("1", 1, group="remote", step_id=0)])
        store.update_tasks([TaskChange("1.remote.1", exit_code=0, reason=OOM_REASON)])
        found = {t.task_id: t.reason for t in store.tasks_of_jobs(["1"])["1"]}
        assert found == {"1.main.0": None, "1.remote.1": OOM_REASON}
    names, count = task_columns(url)
    assert "reason" in names and count == 2
    command.downgrade(alembic_config(url), "0010")
    names, count = task_columns(url)
    assert "reason" not in names and count == 2
