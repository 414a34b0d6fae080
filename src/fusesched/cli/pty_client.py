"""``fusesched run --pty`` on the client's side (Slurm's ``srun --pty``): the local terminal in
raw mode, keystrokes relayed to the task's terminal and its output to this one, through the
controller's relay (:mod:`fusesched.controller.pty_relay`).

Once the job has started, :func:`attach` puts the terminal in raw mode (restored on every way
out: the end, an error, SIGTERM, SIGHUP), then relays: a thread long-polls the output and
writes it here; the main thread reads the keystrokes (Ctrl-C and Ctrl-D are bytes like any
other, as over ssh) and posts them, with the window's new size after a ``SIGWINCH``. When the
output has ended, the job's end gives the exit code.
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
from typing import Any

from fusesched.submit.terminal import MAX_SIDE, Terminal

#: How long a long poll for the terminal's output waits (seconds).
OUTPUT_WAIT_S = 20.0
#: How long a post of keystrokes waits for room (seconds).
INPUT_WAIT_S = 10.0
#: The most keystroke bytes read, and posted, at once.
READ_BYTES = 16 * 1024
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
        yield
    finally:
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


class Relay:
    """One job's terminal relayed between ``client`` and the local descriptors ``stdin``
    and ``stdout``."""

    def __init__(self, client: Any, job_id: str, stdin: int, stdout: int) -> None:
        self.client = client
        self.job_id = job_id
        self.stdin = stdin
        self.stdout = stdout
        self.done = threading.Event()  # the output has ended (or the job has)
        self.failure: str | None = None  # why the output could not be read, if so
        self._wake_r, self._wake_w = os.pipe()
        self.resized = threading.Event()

    def run(self) -> None:
        """Relay until the terminal's output has ended."""
        reader = threading.Thread(target=self._output, name="pty-output", daemon=True)
        try:
            with signals_caught(self._wake_w, self.resized):
                reader.start()
                self._input()
        finally:
            self.done.set()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    def _output(self) -> None:
        from fusesched.sdk import ControllerError

        offset = 0
        try:
            while True:
                try:
                    data, offset, closed = self.client.pty_output(
                        self.job_id, offset, OUTPUT_WAIT_S
                    )
                except ControllerError as exc:
                    if exc.status == 0:  # (unreachable: the job goes on meanwhile)
                        time.sleep(RETRY_S)
                        continue
                    if self._ended():
                        return
                    if exc.status != 409:  # (409: not started there yet)
                        self.failure = str(exc)
                        return
                    time.sleep(RETRY_S)
                    continue
                _write_all(self.stdout, data)
                if closed or (not data and self._ended()):
                    return
        except Exception as exc:  # (never a silent hang: the main thread says it)
            self.failure = f"reading the terminal's output failed: {exc!r}"
        finally:
            self.done.set()
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"d")

    def _ended(self) -> bool:
        from fusesched.sdk import FINISHED

        return bool(self.client.show(self.job_id)["state"] in FINISHED)

    def _input(self) -> None:
        size: tuple[int, int] | None = None
        offset = self._send(0, b"", window(self.stdin))  # (it may have changed since)
        reading = True
        while not self.done.is_set():
            watched = [self._wake_r, self.stdin] if reading else [self._wake_r]
            ready, _, _ = select.select(watched, [], [])
            data = b""
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            if self.resized.is_set():
                self.resized.clear()
                size = window(self.stdin)
            if self.stdin in ready:
                try:
                    data = os.read(self.stdin, READ_BYTES)
                except OSError:  # (EIO: this terminal hung up; SIGHUP follows)
                    data = b""
                reading = bool(data)  # (end of input: the task's terminal decides)
            if data or size is not None:
                offset = self._send(offset, data, size)
                size = None

    def _send(self, offset: int, data: bytes, size: tuple[int, int] | None) -> int:
        """Post ``data`` (all of it, as the relay makes room) and ``size``; the new offset."""
        from fusesched.sdk import ControllerError

        start, end = offset, offset + len(data)
        while offset < end or size is not None:
            if self.done.is_set():
                break
            try:
                taken = self.client.pty_input(
                    self.job_id, offset, data[offset - start :], size, INPUT_WAIT_S
                )
            except ControllerError as exc:
                if exc.status == 0 or exc.status == 409:  # (unreachable, not started yet)
                    time.sleep(RETRY_S)
                    continue
                raise
            offset, size = max(taken, offset), None
        return end


def attach(
    client: Any,
    job_id: str,
    stdin: int,
    stdout: int,
    say: Callable[[str], None],
) -> None:
    """Relay the job's terminal with the local one in raw mode until its output has ended;
    :class:`Hangup` when SIGTERM or SIGHUP ends it first. Says (on stderr, the terminal
    restored) why the output could not be read, if it could not."""
    relay = Relay(client, job_id, stdin, stdout)
    with raw_mode(stdin):
        relay.run()
    if relay.failure is not None:
        say(f"lost the job's terminal: {relay.failure}")
