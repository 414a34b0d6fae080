"""Job event notifications: the wording of a notice, which transitions become notices (fed
through the store's writer, as in the controller), and delivery to a real SMTP server and a
real HTTP server on the loopback (retries, give-ups and drops counted)."""

from __future__ import annotations

import contextlib
import logging
import smtplib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.mailservers import closed_port, hook_server, smtp_server

from fusesched.controller.notify import JobNotices
from fusesched.controller.notify_send import (
    Delivery,
    NotifyConfig,
    SmtpTransport,
    WebhookTransport,
    parse_host_port,
)
from fusesched.controller.notify_text import Notice, body, hms, payload, subject
from fusesched.controller.persist import Persistence
from fusesched.model.job import JobSpec
from fusesched.model.phases import OOM_REASON, JobPhase, node_failure
from fusesched.submit.job_notify import NotifyEvent
from fusesched.submit.request import JobRequest, parse_request

T0 = 1_800_000_000.0


def _notice(event: NotifyEvent, state: str = "RUNNING", **more: object) -> Notice:
    facts: dict[str, object] = {
        "job_id": "12",
        "name": "train",
        "user": "alice",
        "to": "a@example.org",
        "state": state,
        "time": T0 + 68,
        "submit_time": T0,
        "start_time": T0 + 3,
    }
    facts.update(more)
    return Notice(event, **facts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("notice", "expected"),
    [
        (_notice(NotifyEvent.BEGIN, time=T0 + 3), "Began, Queued time 00:00:03"),
        (
            _notice(NotifyEvent.END, "COMPLETED", end_time=T0 + 68, exit_code=0),
            "Ended, Run time 00:01:05, COMPLETED, ExitCode 0",
        ),
        (
            _notice(NotifyEvent.FAIL, "FAILED", end_time=T0 + 4, exit_code=3),
            "Failed, Run time 00:00:01, FAILED, ExitCode 3",
        ),
        (_notice(NotifyEvent.REQUEUE, "REQUEUED", end_time=T0 + 43), "Requeued, Run time 00:00:40"),
        (_notice(NotifyEvent.TIME_LIMIT_80), "Reached 80% of time limit, Run time 00:01:05"),
        (_notice(NotifyEvent.TIME_LIMIT, "TIMEOUT"), "Reached time limit, Run time 00:01:05"),
        (
            _notice(NotifyEvent.INVALID_DEPEND, "CANCELLED", start_time=None),
            "Invalid dependency, CANCELLED",
        ),
        (
            _notice(NotifyEvent.END, "CANCELLED", start_time=None, end_time=T0 + 5),
            "Ended, Run time 00:00:00, CANCELLED",
        ),
    ],
)
def test_subjects_read_as_slurms(notice: Notice, expected: str) -> None:
    assert subject(notice) == f"fusesched Job_id=12 Name=train {expected}"


def test_array_summary_subject_and_days() -> None:
    summary = _notice(
        NotifyEvent.FAIL, "MIXED", job_id="7", members=3, exit_codes=(0, 2), exit_code=2
    )
    assert subject(summary) == (
        "fusesched Array Summary Job_id=7_* Name=train Failed, MIXED, ExitCode [0-2]"
    )
    assert hms(90061.9) == "1-01:01:01"
    assert hms(-5) == "00:00:00"


def test_body_and_payload_carry_the_key_facts() -> None:
    notice = _notice(
        NotifyEvent.END,
        "COMPLETED",
        end_time=T0 + 68,
        exit_code=0,
        time_limit_s=3600.0,
        nodes=("node-a", "node-b"),
        reason="line one\nline two",
    )
    text = body(notice)
    for part in (
        "State=COMPLETED ExitCode=0",
        "User=alice Tenant=default Queue=default",
        "Run time 00:01:05",
        "Queued time 00:00:03",
        "Time limit 01:00:00",
        "Nodes=node-a,node-b",
        "Reason=line one line two",  # one line
    ):
        assert part in text
    data = payload(notice)
    assert data["event"] == "end" and data["job_id"] == "12" and data["exit_code"] == 0
    assert data["run_time_s"] == 65.0 and data["queued_time_s"] == 3.0
    assert data["user"] == "alice" and data["state"] == "COMPLETED"
    assert data["subject"] == subject(notice)


# ---------------------------------------------------------------- which transitions


class Recorder:
    """A transport that keeps what it is given."""

    name = "record"

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.changed = threading.Condition()

    def send(self, notice: Notice) -> None:
        with self.changed:
            self.notices.append(notice)
            self.changed.notify_all()

    def close(self) -> None:
        pass

    def wait(self, count: int) -> list[Notice]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.notices) >= count, 5), self.notices
        time.sleep(0.05)  # and no more than that
        with self.changed:
            return list(self.notices)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Persistence, JobNotices, Recorder, Clock]]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    recorder, clock = Recorder(), Clock()
    notices = JobNotices(NotifyConfig(check_s=3600), clock, sinks=[recorder])
    persist.notices = notices
    notices.start()
    yield persist, notices, recorder, clock
    notices.stop()
    persist.close()


def _request(notify: object, **more: object) -> JobRequest:
    data: dict[str, object] = {
        "name": "train",
        "user": "alice",
        "groups": [{"resources": {"cpu": 1}, "argv": ["true"]}],
    }
    if notify is not None:
        data["notify"] = notify
    data.update(more)
    return parse_request(data)


def _submit(persist: Persistence, request: JobRequest, first: int, now: float) -> list[JobSpec]:
    spec = request.to_job_spec(str(first), now)
    specs = spec.expand_array()
    persist.jobs_submitted(range(first, first + len(specs)), request, specs, now)
    return specs


def test_begin_and_end_of_one_job(watched: tuple[Persistence, JobNotices, Recorder, Clock]) -> None:
    persist, notices, recorder, _ = watched
    request = _request({"events": ["begin", "end"], "to": "a@example.org"})
    _submit(persist, request, 1, T0)
    assert notices.watches("1")
    persist.job_started("1", ["n0"], T0 + 3, [])
    persist.job_finished("1", JobPhase.COMPLETED, 0, "", T0 + 68)
    got = recorder.wait(2)
    assert [subject(n) for n in got] == [
        "fusesched Job_id=1 Name=train Began, Queued time 00:00:03",
        "fusesched Job_id=1 Name=train Ended, Run time 00:01:05, COMPLETED, ExitCode 0",
    ]
    assert {n.to for n in got} == {"a@example.org"}
    assert got[0].nodes == ("n0",)
    assert not notices.watches("1")  # forgotten with its end


def test_a_job_without_notify_is_not_watched(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, notices, recorder, _ = watched
    _submit(persist, _request(None), 1, T0)
    assert not notices.watches("1")
    persist.job_started("1", ["n0"], T0 + 1, [])
    persist.job_finished("1", JobPhase.FAILED, 1, "", T0 + 2)
    time.sleep(0.05)
    assert recorder.notices == []


def test_one_notice_per_end_the_most_specific(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, _, recorder, _ = watched
    both = _request("END,FAIL")  # to the job's user
    for first in (1, 2, 3):
        _submit(persist, both, first, T0)
        persist.job_started(str(first), ["n0"], T0 + 1, [])
    persist.job_finished("1", JobPhase.FAILED, 3, "", T0 + 2)
    persist.job_finished("2", JobPhase.COMPLETED, 0, "", T0 + 2)
    persist.job_finished("3", JobPhase.CANCELLED, None, "cancelled by user", T0 + 2)
    got = recorder.wait(3)
    assert [(n.event, n.state, n.exit_code) for n in got] == [
        (NotifyEvent.FAIL, "FAILED", 3),
        (NotifyEvent.END, "COMPLETED", 0),
        (NotifyEvent.END, "CANCELLED", None),  # a cancel is an end, not a failure (as Slurm)
    ]
    assert {n.to for n in got} == {"alice"}


def test_a_job_failed_by_a_lost_node_is_told_node_fail_as_slurm_does(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    """Slurm mails a job its node failure ended ``Failed, Run time …, NODE_FAIL`` (``FAIL``,
    and ``ALL``, ask for it): its exit status is no number, so the subject names none and the
    webhook's ``exit_code`` is null. An array's summary names the state too."""
    persist, _, recorder, _ = watched
    _submit(persist, _request("FAIL"), 1, T0)
    persist.job_started("1", ["n0"], T0 + 3, [])
    persist.job_finished("1", JobPhase.FAILED, -1, node_failure("node n0 lost"), T0 + 37)
    (got,) = recorder.wait(1)
    assert subject(got) == "fusesched Job_id=1 Name=train Failed, Run time 00:00:34, NODE_FAIL"
    assert (got.event, payload(got)["state"], payload(got)["exit_code"]) == (
        NotifyEvent.FAIL,
        "NODE_FAIL",
        None,
    )
    assert "State=NODE_FAIL\n" in body(got)
    specs = _submit(persist, _request("FAIL", array={"start": 0, "stop": 1}), 20, T0)
    for spec in specs:
        persist.job_started(spec.id, ["n0"], T0 + 1, [])
        persist.job_finished(spec.id, JobPhase.FAILED, -1, node_failure("lost"), T0 + 2)
    assert subject(recorder.wait(2)[1]).endswith(
        "Array Summary Job_id=20_* Name=train Failed, NODE_FAIL"
    )


def test_a_job_the_oom_killer_ended_is_told_out_of_memory(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    """As sacct and squeue show it: ``Failed, Run time …, OUT_OF_MEMORY`` (it was ``FAILED,
    ExitCode 137``), no exit code (the OOM killer's SIGKILL is none of the job's own)."""
    persist, _, recorder, _ = watched
    _submit(persist, _request("FAIL"), 1, T0)
    persist.job_started("1", ["n0"], T0 + 3, [])
    persist.job_finished("1", JobPhase.FAILED, 137, OOM_REASON, T0 + 5)
    (got,) = recorder.wait(1)
    assert subject(got) == "fusesched Job_id=1 Name=train Failed, Run time 00:00:02, OUT_OF_MEMORY"
    assert (payload(got)["state"], payload(got)["exit_code"]) == ("OUT_OF_MEMORY", None)


def test_invalid_dependency_and_requeue(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, _, recorder, _ = watched
    _submit(persist, _request("INVALID_DEPEND,END"), 1, T0)
    persist.job_finished("1", JobPhase.CANCELLED, None, "dependency 7 ended failed", T0 + 2)
    _submit(persist, _request("REQUEUE"), 2, T0)
    persist.job_started("2", ["n0"], T0 + 1, [])
    persist.job_requeued("2", JobPhase.QUEUED, "node n0 lost", 1, T0 + 41)
    persist.job_requeued("2", JobPhase.QUEUED, "again", 2, T0 + 42)  # not running: no notice
    persist.job_started("2", ["n1"], T0 + 50, [])
    persist.job_finished("2", JobPhase.COMPLETED, 0, "", T0 + 60)  # END not asked for
    got = recorder.wait(2)
    assert [subject(n) for n in got] == [
        "fusesched Job_id=1 Name=train Invalid dependency, CANCELLED",
        "fusesched Job_id=2 Name=train Requeued, Run time 00:00:40",
    ]
    assert got[1].reason == "node n0 lost"


def test_time_limit_levels(watched: tuple[Persistence, JobNotices, Recorder, Clock]) -> None:
    persist, notices, recorder, _ = watched
    events = ["time_limit_50", "time_limit_80", "time_limit_90", "time_limit", "fail"]
    _submit(persist, _request({"events": events}, walltime_s=100), 1, T0)
    persist.job_started("1", ["n0"], T0, [])
    notices.tick(T0 + 49)
    notices.tick(T0 + 50)
    notices.tick(T0 + 51)  # once
    notices.tick(T0 + 95)  # 80 and 90 passed together: the highest only
    persist.job_finished("1", JobPhase.TIMEOUT, -15, "walltime exceeded", T0 + 101)
    got = recorder.wait(4)
    assert [n.event for n in got] == [
        NotifyEvent.TIME_LIMIT_50,
        NotifyEvent.TIME_LIMIT_90,
        NotifyEvent.TIME_LIMIT,  # with the timeout, not seen by a tick before it
        NotifyEvent.FAIL,
    ]
    assert subject(got[0]).endswith("Reached 50% of time limit, Run time 00:00:50")
    assert subject(got[3]).endswith("Failed, Run time 00:01:41, TIMEOUT, ExitCode -15")


def test_a_new_time_limit_moves_the_notices(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, notices, recorder, _ = watched
    request = _request("TIME_LIMIT_50", walltime_s=100)
    _submit(persist, request, 1, T0)
    persist.job_started("1", ["n0"], T0, [])
    longer = request.model_copy(update={"walltime_s": 1000.0}).model_dump(mode="json")
    persist.job_updated("1", 0, longer, {"walltime_s": 1000}, T0 + 10)
    notices.tick(T0 + 60)
    assert recorder.notices == []
    notices.tick(T0 + 500)
    assert [n.event for n in recorder.wait(1)] == [NotifyEvent.TIME_LIMIT_50]


def test_an_array_is_told_of_as_a_whole(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, _, recorder, _ = watched
    specs = _submit(persist, _request("BEGIN,END,FAIL", array={"start": 0, "stop": 2}), 10, T0)
    ids = [s.id for s in specs]
    assert ids == ["10_0", "10_1", "10_2"]
    for k, job_id in enumerate(ids):
        persist.job_started(job_id, ["n0"], T0 + 2 + k, [])
    persist.job_finished(ids[0], JobPhase.COMPLETED, 0, "", T0 + 10)
    persist.job_finished(ids[1], JobPhase.FAILED, 2, "", T0 + 11)
    persist.job_finished(ids[2], JobPhase.COMPLETED, 0, "", T0 + 12)
    got = recorder.wait(2)
    assert [subject(n) for n in got] == [
        "fusesched Array Summary Job_id=10_* Name=train Began, Queued time 00:00:02",
        "fusesched Array Summary Job_id=10_* Name=train Failed, MIXED, ExitCode [0-2]",
    ]


def test_array_tasks_tell_of_each_member(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
) -> None:
    persist, _, recorder, _ = watched
    request = _request("END,ARRAY_TASKS", array={"start": 0, "stop": 1})
    assert request.notify is not None and request.notify.array_tasks
    for spec in _submit(persist, request, 20, T0):
        persist.job_started(spec.id, ["n0"], T0 + 1, [])
        persist.job_finished(spec.id, JobPhase.COMPLETED, 0, "", T0 + 2)
    got = recorder.wait(2)
    assert [n.job_id for n in got] == ["20_0", "20_1"]
    assert all(n.array_parent == "20" and n.members == 0 for n in got)


def test_a_restart_goes_on_without_repeating(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first = Persistence(url)
    request = _request("BEGIN,END,TIME_LIMIT_50,TIME_LIMIT_90", walltime_s=100)
    _submit(first, request, 1, T0)
    first.job_started("1", ["n0"], T0, [])
    first.close()
    # the next controller: the run is 60 % through its limit
    recorder, clock = Recorder(), Clock()
    clock.now = T0 + 60
    notices = JobNotices(NotifyConfig(check_s=3600), clock, sinks=[recorder])
    notices.start()
    second = Persistence(url)
    second.notices = notices
    try:
        _, running = second.unfinished_jobs()
        assert [d.job.id for d in running] == ["1"] and notices.watches("1")
        notices.tick(T0 + 61)  # 50 % passed before the restart: not sent late
        notices.tick(T0 + 91)
        second.job_finished("1", JobPhase.COMPLETED, 0, "", T0 + 95)
        got = recorder.wait(2)  # no second "Began"
        assert [n.event for n in got] == [NotifyEvent.TIME_LIMIT_90, NotifyEvent.END]
        assert got[1].start_time == T0
    finally:
        notices.stop()
        second.close()


def test_without_a_transport_nothing_is_watched_and_it_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    notices = JobNotices(None, Clock())
    persist.notices = notices
    try:
        with caplog.at_level(logging.WARNING, logger="fusesched.notify"):
            _submit(persist, _request("END"), 1, T0)
            _submit(persist, _request("END"), 2, T0)
        assert not notices.watches("1") and not notices.watches("2")
        said = [r.getMessage() for r in caplog.records if "none are sent" in r.getMessage()]
        assert len(said) == 1 and "job 1 " in said[0]
        assert notices.families()[0].samples == []
    finally:
        persist.close()


# ---------------------------------------------------------------- delivery


def test_mail_through_a_real_smtp_server() -> None:
    with smtp_server() as (box, port):
        config = NotifyConfig(
            smtp=f"127.0.0.1:{port}", mail_from="hpc@example.org", mail_domain="example.org"
        )
        delivery = Delivery(SmtpTransport(config), config)
        delivery.start()
        try:
            delivery.offer(_notice(NotifyEvent.BEGIN, to="alice"))
            delivery.offer(_notice(NotifyEvent.END, "COMPLETED", exit_code=0))
            mails = box.wait(2)
        finally:
            delivery.stop()
    assert box.recipients == [["alice@example.org"], ["a@example.org"]]
    assert str(mails[0]["From"]) == "hpc@example.org"
    assert str(mails[1]["Subject"]).startswith("fusesched Job_id=12 Name=train Ended")
    assert mails[1]["X-Fusesched-Event"] == "end"
    assert "State=COMPLETED ExitCode=0" in mails[1].get_content()
    assert (delivery.sent, delivery.failed, delivery.dropped) == (2, 0, 0)


def test_a_mail_server_that_is_down_is_tried_again_then_given_up() -> None:
    with closed_port() as port:
        config = NotifyConfig(smtp=f"127.0.0.1:{port}", attempts=3, backoff_s=0.01, timeout_s=2)
        delivery = Delivery(SmtpTransport(config), config)
        delivery.start()
        try:
            delivery.offer(_notice(NotifyEvent.END, "COMPLETED"))
            deadline = time.monotonic() + 10
            while delivery.failed < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            delivery.stop()
    assert (delivery.sent, delivery.failed) == (0, 1)


def test_webhook_retries_until_a_2xx() -> None:
    with hook_server() as (box, url):
        box.status = 503
        config = NotifyConfig(webhook=url, attempts=3, backoff_s=0.2)
        delivery = Delivery(WebhookTransport(config), config)
        delivery.start()
        try:
            delivery.offer(_notice(NotifyEvent.FAIL, "FAILED", exit_code=1))
            box.wait(1)
            with box.lock:
                box.status = 200  # the second try gets through
            posts = box.wait(2)
            deadline = time.monotonic() + 5
            while delivery.sent < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            delivery.stop()
    assert posts[0] == posts[1] and posts[1]["event"] == "fail" and posts[1]["exit_code"] == 1
    assert (delivery.sent, delivery.failed) == (1, 0)


def test_a_full_queue_drops_and_counts() -> None:
    release = threading.Event()

    class Stuck:
        name = "stuck"

        def send(self, notice: Notice) -> None:
            release.wait(5)

        def close(self) -> None:
            pass

    config = NotifyConfig(webhook="http://127.0.0.1:9/", queue_size=1)
    delivery = Delivery(Stuck(), config)
    delivery.start()
    try:
        delivery.offer(_notice(NotifyEvent.BEGIN))  # being sent (stuck)
        time.sleep(0.05)
        delivery.offer(_notice(NotifyEvent.BEGIN))  # queued
        delivery.offer(_notice(NotifyEvent.BEGIN))  # dropped at once, not blocking
        assert delivery.dropped == 1
    finally:
        release.set()
        delivery.stop()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"smtp": "mail.example.org:99999"}, "port"),
        ({"smtp": "a b:25"}, "HOST:PORT"),
        ({"smtp": "mail:25", "mail_from": "nobody"}, "full address"),
        ({"smtp": "mail:25", "smtp_user": "u"}, "FUSESCHED_SMTP_PASSWORD"),
        ({"starttls": True}, "need --smtp"),
        ({"webhook": "ftp://x/"}, "http"),
        ({"smtp": "mail:25", "mail_domain": "bad domain"}, "no spaces"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NotifyConfig(**settings)  # type: ignore[arg-type]


def test_host_and_port() -> None:
    assert parse_host_port("mail.example.org") == ("mail.example.org", 25)
    assert parse_host_port("mail:587") == ("mail", 587)
    assert parse_host_port("[::1]:2525") == ("::1", 2525)
    assert NotifyConfig(smtp="m", mail_domain="lab.org").recipient("bob") == "bob@lab.org"
    assert NotifyConfig(smtp="m").recipient("bob") == "bob"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--smtp", "mail:70000"], "port"),
        (["--smtp-user", "u"], "need --smtp"),
        (["--smtp", "mail", "--smtp-user", "u"], "FUSESCHED_SMTP_PASSWORD"),
        (["--mail-domain", "lab.org"], "needs --smtp HOST:PORT or --notify-webhook"),
        (["--mail-from", "me@lab.org", "--notify-webhook", "http://h/"], "needs --smtp"),
        (["--notify-webhook", "hook.example.org"], "http:// or https://"),
    ],
)
def test_controller_options_are_checked_before_it_starts(
    tmp_path: Path, options: list[str], message: str
) -> None:
    from typer.testing import CliRunner

    from fusesched.cli.main import app

    result = CliRunner().invoke(
        app,
        ["controller", "--data-dir", str(tmp_path), "--port", "0", *options],
        env={"FUSESCHED_SMTP_PASSWORD": "", "COLUMNS": "200"},
    )
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_stopped_delivery_gives_up_what_is_left_after_its_wait() -> None:
    """The notices still queued at a stop get one try each within ``wait_s``, then its thread
    ends: nothing goes on sending after the controller has stopped."""

    class Slow:
        name = "slow"

        def __init__(self) -> None:
            self.tries = 0

        def send(self, notice: Notice) -> None:
            self.tries += 1
            time.sleep(0.2)

        def close(self) -> None:
            pass

    slow = Slow()
    config = NotifyConfig(webhook="http://127.0.0.1:9/")
    delivery = Delivery(slow, config)
    delivery.start()
    for _ in range(20):  # 4 s of sending
        delivery.offer(_notice(NotifyEvent.BEGIN))
    delivery.stop(wait_s=0.3)
    time.sleep(0.5)  # (the send under way when the wait ran out finishes)
    assert not any(t.name == "fusesched-notify-slow" for t in threading.enumerate())
    assert slow.tries <= 4


@pytest.mark.parametrize("user", ["a@example.org, b@example.org", "x\r\nBcc: c@example.org"])
def test_a_user_name_that_is_no_address_is_not_mailed(
    watched: tuple[Persistence, JobNotices, Recorder, Clock],
    user: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without ``notify.to`` the job's user is the recipient: one that is neither a user name
    nor one address (a list, a header) is refused when the job is submitted, not tried and
    retried by the sending thread; with ``to`` the job is told as asked."""
    persist, notices, recorder, _ = watched
    with caplog.at_level(logging.WARNING, logger="fusesched.notify"):
        _submit(persist, _request("END", user=user), 1, T0)
    assert not notices.watches("1")
    assert any("not a mail address" in r.getMessage() for r in caplog.records)
    _submit(persist, _request({"events": ["end"], "to": "a@example.org"}, user=user), 2, T0)
    persist.job_finished("2", JobPhase.COMPLETED, 0, "", T0 + 1)
    assert [n.to for n in recorder.wait(1)] == ["a@example.org"]


def test_mail_goes_to_the_one_recipient_only() -> None:
    """The envelope names the notice's recipient only, whatever the To header parses as."""
    with smtp_server() as (box, port):
        transport = SmtpTransport(NotifyConfig(smtp=f"127.0.0.1:{port}"))
        with contextlib.suppress(smtplib.SMTPException):  # (a stricter server refuses it)
            transport.send(_notice(NotifyEvent.BEGIN, to="a@example.org, b@example.org"))
        transport.send(_notice(NotifyEvent.BEGIN, to="a@example.org"))
        box.wait(1)
    assert all(len(envelope) == 1 for envelope in box.recipients), box.recipients
    assert box.recipients[-1] == ["a@example.org"]


def test_a_webhook_url_is_logged_without_its_secret() -> None:
    from fusesched.controller.notify_send import shown_url

    assert shown_url("https://hooks.example/services/T0/B1/XyZ") == "https://hooks.example/…"
    assert shown_url("http://user:pw@10.0.0.5:8080/hook?token=s3") == "http://10.0.0.5:8080/…"
    assert shown_url("https://example.org") == "https://example.org"
