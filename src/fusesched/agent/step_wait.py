"""How ``srun`` in a job waits for room for its step, as Slurm's does: it tries to create
the step, and while running steps hold what it needs it says so once ("step creation
temporarily disabled, retrying"), tries again with a growing pause, and says once more when
the step is created; ``--immediate=N`` bounds the wait (:class:`NoRoom`). Used by plain
steps (agent/step.py) and steps on a terminal (agent/step_pty.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

RETRY_MIN_S = 0.1
RETRY_MAX_S = 0.5


class NoRoom(Exception):
    """``--immediate`` passed with the step still waiting; the message is srun's."""


def create_waiting(
    job_id: str,
    immediate: int | None,
    attempt: Callable[[], int | str],
    say: Callable[[str], None],
    stopped: Callable[[], bool] = lambda: False,
) -> int | None:
    """The id of the step ``attempt`` created (it answers the step's id, or why the step
    must wait), trying until it is or ``immediate`` seconds have passed (:class:`NoRoom`);
    None when ``stopped`` says to give up first (a signal)."""
    waited = False
    pause = RETRY_MIN_S
    deadline = None if immediate is None else time.monotonic() + immediate
    while True:
        if stopped():
            return None
        got = attempt()
        if not isinstance(got, str):
            if waited:
                say(f"Step created for StepId={job_id}.{got}")
            return got
        if deadline is not None and time.monotonic() >= deadline:
            raise NoRoom(f"Unable to create step for job {job_id}: {got}")
        if not waited:
            say(f"Job {job_id} step creation temporarily disabled, retrying ({got})")
            waited = True
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)
