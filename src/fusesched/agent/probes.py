"""The agent's probe runner: the liveness and readiness probes of its running tasks.

One scheduler thread for every task's probes, started with the first probed task, and a few
worker threads (:data:`WORKERS`) that run the checks, so a check that hangs until its timeout
delays no other task's, and nothing here ever holds up a heartbeat. The runtime (single
threaded, under the agent client's lock) adds a task when it starts (:meth:`ProbeRunner.add`),
stops its probes when it is being stopped (:meth:`ProbeRunner.stopping`) and forgets it once
reaped (:meth:`ProbeRunner.remove`); each ``poll`` takes the liveness verdicts
(:meth:`ProbeRunner.failed`) and stops those tasks itself. The client reads every probed task's
ready state (:meth:`ProbeRunner.readiness`) for its heartbeats.

Schedule, as Kubernetes: the first check ``initial_delay_s`` after the task started, then one
every ``period_s`` from the start of the previous one (at once when the previous took longer);
checks of one probe never overlap. A task with a readiness probe is not ready until
``success_threshold`` checks in a row pass; ``failure_threshold`` failures in a row make it not
ready again, or make a liveness probe fail (once: the task is then stopped).

Checks (:func:`run_check`): ``http`` and ``tcp`` go to 127.0.0.1 (a container task shares the
node's network); ``exec`` runs the program in its own session with the task's environment, in
its working folder and as its user (:class:`ExecContext`), inside the same sandbox command for
a container task (its image, binds and task folder; not its process namespace), and is killed
with its whole process group at ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fusesched.submit.probes import HttpCheck, Probe

log = logging.getLogger(__name__)

#: Threads that run checks (each at most one check at a time).
WORKERS: Final = 4
#: The most output of a failed ``exec`` check kept in its reason.
OUTPUT_KEPT: Final = 200
#: Enters the working folder (its first argument) as the check's own user, then runs the check:
#: root never enters a folder for a user (``cwd`` is entered before the switch; agent/spawn.py)
_CD: Final = 'cd -- "$1" || exit 125\nshift\nexec "$@"\n'
LIVENESS: Final = "liveness"
READINESS: Final = "readiness"


@dataclass(frozen=True, slots=True)
class ExecContext:
    """How an ``exec`` check of a task runs: the task's environment, its working folder, its
    user (``uid``/``gid`` None: the agent's own) and, for a container task, the sandbox
    command the check's argv goes after (``prefix``, ending with ``--``)."""

    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path = Path("/")
    uid: int | None = None
    gid: int | None = None
    prefix: tuple[str, ...] = ()


def exec_context(
    env: Mapping[str, str],
    cwd: Path,
    ids: tuple[int, int] | None,
    argv: Sequence[str],
    command: Sequence[str],
) -> ExecContext:
    """The context of a task started with ``argv`` to run ``command`` (``argv`` is a container
    sandbox's ``bwrap … -- command``, or ``command`` itself) in ``cwd`` with ``env``, as the
    uid and gid ``ids`` (None: the agent's)."""
    uid, gid = ids if ids is not None else (None, None)
    prefix = tuple(argv[: len(argv) - len(command)])
    return ExecContext(dict(env), cwd, uid, gid, prefix)


@dataclass(frozen=True, slots=True)
class Outcome:
    passed: bool
    detail: str = ""  # why it failed


def run_check(probe: Probe, context: ExecContext) -> Outcome:
    """Run ``probe``'s check once (blocks up to about ``probe.timeout_s``); never raises."""
    try:
        if probe.http is not None:
            return _http(probe.http, probe.timeout_s)
        if probe.tcp is not None:
            return _tcp(probe.tcp.port, probe.timeout_s)
        return _exec(list(probe.exec or ()), context, probe.timeout_s)
    except Exception as exc:  # never out of a worker thread
        log.exception("probe %s failed unexpectedly", probe.describe())
        return Outcome(False, f"{probe.describe()}: internal error: {exc!r}")


def _http(check: HttpCheck, timeout_s: float) -> Outcome:
    what = check.describe()
    deadline = time.monotonic() + timeout_s
    conn = http.client.HTTPConnection("127.0.0.1", check.port, timeout=timeout_s)
    try:
        conn.connect()
        if conn.sock is not None:  # the whole check within timeout_s, not each step
            conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
        conn.request(
            "GET", check.path, headers={"User-Agent": "fusesched-probe", "Connection": "close"}
        )
        response = conn.getresponse()
        status = response.status
    except TimeoutError:
        return Outcome(False, f"{what}: no answer within {timeout_s:g} s")
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(False, f"{what}: {_error(exc)}")
    finally:
        conn.close()
    if 200 <= status < 400:
        return Outcome(True)
    return Outcome(False, f"{what}: HTTP {status}")


def _tcp(port: int, timeout_s: float) -> Outcome:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return Outcome(True)
    except TimeoutError:
        return Outcome(False, f"TCP 127.0.0.1:{port}: no connection within {timeout_s:g} s")
    except OSError as exc:
        return Outcome(False, f"TCP 127.0.0.1:{port}: {_error(exc)}")


def _exec(argv: Sequence[str], context: ExecContext, timeout_s: float) -> Outcome:
    what = "exec " + " ".join(argv)
    command, cwd = [*context.prefix, *argv], context.cwd
    if context.uid is not None:  # it enters the folder itself, as its user
        command = ["/bin/sh", "-c", _CD, "fusesched-probe", str(cwd), *command]
        cwd = Path("/")
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(context.env),
            start_new_session=True,  # its own process group: killed whole at its timeout
            user=context.uid,
            group=context.gid,
            extra_groups=[] if context.uid is not None else None,
        )
    except (OSError, ValueError) as exc:
        return Outcome(False, f"{what}: cannot run: {_error(exc)}")
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5.0)  # reaped; a child that left its group may hold on
        return Outcome(False, f"{what}: timed out after {timeout_s:g} s (killed)")
    if proc.returncode == 0:
        return Outcome(True)
    text = output[-4 * OUTPUT_KEPT :].decode("utf-8", errors="replace").strip()
    text = " ".join(text.split())[-OUTPUT_KEPT:]
    code = proc.returncode
    said = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return Outcome(False, f"{what}: {said}" + (f": {text}" if text else ""))


def _error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


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
        check: Callable[[Probe, ExecContext], Outcome] = run_check,
        workers: int = WORKERS,
    ) -> None:
        self._clock = clock
        self._check = check
        self._workers = workers
        self._cond = threading.Condition()
        self._probes: dict[tuple[str, str], _State] = {}
        self._ready: dict[str, bool] = {}  # tasks with a readiness probe, not being stopped
        self._failed: dict[str, str] = {}  # liveness failed, not yet taken: why
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
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
        with self._cond:
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
        with self._cond:
            for kind in (LIVENESS, READINESS):
                self._probes.pop((task_id, kind), None)
            if task_id in self._ready:
                self._ready[task_id] = False

    def remove(self, task_id: str) -> None:
        """The task has ended: forget it."""
        with self._cond:
            for kind in (LIVENESS, READINESS):
                self._probes.pop((task_id, kind), None)
            self._ready.pop(task_id, None)
            self._failed.pop(task_id, None)

    def failed(self) -> dict[str, str]:
        """The tasks whose liveness probe has failed since the last call, each with why (its
        last failed check); each task is named once."""
        with self._cond:
            found, self._failed = self._failed, {}
            return found

    def readiness(self) -> dict[str, bool]:
        """Each probed task's ready state (tasks without a readiness probe are not named)."""
        with self._cond:
            return dict(self._ready)

    def close(self) -> None:
        """Stop the threads (checks under way finish; their results are dropped)."""
        with self._cond:
            self._closed = True
            self._probes.clear()
            self._cond.notify()
            thread, pool = self._thread, self._pool
        if thread is not None:
            thread.join(timeout=5.0)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- the threads ------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="agent-probe")
            self._thread = threading.Thread(target=self._schedule, name="agent-probes", daemon=True)
            self._thread.start()

    def _schedule(self) -> None:
        with self._cond:
            while not self._closed:
                now = self._clock()
                waiting = [s for s in self._probes.values() if not s.running]
                for state in waiting:
                    if state.due <= now and self._pool is not None:
                        state.running = True
                        self._pool.submit(self._run, state)
                upcoming = [s.due for s in waiting if not s.running]
                timeout = None if not upcoming else max(0.0, min(upcoming) - now)
                self._cond.wait(timeout)

    def _run(self, state: _State) -> None:
        began = self._clock()
        outcome = self._check(state.probe, state.context)
        with self._cond:
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
        log.warning("task %s: liveness probe failed %d times: %s", task_id, times, outcome.detail)
        again = f" ({times} checks in a row)" if times > 1 else ""
        self._failed[task_id] = outcome.detail + again
        self.stopping(task_id)
