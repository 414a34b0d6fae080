"""The agent's end of a pseudo-terminal task (``fusesched run --pty``, Slurm's ``srun --pty``).

:func:`open_pty` makes the terminal before the task starts: the agent keeps its master end;
the task's shim opens the other end by its path (``FUSESCHED_PTY``) as the session leader it
is, which makes it the task's controlling terminal and its standard input, output and error
(agent/task_shim.py). The slave end is handed to the task's user, as ``sshd`` hands a login's.

Agents listen on no port, so :class:`PtyBridge` calls the controller's relay
(:mod:`fusesched.api.pty_routes`) from two threads of its own: one reads the terminal and
posts what the task wrote, the other long-polls the keystrokes (and window sizes) and writes
them to the terminal. The agent holds the slave end open until the task has been reaped (a
read of the master never fails while the task starts); then what is left is read and the
end is posted. The last thread to finish closes the terminal.

The terminal outlives the controller: while it cannot be reached (restarting, a standby
taking over) both threads try again every :data:`RETRY_S`, and the reader goes on reading
the terminal into what it keeps (up to :data:`MAX_KEPT`, then the task's writes block). It
keeps the output its client has not acknowledged yet (each post's answer says how far that
is), so that a restarted controller, whose new session asks for it, gets it again.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import logging
import os
import select
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from fusesched.submit.terminal import Terminal

log = logging.getLogger("fusesched.agent")

#: The most bytes read from the terminal, and posted, at once.
READ_BYTES = 64 * 1024
#: How long a long poll for keystrokes waits (seconds), and a post of output for room.
POLL_WAIT_S = 20.0
#: How often the reader looks whether the task is still there (seconds).
ALIVE_EVERY_S = 0.5
#: How soon a call is tried again after it failed (the controller unreachable: seconds).
RETRY_S = 1.0
#: The most output kept: not yet acknowledged by the client (at most what the relay holds)
#: and, while the controller cannot be reached, what the task wrote meanwhile.
MAX_KEPT = 1024 * 1024


class RelayGone(Exception):
    """The controller has no session for the task (it ended there, or is not a pty task)."""


@dataclass
class Pty:
    """A pseudo-terminal: the agent's master end, the slave end (held until the task has
    ended) and the slave's path."""

    master: int
    slave: int
    path: str

    def close_slave(self) -> None:
        if self.slave >= 0:
            with contextlib.suppress(OSError):
                os.close(self.slave)
            self.slave = -1

    def close(self) -> None:
        self.close_slave()
        with contextlib.suppress(OSError):
            os.close(self.master)


def set_size(fd: int, rows: int, cols: int) -> None:
    """The terminal's window size (its foreground process group gets ``SIGWINCH``)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def open_pty(terminal: Terminal, uid: int | None) -> Pty:
    """A new terminal of ``terminal``'s size, its slave end ``uid``'s (None: the agent's)."""
    master, slave = os.openpty()
    try:
        set_size(master, terminal.rows, terminal.cols)
        if uid is not None:
            os.fchown(slave, uid, -1)
            os.fchmod(slave, 0o620)
        return Pty(master, slave, os.ttyname(slave))
    except OSError:
        os.close(master)
        os.close(slave)
        raise


class HttpRelay:
    """The relay's agent routes over the agent's HTTP client; ``url`` gives the controller
    to call (the current one)."""

    def __init__(self, http: httpx.Client, url: Callable[[], str], node: str) -> None:
        self.http = http
        self.url = url
        self.node = node

    def _path(self, task_id: str, what: str) -> str:
        return f"{self.url()}/v1/agents/{self.node}/pty/{task_id}/{what}"

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        if response.status_code in (404, 409):
            raise RelayGone(response.text)
        response.raise_for_status()  # (503 too: a restarted controller not ready for it yet)
        return response.json()

    def read_input(self, task_id: str, offset: int, size_seq: int) -> dict[str, Any]:
        params = {"offset": offset, "size_seq": size_seq, "wait": POLL_WAIT_S}
        return dict(self._answer(self.http.get(self._path(task_id, "input"), params=params)))

    def write_output(
        self, task_id: str, offset: int, data: bytes, eof: bool, kept: int
    ) -> tuple[int, int]:
        """Post ``data`` (from ``offset``; the agent keeps its output from ``kept`` on): the
        offset to post from next, and how far the client has read (an older controller says
        not: then as far as it took)."""
        body = {"offset": offset, "data": base64.b64encode(data).decode(), "eof": eof}
        body["wait"] = POLL_WAIT_S
        path, params = self._path(task_id, "output"), {"kept": kept}
        answer = self._answer(self.http.post(path, json=body, params=params))
        end = int(answer["offset"])
        return end, int(answer.get("acked", end))


class PtyBridge:
    """Relays task ``task_id``'s terminal ``pty`` through ``relay`` (an :class:`HttpRelay`)
    until the task has ended (``alive`` says False) and its output is all posted, or the
    relay has no session for it, or ``stop`` is set (the agent stops)."""

    def __init__(
        self,
        task_id: str,
        pty: Pty,
        relay: HttpRelay,
        alive: Callable[[], bool],
        stop: threading.Event,
    ) -> None:
        self.task_id = task_id
        self.pty = pty
        self.relay = relay
        self.alive = alive
        self.stop = stop
        self.done = threading.Event()  # the output has ended (or cannot be relayed)
        self._running = 2
        self._lock = threading.Lock()
        self._failing: set[str] = set()  # the calls failing now (said once each)

    def start(self) -> PtyBridge:
        for target, name in ((self._output, "out"), (self._input, "in")):
            threading.Thread(
                target=self._thread, args=(target,), name=f"pty-{name}-{self.task_id}", daemon=True
            ).start()
        return self

    def _thread(self, target: Callable[[], None]) -> None:
        try:
            target()
        except RelayGone as exc:
            log.info("task %s: its terminal is no longer relayed: %s", self.task_id, exc)
        except Exception:
            if not self.stop.is_set():  # (stopping: the agent's HTTP client is closed)
                log.exception("task %s: relaying its terminal failed", self.task_id)
        finally:
            self.done.set()
            with self._lock:
                self._running -= 1
                last = self._running == 0
            if last:
                self.pty.close()

    def _failed(self, what: str, exc: Exception) -> None:
        """Say once until it works again that ``what`` failed (the controller away)."""
        if what not in self._failing:
            self._failing.add(what)
            log.warning("task %s: cannot %s (trying again): %s", self.task_id, what, exc)

    def _worked(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.info("task %s: can %s again", self.task_id, what)

    def _output(self) -> None:
        kept = bytearray()  # the output from ``base`` on, not yet read by the client
        base = sent = 0  # (sent: the relay holds the output up to there)
        ended = False
        while True:
            start = sent - base
            if start == len(kept) and not ended:
                ended = self._fill(kept, ALIVE_EVERY_S, at_once=True)
                continue
            chunk = bytes(kept[start : start + READ_BYTES])
            eof = ended and start + len(chunk) == len(kept)
            try:
                end, acked = self.relay.write_output(self.task_id, sent, chunk, eof, base)
            except httpx.HTTPError as exc:
                self._failed("post its terminal's output", exc)
                if self.stop.is_set():
                    return
                if ended:
                    self.stop.wait(RETRY_S)
                else:  # (the task writes on meanwhile: read it, as far as it may be kept)
                    ended = self._fill(kept, RETRY_S, at_once=False)
                continue
            self._worked("post its terminal's output")
            if eof and end == sent + len(chunk):  # (the end taken with the rest)
                return
            sent = min(max(end, base), base + len(kept))  # (less: a new session's ask)
            acked = min(max(acked, base), sent)
            del kept[: acked - base]
            base = acked

    def _fill(self, kept: bytearray, wait_s: float, at_once: bool) -> bool:
        """Read the terminal into ``kept`` for up to ``wait_s`` (``at_once``: until something
        came), as far as :data:`MAX_KEPT` lets; whether it has ended (:meth:`_read`)."""
        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            room = MAX_KEPT - len(kept)
            if left <= 0:
                return False
            if room <= 0:  # (the task's writes block until the client reads)
                self.stop.wait(left)
                return False
            data, ended = self._read(min(room, READ_BYTES), left)
            kept += data
            if ended or (at_once and data):
                return ended

    def _read(self, most: int, wait_s: float) -> tuple[bytes, bool]:
        """What the terminal has (up to ``most`` bytes, waiting up to ``wait_s``), and
        whether it has ended: the task is gone (what is left is read), the agent stops, or
        the keystrokes' thread has ended (the relay lost the session: the terminal is then
        closed, and the task gets SIGHUP)."""
        ready, _, _ = select.select([self.pty.master], [], [], min(wait_s, ALIVE_EVERY_S))
        if ready:
            try:
                data = os.read(self.pty.master, most)
            except OSError:  # EIO: no process has the terminal open any more
                return b"", True
            return data, not data
        if self.alive() and not self.stop.is_set() and not self.done.is_set():
            return b"", False  # (done: the keystrokes' end has stopped, nobody can type)
        self.pty.close_slave()
        return self._drain(most), True

    def _drain(self, most: int) -> bytes:
        os.set_blocking(self.pty.master, False)
        left = bytearray()
        while len(left) < most:
            try:
                data = os.read(self.pty.master, most - len(left))
            except OSError:  # EAGAIN: nothing more; EIO: nobody has it open
                break
            if not data:
                break
            left += data
        os.set_blocking(self.pty.master, True)
        return bytes(left)

    def _input(self) -> None:
        offset, size_seq = 0, 0
        while not self.done.is_set() and not self.stop.is_set():
            try:
                page = self.relay.read_input(self.task_id, offset, size_seq)
            except httpx.HTTPError as exc:
                self._failed("read its terminal's input", exc)
                if self.stop.wait(RETRY_S):
                    return
                continue
            self._worked("read its terminal's input")
            if page.get("rows") and page.get("cols"):
                with contextlib.suppress(OSError):
                    set_size(self.pty.master, int(page["rows"]), int(page["cols"]))
            size_seq = int(page["size_seq"])
            self._write(base64.b64decode(page["data"]))
            offset = int(page["offset"])
            if page["ended"]:
                return

    def _write(self, data: bytes) -> None:
        while data and not self.done.is_set():
            try:
                data = data[os.write(self.pty.master, data) :]
            except OSError as exc:
                if exc.errno != errno.EINTR:
                    return  # the terminal is gone
