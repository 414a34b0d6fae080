"""A job step's task that reads ``srun``'s standard input as it comes (agent/step_stdin.py):
``python -I -m fusesched.stdin_pump STREAM -- COMMAND...``.

``srun`` starts each task that gets its streamed input behind this module, which gives
``COMMAND`` a pipe as its standard input and becomes it (``exec``: it keeps the task's
process id). A reader process of its own (forked twice, so that it is no child of
``COMMAND``'s, but in the task's process group, ended with it) feeds the pipe with what the
controller's stream ``STREAM`` brings (``GET /v1/jobs/{id}/stdin/{stream}``, long polls:
:mod:`fusesched.api.stdin_routes`), then closes it at the input's end: ``COMMAND`` reads its
end of file. It reads as fast as ``COMMAND`` does: a task that never reads holds the stream
back, never the other way round, and its reader ends with it.

It calls the controller as ``srun`` does, from the task's own variables: the controller
(``FUSESCHED_CONTROLLER``), the job's credential (``FUSESCHED_JOB_TOKEN``), the CA
(``FUSESCHED_CA``), the job and the task (``FUSESCHED_JOB_ID``, ``FUSESCHED_TASK_ID``).
While the controller cannot be reached (restarting, a standby taking over) it tries again
every :data:`RETRY_S`; a stream the controller refuses (its job ended; its input lost) ends
the task's input there, said on the task's standard error. A command that cannot be run
ends the task with 126 or 127, as a shell's. Standard library only: every such task starts
with it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import signal
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: How long one read of the stream waits for input at the controller (seconds).
POLL_WAIT_S = 20.0
#: How soon a read is tried again after it failed (the controller unreachable: seconds).
RETRY_S = 1.0
#: Signals the reader leaves to its task: sent to the task's process group, they are the
#: task's to handle (it ends with the task, or its pipe's end).
_IGNORED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
)


#: One read of the stream: (URL, headers, TLS context) → the answer's JSON.
Get = Callable[[str, Mapping[str, str], "ssl.SSLContext | None"], Any]


class Refused(Exception):
    """The controller refuses the stream (its job ended, the input was lost…): why."""


def main(argv: Sequence[str]) -> int:
    """Start the reader and become the command; the exit status when that fails."""
    if len(argv) < 3 or argv[1] != "--":
        return _fail("usage: python -m fusesched.stdin_pump STREAM -- COMMAND...", 2)
    stream, command = argv[0], list(argv[2:])
    try:
        read_end, write_end = os.pipe()
        child = os.fork()
    except OSError as exc:
        return _fail(f"srun: error: cannot forward standard input: {exc.strerror}", 1)
    if child == 0:  # pragma: no cover (the reader: measured by the tests that run it)
        code = 1
        try:
            os.close(read_end)
            code = reader(stream, write_end, os.environ) if os.fork() == 0 else 0
        except Exception as exc:  # (said, never a traceback in the task's output)
            _warn(f"cannot forward it ({exc}): the task's input ends here")
        finally:
            os._exit(code)
    os.close(write_end)
    os.waitpid(child, 0)
    os.dup2(read_end, 0)
    os.close(read_end)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # (Python ignores them: not the command)
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return _fail(f"srun: error: {command[0]}: {exc.strerror}", code)


def reader(stream: str, pipe: int, env: Mapping[str, str]) -> int:
    """The reader process: leave the task's signals and output to it, then :func:`feed`."""
    for signum in _IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    with open(os.devnull, "rb+") as null:  # (the task's output is not the reader's)
        os.dup2(null.fileno(), 0)
        os.dup2(null.fileno(), 1)
    return feed(stream, pipe, env)


def feed(stream: str, pipe: int, env: Mapping[str, str], get: Get | None = None) -> int:
    """Feed ``pipe`` with the stream ``stream`` (its URL and credential from ``env``;
    ``get`` reads it: :func:`_get`) until its end, or until nobody reads the pipe any more;
    then close it. The reader's exit status."""
    try:
        return _feed(stream, pipe, env, get or _get)
    finally:
        with contextlib.suppress(OSError):
            os.close(pipe)


def _feed(stream: str, pipe: int, env: Mapping[str, str], get: Get) -> int:
    try:
        job, task = env["FUSESCHED_JOB_ID"], env["FUSESCHED_TASK_ID"]
        base = env["FUSESCHED_CONTROLLER"].rstrip("/")
    except KeyError as exc:
        _warn(f"{exc.args[0]} is not set: the task gets no standard input")
        return 1
    url = f"{base}/v1/jobs/{_quoted(job)}/stdin/{_quoted(stream)}"
    token = env.get("FUSESCHED_JOB_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    ca = env.get("FUSESCHED_CA")
    context = ssl.create_default_context(cafile=ca) if ca else None
    offset = 0
    while not _unread(pipe):
        query = urllib.parse.urlencode({"reader": task, "offset": offset, "wait": POLL_WAIT_S})
        try:
            page = get(f"{url}?{query}", headers, context)
        except Refused as exc:
            _warn(f"{exc}: the task's input ends here")
            return 1
        except (OSError, ValueError):  # (unreachable, restarting, an answer cut short)
            time.sleep(RETRY_S)
            continue
        data = base64.b64decode(page["data"])
        if not _write(pipe, data):
            return 0
        offset = int(page["offset"])
        if page["eof"] and not data:  # (the end, once all before it is acknowledged)
            if page.get("lost"):
                _warn("srun stopped forwarding it before its end: the task's input ends here")
            return 0
    return 0


def _get(url: str, headers: Mapping[str, str], context: ssl.SSLContext | None) -> Any:
    """One read of the stream: its answer. :class:`Refused` for an answer that waiting does
    not change; ``OSError`` for one that may (unreachable, 5xx)."""
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=POLL_WAIT_S + 30, context=context) as got:
            return json.load(got)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise OSError(f"HTTP {exc.code}") from None
        raise Refused(_detail(exc)) from None


def _detail(exc: urllib.error.HTTPError) -> str:
    """What the controller said with its refusal."""
    try:
        said = json.loads(exc.read()).get("detail")
    except (OSError, ValueError, AttributeError):
        said = None
    why = said if isinstance(said, str) else exc.reason
    return f"the controller refused it ({exc.code}: {why})"


def _unread(pipe: int) -> bool:
    """Whether nobody holds the pipe's read end any more (the task has ended or closed it)."""
    poller = select.poll()
    poller.register(pipe, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _write(pipe: int, data: bytes) -> bool:
    """Write all of ``data`` (as fast as the task reads it); False once nobody reads."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(pipe, view) :]
        except InterruptedError:
            continue
        except OSError:  # (EPIPE: the task closed its input, or ended)
            return False
    return True


def _quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _warn(message: str) -> None:
    _fail(f"srun: warning: standard input: {message}", 0)


def _fail(message: str, code: int) -> int:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
