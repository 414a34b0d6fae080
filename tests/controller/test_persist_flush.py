"""``Persistence.flush``: one change the store refuses is dropped without holding back the
others, and changes made while the database is locked are written once it is free again
(a real SQLite lock held by another connection)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from fusesched.controller.persist import Persistence
from fusesched.store import engine
from fusesched.submit.request import JobRequest


def submitted(persist: Persistence) -> str:
    request = JobRequest.model_validate({"groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]})
    seq = persist.allocate_seqs(1)
    spec = request.to_job_spec(str(seq), 0.0)
    persist.jobs_submitted([seq], request, [spec], 0.0)
    persist.flush()
    return spec.id


def reason(persist: Persistence, job_id: str) -> str:
    view = persist.get_job(job_id)
    assert view is not None
    return view.reason


def test_a_refused_change_is_dropped_and_the_others_are_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        job = submitted(persist)
        persist.job_reason(job, "first")
        persist.job_reason("no-such-job", "refused")
        persist.job_event(job, "Notice", "kept", 1.0)
        with caplog.at_level(logging.ERROR, logger="fusesched.controller.persist"):
            persist.flush()
        assert reason(persist, job) == "first"
        assert "no-such-job" in caplog.text
        assert [e.event.kind for e in persist.store.events_for_job(job)][-1] == "Notice"
        persist.job_reason(job, "later")  # later writes are not held back by the bad one
        persist.flush()
        assert reason(persist, job) == "later"
    finally:
        persist.close()


def test_changes_made_while_the_database_is_locked_are_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_MS", 100)  # fail fast instead of waiting 30 s
    path = tmp_path / "db.sqlite"
    persist = Persistence(f"sqlite:///{path}")
    try:
        job = submitted(persist)
        lock = sqlite3.connect(path, timeout=0.1, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        persist.job_reason(job, "while locked")
        persist.flush()  # no error: the change is kept
        lock.execute("ROLLBACK")
        lock.close()
        persist.flush()
        assert reason(persist, job) == "while locked"
    finally:
        persist.close()


def test_a_clean_stop_does_not_skip_job_numbers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first = Persistence(url)
    assert [submitted(first), submitted(first)] == ["1", "2"]
    first.close()  # gives back 3..1000
    second = Persistence(url)
    assert submitted(second) == "3"
    second.store.close()  # a crash: no close(), the rest of its block is skipped
    third = Persistence(url)
    try:
        assert submitted(third) == "1003"  # (the second took 3..1002)
    finally:
        third.close()
