"""Tasks' job steps in the store: the column migration 0009 adds (upgrading a 0008 database
keeps its tasks, without a step), and what a page of listed jobs shows beside them (their
tasks and restarts, one query per chunk of jobs)."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import text

from fusesched.store import EventRow, Store, current_revision, head_revision, job_history, upgrade
from fusesched.store.engine import make_engine
from fusesched.store.migrate import alembic_config
from store.rows import job, task


def test_upgrading_a_0008_database_keeps_its_tasks_without_a_step(url: str) -> None:
    command.upgrade(alembic_config(url), "0008")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    'INSERT INTO jobs (id, seq, name, "user", tenant, queue, type, state, '
                    "phase, reason, priority, submit_time, request, nodes) VALUES ('1', 1, "
                    "'j', 'alice', 'default', 'default', 'batch', 'Completed', 'completed', "
                    "'', 0, 1.0, '{}', '[]')"
                )
            )
            conn.execute(
                text(
                    'INSERT INTO tasks (task_id, job_id, "group", "index", state, devices) '
                    "VALUES ('1.main.0', '1', 'main', 0, 'Completed', '[]')"
                )
            )
    finally:
        engine.dispose()
    upgrade(url)
    assert current_revision(url) == head_revision()
    with Store(url) as store:
        (old,) = store.tasks_for_job("1")
        assert old.task_id == "1.main.0" and old.step_id is None
        store.add_tasks([task("1", 0, group="remote", step_id=3)])
        assert [t.step_id for t in store.tasks_for_job("1")] == [None, 3]
    command.downgrade(alembic_config(url), "0008")  # and back: the column goes
    upgrade(url)


def test_tasks_and_restarts_of_a_page_of_jobs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_history, "CHUNK", 2)  # (several chunks)
    store.add_jobs(job(s) for s in range(1, 6))
    store.add_tasks(
        [
            task("1"),
            task("1", 1, group="remote", step_id=0),
            task("3"),
            task("3", 1, task_id="3-r1.main.1"),
            task("5", 0, group="remote"),
        ]
    )
    store.add_events(
        [
            EventRow(1.0, "JobRequeued", job_id="3", data={"attempt": 1}),
            EventRow(2.0, "JobRestartedInPlace", job_id="3", data={}),
            EventRow(3.0, "JobRequeued", job_id="4", data={}),
            EventRow(4.0, "JobStarted", job_id="1", data={}),
        ]
    )
    found = store.tasks_of_jobs(["1", "2", "3", "5", "9"])
    assert {job_id: [t.task_id for t in rows] for job_id, rows in found.items()} == {
        "1": ["1.main.0", "1.remote.1"],
        "3": ["3.main.0", "3-r1.main.1"],
        "5": ["5.remote.0"],
    }
    assert found["1"][1].step_id == 0
    assert store.restarts(["1", "2", "3", "4", "9"]) == {"3": 2, "4": 1}
    assert store.tasks_of_jobs([]) == {} and store.restarts([]) == {}
