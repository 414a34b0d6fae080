"""The cap on each user's open terminals (``fusesched run --pty`` jobs, ``srun --pty`` steps):
each holds a relay session in the controller's memory (up to 64 KiB of keystrokes and
256 KiB of output: controller/pty_relay.py), so that one user's scripts cannot fill it.

A user's open terminals are their live jobs submitted with ``pty`` (waiting ones too: each
will open one), their running steps on a terminal, and the relay's sessions of their jobs
whose output has not been read to its end (one nobody reads is dropped 10 minutes after it
was last touched; one read to its end is closed at once, so that terminals opened and
closed one after another never reach the cap). A submission (controller/submissions.py) or
a step (controller/step_pty.py) past the cap (``ControllerConfig.pty_sessions_per_user``,
``fusesched controller --pty-sessions-per-user``; admins too) is refused with
:class:`SubmitError` (400), saying why. Runs with the controller's lock held.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fusesched.controller.pty_relay import terminal_key

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: The default cap on a user's open terminals.
DEFAULT_PER_USER = 64


def open_terminals(ctl: Controller, user: str) -> set[str]:
    """``user``'s open terminals, named as :func:`terminal_key` names them."""
    keys = ctl.pty_relay.terminals_of(user, time.monotonic())  # (the routes' clock)
    for live in ctl.jobs.values():
        if live.spec.user != user:
            continue
        if live.request.pty is not None:
            keys.add(live.id)
        for task_id, task in live.tasks.items():
            if task.remote and task.launch.pty is not None:
                keys.add(terminal_key(live.id, task_id, step=True))
    return keys


def refusal(ctl: Controller, user: str, adding: int = 1) -> str | None:
    """Why ``user`` may not open ``adding`` more terminals (None: they may)."""
    cap = ctl.config.pty_sessions_per_user
    have = len(open_terminals(ctl, user))
    if have + adding <= cap:
        return None
    who = f"user {user!r}" if user else "this user"
    terminals = "terminal" if have == 1 else "terminals"
    return (
        f"{who} has {have} open {terminals} (run --pty jobs and srun --pty steps, waiting, "
        f"running or not yet read to their end): at most {cap} a user "
        "(the controller's --pty-sessions-per-user); end one first"
    )
