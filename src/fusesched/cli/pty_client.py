"""``fusesched run --pty`` on the client's side (Slurm's ``srun --pty``; ``srun --pty`` in an
allocation and ``run --jobid`` too, :mod:`fusesched.agent.step_pty`): the local terminal in
raw mode, keystrokes relayed to the task's terminal and its output to this one, through the
controller's relay (:mod:`fusesched.controller.pty_relay`).

Once the task has started, :func:`attach` puts the terminal in raw mode (restored on every way
out: the end, an error, ``~.``, SIGTERM, SIGHUP), then relays: a thread long-polls the output
and writes it here; the main thread reads the keystrokes (Ctrl-C and Ctrl-D are bytes like
any other, as over ssh; ``~.`` and ``~~`` are ssh's escapes: :mod:`fusesched.cli.pty_escape`)
and queues them, with the window's new size after a ``SIGWINCH``, for a third thread that
posts them. When the output has ended, the job's (or the task's) end gives the exit code. The
job can end before its output does (a command that ends at once: its agent posts what it
wrote after the exit has ended the job): the output is read on to its end, which the agent
posts, waited for :data:`LAST_OUTPUT_S` at most once the job has ended (after the latest
output since, if any).

Standard input need not be a terminal (``echo ls | fusesched run --pty bash``, as Slurm's):
its bytes are relayed as they come, without raw mode, escapes or window sizes (the task's
terminal is ``$LINES`` x ``$COLUMNS``, else 24 x 80), and its end is the terminal's
end-of-file character (Ctrl-D), sent once.

The controller may go away meanwhile (a restart, a standby taking over): both threads try
again, saying so once (and once more when it is back: :mod:`fusesched.cli.pty_outage`), for
up to a minute. The keystrokes are kept until the task has read them (the relay says how
far), so that a restarted controller's new session gets those its predecessor held again.
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

from fusesched.cli.pty_endpoints import Endpoint
from fusesched.cli.pty_escape import Escapes
from fusesched.cli.pty_outage import Outage, transient
from fusesched.submit.terminal import MAX_SIDE, Terminal

#: How long a long poll for the terminal's output waits (seconds).
OUTPUT_WAIT_S = 20.0
#: How long a post of keystrokes waits for room (seconds).
INPUT_WAIT_S = 10.0
#: How long the output's end is waited for once the job (or the step's task) has ended
#: (seconds): its agent may post the last of it after the end (as the relay waits for it).
LAST_OUTPUT_S = 10.0
#: The most keystroke bytes read at once.
READ_BYTES = 16 * 1024
#: The most keystroke bytes posted at once (the relay's limit a request).
MAX_POST = 64 * 1024
#: The most keystroke bytes kept (not yet read by the task: the controller unreachable, or
#: the task not reading): beyond it, no more is read until it has.
MAX_PENDING = 1024 * 1024
#: How soon a call that could not reach the controller is tried again (seconds).
RETRY_S = 0.5
#: The ``TERM`` given when this one's cannot be passed on (unset, or not a terminfo name).
PLAIN_TERM = "dumb"
#: The terminal's end-of-file character (Ctrl-D): what the end of a piped input sends.
EOF_CHAR = b"\x04"

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
    """What the task's terminal is to be: this one's ``TERM`` and size (standard input not
    a terminal: ``$LINES`` x ``$COLUMNS``, else 24 x 80)."""
    rows, cols = window(fd) if os.isatty(fd) else (_side("LINES", 24), _side("COLUMNS", 80))
    name = term if term and _TERM_NAME.fullmatch(term) else PLAIN_TERM
    return Terminal(term=name, rows=rows, cols=cols)


def _side(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and 1 <= int(value) <= MAX_SIDE else default


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
    _raw_line(f"warning: {line}")


def _raw_line(line: str) -> None:
    with contextlib.suppress(OSError):
        _write_all(2, f"\r\n{line}\r\n".encode(errors="replace"))


def told(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say``, or in raw mode its line alone on stderr with ``\r\n`` line ends."""

    def tell(line: str) -> None:
        if RAW.is_set():
            _raw_line(line)
        else:
            say(line)

    return tell


class Left(Exception):
    """The user typed ``~.`` at the start of a line: the client leaves (ssh's escape)."""


class Relay:
    """The terminal ``endpoint`` relayed between the controller and the local descriptors
    ``stdin`` and ``stdout``. Three threads: this one reads the keystrokes (and the escapes:
    ``~.`` works while the controller cannot be reached), one posts them, one writes the
    output. ``tty``: ``stdin`` is a terminal (else no escapes, no window sizes, and its end
    is sent as :data:`EOF_CHAR`); ``say``: says the controller's absences."""

    def __init__(
        self,
        endpoint: Endpoint,
        stdin: int,
        stdout: int,
        tty: bool = True,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.endpoint = endpoint
        self.stdin = stdin
        self.stdout = stdout
        self.tty = tty
        self.outage = Outage(say)
        self.done = threading.Event()  # the output has ended (or the job has)
        self.failure: str | None = None  # why the output could not be read, if so
        self.left = False  # ``~.`` was typed
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False  # the pipe above is closed (under ``_typed``): not written to
        self.resized = threading.Event()
        self._typed = threading.Condition()  # guards the four below
        self._kept = bytearray()  # typed, not yet read by the task (as far as the relay says)
        self._base = 0  # the stream offset of ``_kept``'s first byte
        self._sent = 0  # the relay holds the keystrokes up to here
        self._size: tuple[int, int] | None = None  # a window size to send

    def run(self) -> None:
        """Relay until the terminal's output has ended, or ``~.``."""
        threads = [
            threading.Thread(target=self._output, name="pty-output", daemon=True),
            threading.Thread(target=self._post, name="pty-input", daemon=True),
        ]
        try:
            with signals_caught(self._wake_w, self.resized):
                if self.tty:
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

    def _away(self, exc: Any) -> bool:
        """Whether ``exc`` (a :class:`ControllerError`) is the controller's absence, waited
        out (:data:`RETRY_S` before the next try); past :data:`OUTAGE_S` the relay fails."""
        if not transient(exc.status):
            return False
        if self.outage.failed(str(exc), time.monotonic()):
            self.done.wait(RETRY_S)
        else:
            self.failure = f"the controller could not be reached for {self.outage.limit_s:g} s"
            self._finish()
        return True

    def _ended(self) -> bool:
        """Whether the terminal's job (or task) has ended; not while the controller is away."""
        from fusesched.sdk import ControllerError

        try:
            return self.endpoint.ended()
        except ControllerError as exc:
            if transient(exc.status):
                return False
            raise

    def _output(self) -> None:
        from fusesched.sdk import ControllerError

        offset = 0
        last_by: float | None = None  # the end has been seen: the output waited for until then
        try:
            while not self.done.is_set():
                wait = OUTPUT_WAIT_S if last_by is None else max(0.0, last_by - time.monotonic())
                try:
                    data, offset, closed = self.endpoint.output(offset, wait)
                except ControllerError as exc:
                    if self._away(exc):  # (the job goes on meanwhile)
                        continue
                    if self._ended():
                        return
                    if exc.status != 409:  # (409: not started there yet)
                        self.failure = str(exc)
                        return
                    time.sleep(RETRY_S)
                    continue
                self.outage.worked()
                _write_all(self.stdout, data)
                if closed:
                    return
                now = time.monotonic()
                if data:
                    if last_by is not None:  # (its agent is there: its next post as long)
                        last_by = now + LAST_OUTPUT_S
                elif last_by is None:
                    if self._ended():  # (what the task wrote last may be on its way still)
                        last_by = now + LAST_OUTPUT_S
                elif now >= last_by:
                    return  # (its agent never said the output ended: gone with its task)
        except Exception as exc:  # (never a silent hang: the main thread says it)
            self.failure = f"reading the terminal's output failed: {exc!r}"
        finally:
            self._finish()

    def _input(self) -> None:
        escapes = Escapes() if self.tty else None
        reading = True
        while not self.done.is_set():
            room = len(self._kept) < MAX_PENDING
            watched = [self._wake_r, self.stdin] if reading and room else [self._wake_r]
            ready, _, _ = select.select(watched, [], [], None if room else RETRY_S)
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
            size = None
            if self.resized.is_set() and self.tty:
                self.resized.clear()
                size = window(self.stdin)
            data = b""
            if self.stdin in ready:
                try:
                    data = os.read(self.stdin, READ_BYTES)
                except OSError:  # (EIO: this terminal hung up; SIGHUP follows)
                    data = b""
                reading = bool(data)  # (end of input: the task's terminal decides)
                if escapes is not None:
                    data, self.left = escapes.feed(data)
                elif not reading:
                    data = EOF_CHAR  # (a pipe's end: the terminal's end of file, once)
            if data or size is not None:
                self._queue(data, size)
            if self.left:
                return

    def _queue(self, data: bytes, size: tuple[int, int] | None) -> None:
        with self._typed:
            self._kept += data
            self._size = size if size is not None else self._size
            self._typed.notify_all()

    def _post(self) -> None:
        """Post the keystrokes (all of them, as the relay makes room) and window sizes."""
        from fusesched.sdk import ControllerError

        try:
            while True:
                with self._typed:
                    while not self._unsent() and not self.done.is_set():
                        self._typed.wait()
                    if self.done.is_set():
                        return
                    start, base, size = self._sent, self._base, self._size
                    data = bytes(self._kept[start - base : start - base + MAX_POST])
                try:
                    taken, acked = self.endpoint.input(start, data, size, INPUT_WAIT_S, base)
                except ControllerError as exc:
                    if self._away(exc):
                        continue
                    if exc.status != 409:  # (409: not started there yet)
                        raise
                    self.done.wait(RETRY_S)
                    continue
                self.outage.worked()
                with self._typed:
                    end = self._base + len(self._kept)
                    self._sent = min(max(taken, self._base), end)  # (less: sent again)
                    acked = min(max(acked, self._base), self._sent)
                    del self._kept[: acked - self._base]
                    self._base = acked
                    if self._size == size:
                        self._size = None
        except Exception as exc:  # (never a silent hang: the main thread says it)
            self.failure = f"sending the keystrokes failed: {exc}"
            self._finish()

    def _unsent(self) -> bool:
        return self._sent < self._base + len(self._kept) or self._size is not None


def attach(endpoint: Endpoint, stdin: int, stdout: int, say: Callable[[str], None]) -> bool:
    """Relay the terminal ``endpoint`` with the local one in raw mode (when standard input is
    a terminal) until its output has ended (True); :class:`Hangup` when SIGTERM or SIGHUP
    ends it first, :class:`Left` when ``~.`` does. Says (on stderr, the terminal restored)
    why the output could not be read, if it could not (False)."""
    tty = os.isatty(stdin)
    relay = Relay(endpoint, stdin, stdout, tty, told(say))
    with raw_mode(stdin) if tty else contextlib.nullcontext():
        relay.run()
    if relay.left:
        raise Left
    if relay.failure is not None:
        say(f"lost the job's terminal: {relay.failure}")
    return relay.failure is None
