"""The retention thread (controller/retention.py) while its purge fails: a database that does
not answer is said in one line each period (no traceback), the thread goes on, and the next
period after the database is back purges; any other failure — SystemExit included — is logged
with its traceback and the thread goes on too."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.test_purge_routes import DAY, controller, run_job

from fusesched.controller.retention import Retention
from fusesched.controller.service import Controller
from fusesched.store.engine import make_engine, writer

#: A PostgreSQL server nobody runs (port 1 refuses at once): the real driver's error.
NOWHERE = "postgresql+psycopg://postgres@127.0.0.1:1/fusesched?connect_timeout=3"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Controller, TestClient, Clock]]:
    clock = Clock()
    clock.now = 100 * DAY
    ctl, client = controller(tmp_path, clock)
    yield ctl, client, clock
    ctl.persist.close()


def database_down(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make the controller's store reach a server that is not there; what brings it back."""
    store = ctl.persist.store
    dead = make_engine(NOWHERE)
    monkeypatch.setattr(store, "_engine", dead)
    monkeypatch.setattr(store, "_writer", writer(dead))

    def back() -> None:
        monkeypatch.undo()
        dead.dispose()

    return back


def retention_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("retention:")]


def wait_for(done: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_database_down_is_one_line_a_period_and_the_purge_resumes_when_it_is_back(
    setup: tuple[Controller, TestClient, Clock],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctl, client, clock = setup
    old = run_job(ctl, client)
    clock.now += 3 * DAY
    keeper = Retention(ctl, DAY, interval_s=3600.0)
    back = database_down(ctl, monkeypatch)
    caplog.set_level(logging.INFO, logger="fusesched")

    keeper.tick()
    keeper.tick()  # (a period later: still down, one more line)

    down = retention_records(caplog)
    assert len(down) == 2
    for record in down:
        line = record.getMessage()
        assert "\n" not in line and record.exc_info is None, line
        assert line.startswith("retention: the purge failed, the database did not answer (")
        assert "127.0.0.1" in line and "trying again at the next period, in 3600 s" in line
    assert "Traceback" not in caplog.text
    assert keeper.runs == 2

    back()
    caplog.clear()
    keeper.tick()

    assert ctl.persist.store.get_job(old) is None  # the next period purged
    lines = [r.getMessage() for r in retention_records(caplog)]
    assert "retention: the database answers again; the purge ran" in lines
    assert any(line.startswith("retention: removed the records") for line in lines)


def test_the_thread_outlives_a_database_down_and_purges_once_it_is_back(
    setup: tuple[Controller, TestClient, Clock],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctl, client, clock = setup
    old = run_job(ctl, client)
    clock.now += 3 * DAY
    back = database_down(ctl, monkeypatch)
    caplog.set_level(logging.INFO, logger="fusesched")
    keeper = Retention(ctl, DAY, interval_s=0.05, first_after_s=0.0).start()
    try:
        wait_for(lambda: keeper.runs >= 3)
        assert keeper._thread is not None and keeper._thread.is_alive()
        assert "Traceback" not in caplog.text
        assert all(r.exc_info is None for r in retention_records(caplog))
        back()
        wait_for(lambda: ctl.persist.store.get_job(old) is None)
        assert keeper._thread.is_alive()
    finally:
        keeper.stop()


def test_any_other_failure_is_logged_with_its_traceback_and_the_thread_goes_on(
    setup: tuple[Controller, TestClient, Clock],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctl, _, _ = setup
    keeper = Retention(ctl, DAY, interval_s=0.05, first_after_s=0.0)
    raised: list[BaseException] = [RuntimeError("a bug"), SystemExit(3)]

    def failing() -> None:
        if raised:
            raise raised.pop(0)

    monkeypatch.setattr(keeper, "run_once", failing)
    caplog.set_level(logging.INFO, logger="fusesched")
    keeper.start()
    try:
        wait_for(lambda: keeper.runs >= 3)
        assert keeper._thread is not None and keeper._thread.is_alive()
        assert threading.current_thread() is not keeper._thread
    finally:
        keeper.stop()
    failed = [r for r in retention_records(caplog) if "the purge failed" in r.getMessage()]
    assert [type(r.exc_info[1]) for r in failed if r.exc_info] == [RuntimeError, SystemExit]


def test_a_submission_whose_dependency_is_purged_after_its_check_is_a_400(
    setup: tuple[Controller, TestClient, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge slips in between the controller's check of the dependency (job ``old``,
    stored and ended) and the insert (store/dependency_lock.py): the submission is refused
    with the reason, nothing is stored, and the controller takes the next one."""
    ctl, client, clock = setup
    old = run_job(ctl, client)
    clock.now += 3 * DAY
    store = ctl.persist.store
    insert = store.add_jobs

    def purge_then_insert(rows: Any) -> int:
        assert Retention(ctl, DAY).run_once().jobs == 1
        return insert(rows)

    monkeypatch.setattr(store, "add_jobs", purge_then_insert)
    body = {
        "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}],
        "dependencies": [{"kind": "afterok", "job_id": old}],
    }
    answer = client.post("/v1/jobs", json=body)

    assert answer.status_code == 400, answer.text
    reason = answer.json()["detail"]
    assert reason == f"dependency on unknown job {old!r} (its record was purged meanwhile)"
    assert store.unfinished_jobs() == []
    monkeypatch.undo()
    plain = client.post("/v1/jobs", json={"groups": body["groups"]})
    assert plain.status_code == 201, plain.text
