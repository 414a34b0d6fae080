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
from typing import TYPE_CHECKING

from fusesched.core.forecast import Forecast, clone, forecast
from fusesched.power.saving import PowerState

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: a projection is answered again for this long (seconds), unless nothing has changed since
MAX_AGE_S = 10.0


class Forecasts:
    """The controller's last projection, and the lock that lets one be computed at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[Forecast, int, float] | None = None  # with the cycle count, monotonic

    def get(self, ctl: Controller) -> Forecast:
        with self._lock:
            last = self._last
            if last is not None:
                answer, cycles, made = last
                if ctl.cycles == cycles or time.monotonic() - made < MAX_AGE_S:
                    return answer
            answer, cycles = _project(ctl)
            self._last = (answer, cycles, time.monotonic())
            return answer


def _project(ctl: Controller) -> tuple[Forecast, int]:
    with ctl.work:
        now = ctl.clock()
        sim = clone(ctl.core)
        for event in ctl.events:  # what the next cycle hands the core first
            with contextlib.suppress(KeyError, ValueError):  # the cycle refuses it too
                sim.handle(event, now)
        waking = _waking(ctl, now)
        cycles = ctl.cycles
    return forecast(sim, now, wake_s=waking, copied=True), cycles


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
