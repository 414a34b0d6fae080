"""The agent's probe runner: the liveness and readiness probes of its running tasks.

One scheduler thread for every task's probes, started with the first probed task, and worker
threads that run the checks (:func:`~fusesched.agent.probe_checks.run_check`): started as
checks fall due and none is idle, at most :data:`WORKERS`, each leaving after
:data:`IDLE_S` without work. So a check that hangs until its timeout delays no other task's
(unless :data:`WORKERS` hang at once), and nothing here ever holds up a heartbeat. The runtime
(single threaded, under the agent client's lock) adds a task when it starts
(:meth:`ProbeRunner.add`), stops its probes when it is being stopped
(:meth:`ProbeRunner.stopping`) and forgets it once reaped (:meth:`ProbeRunner.remove`); each
``poll`` takes the liveness verdicts (:meth:`ProbeRunner.failed`) and stops those tasks itself.
The client reads every probed task's ready state (:meth:`ProbeRunner.readiness`) for its
heartbeats. :meth:`ProbeRunner.close` (the agent's shutdown) stops the threads and kills the
``exec`` checks under way.

Schedule, as Kubernetes: the first check ``initial_delay_s`` after the task started, then one
every ``period_s`` from the start of the previous one (at once when the previous took longer);
checks of one probe never overlap. A task with a readiness probe is not ready until
``success_threshold`` checks in a row pass; ``failure_threshold`` failures in a row make it not
ready again, or make a liveness probe fail (once: the task is then stopped).

The checks themselves (``http``, ``tcp``, ``exec``): :mod:`fusesched.agent.probe_checks`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from fusesched.agent.probe_checks import ExecContext, Outcome, exec_context, run_check
from fusesched.submit.probes import Probe

__all__ = ["ExecContext", "Outcome", "ProbeRunner", "exec_context", "run_check"]

log = logging.getLogger(__name__)

#: The most threads running checks at once (each one check at a time).
WORKERS: Final = 32
#: How long a worker thread waits for a check to run before it leaves.
IDLE_S: Final = 30.0
LIVENESS: Final = "liveness"
READINESS: Final = "readiness"


@dataclass(slots=True)
class _State:
    """One probe of one task: its schedule and what its checks found."""

    task_id: str
    kind: str  # LIVENESS or READINESS
    probe: Probe
    context: ExecContext
    due: float
    running: bool = False
    successes: int = 0  # in a row
    failures: int = 0  # in a row
    last_failure: str = ""


class ProbeRunner:
    """Runs the probes of the tasks :meth:`add` names (see the module docstring).

    Thread-safe. ``clock``: monotonic seconds; ``check``: how one check runs (tests give a
    fake); ``workers``: threads running checks.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        check: Callable[[Probe, ExecContext], Outcome] | None = None,
        workers: int = WORKERS,
    ) -> None:
        self._clock = clock
        self._check = check if check is not None else self._run_check
        self._workers = workers
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the scheduler waits on it
        self._work = threading.Condition(self._lock)  # idle workers wait on it
        self._probes: dict[tuple[str, str], _State] = {}
        self._ready: dict[str, bool] = {}  # tasks with a readiness probe, not being stopped
        self._failed: dict[str, str] = {}  # liveness failed, not yet taken: why
        self._due: collections.deque[_State] = collections.deque()  # checks to run, in order
        self._alive = 0  # worker threads
        self._idle = 0  # of them, waiting for a check
        self._thread: threading.Thread | None = None
        # written at close: the exec checks under way stop (run_check's ``stop``)
        self._stop_r: int | None = None
        self._stop_w: int | None = None
        self._closed = False

    # -- what the runtime tells it ----------------------------------------------------------

    def add(
        self,
        task_id: str,
        liveness: Probe | None,
        readiness: Probe | None,
        context: ExecContext | None = None,
    ) -> None:
        """Probe a task that has just started (nothing for one without probes)."""
        if liveness is None and readiness is None:
            return
        now = self._clock()
        with self._lock:
            if self._closed:
                return
            for kind, probe in ((LIVENESS, liveness), (READINESS, readiness)):
                if probe is not None:
                    self._probes[(task_id, kind)] = _State(
                        task_id, kind, probe, context or ExecContext(), now + probe.initial_delay_s
                    )
            if readiness is not None:
                self._ready[task_id] = False  # not ready before its checks pass
            self._start()
            self._cond.notify()

    def stopping(self, task_id: str) -> None:
        """The task is being stopped: no more checks, and it is not ready."""
        with self._lock:
            self._stop(task_id)

    def remove(self, task_id: str) -> None:
        """The task has ended: forget it."""
        with self._lock:
            for kind in (LIVENESS, READINESS):
                self._probes.pop((task_id, kind), None)
            self._ready.pop(task_id, None)
            self._failed.pop(task_id, None)

    def failed(self) -> dict[str, str]:
        """The tasks whose liveness probe has failed since the last call, each with why (its
        last failed check); each task is named once."""
        with self._lock:
            found, self._failed = self._failed, {}
            return found

    def readiness(self) -> dict[str, bool]:
        """Each probed task's ready state (tasks without a readiness probe are not named)."""
        with self._lock:
            return dict(self._ready)

    def close(self) -> None:
        """Stop the threads; the ``exec`` checks under way are killed (their results, and
        those of the other checks under way, are dropped)."""
        with self._lock:
            self._closed = True
            self._probes.clear()
            self._due.clear()
            self._cond.notify()
            self._work.notify_all()
            thread = self._thread
            if self._stop_w is not None:
                with contextlib.suppress(OSError):
                    os.write(self._stop_w, b"x")
            if self._alive == 0:
                self._close_pipe()
        if thread is not None:
            thread.join(timeout=5.0)

    # -- the threads ------------------------------------------------------------------------

    def _run_check(self, probe: Probe, context: ExecContext) -> Outcome:
        return run_check(probe, context, self._stop_r)

    def _start(self) -> None:
        if self._thread is None:
            self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            self._thread = threading.Thread(target=self._schedule, name="agent-probes", daemon=True)
            self._thread.start()

    def _close_pipe(self) -> None:
        for fd in (self._stop_r, self._stop_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._stop_r = self._stop_w = None

    def _schedule(self) -> None:
        with self._lock:
            while not self._closed:
                now = self._clock()
                soonest: float | None = None
                for state in self._probes.values():
                    if state.running:
                        continue
                    if state.due <= now:
                        state.running = True
                        self._due.append(state)
                    elif soonest is None or state.due < soonest:
                        soonest = state.due
                self._hire()
                self._cond.wait(None if soonest is None else max(0.0, soonest - now))

    def _hire(self) -> None:
        """Hand the due checks to idle workers, and start workers for the rest (at most
        ``workers`` in all). With the lock held."""
        if not self._due:
            return
        self._work.notify(len(self._due))
        for _ in range(min(len(self._due) - self._idle, self._workers - self._alive)):
            self._alive += 1
            threading.Thread(target=self._serve, name="agent-probe", daemon=True).start()

    def _serve(self) -> None:
        """A worker: runs due checks until none comes for :data:`IDLE_S`."""
        with self._lock:
            try:
                while not self._closed:
                    if not self._due:
                        self._idle += 1
                        self._work.wait(IDLE_S)
                        self._idle -= 1
                        if not self._due:
                            return  # idle for long, or closed
                    state = self._due.popleft()
                    self._lock.release()
                    try:
                        began = self._clock()
                        outcome = self._guarded(state)
                    finally:
                        self._lock.acquire()
                    self._finish(state, began, outcome)
            finally:
                self._alive -= 1
                if self._closed and self._alive == 0:
                    self._close_pipe()

    def _guarded(self, state: _State) -> Outcome:
        try:
            return self._check(state.probe, state.context)
        except Exception as exc:  # (a check that raises must not end its worker)
            log.exception("probe %s failed unexpectedly", state.probe.describe())
            return Outcome(False, f"{state.probe.describe()}: internal error: {exc!r}")

    def _finish(self, state: _State, began: float, outcome: Outcome) -> None:
        """Count a check's outcome (with the lock held)."""
        state.running = False
        state.due = max(began + state.probe.period_s, self._clock())
        if self._probes.get((state.task_id, state.kind)) is not state:
            return  # stopped or ended meanwhile
        self._count(state, outcome)
        self._cond.notify()

    def _count(self, state: _State, outcome: Outcome) -> None:
        probe, task_id = state.probe, state.task_id
        if outcome.passed:
            state.successes, state.failures = state.successes + 1, 0
            if state.kind == READINESS and state.successes >= probe.success_threshold:
                if not self._ready.get(task_id, True):
                    log.info("task %s is ready (%s)", task_id, probe.describe())
                self._ready[task_id] = True
            return
        state.failures, state.successes = state.failures + 1, 0
        state.last_failure = outcome.detail
        if state.failures < probe.failure_threshold:
            return
        if state.kind == READINESS:
            if self._ready.get(task_id):
                log.info("task %s is no longer ready: %s", task_id, outcome.detail)
            self._ready[task_id] = False
            return
        times = state.failures
        again = f" ({times} checks in a row)" if times > 1 else ""
        log.warning("task %s: liveness probe failed: %s%s", task_id, outcome.detail, again)
        self._failed[task_id] = outcome.detail + again
        self._stop(task_id)

    def _stop(self, task_id: str) -> None:
        """No more checks of ``task_id``, and it is not ready (with the lock held)."""
        for kind in (LIVENESS, READINESS):
            self._probes.pop((task_id, kind), None)
        if task_id in self._ready:
            self._ready[task_id] = False
