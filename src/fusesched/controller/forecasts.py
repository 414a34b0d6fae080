"""Expected start times of the waiting jobs, for ``GET /v1/starts`` (``squeue --start``).

The core is copied under the controller's lock (with the submissions, holds and changes not
yet handed to it) and projected forward outside it (:mod:`fusesched.core.forecast`), so the
scheduler is held up only for the copy. Nodes asleep through power saving count as up once
they would have woken (the power configuration's wake latency). A projection is kept and
answered again until the scheduler has run a cycle since and it is :data:`MAX_AGE_S` old, and
only one is computed at a time: many users asking at once cost one projection.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.controller import submissions
from fusesched.core.forecast import ExpectedStart, Forecast, clone, forecast
from fusesched.core.scheduler import SchedulerCore
from fusesched.power.saving import PowerState
from fusesched.submit.request import JobRequest

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: a projection is answered again for this long (seconds), unless nothing has changed since
MAX_AGE_S = 10.0
#: trials (``--test-only``) computed at once; each copies the core under the lock
MAX_TRIALS = 2
#: how long a trial waits for its turn before it is turned away (:class:`TrialsBusy`)
TRIAL_WAIT_S = 20.0


class TrialsBusy(Exception):
    """Too many trials are being computed: the caller should try again later (HTTP 429)."""


class Forecasts:
    """The controller's last projection, and the lock that lets one be computed at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[Forecast, int, float] | None = None  # with the cycle count, monotonic
        # each trial is its own projection (nothing to share): only a few at once, so that
        # a burst of them cannot hold the scheduler's lock copy after copy
        self.trials = threading.BoundedSemaphore(MAX_TRIALS)

    def get(self, ctl: Controller) -> Forecast:
        """The last projection while it is current; else a new one — or, while another
        caller computes it, the last one (no one waits behind a projection but the first)."""
        last = self._last
        if last is not None and self._current(ctl, last):
            return last[0]
        if not self._lock.acquire(blocking=last is None):
            assert last is not None
            return last[0]
        try:
            last = self._last
            if last is not None and self._current(ctl, last):
                return last[0]  # made while this caller waited for the lock
            answer, cycles = _project(ctl)
            self._last = (answer, cycles, time.monotonic())
            return answer
        finally:
            self._lock.release()

    @staticmethod
    def _current(ctl: Controller, last: tuple[Forecast, int, float]) -> bool:
        _, cycles, made = last
        return ctl.cycles == cycles or time.monotonic() - made < MAX_AGE_S


def _project(ctl: Controller) -> tuple[Forecast, int]:
    with ctl.work:
        now, sim, waking = _copy(ctl)
        cycles = ctl.cycles
    return forecast(sim, now, wake_s=waking, copied=True), cycles


def _copy(ctl: Controller) -> tuple[float, SchedulerCore, dict[str, float]]:
    """The time, a copy of the core with the events the next cycle hands it first, and the
    nodes that would wake (called with the lock held)."""
    now = ctl.clock()
    sim = clone(ctl.core)
    for event in ctl.events:
        with contextlib.suppress(KeyError, ValueError):  # the cycle refuses it too
            sim.handle(event, now)
    return now, sim, _waking(ctl, now)


#: the numbers given to jobs tried with :func:`trial` (never a real job's: those are > 0)
TRIAL_FIRST = -1_000_000_000


@dataclass(frozen=True, slots=True)
class Trial:
    """When a job that was not submitted would start (``sbatch --test-only``): per request,
    its members' expected starts (one for a plain job), or why it would be refused."""

    at: float
    horizon_s: float
    starts: list[list[ExpectedStart]]
    refused: list[str | None]
    held: list[bool]  # submitted held: it would not start until released (no projection)


def trial(ctl: Controller, requests: Sequence[JobRequest], user: str = "") -> Trial:
    """Check ``requests`` as a submission would (raising :class:`SubmitError` as it would)
    and project when each would start if submitted now; nothing is stored or queued.
    Raises :class:`TrialsBusy` when :data:`MAX_TRIALS` others have run for
    :data:`TRIAL_WAIT_S`."""
    turn = ctl.forecasts.trials
    if not turn.acquire(timeout=TRIAL_WAIT_S):
        raise TrialsBusy(
            f"{MAX_TRIALS} other test-only requests are being computed; try again shortly"
        )
    try:
        return _trial(ctl, requests, user)
    finally:
        turn.release()


def _trial(ctl: Controller, requests: Sequence[JobRequest], user: str) -> Trial:
    with ctl.work:
        node_specs, requests, sizes = submissions.intake(ctl, requests)
        now, sim, waking = _copy(ctl)
        prepared = submissions.prepare(ctl, requests, sizes, TRIAL_FIRST, user, node_specs, now)
    specs = [spec for _, _, spec in prepared]
    held = [request.hold for request in requests]
    tried = [spec for spec, h in zip(specs, held, strict=True) if not h]
    answer = forecast(sim, now, wake_s=waking, copied=True, extra=tried)
    refused = dict(answer.rejected)
    starts: list[list[ExpectedStart]] = []
    for spec in specs:
        members = [
            j for j in answer.jobs if j.job_id == spec.id or j.job_id.rpartition("_")[0] == spec.id
        ]
        starts.append(members)
    return Trial(now, answer.horizon_s, starts, [refused.get(s.id) for s in specs], held)


def _waking(ctl: Controller, now: float) -> dict[str, float]:
    """Nodes power saving has put to sleep (or is waking), and the seconds until they would
    be up; drained ones are left asleep."""
    power = ctl.power
    if power is None:
        return {}
    wake = power.config.wake_latency_s
    out: dict[str, float] = {}
    for name, entry in power.nodes.items():
        live = ctl.nodes.get(name)
        if live is None or live.drain is not None:
            continue
        if entry.power in (PowerState.SUSPENDED, PowerState.SUSPENDING):
            out[name] = wake
        elif entry.power is PowerState.RESUMING:
            out[name] = max(0.0, entry.since + wake - now)
    return out
