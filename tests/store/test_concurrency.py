"""Concurrent writers lose nothing: two threads, each allocating seqs and adding jobs, tasks
and events while the other does the same (one shares the store, one opens its own)."""

from __future__ import annotations

import threading

from fusesched.store import JobChange, Store
from fusesched.store.job_filters import JobFilters
from store.rows import event, job, task

ROUNDS = 150


def writer(store: Store, name: str, errors: list[BaseException], start: threading.Barrier) -> None:
    try:
        start.wait()
        for i in range(ROUNDS):
            (seq,) = store.next_job_seq()
            job_id = f"{name}{i}"
            store.add_jobs([job(seq, id=job_id, user=name)])
            store.add_tasks([task(job_id, 0)])
            store.add_events([event("JobSubmitted", job_id)])
            store.update_jobs([JobChange(job_id, state="Running", phase="running")])
            store.list_jobs(JobFilters(users=[name]), limit=5)
    except BaseException as error:  # reported by the main thread
        errors.append(error)


def test_two_writer_threads_lose_no_rows(url: str) -> None:
    with Store(url) as shared, Store(url) as own:
        errors: list[BaseException] = []
        start = threading.Barrier(3)
        threads = [
            threading.Thread(target=writer, args=(shared, "a", errors, start)),
            threading.Thread(target=writer, args=(own, "b", errors, start)),
        ]
        for thread in threads:
            thread.start()
        shared.list_jobs()  # a reader alongside the writers
        start.wait()
        for thread in threads:
            thread.join(timeout=120)
        assert errors == []
        jobs = shared.list_jobs(limit=10 * ROUNDS)
        assert len(jobs) == 2 * ROUNDS
        assert len({j.seq for j in jobs}) == 2 * ROUNDS
        assert {j.state.value for j in jobs} == {"Running"}
        assert sum(len(shared.tasks_for_job(j.id)) for j in jobs) == 2 * ROUNDS
        assert all(len(shared.events_for_job(j.id)) == 1 for j in jobs)
        assert shared.next_job_seq() == range(2 * ROUNDS + 1, 2 * ROUNDS + 2)
