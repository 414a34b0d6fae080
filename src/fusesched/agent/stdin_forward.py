"""``srun``'s side of a streamed standard input (agent/step_stdin.py): it opens a stream on
the controller before its step starts (:func:`open_stream`; a controller older than streams
answers 404, and srun sends its input whole instead, as before), then, once the step runs,
a :class:`Forwarder` thread writes into the stream what srun reads, as it comes, while srun
follows its tasks (:mod:`fusesched.agent.step_run`). Each task that gets it reads it there
(:mod:`fusesched.stdin_pump`; the stream: :mod:`fusesched.controller.stdin_streams`).

The forwarder reads srun's standard input no further ahead than :data:`MAX_KEPT` bytes past
what every task has read (``acked``): a task that reads slowly holds srun's reading back,
as a pipe would, and srun's memory is bounded. It keeps what the tasks have not all read,
and says from where (``kept``), so that a restarted controller's stream gets it again. While
its input is quiet it writes an empty chunk every :data:`KEEPALIVE_S` (the controller takes a
writer silent for a minute for gone, and ends the tasks' input). It ends once its input has
ended and every task has read all of it, once every task has ended (``ended``), or with
srun, when the step ends (its thread is a daemon: srun exits with the step's exit status
whatever its standard input still holds).
"""

from __future__ import annotations

import base64
import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from fusesched.agent.step_answers import controller_detail
from fusesched.agent.step_plan import StepError

#: The most bytes one write carries (the controller's cap: controller/stdin_streams.py).
CHUNK_BYTES: Final = 256 * 1024
#: The most bytes srun holds that the tasks have not all read (the controller holds up to
#: 1 MiB of them), past which it reads no more of its standard input.
MAX_KEPT: Final = 2 * 1024 * 1024
#: How often srun writes (an empty chunk) while its input is quiet (seconds).
KEEPALIVE_S: Final = 10.0
#: How long one write waits at the controller for room (seconds).
WRITE_WAIT_S: Final = 10.0
#: How soon a write is tried again after it failed (the controller unreachable: seconds).
RETRY_S: Final = 1.0


class OlderController(Exception):
    """The controller has no stream route: it cannot forward an input as it comes."""


def open_stream(http: httpx.Client, job_id: str) -> str:
    """A new stream of ``job_id``'s for srun's standard input: its id.
    :class:`OlderController` for a controller older than streams; :class:`StepError` for
    another refusal (``httpx.HTTPError`` when it cannot be reached)."""
    response = http.post(f"/v1/jobs/{job_id}/stdin")
    missing = response.status_code == 404 and controller_detail(response) == "Not Found"
    if missing or response.status_code == 405:
        raise OlderController(job_id)
    if response.status_code >= 400:
        raise StepError(f"cannot forward standard input: {controller_detail(response)}")
    return str(response.json()["stream"])


@dataclass(frozen=True, slots=True)
class Answer:
    """The controller's answer to a write (api/stdin_routes.py's ``StdinTaken``)."""

    offset: int
    acked: int
    ended: bool
    readers: bool


class Forwarder:
    """Writes srun's standard input ``fd`` into the stream ``stream`` of ``job_id``, after
    ``head`` (what srun read of it already), through a client ``connect`` makes; ``warn``
    says why it stopped early."""

    def __init__(
        self,
        connect: Callable[[], httpx.Client],
        job_id: str,
        stream: str,
        fd: int,
        head: bytes,
        warn: Callable[[str], None],
    ) -> None:
        self.connect = connect
        self.path = f"/v1/jobs/{job_id}/stdin/{stream}"
        self.fd = fd
        self.warn = warn
        self.buffer = bytearray(head)  # what the tasks have not all read, from ``kept`` on
        self.kept = 0
        self.sent = 0  # the offset to send from next
        self.read_all = False  # srun's input has ended
        self.readers: list[str] = []
        self.named = False  # the stream knows its readers
        self.eof_taken = False  # the stream holds the input's end
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def end(self) -> int:
        """The offset after the last byte read."""
        return self.kept + len(self.buffer)

    def start(self, readers: Sequence[str]) -> None:
        """Forward to the tasks ``readers`` (their ids), in a daemon thread."""
        self.readers = list(readers)
        self._thread = threading.Thread(target=self.run, name="srun-stdin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop forwarding (the step has ended)."""
        self._stop.set()

    def run(self) -> None:
        try:
            with self.connect() as http:
                self._forward(http)
        except Exception as exc:  # (said, never a traceback: srun goes on following its tasks)
            if not self._stop.is_set():
                self.warn(f"stopped forwarding standard input: {exc}")
        finally:
            self.done.set()

    def _forward(self, http: httpx.Client) -> None:
        posted_at = time.monotonic()
        while not self._stop.is_set():
            if not self.read_all and len(self.buffer) < MAX_KEPT:
                pending = self.sent < self.end or not self.named
                self._read(0.0 if pending else KEEPALIVE_S)
            start = self.sent - self.kept
            chunk = bytes(self.buffer[start : start + CHUNK_BYTES])
            last = self.read_all and self.sent + len(chunk) == self.end
            due = time.monotonic() - posted_at >= KEEPALIVE_S
            if not (chunk or not self.named or (last and not self.eof_taken) or due):
                if self.read_all or len(self.buffer) >= MAX_KEPT:  # (nothing to read now)
                    self._stop.wait(KEEPALIVE_S if self.eof_taken else 0.2)
                continue
            answer = self._write(http, chunk, last)
            if answer is None:
                return
            posted_at = time.monotonic()
            if self._took(answer, last):
                return

    def _read(self, wait_s: float) -> bool:
        """Read what srun's input holds, waiting up to ``wait_s`` for some; whether
        anything (or its end) came."""
        try:
            ready, _, _ = select.select([self.fd], [], [], wait_s)
        except (OSError, ValueError):
            ready = [self.fd]
        if not ready:
            return False
        try:
            data = os.read(self.fd, CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""  # (closed, or one that cannot be read: its end)
        if not data:
            self.read_all = True
        self.buffer += data
        return True

    def _write(self, http: httpx.Client, chunk: bytes, last: bool) -> Answer | None:
        """Write ``chunk`` at :attr:`sent` (``last``: the input ends after it), trying again
        while the controller cannot be reached; None when it refuses (said)."""
        body: dict[str, object] = {
            "offset": self.sent,
            "data": base64.b64encode(chunk).decode("ascii"),
            "eof": last,
            "wait": WRITE_WAIT_S,
        }
        if not self.named:
            body["readers"] = self.readers
        while not self._stop.is_set():
            try:
                response = http.post(self.path, json=body, params={"kept": self.kept})
            except httpx.HTTPError:
                self._stop.wait(RETRY_S)
                continue
            if response.status_code >= 500:
                self._stop.wait(RETRY_S)
                continue
            if response.status_code == 404:  # (the job has ended)
                return None
            if response.status_code >= 400:
                self.warn(f"stopped forwarding standard input: {controller_detail(response)}")
                return None
            got = response.json()
            return Answer(
                int(got["offset"]), int(got["acked"]), bool(got["ended"]), bool(got["readers"])
            )
        return None

    def _took(self, answer: Answer, last: bool) -> bool:
        """Take the controller's ``answer``: whether forwarding is over."""
        if answer.ended:
            return True  # (every task has ended: nothing more is read)
        self.named = answer.readers
        acked = min(max(answer.acked, self.kept), self.end)
        del self.buffer[: acked - self.kept]
        self.kept = acked
        if answer.offset < self.kept:
            self.warn(
                "stopped forwarding standard input: the controller lost what the tasks had "
                "not read yet"
            )
            return True
        self.sent = min(answer.offset, self.end)
        if last and answer.offset == self.end:
            self.eof_taken = True
        return self.eof_taken and self.kept == self.end  # (all of it read by every task)

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout_s)
