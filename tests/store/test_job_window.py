"""``Store.list_jobs``'s time window (``sacct -S … -E …``) on SQLite and PostgreSQL: a job is in
it when it waited or ran at some time inside (submitted by ``until``, not ended before
``since``), with the other filters and ``limit``; and on SQLite the window walks the end-time
indexes, not every job."""

from __future__ import annotations

import pytest

from fusesched.store import JobRow, JobState, Store
from fusesched.store.engine import make_engine
from fusesched.store.job_filters import JobFilters
from store.rows import job


def ids(rows: list[JobRow]) -> list[str]:
    return [r.id for r in rows]


@pytest.fixture
def timed(store: Store) -> Store:
    """Submitted at 100·seq (seq 1..6): 1 ran 100..150, 2 ran 200..400, 3 ran 300..1000, 4
    cancelled while waiting at 450, 5 runs since 550, 6 waits (bob's; the others alice's)."""
    ended = {1: 150.0, 2: 400.0, 3: 1000.0, 4: 450.0}
    rows = []
    for s in range(1, 7):
        fields: dict[str, object] = {"submit_time": 100.0 * s, "user": "bob" if s == 6 else "alice"}
        if s in ended:
            state = JobState.CANCELLED if s == 4 else JobState.COMPLETED
            fields.update(state=state, phase=state.value.lower(), end_time=ended[s])
        if s == 5:
            fields.update(state=JobState.RUNNING, phase="running", start_time=550.0)
        rows.append(job(s, **fields))
    store.add_jobs(rows)
    return store


def test_a_job_is_in_a_window_it_waited_or_ran_in(timed: Store) -> None:
    assert ids(timed.list_jobs(JobFilters(since=420.0))) == ["6", "5", "4", "3"]
    assert ids(timed.list_jobs(JobFilters(since=150.0, until=250.0))) == ["2", "1"]  # (ends count)
    assert ids(timed.list_jobs(JobFilters(until=250.0))) == ["2", "1"]
    assert ids(timed.list_jobs(JobFilters(since=2000.0))) == ["6", "5"]  # the unfinished, always
    assert ids(timed.list_jobs(JobFilters(since=0.0, until=50.0))) == []
    assert ids(timed.list_jobs(JobFilters(since=420.0), limit=2)) == ["6", "5"]


def test_the_window_goes_with_the_other_filters(timed: Store) -> None:
    assert ids(timed.list_jobs(JobFilters(since=420.0, users=["alice"]))) == ["5", "4", "3"]
    assert ids(timed.list_jobs(JobFilters(since=420.0, users=["bob"]))) == ["6"]
    assert ids(timed.list_jobs(JobFilters(since=420.0, states=[JobState.COMPLETED]))) == ["3"]
    assert ids(timed.list_jobs(JobFilters(since=420.0, ids=["1", "3", "5"]))) == ["5", "3"]
    assert ids(timed.list_jobs(JobFilters(since=100.0, until=350.0), before_seq=3)) == ["2", "1"]
    assert ids(timed.list_jobs(JobFilters(since=420.0, tenant="default", users=[]))) == []


def test_a_requeued_job_that_ended_once_is_listed_once(timed: Store) -> None:
    timed.add_jobs([job(7, submit_time=700.0, state=JobState.PENDING, end_time=800.0)])
    assert ids(timed.list_jobs(JobFilters(since=750.0))) == ["7", "6", "5", "3"]


def test_sqlite_walks_the_end_time_indexes(tmp_path: object) -> None:
    """Ended jobs by the end-time index (a user's: the user's end-time index), the live ones
    by the partial index of unfinished jobs (or the state index: the same rows); before and
    after ``optimize``."""
    url = f"sqlite:///{tmp_path}/window.db"
    with Store(url) as store:
        store.add_jobs(
            job(s, user=f"u{s % 7}", state="Completed", end_time=float(s)) for s in range(1, 300)
        )
        store.add_jobs([job(300, state="Running"), job(301)])
        engine = make_engine(url)
        for _ in ("without statistics", "with statistics"):
            with engine.connect() as conn:
                for users, index in ((None, "ix_jobs_end_time"), (["u1"], "ix_jobs_user_end_time")):
                    stmt = _statement(store, users)
                    compiled = stmt.compile(conn, compile_kwargs={"literal_binds": True})
                    plan = " | ".join(
                        r[3] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
                    )
                    assert f"USING INDEX {index} (" in plan, plan
                    live = ("ix_jobs_unfinished", "ix_jobs_state_seq (state=?)")
                    assert any(f"USING INDEX {i}" in plan for i in live), plan
                    assert "SCAN jobs" not in plan.replace("SCAN jobs USING", ""), plan
            store.optimize()
        engine.dispose()
        assert ids(store.list_jobs(JobFilters(since=290.0, users=["u1"]))) == ["295"]


def _statement(store: Store, users: list[str] | None) -> object:
    """The statement ``list_jobs(since=…, user=users)`` runs (captured from its execution)."""
    from sqlalchemy import event

    seen: list[object] = []
    engine = store._engine

    def capture(conn: object, clauseelement: object, *args: object) -> None:
        seen.append(clauseelement)

    event.listen(engine, "before_execute", capture)
    try:
        store.list_jobs(JobFilters(since=250.0, users=users, tenant="default", queues=["default"]))
    finally:
        event.remove(engine, "before_execute", capture)
    return seen[-1]
