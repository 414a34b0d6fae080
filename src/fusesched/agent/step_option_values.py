"""The values of the options a job step applies beyond its shape (``srun -t``,
``--signal``, ``-w``/``-x``, ``-r``, ``-W``, ``-D``, the task prolog and epilog,
``-m``) read as :mod:`fusesched.agent.step_args` keeps them, with no I/O; a bad one is a
``ValueError`` saying why.
"""

from __future__ import annotations

import math
import signal as _signal

from fusesched.agent.step_option_table import distribution
from fusesched.hostlist import expand_hostlist
from fusesched.submit.syntax import parse_slurm_time

#: The most seconds ``-W`` and ``--signal``'s time may be (Slurm's: 65535).
MAX_SECONDS = 65535
#: ``--signal``'s time when it gives none (Slurm's).
SIGNAL_BEFORE_S = 60


def time_limit(text: str) -> int:
    """``-t``'s limit in seconds, rounded up to whole minutes as Slurm's; 0 for none (``0``,
    ``UNLIMITED``, ``INFINITE``)."""
    seconds = parse_slurm_time(text)
    return 0 if seconds is None else math.ceil(seconds / 60) * 60


def signal_before(text: str) -> tuple[int, int]:
    """``--signal=[R:]SIG[@SECONDS]``: the signal's number and how long before the step's
    time limit it comes (60 s when not given); ``R:`` (a reservation's) changes nothing."""
    value = text[2:] if text[:2].upper() == "R:" else text
    sig, at, seconds = value.partition("@")
    number = _signal_number(sig.strip())
    if not at:
        return number, SIGNAL_BEFORE_S
    if not (seconds.isascii() and seconds.isdigit()) or int(seconds) > MAX_SECONDS:
        raise ValueError(f"--signal: the time in {text!r} must be whole seconds, 0-{MAX_SECONDS}")
    return number, int(seconds)


def _signal_number(text: str) -> int:
    if text.isascii() and text.isdigit() and len(text) <= 3:
        number = int(text)
        if number in {s.value for s in _signal.Signals} and number not in (9, 19):
            return number
    name = text.upper().removeprefix("SIG")
    found = getattr(_signal.Signals, f"SIG{name}", None) if name.isalnum() else None
    if found is None or found in (_signal.SIGKILL, _signal.SIGSTOP):
        raise ValueError(f"--signal: {text!r} is not a signal a task can catch (USR1, 10…)")
    return int(found)


def hosts(option: str, text: str) -> tuple[str, ...]:
    """The nodes a host list names (``-w``, ``-x``), in order, each once."""
    try:
        names = expand_hostlist(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None
    if not names:
        raise ValueError(f"{option} names no node")
    return tuple(names)


def seconds(option: str, text: str, most: int = MAX_SECONDS) -> int:
    """A whole number of seconds (or a node's index: ``-r``), 0 to ``most``."""
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) > most:
        raise ValueError(f"{option} takes a whole number from 0 to {most}, not {text!r}")
    return int(text)


def step_distribution(text: str) -> str:
    """``-m``'s spread over the nodes (:func:`distribution`); ``arbitrary`` is refused."""
    found = distribution(text)
    if found == "arbitrary":
        raise ValueError(
            "-m arbitrary places each task on the node $SLURM_HOSTFILE names for it, which "
            "this srun does not read: give -w NODES with -m block or cyclic"
        )
    return found
