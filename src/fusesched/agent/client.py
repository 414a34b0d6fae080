"""The agent's side of the conversation with the controller (see :mod:`fusesched.api.wire`).

Two threads: the *work* thread long-polls the controller for tasks to launch or kill and
sends the full list of live tasks; the *report* thread sends task exits and new log output
as soon as they happen, so a finished task is reported in milliseconds, not at the next
long poll. The report thread sleeps in ``poll`` on a pidfd per live task (and a wake pipe),
so an exit wakes it at once; it looks for new log output every :data:`LOG_PERIOD_S`. Once an
ended task's output is all sent, an empty chunk marks the end of its log (``_new_logs``), so
the controller knows the log is complete; it rides with the exit report when it can. A quick
report that carries an exit waits (at most :data:`QUICK_WAIT_S`) for the scheduling cycle that
handles it, and its reply may carry the next launch (the ``launch`` query flag says this agent
takes work on quick reports): one exchange per task turnover. A task's ``RUNNING`` report
alone does not make a quick report; it goes with the next beat (an exit, new output, or a full
beat), or after :data:`RUNNING_REPORT_DELAY_S`.

With :class:`~fusesched.agent.sensing.Sensing`, a third thread samples the tasks and the node's
health every ``interval_s``, and full beats carry the results. Each full beat also carries the
node's free memory and load averages, read as it is built (agent/node_load.py); a controller
older than that field refuses it (422), and the beat is sent again without it, as are the
agent's later beats until it registers again. With a dataset
cache (the runtime's ``data_cache``), full beats name the datasets it holds, and the datasets a
reply asks to stage ahead are copied into it in the background.

Registration and beats go to the controller through an in-process
:class:`~fusesched.agent.link.ControllerLink` when the client has one, else over HTTP
(agent/failover.py): to the current controller URL, moving on to the next one (a leader and its
standbys) while it cannot be reached or answers 503.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol

import httpx

from fusesched.agent.datasets import DatasetCache
from fusesched.agent.failover import post_beat, register_over_http
from fusesched.agent.joining import controller_urls
from fusesched.agent.leaving import tell_leaving
from fusesched.agent.link import ControllerLink, NodeForgotten
from fusesched.agent.logtext import chunk_end
from fusesched.agent.node_load import LoadReports, read_node_load
from fusesched.agent.pty_bridge import HttpRelay, Pty, PtyBridge
from fusesched.agent.sensing import Sensing
from fusesched.agent.sensors import TaskWatch
from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    LogChunk,
    NodeInventory,
    NodeLoadWire,
    TaskLaunch,
    TaskReport,
    TaskSampleWire,
    TaskState,
)

log = logging.getLogger("fusesched.agent")

#: How often the report thread looks for exits when the runtime gives no pidfds to wait on.
REPORT_PERIOD_S = 0.02
#: How often the report thread looks for new log output (exits wake it at once).
LOG_PERIOD_S = 0.05
#: How long a quick report carrying an exit waits for the cycle that handles it (and the
#: launch that may take the freed room) before its reply comes back.
QUICK_WAIT_S = 0.5
#: How long a task's RUNNING report may wait for a beat to ride with before one is sent for it.
RUNNING_REPORT_DELAY_S = 0.2
#: How much of ended tasks' output one beat carries at most (beyond each one's first chunk): a
#: large last burst reaches the controller in a few beats, not at one chunk a beat.
MAX_BEAT_LOG_BYTES = 4 * 1024 * 1024
LONG_POLL_S = 2.0


class Runtime(Protocol):
    """What the agent needs from a task runtime (real processes or a fake clock)."""

    def start(self, launch: TaskLaunch) -> None: ...
    def poll(self) -> list[TaskReport]: ...
    def kill(self, task_id: str, grace_s: float, reason: str) -> None: ...
    def set_walltime(self, task_id: str, walltime_s: float) -> None: ...
    def signal(self, task_id: str, name: str, main_only: bool = False) -> bool: ...
    def running(self) -> list[str]: ...
    def read_log(self, task_id: str, offset: int) -> LogChunk | None: ...
    def watches(self) -> list[TaskWatch]: ...
    def launches(self) -> list[TaskLaunch]: ...
    def shutdown(self) -> None: ...


class AgentClient:
    def __init__(
        self,
        controller: str | Sequence[str],
        inventory: NodeInventory,
        runtime: Runtime,
        *,
        long_poll_s: float = LONG_POLL_S,
        token: str | None = None,
        verify: ssl.SSLContext | bool = True,
        ca_path: Path | None = None,
        sensing: Sensing | None = None,
        data_cache: DatasetCache | None = None,
        link: ControllerLink | None = None,
        node_load: Callable[[], NodeLoadWire | None] | None = read_node_load,
    ) -> None:
        # several URLs: a leader and its standbys; requests go to ``self.url`` and move on to
        # the next URL when it cannot be reached or answers 503 (a standby)
        self.urls = controller_urls(controller)
        self.url = self.urls[0]
        self._failover = len(self.urls) > 1
        self._url_lock = threading.Lock()
        self.ca_path = ca_path  # given to tasks as FUSESCHED_CA (mpirun's launcher needs it)
        self.inventory = inventory
        self.runtime = runtime
        self.long_poll_s = long_poll_s
        self.sensing = sensing  # None: no task samples or node health in heartbeats
        # the node's free memory and load, read for each full beat (None: not reported)
        self.load = LoadReports(node_load)
        if sensing is not None and hasattr(runtime, "on_exit"):
            # a task's final sample, taken as it exits, rides with its exit report
            setattr(runtime, "on_exit", sensing.final)  # noqa: B010 (not in Runtime)
            # completed with the kernel's count of its CPU time and peak memory once reaped
            setattr(runtime, "on_reaped", sensing.reaped)  # noqa: B010 (not in Runtime)
        # the node's dataset cache: given, else the runtime's (ProcessRuntime.data_cache)
        found = getattr(runtime, "data_cache", None)
        self.data_cache = data_cache or (found if isinstance(found, DatasetCache) else None)
        self.stop_event = threading.Event()
        self._lock = threading.Lock()  # the runtime is used from both threads
        self._offsets: dict[str, int] = {}  # log bytes delivered, per task
        self._outgoing: list[TaskReport] = []  # polled reports not yet answered
        self._running_since: float | None = None  # oldest RUNNING report not yet sent
        self._ready_sent: dict[str, bool] = {}  # tasks' ready states the controller has
        self._urls: dict[tuple[str, float, bool], httpx.URL] = {}  # heartbeat URLs, built once
        # written to wake the report thread (a task started: a new pidfd to watch; stopping)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            timeout=httpx.Timeout(long_poll_s + 30.0, connect=5.0), headers=headers, verify=verify
        )
        self._threads: list[threading.Thread] = []
        self._link = link  # set: register and beat through it, not over HTTP
        if hasattr(runtime, "on_pty"):  # pseudo-terminal tasks relayed through the controller
            setattr(runtime, "on_pty", self._relay_pty)  # noqa: B010 (not in Runtime)

    def _relay_pty(self, task_id: str, pty: Pty) -> None:
        """Relay a pseudo-terminal task's terminal (``fusesched run --pty``) through the
        controller, from threads of its own, until the task ends."""
        relay = HttpRelay(self._http, lambda: self.url, self.inventory.name)
        alive = lambda: task_id in self.runtime.running()  # noqa: E731
        PtyBridge(task_id, pty, relay, alive, self.stop_event).start()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.register()
        targets: list[tuple[Callable[[], None], str]] = [
            (self._work, "work"),
            (self._report, "report"),
        ]
        if self.sensing is not None and self.sensing.interval_s > 0:
            targets.append((partial(self.sensing.run, self.stop_event, self._watches), "sensors"))
        for target, name in targets:
            thread = threading.Thread(
                target=target, name=f"agent-{self.inventory.name}-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, kill_tasks: bool = True, leave: bool = True) -> None:
        """Stop; with ``kill_tasks``, kill every task, once the controller is told the node
        is leaving (:meth:`leave`), so that it requeues their jobs now, not after its node
        timeout. ``leave=False``: not told (the controller stops along with its agents)."""
        self.stop_event.set()
        self._poke()
        if kill_tasks and leave and self._threads:  # (started: registered)
            self.leave()  # while the threads wind down: their last requests end meanwhile
        for thread in self._threads:
            thread.join(timeout=self.long_poll_s + 5)
        if kill_tasks:
            with self._lock:
                self.runtime.shutdown()
        if self.sensing is not None:
            self.sensing.close()
        self._http.close()
        if not any(thread.is_alive() for thread in self._threads):
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def leave(self) -> bool:
        """Tell the controller this node is leaving (:func:`tell_leaving`, the current URL
        first); not over an in-process link, whose controller stops with the agent."""
        if self._link is not None:
            return False
        first = self.urls.index(self.url)
        return tell_leaving(self._http, self.urls[first:] + self.urls[:first], self.inventory.name)

    def register(self, retry_s: float = 30.0) -> None:
        """Register, retrying while the controller is still starting (over HTTP:
        :func:`~fusesched.agent.failover.register_over_http`, going round the controllers)."""
        if self._link is not None:
            self._link.register(self.inventory)
            return
        register_over_http(self, retry_s)

    # ------------------------------------------------------------------ threads

    def _work(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._beat(full=True)
            except NodeForgotten:
                self._reregister()
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 404:  # the controller forgot us: register again
                    self._reregister()
                else:
                    log.warning("heartbeat refused: %s", exc)
                    self.stop_event.wait(1.0)
            except httpx.HTTPError as exc:
                if self.stop_event.is_set():  # stopping: the controller may have stopped first
                    return
                log.warning("controller unreachable: %s", exc)
                self.stop_event.wait(1.0)

    def _report(self) -> None:
        while not self.stop_event.is_set():
            self._sleep()
            if self.stop_event.is_set():
                return
            try:
                self._beat(full=False)
            except httpx.HTTPError as exc:
                if self.stop_event.is_set():
                    return
                log.warning("report failed (kept, sent again with the next beat): %s", exc)
                self.stop_event.wait(0.5)

    def _sleep(self) -> None:
        """Wait until a task exits, the wake pipe is written, or it is time to look for log
        output, a due RUNNING report or a runtime deadline (walltimes, grace periods)."""
        exit_fds = getattr(self.runtime, "exit_fds", None)
        until_deadline = getattr(self.runtime, "until_deadline", None)
        with self._lock:
            fds = exit_fds() if exit_fds is not None else None
            left = until_deadline() if until_deadline is not None else None
        timeout = REPORT_PERIOD_S if fds is None else LOG_PERIOD_S
        if left is not None:
            timeout = max(0.001, min(timeout, left))
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in fds or ():
            poller.register(fd, select.POLLIN)
        try:
            ready = poller.poll(timeout * 1000)
        except OSError:  # e.g. interrupted; a pidfd the work thread closed meanwhile comes
            return  # back as POLLNVAL instead: a spurious wake-up, harmless
        if any(fd == self._wake_r for fd, _ in ready):
            with contextlib.suppress(OSError):
                while os.read(self._wake_r, 512):
                    pass

    def _poke(self) -> None:
        """Wake the report thread (a task started: its pidfd is to be watched)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _watches(self) -> list[TaskWatch]:
        with self._lock:
            return self.runtime.watches()

    def _beat(self, full: bool) -> None:
        """Send what is new; reports and log chunks count as delivered only once answered.

        A task that has ended but whose exit report has not been answered yet is still listed
        as running in full beats, so the controller never takes it for lost while its report is
        on the way (the two threads' requests may arrive in either order).
        """
        now = time.monotonic()
        with self._lock:
            polled = self.runtime.poll()
            self._outgoing.extend(polled)
            if self._running_since is None and any(r.state is TaskState.RUNNING for r in polled):
                self._running_since = now
            reports = list(self._outgoing)
            logs = self._new_logs()
            running = None
            ended = [r.task_id for r in reports if r.state is not TaskState.RUNNING]
            if full:
                running = sorted(set(self.runtime.running()) | set(ended))
            since = self._running_since
            ready = self._ready_to_send(full)
        if not full:
            # a task's start alone waits a little for an exit or output to ride with
            due = since is not None and now - since >= RUNNING_REPORT_DELAY_S
            if not ended and not logs and not due and not ready:
                return
        samples: list[TaskSampleWire] = []
        health = None
        if self.sensing is not None:  # a quick report: the final samples of its exits
            samples, health = self.sensing.pending(None if full else ended)
        beat = Heartbeat(
            node=self.inventory.name,
            reports=reports,
            logs=logs,
            running=running,
            samples=samples,
            health=health,
            datasets=self.data_cache.cached() if full and self.data_cache is not None else None,
            ready=ready,
            load=self.load.read() if full else None,
        )
        # a quick report with an exit waits for the cycle that handles it: the reply may
        # carry the launch that takes the room it freed
        wait = self.long_poll_s if full else (min(QUICK_WAIT_S, self.long_poll_s) if ended else 0.0)
        reply = self._send(beat, wait)
        if self.sensing is not None:
            self.sensing.delivered(samples)
        with self._lock:
            sent = {id(r) for r in reports}
            self._outgoing = [r for r in self._outgoing if id(r) not in sent]
            if not any(r.state is TaskState.RUNNING for r in self._outgoing):
                self._running_since = None
            self._ready_sent.update(ready)
            for chunk in logs:
                if not chunk.data:  # its end mark is delivered: nothing more to send of it
                    self._offsets.pop(chunk.task_id, None)
                    continue
                end = chunk_end(chunk)
                if self._offsets.get(chunk.task_id, end) < end:
                    self._offsets[chunk.task_id] = end
        self._obey(reply)

    def _ready_to_send(self, full: bool) -> dict[str, bool]:
        """The ready states a beat reports (tasks with a readiness probe): all of them on a full
        beat (a restarted controller learns them), those that changed since the controller
        last had them on a quick one (a change makes a quick report: it shows in
        milliseconds). Called with the lock held."""
        readiness = getattr(self.runtime, "readiness", None)
        states: dict[str, bool] = readiness() if readiness is not None else {}
        self._ready_sent = {t: r for t, r in self._ready_sent.items() if t in states}
        if full:
            return states
        return {t: r for t, r in states.items() if self._ready_sent.get(t) != r}

    def _reregister(self) -> None:
        """The controller forgot this node (it restarted): register again, with the tasks
        still running here, which it adopts."""
        with self._lock:
            running = self.runtime.launches()
        self.inventory = self.inventory.model_copy(update={"running": running})
        self.load.refused = False  # (the controller restarted: maybe a newer one)
        try:
            self.register(retry_s=5.0)
        except httpx.HTTPError:
            self.stop_event.wait(1.0)

    def _send(self, beat: Heartbeat, wait_s: float) -> HeartbeatReply:
        """Send ``beat`` through the link, else over HTTP (agent/failover.py: to the current
        controller, moving on while it is away or a standby)."""
        quick = beat.running is None
        if self._link is not None:
            return self._link.heartbeat(beat, wait_s, quick)
        response = post_beat(self, beat.model_dump_json(), wait_s, quick)
        if beat.load is not None and self.load.refused_by(response, self.url):
            # (refused before anything was done with it: the same beat again, without it)
            response = post_beat(
                self, beat.model_copy(update={"load": None}).model_dump_json(), wait_s, quick
            )
        response.raise_for_status()
        return HeartbeatReply.model_validate_json(response.content)

    def _obey(self, reply: HeartbeatReply) -> None:
        for dataset in reply.stage:  # queued: copied by the cache's own worker
            if self.data_cache is not None:
                self.data_cache.stage_ahead(dataset)
        with self._lock:
            for launch in reply.launch:
                if self.ca_path is not None:
                    env = launch.env | {"FUSESCHED_CA": str(self.ca_path)}
                    launch = launch.model_copy(update={"env": env})
                self._offsets.setdefault(launch.task_id, 0)
                self.runtime.start(launch)
            for kill in reply.kill:
                self.runtime.kill(kill.task_id, kill.grace_s, kill.reason)
            for limit in reply.limit:  # a job's time limit changed while it runs
                self.runtime.set_walltime(limit.task_id, limit.walltime_s)
            for sent in reply.signal:  # fusesched cancel --signal: the task goes on
                self.runtime.signal(sent.task_id, sent.signal, sent.main_only)
        if reply.launch or reply.limit:
            # the report thread watches the new tasks' pidfds, and the new deadlines, from now
            self._poke()

    def _new_logs(self) -> list[LogChunk]:
        """Output not yet delivered (offsets move on once a beat carrying it is answered).

        A running task's output goes a chunk (at most ``MAX_LOG_CHUNK``) a beat. An ended
        task's goes in as many chunks as :data:`MAX_BEAT_LOG_BYTES` allows, and once the beat
        holds the rest of it, an empty chunk at its end follows: the end mark, which tells the
        controller that the log is complete (:class:`~fusesched.api.wire.LogChunk`). A task is
        forgotten once a beat carrying its mark has been answered."""
        chunks: list[LogChunk] = []
        alive = set(self.runtime.running())
        budget = MAX_BEAT_LOG_BYTES
        for task_id, offset in list(self._offsets.items()):
            ended = task_id not in alive
            chunk = self.runtime.read_log(task_id, offset)
            while chunk is not None and chunk.data:
                chunks.append(chunk)
                offset = chunk_end(chunk)
                budget -= offset - chunk.offset
                if not ended or budget <= 0:
                    break
                chunk = self.runtime.read_log(task_id, offset)
            else:
                if ended:  # all of its output is delivered or in this beat: mark the end
                    chunks.append(LogChunk(task_id=task_id, offset=offset, data=""))
        return chunks
