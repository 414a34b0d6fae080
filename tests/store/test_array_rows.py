"""``Store.list_job_rows`` (``GET /v1/jobs?combine_arrays=true``, squeue without ``-r``) on
SQLite and PostgreSQL: an array's members that wait and never started, and wait for the
same reason, are one row (their indices in Slurm's short form, at the newest one's place);
the others keep a row each; ``limit`` counts rows; the filters and paging hold."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, event

from fusesched.store import JobChange, JobRow, JobState, Store
from fusesched.store.array_rows import ArrayRow, Listed
from fusesched.store.engine import make_engine
from fusesched.store.job_filters import ALL_JOBS, JobFilters
from store.rows import job

LIMIT = "JobArrayTaskLimit"


def shown(rows: list[Listed]) -> list[str]:
    """Each row as ``id`` or ``array_[indices] (count, reason)``."""
    out = []
    for r in rows:
        if isinstance(r, ArrayRow):
            throttle = f"%{r.throttle}" if r.throttle else ""
            out.append(
                f"{r.newest.array_parent}_[{r.indices}{throttle}] {r.count} {r.newest.reason}"
            )
        else:
            out.append(r.id)
    return out


def member(array: int, index: int, seq: int, **fields: Any) -> JobRow:
    request = {"name": "arr", "array": {"start": 0, "stop": 99, "step": fields.pop("step", 1)}}
    if "throttle" in fields:
        request["array"]["max_parallel"] = fields.pop("throttle")
    return job(
        seq,
        id=f"{array}_{index}",
        name="arr",
        array_parent=str(array),
        request=request,
        **fields,
    )


@pytest.fixture
def arrays(store: Store) -> Store:
    """Job 1 (bob's, pending); array 2 (alice's, -a 0-9%2): 2_0 done, 2_1 running, 2_2..2_9
    waiting, 2_5 held (another reason) and 2_6 requeued (started once); job 12 (running);
    array 13 (carol's, queue gpu): 13_0..13_2 waiting."""
    rows = [job(1, user="bob")]
    for i in range(10):
        fields: dict[str, Any] = {"throttle": 2, "reason": LIMIT}
        if i == 0:
            fields.update(state=JobState.COMPLETED, phase="completed", start_time=5.0)
        elif i == 1:
            fields.update(state=JobState.RUNNING, phase="running", start_time=6.0, reason="")
        elif i == 5:
            fields.update(reason="JobHeldUser")
        elif i == 6:
            fields.update(start_time=7.0)
        rows.append(member(2, i, 2 + i, **fields))
    rows.append(job(12, state=JobState.RUNNING, phase="running", start_time=8.0))
    rows += [member(13, i, 13 + i, user="carol", queue="gpu", reason="Priority") for i in range(3)]
    store.add_jobs(rows)
    return store


def test_waiting_members_for_one_reason_are_one_row(arrays: Store) -> None:
    assert shown(arrays.list_job_rows()) == [
        "13_[0-2] 3 Priority",
        "12",
        "2_[2-4,7-9%2] 6 JobArrayTaskLimit",
        "2_6",
        "2_[5%2] 1 JobHeldUser",
        "2_1",
        "2_0",
        "1",
    ]
    newest = arrays.list_job_rows()[0]
    assert isinstance(newest, ArrayRow) and newest.newest.id == "13_2"


def test_limit_counts_rows_and_before_pages_by_the_newest_member(arrays: Store) -> None:
    first = arrays.list_job_rows(limit=3)
    assert shown(first) == ["13_[0-2] 3 Priority", "12", "2_[2-4,7-9%2] 6 JobArrayTaskLimit"]
    last = first[-1]
    assert isinstance(last, ArrayRow)
    rest = arrays.list_job_rows(limit=10, before_seq=last.newest.seq)
    assert shown(rest) == ["2_6", "2_[5%2] 1 JobHeldUser", "2_1", "2_0", "1"]


def test_filters_hold(arrays: Store) -> None:
    assert shown(arrays.list_job_rows(JobFilters(users=["carol", "bob"]))) == [
        "13_[0-2] 3 Priority",
        "1",
    ]
    assert shown(arrays.list_job_rows(JobFilters(queues=["gpu"]))) == ["13_[0-2] 3 Priority"]
    assert shown(arrays.list_job_rows(JobFilters(tenant="other"))) == []
    assert shown(arrays.list_job_rows(JobFilters(states=["Running"]))) == ["12", "2_1"]
    assert shown(arrays.list_job_rows(JobFilters(ids=["2_3", "2_4", "2_9", "1"]))) == [
        "2_[3-4,9%2] 3 JobArrayTaskLimit",
        "1",
    ]
    assert shown(arrays.list_job_rows(JobFilters(array_parent="13"))) == ["13_[0-2] 3 Priority"]
    assert shown(arrays.list_job_rows(JobFilters(names=["arr"], users=["carol"]))) == [
        "13_[0-2] 3 Priority"
    ]
    assert shown(arrays.list_job_rows(JobFilters(until=1004.5))) == [
        "2_[2%2] 1 JobArrayTaskLimit",
        "2_1",
        "2_0",
        "1",
    ]
    assert (
        arrays.list_job_rows(JobFilters(users=[]))
        == arrays.list_job_rows(JobFilters(states=[]))
        == []
    )


def test_a_big_array_is_one_row_with_its_step(store: Store) -> None:
    rows = [member(7, i, 1 + i // 3, step=3, reason="Resources") for i in range(0, 3000, 3)]
    store.add_jobs(rows)
    (row,) = store.list_job_rows()
    assert shown([row]) == ["7_[0-2997:3] 1000 Resources"]
    store.update_jobs([JobChange("7_300", state=JobState.CANCELLED, phase="cancelled")])
    (row, cancelled) = store.list_job_rows(limit=2)
    assert shown([row, cancelled]) == ["7_[0-297:3,303-2997:3] 999 Resources", "7_300"]


def test_unknown_or_loose_filters_are_refused(store: Store) -> None:
    with pytest.raises(TypeError, match="color"):
        JobFilters(color="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="job filter users: a collection of values, not 'bob'"):
        JobFilters(users="bob")  # (a string is a collection: of its letters)
    with pytest.raises(ValueError, match="unknown job state 'Done'"):
        JobFilters(states=["Done"])
    with pytest.raises(ValueError, match="limit"):
        store.list_job_rows(limit=0)


def test_equal_filters_are_one_value() -> None:
    """Kept sorted, without repeats: equal filters compare (and hash) equal."""
    given = JobFilters(users=["bob", "alice", "bob"], states=["Running", JobState.PENDING])
    assert given == JobFilters(users=("alice", "bob"), states=("Pending", "Running"))
    assert given.users == ("alice", "bob")
    assert given.states == (JobState.PENDING, JobState.RUNNING)
    assert hash(given) == hash(JobFilters(users={"alice", "bob"}, states=["Pending", "Running"]))


def test_scattered_indices_are_cut_as_squeue_cuts_them(store: Store) -> None:
    """Every second member of 7 started: the 200 waiting ones' indices are 200 runs, cut
    after a whole run at 64 characters (else an id of hundreds of kilobytes at 100,000)."""
    started = {"state": JobState.RUNNING, "phase": "running", "start_time": 5.0, "reason": ""}
    store.add_jobs(
        [
            member(7, i, 1 + i, **(started if i % 2 == 0 else {"reason": "Priority"}))
            for i in range(400)
        ]
    )
    row = store.list_job_rows(limit=1)[0]
    assert isinstance(row, ArrayRow) and row.count == 200
    assert row.indices == "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39,41,43,..."
    assert len(row.indices) <= 64


def test_sqlite_groups_the_waiting_members_from_their_index(tmp_path: object) -> None:
    """The waiting members are grouped from the partial index of waiting members alone (not
    the state index and each member's row: 110 ms instead of 45 at 100,000 members), all
    arrays' or one array's; before and after ``optimize``."""
    url = f"sqlite:///{tmp_path}/members.db"
    with Store(url) as store:
        store.add_jobs(job(s, state="Completed") for s in range(1, 200))
        store.add_jobs(member(200, i, 201 + i, reason="Priority") for i in range(300))
        store.add_jobs([job(600, state="Running"), job(601)])
        engine = make_engine(url)
        for _ in ("without statistics", "with statistics"):
            for filters in (ALL_JOBS, JobFilters(array_parent="200")):
                plan = _grouping_plan(store, engine, filters)
                assert "USING COVERING INDEX ix_jobs_waiting_members (state=? AND" in plan, plan
                assert "TEMP B-TREE FOR GROUP BY" not in plan, plan
            store.optimize()
        engine.dispose()
        assert shown(store.list_job_rows(limit=3)) == ["601", "600", "200_[0-299] 300 Priority"]


def _grouping_plan(store: Store, engine: Engine, filters: JobFilters) -> str:
    """SQLite's plan of the statement that groups the waiting members (captured from the
    execution of ``list_job_rows(filters)``)."""
    seen: list[Any] = []

    def capture(conn: object, clauseelement: object, *args: object) -> None:
        seen.append(clauseelement)

    event.listen(store._engine, "before_execute", capture)
    try:
        store.list_job_rows(filters)
    finally:
        event.remove(store._engine, "before_execute", capture)
    with engine.connect() as conn:
        (grouping,) = (
            str(s.compile(conn, compile_kwargs={"literal_binds": True}))
            for s in seen
            if "GROUP BY" in str(s)
        )
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {grouping}")
        return " | ".join(r[3] for r in rows)
