"""Signals for running jobs: the warning before the time limit (``sbatch --signal``, the job
field ``signal``) and the names and numbers a user may give for one (``fusesched cancel
--signal``).

A signal is written as Slurm takes it: a name with or without ``SIG`` (``USR1``,
``SIGUSR1``, any case) or its number (``10``); it is kept as the bare upper-case name
(``USR1``). SIGKILL and SIGSTOP cannot be caught, so they cannot warn a job: they are refused.
``sbatch --signal=[B:]SIG[@SECONDS]`` asks for SIG ``SECONDS`` (default 60) before the time
limit; ``B:`` sends it to the task's main process only (the batch script's shell), otherwise
the task's whole process group gets it. Slurm's ``R:`` (signal at the end of a reservation)
is refused.
"""

from __future__ import annotations

import signal as _signal
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Default lead of the warning, as Slurm's.
DEFAULT_BEFORE_S: Final = 60.0
#: Longest lead (Slurm's own limit: 65535 s, about 18 hours).
MAX_BEFORE_S: Final = 65535.0
#: Signals that cannot be caught (so cannot warn a job).
UNCATCHABLE: Final = frozenset({"KILL", "STOP"})
#: Every signal a job may be sent, by bare name.
SIGNALS: Final = {s.name.removeprefix("SIG"): s.value for s in _signal.Signals} | {
    "IOT": _signal.SIGABRT.value,
    "CLD": _signal.SIGCHLD.value,
    "POLL": _signal.SIGIO.value,
}
_BY_NUMBER: Final = {s.value: s.name.removeprefix("SIG") for s in _signal.Signals}


def signal_name(text: str | int) -> str:
    """The bare upper-case name of a signal given as a name (with or without ``SIG``, any
    case) or a number; ``ValueError`` for an unknown signal, or one that cannot be caught
    (and for ``True``/``False``, which are not signals)."""
    if isinstance(text, bool):
        raise ValueError(f"a signal is a name (USR1) or a number (10), not {text!r}")
    given = str(text).strip()
    if given.isascii() and given.isdigit():
        name = _BY_NUMBER.get(int(given)) if len(given) <= 3 else None
        if name is None:
            shown = given if len(given) <= 12 else f"{given[:12]}… ({len(given)} digits)"
            raise ValueError(
                f"unknown signal number {shown}: give a signal such as USR1 (10), USR2 (12), "
                "TERM (15), INT (2) or HUP (1)"
            )
    else:
        name = given.upper().removeprefix("SIG")
        if name not in SIGNALS:
            shown = repr(given) if len(given) <= 40 else f"{given[:40]!r}… ({len(given)} chars)"
            raise ValueError(
                f"unknown signal {shown}: give a name such as USR1, SIGUSR2, TERM, INT or "
                "HUP, or its number (10)"
            )
        name = _BY_NUMBER[SIGNALS[name]]  # IOT → ABRT, …
    if name in UNCATCHABLE:
        raise ValueError(
            f"SIG{name} cannot be caught, so it cannot warn or notify a job (to stop a job "
            "use fusesched cancel); give a signal such as USR1"
        )
    return name


def signal_number(name: str) -> int:
    """The number of a signal given by name (as :func:`signal_name` takes it)."""
    return SIGNALS[signal_name(name)]


class JobSignal(BaseModel):
    """The warning a job gets before its time limit: signal ``name`` once its tasks have
    run their time limit less ``before_s`` seconds; ``main_only``: to each task's main
    process only, else to its whole process group. Also written as a string in ``sbatch
    --signal`` form (``"B:USR1@90"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    before_s: Annotated[float, Field(gt=0, le=MAX_BEFORE_S)] = DEFAULT_BEFORE_S
    main_only: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return parse_signal_option(str(value))
        return value

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        if isinstance(value, str | int) and not isinstance(value, bool):
            return signal_name(value)
        return value

    def describe(self) -> str:
        """As sbatch writes it: ``B:USR1@60``."""
        return f"{'B:' if self.main_only else ''}{self.name}@{self.before_s:g}"


def parse_signal_option(text: str) -> dict[str, object]:
    """``[B:]SIG[@SECONDS]`` (``sbatch --signal``) as the fields of :class:`JobSignal`;
    ``ValueError`` with the reason for anything else (``R:`` included)."""
    value = text.strip()
    flags = ""
    if ":" in value:
        flags, value = value.split(":", 1)
        flags = flags.strip().upper()
    if "R" in flags:
        raise ValueError(
            "the R: flag (signal when a reservation ends) is not supported: give [B:]SIG[@SECONDS]"
        )
    if flags.strip("B") or (":" in text and not flags):
        raise ValueError(
            f"unknown flag {flags + ':'!r} in {text!r}: give [B:]SIG[@SECONDS] (B: the main "
            "process only)"
        )
    sig, at, seconds = value.partition("@")
    if not sig.strip():
        raise ValueError(f"no signal in {text!r}: give [B:]SIG[@SECONDS], e.g. USR1@120")
    before = DEFAULT_BEFORE_S
    if at:
        seconds = seconds.strip()
        if not (seconds.isascii() and seconds.isdigit()) or not 0 < int(seconds) <= MAX_BEFORE_S:
            raise ValueError(
                f"the time in {text!r} must be a whole number of seconds from 1 to "
                f"{MAX_BEFORE_S:.0f} (how long before the time limit)"
            )
        before = float(seconds)
    return {"name": signal_name(sig), "before_s": before, "main_only": "B" in flags}


def signal_warnings(signal: JobSignal | None, walltime_s: float | None) -> list[str]:
    """What to tell a user about a job's warning signal that cannot work as asked (without a
    time limit it is sent only if one is set later; a limit no longer than the lead sends it
    at once)."""
    if signal is None:
        return []
    if walltime_s is None:
        return [
            f"signal {signal.describe()}: the job has no time limit, so SIG{signal.name} is "
            "sent only if one is set later (fusesched update --time)"
        ]
    if walltime_s <= signal.before_s:
        return [
            f"signal {signal.describe()}: the time limit ({walltime_s:g} s) is not longer "
            f"than {signal.before_s:g} s, so SIG{signal.name} is sent as soon as the job starts"
        ]
    return []
