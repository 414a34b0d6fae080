"""The agent's side of the conversation with the controller (see :mod:`fusesched.api.wire`).

Two threads: the *work* thread long-polls the controller for tasks to launch or kill and
sends the full list of live tasks; the *report* thread sends task exits and new log output
as soon as they happen, so a finished task is reported in milliseconds, not at the next
long poll.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import httpx

from fusesched.api.wire import (
    Heartbeat,
    HeartbeatReply,
    LogChunk,
    NodeInventory,
    TaskLaunch,
    TaskReport,
)

log = logging.getLogger("fusesched.agent")

REPORT_PERIOD_S = 0.02
LONG_POLL_S = 2.0


class Runtime(Protocol):
    """What the agent needs from a task runtime (real processes or a fake clock)."""

    def start(self, launch: TaskLaunch) -> None: ...
    def poll(self) -> list[TaskReport]: ...
    def kill(self, task_id: str, grace_s: float, reason: str) -> None: ...
    def running(self) -> list[str]: ...
    def read_log(self, task_id: str, offset: int) -> LogChunk | None: ...
    def shutdown(self) -> None: ...


class AgentClient:
    def __init__(
        self,
        controller: str,
        inventory: NodeInventory,
        runtime: Runtime,
        *,
        long_poll_s: float = LONG_POLL_S,
    ) -> None:
        self.url = controller.rstrip("/")
        self.inventory = inventory
        self.runtime = runtime
        self.long_poll_s = long_poll_s
        self.stop_event = threading.Event()
        self._lock = threading.Lock()  # the runtime is used from both threads
        self._offsets: dict[str, int] = {}
        self._http = httpx.Client(timeout=httpx.Timeout(long_poll_s + 30.0, connect=5.0))
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.register()
        for target, name in ((self._work, "work"), (self._report, "report")):
            thread = threading.Thread(
                target=target, name=f"agent-{self.inventory.name}-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, kill_tasks: bool = True) -> None:
        self.stop_event.set()
        for thread in self._threads:
            thread.join(timeout=self.long_poll_s + 5)
        if kill_tasks:
            with self._lock:
                self.runtime.shutdown()
        self._http.close()

    def register(self, retry_s: float = 30.0) -> None:
        """Register, retrying while the controller is still starting."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                response = self._http.post(
                    f"{self.url}/v1/agents/register", json=self.inventory.model_dump(mode="json")
                )
                response.raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.stop_event.is_set():
                    raise
                time.sleep(0.2)

    # ------------------------------------------------------------------ threads

    def _work(self) -> None:
        while not self.stop_event.is_set():
            try:
                with self._lock:
                    beat = Heartbeat(
                        node=self.inventory.name,
                        reports=self.runtime.poll(),
                        logs=self._new_logs(),
                        running=self.runtime.running(),
                    )
                self._obey(self._send(beat, self.long_poll_s))
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 404:  # the controller forgot us: register again
                    self._reregister()
                else:
                    log.warning("heartbeat refused: %s", exc)
                    self.stop_event.wait(1.0)
            except httpx.HTTPError as exc:
                log.warning("controller unreachable: %s", exc)
                self.stop_event.wait(1.0)

    def _report(self) -> None:
        while not self.stop_event.wait(REPORT_PERIOD_S):
            try:
                with self._lock:
                    reports = self.runtime.poll()
                    logs = self._new_logs()
                if not reports and not logs:
                    continue
                beat = Heartbeat(node=self.inventory.name, reports=reports, logs=logs)
                self._obey(self._send(beat, 0.0))
            except httpx.HTTPError as exc:
                log.warning("report failed (will retry with the next beat): %s", exc)
                self.stop_event.wait(0.5)

    def _reregister(self) -> None:
        try:
            self.register(retry_s=5.0)
        except httpx.HTTPError:
            self.stop_event.wait(1.0)

    def _send(self, beat: Heartbeat, wait_s: float) -> HeartbeatReply:
        response = self._http.post(
            f"{self.url}/v1/agents/heartbeat",
            params={"wait": wait_s},
            content=beat.model_dump_json(),
            headers={"content-type": "application/json"},
        )
        response.raise_for_status()
        return HeartbeatReply.model_validate_json(response.content)

    def _obey(self, reply: HeartbeatReply) -> None:
        with self._lock:
            for launch in reply.launch:
                self._offsets.setdefault(launch.task_id, 0)
                self.runtime.start(launch)
            for kill in reply.kill:
                self.runtime.kill(kill.task_id, kill.grace_s, kill.reason)

    def _new_logs(self) -> list[LogChunk]:
        chunks = []
        alive = set(self.runtime.running())
        for task_id, offset in list(self._offsets.items()):
            chunk = self.runtime.read_log(task_id, offset)
            if chunk is not None and chunk.data:
                chunks.append(chunk)
                self._offsets[task_id] = chunk.offset + len(chunk.data.encode())
            elif task_id not in alive:
                del self._offsets[task_id]  # ended and fully read
        return chunks
