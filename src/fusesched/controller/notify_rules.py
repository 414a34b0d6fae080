"""Which notice a job's transition gives and who gets it (controller/notify.py): a job's
recipient (its ``notify.to``, else its user when that is a user name or one address), the
time-limit levels it asked for, and the one notice its end gives."""

from __future__ import annotations

import logging
from typing import Final

from fusesched.model.phases import JobPhase
from fusesched.submit.job_notify import TIME_LIMIT_LEVELS, NotifyEvent, NotifyRequest, mail_address

log = logging.getLogger("fusesched.notify")

#: The ends a ``fail`` notice is for.
FAILED: Final = frozenset({JobPhase.FAILED, JobPhase.TIMEOUT})


def mailable(notify: NotifyRequest, user: str, job_id: str) -> bool:
    """Whether the job has a recipient: ``notify.to`` (checked when submitted), else its user,
    which must then be a user name or one mail address (a job's user is free text where
    authentication is off: a list of addresses or a header must not become recipients)."""
    if notify.to:
        return True
    if not user:
        log.warning("job %s names no user and no notify.to: no notice is sent", job_id)
        return False
    try:
        mail_address(user)
    except ValueError:
        log.warning(
            "job %s: its user %r is not a mail address or user name and it names no "
            "notify.to (sbatch --mail-user): no notice is sent",
            job_id,
            user[:80],
        )
        return False
    return True


def levels(notify: NotifyRequest) -> tuple[int, ...]:
    return tuple(sorted(TIME_LIMIT_LEVELS[e] for e in notify.events if e in TIME_LIMIT_LEVELS))


def end_event(
    events: frozenset[NotifyEvent], phase: JobPhase, start: float | None, reason: str
) -> NotifyEvent | None:
    """The one notice a job's end gives (see the module's docstring), or None."""
    if (
        NotifyEvent.INVALID_DEPEND in events
        and phase is JobPhase.CANCELLED
        and start is None
        and reason.removeprefix("rejected: ").startswith("dependency")
    ):
        return NotifyEvent.INVALID_DEPEND
    if NotifyEvent.FAIL in events and phase in FAILED:
        return NotifyEvent.FAIL
    if NotifyEvent.END in events:
        return NotifyEvent.END
    return None
