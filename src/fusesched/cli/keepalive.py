"""The holder's side of Slurm's ``InactiveLimit``: ``fusesched salloc`` and ``fusesched run``
submit their job *attended* (:class:`Attended`) and, from a thread of their own
(:class:`Keepalive`), tell the controller every few seconds that they are still there
(``POST /v1/jobs/{id}/alive``), at the pace the controller's answer asks for. If the command
is killed outright (SIGKILL, its host reboots or loses its network), the pings stop and the
controller ends the job once the limit has passed (:mod:`fusesched.controller.inactive`).

A thread, not the command's own loop: salloc's and run's main threads wait on other things
(a child's exit, output written to a pipe that nobody reads yet) and must not lose the
allocation meanwhile. A suspended command (Ctrl-Z) stops its thread too: it is silent, as
under Slurm.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fusesched.controller.inactive import MAX_PING_S, MIN_PING_S

#: The request field that declares the job attended.
ATTENDED = "attended"
#: The warning when the controller is older than ``attended``.
OLDER_CONTROLLER = (
    "the controller is older than this command: the job is not ended if this command is "
    "killed (no InactiveLimit); cancel it with fusesched cancel then"
)
#: How soon a ping is tried again after the controller could not be reached (seconds).
RETRY_S = 1.0


def warn(line: str) -> None:
    """A warning on stderr, as the other client commands print theirs."""
    from fusesched.cli.live import err

    err.print(f"[yellow]warning:[/] {line}", highlight=False)


class Attended:
    """Submits payloads attended with ``call``; a controller older than the field (it
    refuses fields it does not know: nothing was submitted) gets each again without it, with
    one warning, and later payloads (a fallback for another field, ``submit_dir``) without
    it at once."""

    def __init__(self, call: Callable[[Any], Any], warn: Callable[[str], None]) -> None:
        self.call = call
        self.warn = warn
        self.older = False  # (the controller refused the field)

    def __call__(self, payload: Any) -> Any:
        from fusesched.sdk import ControllerError

        if not self.older:
            try:
                return self.call({**payload, ATTENDED: True})
            except ControllerError as exc:
                if not older_than_attended(exc):
                    raise
            self.older = True
            self.warn(OLDER_CONTROLLER)
        return self.call({k: v for k, v in payload.items() if k != ATTENDED})


def older_than_attended(exc: Exception) -> bool:
    """Whether ``exc`` is the refusal of a controller older than ``attended``: FastAPI's 422
    for a field it does not know (``attended: Extra inputs are not permitted``), not another
    refusal that names the field."""
    from fusesched.sdk import ControllerError

    return (
        isinstance(exc, ControllerError)
        and exc.status == 422
        and f"{ATTENDED}: Extra inputs" in str(exc)
    )


def final(status: int) -> bool:
    """Whether the controller's answer ``status`` to a ping means it will never take one for
    this job (it has ended or is being stopped, is not attended, is not the caller's, or the
    controller has no such route): a refusal (4xx) other than a timeout or too many requests.
    Anything else (unreachable, a standby's 503, a server error) may pass: pinged again."""
    return 400 <= status < 500 and status not in (408, 429)


def given_up(job_id: str, status: int, why: str) -> str:
    """What the holder is told when the controller refuses its pings for good for another
    reason than the job's end (a revoked token's 403, a job it cannot see): it is no longer
    known to hold the job, which its InactiveLimit may then end."""
    return (
        f"the controller refused to hear that this command still holds job {job_id} "
        f"(HTTP {status}: {why}); it is no longer told, and may end the job once its "
        "inactive limit has passed"
    )


class Keepalive:
    """Pings ``job_id``'s alive route from a daemon thread until :meth:`stop` (or until the
    controller refuses for good, :func:`final`: the job has ended, is being stopped, or the
    controller does not know the route). While the controller cannot be reached it tries
    again every :data:`RETRY_S`, and after a server error (a standby's 503, a 500) at its
    usual pace: a controller that restarts or takes over gives every holder a fresh limit
    anyway. A refusal other than the job's end (409) is said once with ``say``
    (:func:`given_up`); the job's end is the command's own to tell."""

    def __init__(self, client: Any, job_id: str, say: Callable[[str], None] = warn) -> None:
        self.client = client
        self.job_id = job_id
        self.say = say
        self.pings = 0  # answered so far
        self.refused: str | None = None  # why the controller refused it, if it did
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"fusesched-keepalive-{job_id}", daemon=True
        )

    def start(self) -> Keepalive:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()

    def ended(self, timeout: float) -> bool:
        """Whether the thread has ended (waiting up to ``timeout`` seconds for it)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        from fusesched.sdk import ControllerError

        pace = MAX_PING_S  # (the controller's, once it answered)
        while not self._stopping.is_set():
            try:
                answer = self.client.alive(self.job_id)
            except ControllerError as exc:
                if final(exc.status):  # ended, being stopped, unknown here: nothing to hold
                    self.refused = str(exc)
                    if exc.status != 409:  # (the job's end: the command's own to tell)
                        self.say(given_up(self.job_id, exc.status, str(exc)))
                    return
                pause = RETRY_S if exc.status == 0 else pace
            except Exception:  # (a bad answer: try again later, never end the command)
                pause = pace
            else:
                self.pings += 1
                asked = answer.get("ping_every_s") if isinstance(answer, dict) else None
                pause = pace = _pause(asked)
            self._stopping.wait(pause)


def _pause(asked: object) -> float:
    """The controller's ``ping_every_s``, kept within [MIN_PING_S, MAX_PING_S]."""
    if isinstance(asked, int | float) and not isinstance(asked, bool) and asked == asked:
        return max(MIN_PING_S, min(float(asked), MAX_PING_S))
    return MAX_PING_S
