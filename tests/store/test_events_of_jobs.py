"""``Store.events_of_jobs`` on SQLite and PostgreSQL: some kinds of the events of many jobs,
one query per chunk of 500 jobs, each job's in the order they were added, whatever the
chunk it falls in and however many events it has."""

from __future__ import annotations

from fusesched.store import EventRow, Store, job_history

KINDS = ("JobStarted", "CancelAsked")


def test_each_job_s_events_of_the_kinds_asked_in_the_order_added(store: Store) -> None:
    count = 2 * job_history.CHUNK + 1  # (three chunks: the boundaries 500 and 1000)
    ids = [str(n) for n in range(1, count + 1)]
    rows: list[EventRow] = []
    for step in range(3):  # (interleaved: each job's events far apart in the log)
        for n, job_id in enumerate(ids):
            kind = KINDS[(n + step) % 2]
            rows.append(EventRow(float(step), kind, job_id=job_id, data={"step": step}))
            rows.append(EventRow(float(step), "JobNotice", job_id=job_id))
    many = ids[job_history.CHUNK - 1]  # (the last job of the first chunk)
    rows += [EventRow(5.0, KINDS[i % 2], job_id=many, data={"i": i}) for i in range(3000)]
    store.add_events(rows)
    found = store.events_of_jobs([*ids, *ids[:10], "unknown"], KINDS)
    assert sorted(found) == sorted(ids)  # (a job with none has no key)
    for job_id in (ids[0], ids[job_history.CHUNK], ids[-1], many):
        alone = [r for r in store.events_for_job(job_id) if r.event.kind in KINDS]
        assert found[job_id] == alone
    assert [r.event.data["i"] for r in found[many][3:]] == list(range(3000))
    assert store.events_of_jobs([], KINDS) == {}
    assert store.events_of_jobs(ids[:3], ()) == {}
