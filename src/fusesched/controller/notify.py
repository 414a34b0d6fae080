"""Job event notifications (Slurm's ``--mail-type``/``--mail-user``; the job field
``notify``): which job transitions become notices, and when.

:class:`JobNotices` is fed by the one place every job transition goes through on its way to
the store, :class:`~fusesched.controller.persist.Persistence` (submitted, started, requeued,
finished, updated; the unfinished jobs a restarted controller reads back). It keeps only the
jobs that asked to be told of something: any other job costs a dictionary lookup per
transition and nothing per cycle. A notice is handed to each transport's
:class:`~fusesched.controller.notify_send.Delivery`, which sends it on its own thread; the
time-limit notices (50, 80, 90 and 100 % of the limit used) come from a thread of their own
that looks at the watched running jobs every ``check_s``.

What is sent when (docs/LIVE.md, "Job event notifications"):

* ``begin`` each time the job starts (a requeued job again);
* at the end one notice: ``invalid_depend`` when a dependency that can never be met cancelled
  it, else ``fail`` when it failed or timed out, else ``end`` (any end: completed, failed,
  timed out, cancelled) — the first of those the job asked for;
* ``requeue`` when a run ends and the job waits again (a failure retried, a preemption, a
  requeue on request), or an ended job is requeued on request (watched again from then);
* ``time_limit_50/80/90`` once the run has used that share of its time limit, ``time_limit``
  when it reaches it (at the latest with its end as timed out); several levels passed at once
  (a limit shortened) give one notice, the highest;
* an array without ``array_tasks``: ``begin`` once, when its first member starts, and one
  summary when its last member ends (``fail`` if a member failed); its members' ``requeue``
  and time-limit notices each on their own. With ``array_tasks`` every member is a job of
  its own.

Nothing here is stored: after a controller restart, notices of the jobs it recovers go on
(runs that had begun are not announced again, time-limit levels passed are not sent late),
and an array's summary covers the members that had not ended.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, Metric
from pydantic import ValidationError

from fusesched.controller.notify_rules import FAILED, end_event, levels, mailable
from fusesched.controller.notify_send import Delivery, NotifyConfig, Transport, transports
from fusesched.controller.notify_text import NO_EXIT_CODE, Notice, slurm_state
from fusesched.model.phases import JobPhase
from fusesched.store.records import JobDetail, JobState
from fusesched.submit.job_notify import (
    TIME_LIMIT_LEVELS,
    NotifyEvent,
    NotifyRequest,
)

if TYPE_CHECKING:
    from fusesched.model.job import JobSpec
    from fusesched.submit.request import JobRequest

log = logging.getLogger("fusesched.notify")

_LEVEL_EVENT = {level: event for event, level in TIME_LIMIT_LEVELS.items()}


@dataclass(slots=True)
class _Job:
    """A watched job: who to tell of what, and its current run."""

    notice: Notice  # its facts, as a template (event and state replaced per notice)
    events: frozenset[NotifyEvent]
    levels: tuple[int, ...]  # time-limit percentages asked for, rising
    summary: str | None = None  # the array whose summary it feeds (no array_tasks)
    start: float | None = None  # its run's start (None: not running)
    nodes: tuple[str, ...] = ()
    sent_levels: set[int] = field(default_factory=set)  # of this run


@dataclass(slots=True)
class _Array:
    """An array told of as a whole: its first start and its members' ends."""

    notice: Notice
    events: frozenset[NotifyEvent]
    left: int = 0  # members not ended yet
    began: bool = False
    members: int = 0
    states: set[str] = field(default_factory=set)
    failed: bool = False
    codes: list[int] = field(default_factory=list)
    first_start: float | None = None


class JobNotices:
    """The watched jobs and the deliveries of one controller. Thread-safe: its methods are
    called with the controller's lock held and take only their own (never blocking)."""

    def __init__(
        self,
        config: NotifyConfig | None,
        clock: Callable[[], float],
        sinks: Sequence[Transport] | None = None,
    ) -> None:
        """``sinks``: the transports to use instead of those ``config`` names."""
        self.config = config or NotifyConfig()
        self.clock = clock
        chosen = transports(config) if sinks is None else list(sinks)
        self.deliveries = [Delivery(t, self.config) for t in chosen]
        self._jobs: dict[str, _Job] = {}
        self._arrays: dict[str, _Array] = {}
        self._timed: set[str] = set()  # running jobs with time-limit levels asked for
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._warned = False

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        for delivery in self.deliveries:
            delivery.start()
        if self.deliveries:
            self._ticker = threading.Thread(
                target=self._tick_loop, name="fusesched-notify-time", daemon=True
            )
            self._ticker.start()

    def stop(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        for delivery in self.deliveries:
            delivery.stop()

    def watches(self, job_id: str) -> bool:
        """Whether ``job_id`` asked for notices (the cheap test before every other call)."""
        return job_id in self._jobs

    # ------------------------------------------------------------------ transitions

    def submitted(self, request: JobRequest, specs: Sequence[JobSpec]) -> None:
        """New jobs (an array's members, together) of ``request``."""
        notify = request.notify
        if notify is None or not specs:
            return
        if not self.deliveries:
            self._nothing_sent(specs[0].array_parent or specs[0].id)
            return
        first = specs[0]
        if not mailable(notify, first.user, first.array_parent or first.id):
            return
        summary = first.array_parent if not notify.array_tasks else None
        with self._lock:
            for spec in specs:
                self._jobs[spec.id] = self._job(notify, spec.id, spec.array_parent, summary, spec)
            if summary is not None:
                array = self._array(notify, summary, first)
                array.left += len(specs)
                array.members += len(specs)

    def reopened(self, detail: JobDetail, reason: str, now: float) -> None:
        """An ended job requeued on request (controller/ended_requeue.py; ``detail``: its
        ended row): watched again for its next run, as at its submission, and told of its
        requeue (``requeue``, with its last run's times). A member of an array told of as a
        whole rejoins the array's summary (a new one when the array's was sent)."""
        if not self.watches(detail.job.id):
            self.recovered(detail, rejoins=True)
        with self._lock:
            job = self._jobs.get(detail.job.id)
            if job is None or NotifyEvent.REQUEUE not in job.events:
                return
            notice = self._notice(job, NotifyEvent.REQUEUE, "REQUEUED", now, reason=reason)
            row = detail.job
            self._send(replace(notice, start_time=row.start_time, end_time=row.end_time))

    def recovered(self, detail: JobDetail, rejoins: bool = False) -> None:
        """A job a previous controller left unfinished (read back at a restart); with
        ``rejoins``, an ended one requeued (:meth:`reopened`), which an open summary of its
        array counted already."""
        row = detail.job
        data = row.request.get("notify")
        if data is None:
            return
        try:
            notify = NotifyRequest.model_validate(data)
        except ValidationError as exc:  # stored by another version: no notices for it
            log.warning("job %s: its stored notify settings are not understood: %s", row.id, exc)
            return
        if not self.deliveries:
            self._nothing_sent(row.array_parent or row.id)
            return
        if not mailable(notify, row.user, row.id):
            return
        walltime = row.request.get("walltime_s")
        template = self._template(
            notify,
            row.id,
            row.name,
            row.user,
            row.submit_time,
            float(walltime) if isinstance(walltime, int | float) else None,
            row.queue,
            row.tenant,
            row.array_parent,
        )
        summary = row.array_parent if not notify.array_tasks else None
        running = row.state is JobState.RUNNING and row.start_time is not None
        with self._lock:
            job = _Job(template, frozenset(notify.events), levels(notify), summary)
            if running:
                job.start, job.nodes = row.start_time, tuple(row.nodes)
                job.sent_levels = set(self._due(job, self.clock()))  # passed: not sent late
                if job.levels:
                    self._timed.add(row.id)
            self._jobs[row.id] = job
            if summary is not None:
                array = self._arrays.get(summary)
                counted = array is not None and rejoins
                if array is None:
                    array = self._arrays[summary] = _Array(
                        replace(template, job_id=summary, array_parent=None),
                        frozenset(notify.events),
                    )
                array.left += 1
                array.members += 0 if counted else 1
                array.began = array.began or running

    def started(self, job_id: str, nodes: Sequence[str], now: float) -> None:
        """A run of the job began at ``now`` on ``nodes``."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            job.start, job.nodes, job.sent_levels = now, tuple(nodes), set()
            if job.levels:
                self._timed.add(job_id)
            if NotifyEvent.BEGIN not in job.events:
                return
            if job.summary is None:
                self._send(self._notice(job, NotifyEvent.BEGIN, "RUNNING", now))
                return
            array = self._arrays.get(job.summary)
            if array is not None and not array.began:
                array.began, array.first_start = True, now
                notice = replace(array.notice, state="RUNNING", time=now, start_time=now)
                self._send(replace(notice, members=array.members))

    def start_time(self, job_id: str, start: float) -> None:
        """The run really began at ``start`` (an external cluster queued it first)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and job.start is not None:
                job.start = start

    def requeued(self, job_id: str, reason: str, now: float) -> None:
        """A run ended and the job waits again."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            if NotifyEvent.REQUEUE in job.events and job.start is not None:
                notice = self._notice(job, NotifyEvent.REQUEUE, "REQUEUED", now, reason=reason)
                self._send(replace(notice, end_time=now))
            job.start, job.nodes, job.sent_levels = None, (), set()
            self._timed.discard(job_id)

    def updated(self, job_id: str, request: Mapping[str, Any]) -> None:
        """The job's stored request changed (its time limit, say)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            walltime = request.get("walltime_s")
            limit = float(walltime) if isinstance(walltime, int | float) else None
            job.notice = replace(job.notice, time_limit_s=limit)

    def finished(
        self, job_id: str, phase: JobPhase, exit_code: int | None, reason: str, now: float
    ) -> None:
        """The job ended (ran, or was cancelled or rejected before it could)."""
        with self._lock:
            job = self._jobs.pop(job_id, None)
            if job is None:
                return
            self._timed.discard(job_id)
            state = slurm_state(phase, reason)
            if state in NO_EXIT_CODE:
                exit_code = None  # (no exit status of its own: Slurm's mail names none)
            timed_out = phase is JobPhase.TIMEOUT and job.start is not None
            if timed_out and 100 in job.levels and 100 not in job.sent_levels:
                self._send(self._notice(job, NotifyEvent.TIME_LIMIT, "TIMEOUT", now))
            if job.summary is not None:
                self._member_ended(job.summary, phase, state, exit_code, now)
                return
            event = end_event(job.events, phase, job.start, reason)
            if event is not None:
                notice = self._notice(job, event, state, now, reason=reason)
                self._send(replace(notice, end_time=now, exit_code=exit_code))

    # ------------------------------------------------------------------ time limits

    def tick(self, now: float) -> None:
        """Send the time-limit notices due at ``now`` (the ticker thread calls it)."""
        with self._lock:
            for job_id in self._timed:
                job = self._jobs[job_id]
                due = self._due(job, now)
                if not due:
                    continue
                job.sent_levels.update(due)
                top = max(due)
                state = "RUNNING" if top < 100 else "TIMEOUT"
                self._send(self._notice(job, _LEVEL_EVENT[top], state, now))

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.config.check_s):
            try:
                self.tick(self.clock())
            except Exception:  # the checks must outlive one bad job: say so and go on
                log.exception("time-limit notices failed")

    @staticmethod
    def _due(job: _Job, now: float) -> list[int]:
        """Time-limit levels the current run has reached and not been told of."""
        limit = job.notice.time_limit_s
        if job.start is None or limit is None or limit <= 0:
            return []
        used = (now - job.start) / limit * 100.0
        return [lv for lv in job.levels if lv <= used and lv not in job.sent_levels]

    # ------------------------------------------------------------------ metrics

    def families(self) -> list[Metric]:
        """The notification counters (docs/METRICS.md), one series per transport."""
        sent = CounterMetricFamily(
            "fusesched_notifications_sent",
            "Job notifications delivered, per transport (smtp, webhook).",
            labels=["transport"],
        )
        failed = CounterMetricFamily(
            "fusesched_notification_failures",
            "Job notifications given up on after every attempt failed, per transport.",
            labels=["transport"],
        )
        dropped = CounterMetricFamily(
            "fusesched_notifications_dropped",
            "Job notifications dropped because the transport's queue was full.",
            labels=["transport"],
        )
        for d in self.deliveries:
            sent.add_metric([d.transport.name], d.sent)
            failed.add_metric([d.transport.name], d.failed)
            dropped.add_metric([d.transport.name], d.dropped)
        return [sent, failed, dropped]

    # ------------------------------------------------------------------ helpers

    def _template(
        self,
        notify: NotifyRequest,
        job_id: str,
        name: str,
        user: str,
        submit_time: float,
        time_limit_s: float | None,
        queue: str,
        tenant: str,
        parent: str | None,
    ) -> Notice:
        """A job's facts as every notice of it starts (event and state set per notice)."""
        return Notice(
            NotifyEvent.BEGIN,
            job_id,
            name,
            user,
            self.config.recipient(notify.to or user),
            "PENDING",
            submit_time,
            submit_time,
            time_limit_s=time_limit_s,
            queue=queue,
            tenant=tenant,
            array_parent=parent,
        )

    def _job(
        self,
        notify: NotifyRequest,
        job_id: str,
        parent: str | None,
        summary: str | None,
        spec: JobSpec,
    ) -> _Job:
        template = self._template(
            notify,
            job_id,
            spec.name,
            spec.user,
            spec.submit_time,
            spec.walltime_s,
            spec.queue,
            spec.tenant,
            parent,
        )
        return _Job(template, frozenset(notify.events), levels(notify), summary)

    def _array(self, notify: NotifyRequest, parent: str, first: JobSpec) -> _Array:
        array = self._arrays.get(parent)
        if array is None:
            template = replace(self._job(notify, parent, None, None, first).notice, job_id=parent)
            array = self._arrays[parent] = _Array(template, frozenset(notify.events))
        return array

    @staticmethod
    def _notice(job: _Job, event: NotifyEvent, state: str, now: float, reason: str = "") -> Notice:
        return replace(
            job.notice,
            event=event,
            state=state,
            time=now,
            start_time=job.start,
            nodes=job.nodes,
            reason=reason,
        )

    def _member_ended(
        self, parent: str, phase: JobPhase, state: str, exit_code: int | None, now: float
    ) -> None:
        array = self._arrays.get(parent)
        if array is None:
            return
        array.left -= 1
        array.states.add(state)
        array.failed = array.failed or phase in FAILED
        if exit_code is not None:
            array.codes.append(exit_code)
        if array.left > 0:
            return
        del self._arrays[parent]
        events = array.events
        event = None
        if array.failed and NotifyEvent.FAIL in events:
            event = NotifyEvent.FAIL
        elif NotifyEvent.END in events:
            event = NotifyEvent.END
        if event is None:
            return
        state = next(iter(array.states)) if len(array.states) == 1 else "MIXED"
        codes = (min(array.codes), max(array.codes)) if array.codes else None
        self._send(
            replace(
                array.notice,
                event=event,
                state=state,
                time=now,
                start_time=array.first_start,
                end_time=now,
                exit_code=codes[1] if codes else None,
                exit_codes=codes,
                members=array.members,
            )
        )

    def _send(self, notice: Notice) -> None:
        for delivery in self.deliveries:
            delivery.offer(notice)

    def _nothing_sent(self, job_id: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "job %s asks for notifications (notify, sbatch --mail-type) but this controller "
                "has no --smtp and no --notify-webhook: none are sent (said once)",
                job_id,
            )
