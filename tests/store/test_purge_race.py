"""A purge racing a submission that depends on one of the jobs it deletes
(store/dependency_lock.py): the job stays, or the submission is refused and stores nothing —
never a waiting job that names a job no longer stored. On SQLite and PostgreSQL; the
READ COMMITTED window of PostgreSQL (a submission committing between the purge's read of the
dependencies and its delete) is reproduced deterministically with two connections."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text
from tests.store.rows import job
from tests.store.test_purge import ended, ids, members

from fusesched.store import Store
from fusesched.store import purge as purge_module
from fusesched.store.dependency_lock import PurgedDependency, dependency_ids
from fusesched.store.purge import PurgeCounts, purge_jobs

AFTER_1 = {"dependencies": [{"kind": "afterok", "job_id": "1"}]}


def dangling(store: Store) -> set[str]:
    """The dependencies of stored waiting jobs on jobs (or arrays) no longer stored."""
    rows = store.list_jobs(limit=1000)
    known = {r.id for r in rows} | {r.array_parent for r in rows if r.array_parent}
    named = {d for r in store.unfinished_jobs() for d in dependency_ids(r.job.request)}
    return named - known


def test_a_submission_whose_dependency_was_purged_after_its_check_is_refused(
    store: Store,
) -> None:
    """The controller checked job 1 (stored, ended); a purge removed it before the insert:
    the insert refuses the job rather than store one waiting on nothing."""
    store.add_jobs([ended(1, 100.0), ended(2, 100.0)])
    assert purge_jobs(store, 200.0).counts.jobs == 2

    with pytest.raises(PurgedDependency, match="no longer stored") as refused:
        store.add_jobs([job(90, request=AFTER_1), job(91)])

    assert refused.value.ids == ("1",)
    assert ids(store) == set()  # all or none: job 91 is not stored either


def test_dependencies_on_stored_jobs_arrays_and_the_same_batch_are_stored(store: Store) -> None:
    store.add_jobs([ended(1, 100.0), *members(5, 5, [100.0, 101.0])])
    on_all = {
        "dependencies": [
            {"kind": "afterok", "job_id": "1"},
            {"kind": "afterany", "job_id": "5"},  # the array
            {"kind": "afterok", "job_id": "5_1"},
            {"kind": "after", "job_id": "20"},  # in this batch
            {"kind": "singleton"},  # names no job
        ]
    }
    assert store.add_jobs([job(20), job(21, request=on_all)]) == 2
    assert dangling(store) == set()


def test_a_submission_committed_between_the_purges_read_and_its_delete(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL at READ COMMITTED: a submission depending on job 1 arrives (in a thread, on
    a connection of its own) right after the deleting transaction read the waiting jobs'
    dependencies. Without the lock it commits at once and job 1 is deleted under it; with the
    lock it waits for the purge's commit and is then refused. Either way, no waiting job may
    name a job that is gone."""
    if store._engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises the two write transactions: no such window")
    store.add_jobs([ended(1, 100.0), ended(2, 100.0)])
    real_guard = purge_module._guard
    outcome: list[BaseException | int] = []
    calls: list[object] = []

    def submit() -> None:
        try:
            outcome.append(store.add_jobs([job(90, request=AFTER_1)]))
        except BaseException as error:  # (reported by the test)
            outcome.append(error)

    def read_then_a_submission(conn: Connection, keep: Any) -> Any:
        found = real_guard(conn, keep)
        calls.append(keep)
        if len(calls) == 2:  # the deleting transaction's read (the first is the pre-read)
            purger = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            thread = threading.Thread(target=submit)
            thread.start()
            until_committed_or_waiting_on(purger, thread)
        return found

    monkeypatch.setattr(purge_module, "_guard", read_then_a_submission)
    done = purge_jobs(store, 200.0, pause_s=0)

    deadline = time.monotonic() + 30
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    (result,) = outcome
    assert dangling(store) == set(), "a waiting job names a purged job"
    assert isinstance(result, PurgedDependency) and result.ids == ("1",)
    assert done.counts == PurgeCounts(jobs=2)
    assert ids(store) == set()


def until_committed_or_waiting_on(purger: int, thread: threading.Thread) -> None:
    """Return once ``thread`` has ended, or its connection waits for the purge's (``purger``,
    a backend pid) — seen by the server, so no sleep decides it."""
    from tests.store.conftest import PG_URL

    watcher = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    waiting = text("SELECT count(*) FROM pg_stat_activity WHERE :p = ANY(pg_blocking_pids(pid))")
    try:
        with watcher.connect() as conn:
            deadline = time.monotonic() + 30
            while thread.is_alive():
                if conn.execute(waiting, {"p": purger}).scalar_one():
                    return
                assert time.monotonic() < deadline, "the submission neither ended nor waited"
                time.sleep(0.005)
    finally:
        watcher.dispose()
