"""Job event notifications: what a job asks to be told of (``sbatch --mail-type`` /
``--mail-user``, the job field ``notify``) and the checks on it.

The events are Slurm's mail types in lower case: ``begin``, ``end``, ``fail``, ``requeue``,
``invalid_depend`` (a dependency that can never be met cancelled the job), ``time_limit_50``,
``time_limit_80``, ``time_limit_90`` (that share of the time limit used) and ``time_limit``
(the limit reached). ``all`` stands for ``begin, end, fail, requeue, invalid_depend`` (Slurm's
ALL less STAGE_OUT); ``array_tasks`` is a flag, not an event: each member of an array is then
told of on its own, instead of one notice for the whole array. Slurm's ``STAGE_OUT`` (burst
buffers) has no meaning here: ``sbatch`` drops it with a warning, the job field refuses it.

``to`` is one mail address (``name@host``) or a user name that the controller's mail
transport qualifies with its default domain; empty: the job's user.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class NotifyEvent(StrEnum):
    BEGIN = "begin"
    END = "end"
    FAIL = "fail"
    REQUEUE = "requeue"
    INVALID_DEPEND = "invalid_depend"
    TIME_LIMIT_50 = "time_limit_50"
    TIME_LIMIT_80 = "time_limit_80"
    TIME_LIMIT_90 = "time_limit_90"
    TIME_LIMIT = "time_limit"


#: ``all``: as Slurm's ALL (STAGE_OUT has no meaning here)
ALL: Final = (
    NotifyEvent.BEGIN,
    NotifyEvent.END,
    NotifyEvent.FAIL,
    NotifyEvent.REQUEUE,
    NotifyEvent.INVALID_DEPEND,
)
#: the share of the time limit (percent) each time-limit event is sent at
TIME_LIMIT_LEVELS: Final = {
    NotifyEvent.TIME_LIMIT_50: 50,
    NotifyEvent.TIME_LIMIT_80: 80,
    NotifyEvent.TIME_LIMIT_90: 90,
    NotifyEvent.TIME_LIMIT: 100,
}
ARRAY_TASKS: Final = "array_tasks"
#: Slurm mail types with no meaning here (dropped by sbatch with a warning)
UNSUPPORTED: Final = frozenset({"stage_out"})
_KNOWN: Final = ", ".join([*(e.name for e in NotifyEvent), "ALL", "NONE", "ARRAY_TASKS"])
#: a user name the transport qualifies (``alice`` → ``alice@<default domain>``)
_USER_RE: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_ATOM: Final = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL_RE: Final = re.compile(rf"^{_ATOM}(\.{_ATOM})*$")
_LABEL_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
MAX_ADDRESS: Final = 254


def mail_address(text: str) -> str:
    """``text`` checked as one mail address (``name@host.domain``) or a bare user name; the
    reason for anything else (``ValueError``)."""
    value = text.strip()
    shown = repr(value) if len(value) <= 60 else f"{value[:60]!r}… ({len(value)} chars)"
    if not value:
        raise ValueError("the mail address is empty")
    if "," in value or any(ch.isspace() for ch in value):
        raise ValueError(f"{shown}: give one mail address (no spaces or commas)")
    if len(value) > MAX_ADDRESS:
        raise ValueError(f"{shown}: a mail address has at most {MAX_ADDRESS} characters")
    if "@" not in value:
        if not _USER_RE.fullmatch(value):
            raise ValueError(
                f"{shown} is neither a mail address (name@host) nor a user name (letters, "
                "digits, . _ -)"
            )
        return value
    local, _, domain = value.rpartition("@")
    if not local or not _LOCAL_RE.fullmatch(local) or len(local) > 64:
        raise ValueError(f"{shown}: the part before @ is not a valid mail name")
    labels = domain.split(".")
    if not domain or not all(_LABEL_RE.fullmatch(label) for label in labels):
        raise ValueError(f"{shown}: {domain!r} is not a valid host name (as in name@example.org)")
    return value


def mail_types(items: Iterable[str]) -> tuple[list[NotifyEvent], bool, list[str], bool]:
    """Slurm mail types (any case) as (events, array_tasks, unsupported names given, none):
    ``all`` expanded; ``none`` (which may not be combined with others) gives no events.
    ``ValueError`` names an unknown type."""
    events: list[NotifyEvent] = []
    array_tasks = False
    unsupported: list[str] = []
    names = [str(item).strip().lower() for item in items]
    names = [n for n in names if n]
    if not names:
        raise ValueError(f"no mail type given: give one or more of {_KNOWN}")
    if "none" in names:
        if len(names) > 1:
            raise ValueError("NONE cannot be combined with other mail types")
        return [], False, [], True
    for name in names:
        if name == "all":
            events.extend(ALL)
        elif name == ARRAY_TASKS:
            array_tasks = True
        elif name in UNSUPPORTED:
            unsupported.append(name.upper())
        else:
            try:
                events.append(NotifyEvent(name))
            except ValueError:
                raise ValueError(f"unknown mail type {name.upper()!r}: give {_KNOWN}") from None
    ordered = [e for e in NotifyEvent if e in events]  # one each, in the table's order
    return ordered, array_tasks, unsupported, False


class NotifyRequest(BaseModel):
    """What a job asks to be told of: ``events`` (at least one), sent ``to`` one address
    (empty: the job's user); ``array_tasks``: each array member on its own. Also written as
    a string of mail types (``"END,FAIL"``), sent to the job's user."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    events: list[NotifyEvent] = Field(min_length=1)
    to: str = ""
    array_tasks: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = {"events": value}
        if isinstance(value, dict) and isinstance(value.get("events"), str | list):
            given = value["events"]
            items = given.split(",") if isinstance(given, str) else given
            if not all(isinstance(i, str) for i in items):
                return value  # pydantic reports the type
            events, array_tasks, unsupported, none = mail_types(items)
            if unsupported:
                raise ValueError(
                    f"{', '.join(unsupported)}: not supported (fusesched has no burst-buffer "
                    "stage-out)"
                )
            if none or not events:
                raise ValueError(
                    "give at least one event to be told of (begin, end, fail, …), or leave "
                    "notify out"
                )
            value = {**value, "events": [e.value for e in events]}
            if array_tasks:
                value["array_tasks"] = True
        return value

    @field_validator("to")
    @classmethod
    def _to(cls, to: str) -> str:
        return mail_address(to) if to.strip() else ""

    def describe(self) -> str:
        """As ``sbatch --mail-type`` writes it: ``BEGIN,END``."""
        names = [e.name for e in self.events] + (["ARRAY_TASKS"] if self.array_tasks else [])
        return ",".join(names)


class MailOptionError(ValueError):
    """A bad ``--mail-type`` or ``--mail-user``; ``option`` names which."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def mail_options(
    mail_type: str | None, mail_user: str | None
) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """``sbatch --mail-type`` and ``--mail-user`` (either may be absent) as the request's
    fields (``{"notify": {...}}``, or none) and warnings as (option, message) pairs.

    As Slurm: no mail without a mail type (``--mail-user`` alone is a warning), ``NONE`` asks
    for none; STAGE_OUT is dropped with a warning. :class:`MailOptionError` for a bad value.
    """
    warnings: list[tuple[str, str]] = []
    to = ""
    if mail_user is not None:
        try:
            to = mail_address(mail_user)
        except ValueError as exc:
            raise MailOptionError("mail-user", str(exc)) from None
    if mail_type is None:
        warnings.append(("mail-user", "--mail-user without --mail-type: no mail is sent"))
        return {}, warnings
    try:
        events, array_tasks, unsupported, none = mail_types(mail_type.split(","))
    except ValueError as exc:
        raise MailOptionError("mail-type", str(exc)) from None
    if unsupported:
        warnings.append(
            ("mail-type", f"--mail-type {', '.join(unsupported)} is not supported; ignored")
        )
    if none:
        return {}, warnings
    if not events:
        warnings.append(
            ("mail-type", f"--mail-type={mail_type} names no event to be told of: no mail is sent")
        )
        return {}, warnings
    notify: dict[str, object] = {"events": [e.value for e in events]}
    if to:
        notify["to"] = to
    if array_tasks:
        notify["array_tasks"] = True
    return {"notify": notify}, warnings


def stored_mail(data: object, user: str) -> tuple[str | None, str | None]:
    """A stored request's ``notify`` as ``scontrol show job`` shows it: (mail type,
    ``BEGIN,END``; mail user, ``to`` or the job's user), or (None, None) without one."""
    if data is None:
        return None, None
    try:
        notify = NotifyRequest.model_validate(data)
    except ValueError:  # (a ValidationError too) stored by another version: not shown
        return None, None
    return notify.describe(), notify.to or user
