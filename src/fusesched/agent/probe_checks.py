"""One check of a task's probe (:func:`run_check`), for the probe runner (agent/probes.py).

* ``http``: ``GET <path>`` to ``127.0.0.1:<port>``; a status from 200 to 399 passes (a
  redirect is not followed). The whole check — connection, request, the answer's status line
  and headers (read up to :data:`MAX_HEAD` bytes; the body never) — within ``timeout_s``: a
  server that trickles its answer is cut off then, one that answers something other than HTTP
  fails;
* ``tcp``: a connection to ``127.0.0.1:<port>`` that opens within ``timeout_s`` passes;

  both go to ``::1`` when nothing listens on ``127.0.0.1`` (a server bound to IPv6 loopback
  only) and never anywhere else; container tasks share the node's network;
* ``exec``: the argv in a new session (its own process group) with the task's environment, in
  its working folder and as its user (:class:`ExecContext`; under another uid a ``/bin/sh``
  shim enters the folder as that uid, as the task's own shim does: root never enters it),
  after the task's sandbox command for a container task. It passes when it exits 0; it is
  judged when its main process exits (not when its output closes: a child it leaves behind may
  hold that), and whatever it leaves in its process group is then SIGKILLed, as the whole
  group is at ``timeout_s`` or when the runner stops (its ``stop`` descriptor becomes
  readable). Only the end of its output is kept (:data:`OUTPUT_KEPT` characters in the
  reason), however much it writes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fusesched.submit.probes import HttpCheck, Probe

log = logging.getLogger(__name__)

#: The most output of a failed ``exec`` check kept in its reason.
OUTPUT_KEPT: Final = 200
#: The most of an ``exec`` check's output held at a time (the end of it).
_TAIL_BYTES: Final = 4 * OUTPUT_KEPT
#: The most of an HTTP answer read: its status line and headers (never its body).
MAX_HEAD: Final = 64 * 1024
#: Reads of an ``exec`` check's output between two looks at the clock.
_READS_PER_LOOK: Final = 16
#: Enters the working folder (its first argument) as the check's own user, then runs the check:
#: root never enters a folder for a user (``cwd`` is entered before the switch; agent/task_shim.py)
_CD: Final = 'cd -- "$1" || exit 125\nshift\nexec "$@"\n'
_STATUS_RE: Final = re.compile(rb"HTTP/[0-9]\.[0-9] ([1-5][0-9][0-9])(?:[ \r\n]|$)")


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


def run_check(probe: Probe, context: ExecContext, stop: int | None = None) -> Outcome:
    """Run ``probe``'s check once (blocks up to about ``probe.timeout_s``; an ``exec`` check
    less if the descriptor ``stop`` becomes readable); never raises."""
    try:
        if probe.http is not None:
            return _http(probe.http, probe.timeout_s)
        if probe.tcp is not None:
            return _tcp(probe.tcp.port, probe.timeout_s)
        return _exec(list(probe.exec or ()), context, probe.timeout_s, stop)
    except Exception as exc:  # never out of a worker thread
        log.exception("probe %s failed unexpectedly", probe.describe())
        return Outcome(False, f"{probe.describe()}: internal error: {exc!r}")


def _left(deadline: float) -> float:
    """The time left before ``deadline``; :class:`TimeoutError` when none is."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _connect(port: int, deadline: float) -> socket.socket:
    """A connection to ``127.0.0.1:<port>``, or to ``[::1]:<port>`` when nothing listens on
    the first (the first one's error is raised when neither opens)."""
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=_left(deadline))
    except ConnectionRefusedError as refused:
        first = refused
    if socket.has_ipv6:
        with contextlib.suppress(OSError):
            return socket.create_connection(("::1", port), timeout=_left(deadline))
    raise first


def _http(check: HttpCheck, timeout_s: float) -> Outcome:
    what = check.describe()
    deadline = time.monotonic() + timeout_s
    try:
        with _connect(check.port, deadline) as sock:
            host = "127.0.0.1" if sock.family == socket.AF_INET else "[::1]"
            request = (
                f"GET {check.path} HTTP/1.1\r\nHost: {host}:{check.port}\r\n"
                "User-Agent: fusesched-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            )
            sock.settimeout(_left(deadline))
            sock.sendall(request.encode("ascii"))
            head = _read_head(sock, deadline)
    except TimeoutError:
        return Outcome(False, f"{what}: no answer within {timeout_s:g} s")
    except OSError as exc:
        return Outcome(False, f"{what}: {_error(exc)}")
    if not head:
        return Outcome(False, f"{what}: the connection closed without an answer")
    found = _STATUS_RE.match(head)
    if found is None:
        return Outcome(False, f"{what}: not an HTTP response")
    status = int(found.group(1))
    if 200 <= status < 400:
        return Outcome(True)
    return Outcome(False, f"{what}: HTTP {status}")


def _read_head(sock: socket.socket, deadline: float) -> bytes:
    """The answer up to the end of its headers, the connection's end or :data:`MAX_HEAD`
    bytes, whichever comes first; :class:`TimeoutError` at ``deadline`` (the whole read, not
    each piece of it)."""
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < MAX_HEAD:
        sock.settimeout(_left(deadline))
        piece = sock.recv(MAX_HEAD - len(head))
        if not piece:
            break
        head += piece
    return head


def _tcp(port: int, timeout_s: float) -> Outcome:
    try:
        with _connect(port, time.monotonic() + timeout_s):
            return Outcome(True)
    except TimeoutError:
        return Outcome(False, f"TCP 127.0.0.1:{port}: no connection within {timeout_s:g} s")
    except OSError as exc:
        return Outcome(False, f"TCP 127.0.0.1:{port}: {_error(exc)}")


def _exec(argv: Sequence[str], context: ExecContext, timeout_s: float, stop: int | None) -> Outcome:
    what = "exec " + " ".join(argv)
    deadline = time.monotonic() + timeout_s
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
            start_new_session=True,  # its own process group: killed whole at its end
            user=context.uid,
            group=context.gid,
            extra_groups=[] if context.uid is not None else None,
        )
    except (OSError, ValueError) as exc:
        return Outcome(False, f"{what}: cannot run: {_error(exc)}")
    tail = bytearray()
    try:
        ended = _await(proc, deadline, stop, tail)
    finally:
        # (its main process is a zombie or running: its pid, the group's id, is not reused)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left behind, or all of it
        if proc.stdout is not None:
            proc.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
    if ended == "stopped":
        return Outcome(False, f"{what}: stopped (the agent is stopping)")
    if ended == "timeout":
        return Outcome(False, f"{what}: timed out after {timeout_s:g} s (killed)")
    code = proc.returncode
    if code == 0:
        return Outcome(True)
    text = bytes(tail).decode("utf-8", errors="replace").strip()
    text = " ".join(text.split())[-OUTPUT_KEPT:]
    said = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return Outcome(False, f"{what}: {said}" + (f": {text}" if text else ""))


def _await(
    proc: subprocess.Popen[bytes], deadline: float, stop: int | None, tail: bytearray
) -> str:
    """Wait for ``proc``'s main process to exit (``"exited"``, not reaped), ``deadline``
    (``"timeout"``) or ``stop`` (``"stopped"``), keeping the end of its output in ``tail``."""
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    os.set_blocking(out, False)
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # (before Linux 5.3: looked at every 50 ms)
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ, "out")
        if pidfd is not None:
            selector.register(pidfd, selectors.EVENT_READ, "exit")
        if stop is not None:
            selector.register(stop, selectors.EVENT_READ, "stop")
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                events = selector.select(left if pidfd is not None else min(left, 0.05))
                for key, _ in events:
                    if key.data == "stop":
                        return "stopped"
                    if key.data == "out" and not _drain(out, tail):
                        selector.unregister(out)  # its output closed; it may still run
                if _exited(proc.pid):
                    _drain(out, tail)  # what it wrote last
                    return "exited"
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _drain(fd: int, tail: bytearray) -> bool:
    """Read what ``fd`` has now (a few reads at most), keeping the end in ``tail``; False at
    its end."""
    for _ in range(_READS_PER_LOOK):
        try:
            piece = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not piece:
            return False
        tail += piece
        del tail[:-_TAIL_BYTES]
    return True


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has exited (it is left a zombie: not reaped)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
