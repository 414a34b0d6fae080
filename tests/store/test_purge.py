"""Job-record retention (store/purge.py): the jobs that ended before a cutoff go whole — row,
tasks, events, job tokens, their folders, the environments no job names any more — in
bounded batches; waiting and running jobs, jobs a waiting job depends on, arrays not all
ended and the audit log stay; a dry run counts and changes nothing; a cutoff in the future,
not a time, or young enough to erase recalled fair-share usage is refused. On SQLite and
PostgreSQL."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import func, select
from tests.store.rows import event, job, task

from fusesched.api.access import AUDIT
from fusesched.store import JobChange, JobState, Store, TokenKind, TokenRow
from fusesched.store import purge as purge_module
from fusesched.store.environments import environment_key
from fusesched.store.purge import (
    AUDIT_KIND,
    PurgeCounts,
    PurgeRefused,
    _candidates,
    check_cutoff,
    purge_jobs,
)
from fusesched.store.schema import environments, events, tokens

DAY = 86400.0
SHELL = {"PATH": "/usr/bin", "HOME": "/home/ana"}
OTHER_SHELL = {"PATH": "/opt/bin"}


def ended(seq: int, end: float, **fields: Any) -> Any:
    """A job that ran and ended (Completed) at ``end``."""
    values: dict[str, Any] = {
        "state": JobState.COMPLETED,
        "phase": "completed",
        "start_time": end - 10,
        "end_time": end,
        "nodes": ("n0",),
    }
    values.update(fields)
    return job(seq, **values)


def count(store: Store, table: Any, *where: Any) -> int:
    with store._read() as conn:
        stmt = select(func.count()).select_from(table).where(*where)
        return int(conn.execute(stmt).scalar_one())


def job_token(store: Store, job_id: str) -> None:
    store.add_token(
        TokenRow(f"tok-{job_id}", "h" * 64, TokenKind.JOB, 1.0, user="ana", job_id=job_id)
    )


def ids(store: Store) -> set[str]:
    return {r.id for r in store.list_jobs(limit=1000)}


def test_the_jobs_ended_before_the_cutoff_go_whole(store: Store) -> None:
    store.add_jobs(
        [
            ended(1, 100.0, request={"name": "a", "submit_env": SHELL}),
            ended(2, 150.0, state=JobState.FAILED, phase="failed", request={"submit_env": SHELL}),
            ended(3, 300.0, request={"name": "c", "submit_env": OTHER_SHELL}),  # after the cutoff
            job(4),  # waiting
            job(5, state=JobState.RUNNING, phase="running", start_time=50.0),
            # requeued: waits again, its last run's end still in its row
            job(6, end_time=90.0, start_time=80.0),
            # ended at no recorded time
            job(7, state=JobState.CANCELLED, phase="cancelled"),
            ended(8, 120.0, state=JobState.CANCELLED, phase="cancelled"),
        ]
    )
    # a heterogeneous job: its components are its task groups
    store.add_tasks([task("1", 0, "het0"), task("1", 0, "het1"), task("1", 1, "het1")])
    store.add_tasks([task("2"), task("3"), task("5")])
    store.add_events(
        [
            event("JobSubmitted", "1"),
            event("JobEnded", "1"),
            event(AUDIT, "1", action="cancel"),  # the audit log outlives its job
            event("JobEnded", "3"),
            event("NodeDrained"),
        ]
    )
    job_token(store, "1")
    job_token(store, "3")
    store.add_token(TokenRow("tok-user", "h" * 64, TokenKind.USER, 1.0, user="ana"))

    done = purge_jobs(store, 200.0)

    assert done.counts == PurgeCounts(jobs=3, tasks=4, events=2, tokens=1, environments=1)
    assert not done.more and done.after is None
    assert ids(store) == {"3", "4", "5", "6", "7"}
    assert store.tasks_for_job("1") == [] and len(store.tasks_for_job("3")) == 1
    assert [e.event.kind for e in store.events_for_job("1")] == [AUDIT]
    assert count(store, events) == 3  # the audit event, job 3's, the node's
    assert count(store, tokens, tokens.c.job_id == "1") == 0
    assert count(store, tokens) == 2
    # SHELL was named by jobs 1 and 2 alone; job 3's stays
    assert store.environments([environment_key(SHELL)]) == {}
    assert store.environments([environment_key(OTHER_SHELL)]) != {}
    assert count(store, environments) == 1
    # nothing more to do
    assert purge_jobs(store, 200.0).counts == PurgeCounts()


def test_a_dry_run_counts_and_changes_nothing(store: Store, tmp_path: Path) -> None:
    store.add_jobs(
        [
            ended(1, 100.0, request={"submit_env": SHELL}),
            ended(2, 110.0, request={"submit_env": SHELL}),
            ended(3, 120.0, request={"submit_env": OTHER_SHELL}),
            ended(4, 500.0, request={"submit_env": OTHER_SHELL}),
        ]
    )
    store.add_tasks([task("1"), task("2"), task("2", 1)])
    store.add_events([event("JobEnded", "1"), event("JobEnded", "3")])
    logs = tmp_path / "logs"
    (logs / "1").mkdir(parents=True)
    (logs / "1" / "1.main.0.log").write_bytes(b"x" * 10)
    (logs / "1" / "1.main.0.end").write_bytes(b"10\n")

    dry = purge_jobs(store, 200.0, folders=[logs], dry_run=True)

    expected = PurgeCounts(jobs=3, tasks=3, events=2, environments=1, files=2, bytes=13)
    assert dry.counts == expected
    assert ids(store) == {"1", "2", "3", "4"} and (logs / "1").is_dir()
    assert count(store, environments) == 2
    assert purge_jobs(store, 200.0, folders=[logs]).counts == expected
    assert ids(store) == {"4"} and not (logs / "1").exists()


def test_a_job_a_waiting_job_depends_on_stays(store: Store) -> None:
    waiting = {"dependencies": [{"kind": "afterok", "job_id": "1"}]}
    store.add_jobs([ended(1, 100.0), ended(2, 100.0), job(3, request=waiting)])

    done = purge_jobs(store, 200.0)

    assert done.counts == PurgeCounts(jobs=1, kept=1)
    assert ids(store) == {"1", "3"}
    # once the waiting job has ended, nothing holds job 1
    store.update_jobs([JobChange("3", state=JobState.COMPLETED, end_time=150.0)])
    assert purge_jobs(store, 200.0).counts == PurgeCounts(jobs=2)
    assert ids(store) == set()


def members(parent: int, first_seq: int, ends: list[float | None]) -> list[Any]:
    """Array ``parent``'s members, one per end time (None: still waiting)."""
    out = []
    for i, end in enumerate(ends):
        seq, member = first_seq + i, f"{parent}_{i}"
        if end is None:
            out.append(job(seq, id=member, array_parent=str(parent)))
        else:
            out.append(ended(seq, end, id=member, array_parent=str(parent)))
    return out


def test_an_array_goes_whole_or_not_at_all(store: Store) -> None:
    store.add_jobs(members(10, 10, [100.0, 110.0, 120.0]))  # all ended before the cutoff
    store.add_jobs(members(20, 20, [100.0, None]))  # one waits
    store.add_jobs(members(30, 30, [100.0, 300.0]))  # one ended after the cutoff
    store.add_jobs(members(40, 40, [100.0, 101.0, 102.0, 103.0, 104.0]))
    store.add_jobs(members(50, 50, [100.0, 101.0]))
    depends = [
        {"kind": "afterany", "job_id": "40"},  # the whole array
        {"kind": "afterok", "job_id": "50_1"},  # one member: its array stays whole
    ]
    store.add_jobs([job(90, request={"dependencies": depends})])

    # (batches of two: array 10 spans batches and still goes whole)
    done = purge_jobs(store, 200.0, batch=2, pause_s=0)

    assert done.counts == PurgeCounts(jobs=3, kept=9)
    left = ids(store)
    assert not any(i.startswith("10_") for i in left)
    assert {"20_0", "20_1", "30_0", "30_1", "40_0", "40_4", "50_0", "50_1"} <= left


def test_the_jobs_kept_by_the_caller_stay(store: Store) -> None:
    store.add_jobs([ended(1, 100.0), ended(2, 100.0), *members(5, 5, [100.0, 101.0])])
    done = purge_jobs(store, 200.0, keep={"1", "5_1"})
    assert done.counts == PurgeCounts(jobs=1, kept=3)
    assert ids(store) == {"1", "5_0", "5_1"}


def test_batches_and_a_time_budget_go_on_from_where_they_stopped(store: Store) -> None:
    store.add_jobs([ended(i, 100.0 + i // 2) for i in range(1, 8)])  # end times repeat
    store.add_tasks([task(str(i)) for i in range(1, 8)])

    first = purge_jobs(store, 200.0, batch=3, budget_s=0.0)

    assert first.more and first.counts.jobs == 3 and first.after is not None
    assert len(ids(store)) == 4
    dry = purge_jobs(store, 200.0, batch=3, dry_run=True, after=first.after)
    assert dry.counts.jobs == 4
    rest = purge_jobs(store, 200.0, batch=3, budget_s=None, after=first.after, pause_s=0)
    assert not rest.more and rest.counts == PurgeCounts(jobs=4, tasks=4)
    assert ids(store) == set()


def test_a_kept_job_is_judged_once_per_call_and_batches_go_past_it(store: Store) -> None:
    waiting = {"dependencies": [{"kind": "afterok", "job_id": str(i)} for i in range(1, 4)]}
    store.add_jobs([ended(i, 100.0 + i) for i in range(1, 7)])
    store.add_jobs([job(9, request=waiting)])
    done = purge_jobs(store, 200.0, batch=2, pause_s=0)
    assert done.counts == PurgeCounts(jobs=3, kept=3)
    assert ids(store) == {"1", "2", "3", "9"}


def test_an_environment_another_job_names_stays(store: Store) -> None:
    store.add_jobs(
        [
            ended(1, 100.0, request={"submit_env": SHELL}),
            job(2, request={"submit_env": dict(SHELL)}),  # waiting, same shell
        ]
    )
    done = purge_jobs(store, 200.0)
    assert done.counts == PurgeCounts(jobs=1)
    assert store.environments([environment_key(SHELL)]) == {environment_key(SHELL): SHELL}


def test_the_jobs_folders_go_and_links_are_not_followed(store: Store, tmp_path: Path) -> None:
    store.add_jobs([ended(1, 100.0), ended(2, 100.0), ended(3, 500.0)])
    logs, pools = tmp_path / "logs", tmp_path / "pools"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    for root in (logs, pools):
        (root / "1" / "sub").mkdir(parents=True)
        (root / "1" / "1.main.0.log").write_text("hello")
        (root / "1" / "sub" / "x").write_text("ab")
        (root / "3").mkdir()
    (logs / "1" / "away").symlink_to(outside)  # a link in a job's folder: not followed
    (logs / "2").symlink_to(outside)  # a job's folder that is a link: left alone

    expected = PurgeCounts(jobs=2, files=5, bytes=14 + len(str(outside)))
    assert purge_jobs(store, 200.0, folders=[logs, pools], dry_run=True).counts == expected
    done = purge_jobs(store, 200.0, folders=[logs, pools])

    assert done.counts == expected
    assert not (logs / "1").exists() and not (pools / "1").exists()
    assert (logs / "2").is_symlink() and (outside / "precious").read_text() == "keep me"
    assert (logs / "3").is_dir() and (pools / "3").is_dir()


def test_check_cutoff_refuses_bad_and_unsafe_cutoffs() -> None:
    now = 100 * DAY
    for bad, why in (
        (math.nan, "must be a time"),
        (math.inf, "must be a time"),
        (-1.0, "before 1970"),
        (now + 1, "is in the future"),
    ):
        with pytest.raises(PurgeRefused, match=why):
            check_cutoff(bad, now, None)
        with pytest.raises(PurgeRefused, match=why):
            check_cutoff(bad, now, None, force=True)
    check_cutoff(now, now, None)  # no fair share: anything up to now
    since = now - 20 * DAY
    check_cutoff(since, now, since)  # the runs fair share reads back stay
    with pytest.raises(PurgeRefused, match="would erase usage fair share still counts") as info:
        check_cutoff(since + 1, now, since)
    assert "ended since 1970-03-22T00:00:00" in str(info.value)
    check_cutoff(since + 1, now, since, force=True)
    with pytest.raises(PurgeRefused, match="half-life is infinite"):
        check_cutoff(1.0, now, -math.inf)
    with pytest.raises(PurgeRefused, match="must be a time"):
        purge_jobs(Store("sqlite://"), math.nan)


def test_the_audit_kind_is_the_apis() -> None:
    assert AUDIT_KIND == AUDIT


def test_candidates_are_read_through_the_end_time_index(store: Store) -> None:
    if store._engine.dialect.name != "sqlite":
        pytest.skip("query plans are SQLite's")
    store.add_jobs([ended(i, 100.0 + i) for i in range(1, 50)])
    store.optimize()
    seen: list[tuple[str, Any]] = []

    def note(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    with store._read() as conn:
        sa_event.listen(conn, "before_cursor_execute", note)
        rows = _candidates(conn, 200.0, (110.0, "10"), 5)
        sa_event.remove(conn, "before_cursor_execute", note)
        statement, parameters = seen[-1]
        plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    assert [r[0] for r in rows] == ["11", "12", "13", "14", "15"]
    detail = " ".join(str(row[-1]) for row in plan)
    assert "ix_jobs_end_time" in detail, detail


def test_a_job_submitted_during_the_sweep_keeps_its_environment(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environments are found unnamed without a lock; a submission that lands right after
    (naming one of them) is seen by the deleting transaction, which spares it."""
    store.add_jobs([ended(1, 100.0, request={"submit_env": SHELL})])
    store.add_jobs([ended(2, 100.0, request={"submit_env": OTHER_SHELL})])
    found = purge_module._unnamed

    def then_a_submission(conn: Any, leaving: Any) -> set[str]:
        unnamed = found(conn, leaving)
        store.add_jobs([job(9, request={"name": "new", "submit_env": dict(SHELL)})])
        return unnamed

    monkeypatch.setattr(purge_module, "_unnamed", then_a_submission)

    done = purge_jobs(store, 200.0)

    assert done.counts == PurgeCounts(jobs=2, environments=1)  # OTHER_SHELL's alone
    (waiting,) = store.unfinished_jobs()
    assert store.environments([waiting.job.env_id]) == {environment_key(SHELL): SHELL}


def test_a_job_that_a_job_submitted_during_the_purge_depends_on_stays(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job submitted after the purge read the waiting jobs' dependencies (its first step)
    and before a batch's deletion, that depends on a job of that batch (or on an array of
    it), keeps it: checked again in the deleting transaction."""
    store.add_jobs([ended(1, 100.0), ended(2, 100.0), *members(5, 5, [100.0, 101.0])])
    first_guard = purge_module._guard
    calls = []

    def guard_then_submit(conn: Any, keep: Any) -> Any:
        found = first_guard(conn, keep)
        if not calls:  # (the purge's first read; then a submission comes)
            depends = [
                {"kind": "afterok", "job_id": "1"},
                {"kind": "afterany", "job_id": "5"},
            ]
            store.add_jobs([job(90, request={"dependencies": depends})])
        calls.append(keep)
        return found

    monkeypatch.setattr(purge_module, "_guard", guard_then_submit)
    done = purge_jobs(store, 200.0, pause_s=0)

    assert ids(store) == {"1", "5_0", "5_1", "90"}
    assert done.counts == PurgeCounts(jobs=1, kept=3)
