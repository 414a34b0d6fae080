"""``fusesched run --pty`` on the client's side (Slurm's ``srun --pty``; ``srun --pty`` in an
allocation and ``run --jobid`` too, :mod:`fusesched.agent.step_pty`): the local terminal in
raw mode, keystrokes relayed to the task's terminal and its output to this one, through the
controller's relay (:mod:`fusesched.controller.pty_relay`).

Once the task has started, :func:`attach` puts the terminal in raw mode (restored on every way
out: the end, an error, ``~.``, SIGTERM, SIGHUP), then relays: a thread long-polls the output
and writes it here; the main thread reads the keystrokes (Ctrl-C and Ctrl-D are bytes like
any other, as over ssh; ``~.`` and ``~~`` are ssh's escapes: :mod:`fusesched.cli.pty_escape`)
and queues them, with the window's new size after a ``SIGWINCH``, for a third thread that
posts them. When the output has ended, the job's (or the task's) end gives the exit code.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import termios
import threading
import time
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

from fusesched.cli.pty_escape import Escapes
from fusesched.submit.terminal import MAX_SIDE, Terminal

#: How long a long poll for the terminal's output waits (seconds).
OUTPUT_WAIT_S = 20.0
#: How long a post of keystrokes waits for room (seconds).
INPUT_WAIT_S = 10.0
#: The most keystroke bytes read at once.
READ_BYTES = 16 * 1024
#: The most keystroke bytes posted at once (the relay's limit a request).
MAX_POST = 64 * 1024
#: The most keystroke bytes kept while the relay cannot take them (the controller
#: unreachable): beyond it, no more is read until it can.
MAX_PENDING = 1024 * 1024
#: How soon a call that could not reach the controller is tried again (seconds).
RETRY_S = 0.5
#: The ``TERM`` given when this one's cannot be passed on (unset, or not a terminfo name).
PLAIN_TERM = "dumb"

_TERM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


class Hangup(Exception):
    """SIGTERM or SIGHUP reached the client: it leaves (the job is cancelled)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def window(fd: int) -> tuple[int, int]:
    """The terminal ``fd``'s size (rows, columns), within what a launch takes."""
    size = os.get_terminal_size(fd)
    return (min(max(size.lines, 1), MAX_SIDE), min(max(size.columns, 1), MAX_SIDE))


def terminal(fd: int, term: str | None) -> Terminal:
    """What the task's terminal is to be: this one's ``TERM`` and size."""
    rows, cols = window(fd)
    name = term if term and _TERM_NAME.fullmatch(term) else PLAIN_TERM
    return Terminal(term=name, rows=rows, cols=cols)


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal ``fd`` in raw mode (no echo, no line editing, no signals from keys: every
    byte goes to the task), as it was again however the block ends."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSADRAIN)  # (as ssh: what was typed ahead is kept, and sent)
        RAW.set()
        yield
    finally:
        RAW.clear()
        with contextlib.suppress(termios.error):  # (a terminal hung up has no modes to set)
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def signals_caught(wake: int, resized: threading.Event) -> Iterator[None]:
    """SIGWINCH sets ``resized`` (and writes to ``wake``); SIGTERM and SIGHUP raise
    :class:`Hangup`; the previous handlers are back at the end."""

    def on_winch(signum: int, frame: Any) -> None:
        resized.set()
        with contextlib.suppress(OSError):
            os.write(wake, b"w")

    def on_hangup(signum: int, frame: Any) -> None:
        raise Hangup(signum)

    handlers = {signal.SIGWINCH: on_winch, signal.SIGTERM: on_hangup, signal.SIGHUP: on_hangup}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


#: Set while a terminal is in raw mode here: messages then end lines with ``\r\n``.
RAW = threading.Event()


def warn_anywhere(line: str) -> None:
    """A warning on stderr that reads right in raw mode too (its lines end with ``\r\n``,
    which a raw terminal does not add): the keepalive's, while a terminal is relayed."""
    if not RAW.is_set():
        from fusesched.cli.keepalive import warn

        warn(line)
        return
    with contextlib.suppress(OSError):
        _write_all(2, f"\r\nwarning: {line}\r\n".encode(errors="replace"))


class Left(Exception):
    """The user typed ``~.`` at the start of a line: the client leaves (ssh's escape)."""


class Endpoint(Protocol):
    """A terminal the relay serves: a ``run --pty`` job's (:class:`JobTerminal`) or a job
    step's task's (:class:`StepTerminal`)."""

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]: ...

    def input(self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float) -> int: ...

    def ended(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class JobTerminal:
    """A ``run --pty`` job's terminal (``/v1/jobs/{id}/pty/...``); it has ended with its job."""

    client: Any
    job_id: str

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        return cast(tuple[bytes, int, bool], self.client.pty_output(self.job_id, offset, wait))

    def input(self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float) -> int:
        return int(self.client.pty_input(self.job_id, offset, data, size, wait))

    def ended(self) -> bool:
        from fusesched.sdk import FINISHED

        return bool(self.client.show(self.job_id)["state"] in FINISHED)


@dataclass(frozen=True, slots=True)
class StepTerminal:
    """A job step's task's terminal (``srun --pty``: ``/v1/tasks/{id}/pty/...``); it has
    ended with its task (or, gone, with its job)."""

    client: Any
    task_id: str

    def output(self, offset: int, wait: float) -> tuple[bytes, int, bool]:
        return cast(
            tuple[bytes, int, bool], self.client.task_pty_output(self.task_id, offset, wait)
        )

    def input(self, offset: int, data: bytes, size: tuple[int, int] | None, wait: float) -> int:
        return int(self.client.task_pty_input(self.task_id, offset, data, size, wait))

    def ended(self) -> bool:
        from fusesched.sdk import ControllerError

        try:
            return bool(self.client.task(self.task_id)["state"] == "exited")
        except ControllerError as exc:
            if exc.status in (401, 404):  # (its job has ended: the task and its credential)
                return True
            raise


class Relay:
    """The terminal ``endpoint`` relayed between the controller and the local descriptors
    ``stdin`` and ``stdout``. Three threads: this one reads the keystrokes (and the escapes:
    ``~.`` works while the controller cannot be reached), one posts them, one writes the
    output."""

    def __init__(self, endpoint: Endpoint, stdin: int, stdout: int) -> None:
        self.endpoint = endpoint
        self.stdin = stdin
        self.stdout = stdout
        self.done = threading.Event()  # the output has ended (or the job has)
        self.failure: str | None = None  # why the output could not be read, if so
        self.left = False  # ``~.`` was typed
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False  # the pipe above is closed (under ``_typed``): not written to
        self.resized = threading.Event()
        self._typed = threading.Condition()  # guards the three below
        self._pending = bytearray()  # typed, not yet taken by the relay
        self._offset = 0  # the stream offset of ``_pending``'s first byte
        self._size: tuple[int, int] | None = None  # a window size to send

    def run(self) -> None:
        """Relay until the terminal's output has ended, or ``~.``."""
        threads = [
            threading.Thread(target=self._output, name="pty-output", daemon=True),
            threading.Thread(target=self._post, name="pty-input", daemon=True),
        ]
        try:
            with signals_caught(self._wake_w, self.resized):
                self._queue(b"", window(self.stdin))  # (it may have changed since)
                for thread in threads:
                    thread.start()
                self._input()
        finally:
            self._finish()
            with self._typed:  # (a thread still polling may end later: its number is reused)
                self._closed = True
                for fd in (self._wake_r, self._wake_w):
                    os.close(fd)

    def _finish(self) -> None:
        """The end: every thread stops (and the main one wakes)."""
        self.done.set()
        with self._typed:
            self._typed.notify_all()
            if not self._closed:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"d")

    def _output(self) -> None:
        from fusesched.sdk import ControllerError

        offset = 0
        try:
            while not self.done.is_set():
                try:
                    data, offset, closed = self.endpoint.output(offset, OUTPUT_WAIT_S)
                except ControllerError as exc:
                    if exc.status == 0:  # (unreachable: the job goes on meanwhile)
                        time.sleep(RETRY_S)
                        continue
                    if self.endpoint.ended():
                        return
                    if exc.status != 409:  # (409: not started there yet)
                        self.failure = str(exc)
                        return
                    time.sleep(RETRY_S)
                    continue
                _write_all(self.stdout, data)
                if closed or (not data and self.endpoint.ended()):
                    return
        except Exception as exc:  # (never a silent hang: the main thread says it)
            self.failure = f"reading the terminal's output failed: {exc!r}"
        finally:
            self._finish()

    def _input(self) -> None:
        escapes = Escapes()
        reading = True
        while not self.done.is_set():
            room = len(self._pending) < MAX_PENDING
            watched = [self._wake_r, self.stdin] if reading and room else [self._wake_r]
            ready, _, _ = select.select(watched, [], [], None if room else RETRY_S)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            size = None
            if self.resized.is_set():
                self.resized.clear()
                size = window(self.stdin)
            data = b""
            if self.stdin in ready:
                try:
                    data = os.read(self.stdin, READ_BYTES)
                except OSError:  # (EIO: this terminal hung up; SIGHUP follows)
                    data = b""
                reading = bool(data)  # (end of input: the task's terminal decides)
                data, self.left = escapes.feed(data)
            if data or size is not None:
                self._queue(data, size)
            if self.left:
                return

    def _queue(self, data: bytes, size: tuple[int, int] | None) -> None:
        with self._typed:
            self._pending += data
            self._size = size if size is not None else self._size
            self._typed.notify_all()

    def _post(self) -> None:
        """Post the keystrokes (all of them, as the relay makes room) and window sizes."""
        from fusesched.sdk import ControllerError

        try:
            while True:
                with self._typed:
                    while not (self._pending or self._size) and not self.done.is_set():
                        self._typed.wait()
                    if self.done.is_set():
                        return
                    offset, data, size = self._offset, bytes(self._pending[:MAX_POST]), self._size
                try:
                    taken = self.endpoint.input(offset, data, size, INPUT_WAIT_S)
                except ControllerError as exc:
                    if exc.status in (0, 409):  # (unreachable, not started yet)
                        self.done.wait(RETRY_S)
                        continue
                    raise
                with self._typed:
                    del self._pending[: max(0, min(taken, offset + len(data)) - offset)]
                    self._offset = max(self._offset, taken)
                    if self._size == size:
                        self._size = None
        except Exception as exc:  # (never a silent hang: the main thread says it)
            self.failure = f"sending the keystrokes failed: {exc}"
            self._finish()


def attach(endpoint: Endpoint, stdin: int, stdout: int, say: Callable[[str], None]) -> None:
    """Relay the terminal ``endpoint`` with the local one in raw mode until its output has
    ended; :class:`Hangup` when SIGTERM or SIGHUP ends it first, :class:`Left` when ``~.``
    does. Says (on stderr, the terminal restored) why the output could not be read, if it
    could not."""
    relay = Relay(endpoint, stdin, stdout)
    with raw_mode(stdin):
        relay.run()
    if relay.left:
        raise Left
    if relay.failure is not None:
        say(f"lost the job's terminal: {relay.failure}")
