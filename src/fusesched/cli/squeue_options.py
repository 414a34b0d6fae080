"""The options of Slurm 22.05's ``squeue`` that ``fusesched jobs`` (and ``fusesched squeue``)
takes beyond its own filters and formats, so that a tool that passes them is not refused.

Applied as Slurm does: ``-A``, ``-q``, ``-w``, ``-L``, ``-R`` filter
(:mod:`fusesched.cli.squeue_filters`); ``-S`` sorts (:mod:`fusesched.cli.squeue_sort`);
``-s`` lists job steps (:mod:`fusesched.cli.squeue_steps`); ``-l`` is squeue's long
layout; ``-i`` lists again every SECONDS; ``--array-unique`` is ``-r``; ``--yaml`` is
``--json``'s data as YAML; ``-v`` says on stderr what is asked; ``-V`` and ``--usage`` print
and stop. Taken, with nothing to do in one fusesched cluster: ``-a/--all`` and ``--hide``
(no partition is hidden), ``--local``, ``--federation``, ``--sibling`` (no federation),
``-P/--priority`` (a job waits in one partition) and ``--noconvert`` (``%m`` is in
megabytes, converted only when exact, as Slurm's; ``--noconvert`` keeps megabytes).

``-s`` and ``-j`` take their value optionally in Slurm (``squeue -s`` lists every step):
:func:`normalise_argv` writes a bare one as the typer command reads it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

import typer

ListOpt = list[str] | None
#: The options that take a value (a bare ``-s``/``-j`` is told apart from their values).
_VALUE_SHORT: Final = frozenset("utpjnoOAqwLRsSiM")
_VALUE_LONG: Final = frozenset(
    {
        *("--user", "--state", "--states", "--queue", "--partition", "--jobs", "--job"),
        *("--name", "--array", "--limit", "--format", "--Format", "--account", "--qos"),
        *("--nodelist", "--licenses", "--reservation", "--steps", "--step", "--sort"),
        *("--iterate", "--clusters", "--controller", "--token", "--ca"),
    }
)


def normalise_argv(args: Sequence[str]) -> list[str]:
    """squeue's arguments as the typer command reads them: Slurm's ``-s``/``--steps`` and
    ``-j``/``--jobs`` take their value optionally (``squeue -s`` lists every step, ``squeue
    -s -u me`` too; ``-s37.0``, ``-s 37.0``, ``--steps=37.0`` those steps), so a bare one
    (the next argument an option, or none) is written ``--steps=`` (every step), or left out
    for ``-j`` (every job). Values of other options (``-n -s``: a job named ``-s``) and
    clustered flags (``-hs``) are read as Slurm reads them; the rest is as given."""
    out: list[str] = []
    at = 0
    while at < len(args):
        arg = args[at]
        at += 1
        after = args[at] if at < len(args) else None
        bare = after is None or (after.startswith("-") and after != "-")
        if arg == "--" or not arg.startswith("-") or arg == "-":
            out.extend(args[at - 1 :] if arg == "--" else [arg])
            if arg == "--":
                break
            continue
        if arg.startswith("--"):
            name, eq, _ = arg.partition("=")
            if name in ("--steps", "--step") and not eq and bare:
                out.append("--steps=")
            elif not (name in ("--jobs", "--job") and not eq and bare):
                out.append(arg)
                if name in _VALUE_LONG and not eq and after is not None:
                    out.append(after)
                    at += 1
            continue
        at = _short(arg, after, bare, out, at)
    return out


def _short(arg: str, after: str | None, bare: bool, out: list[str], at: int) -> int:
    """One ``-abc`` cluster of short options into ``out``; where the next argument is read
    from then (past ``after`` when a value took it)."""
    for k, letter in enumerate(arg[1:], 1):
        if letter not in _VALUE_SHORT:
            continue
        if k > 1:
            out.append(arg[:k])  # (the flags before it)
        rest = arg[k + 1 :]
        if rest:  # (-s37.0, -uname: the value attached)
            out.append(f"-{letter}{rest}")
        elif letter == "s" and bare:
            out.append("--steps=")
        elif letter == "j" and bare:
            pass  # (-j alone: every job)
        else:
            out.append(f"-{letter}")
            if after is not None:
                out.append(after)
                at += 1
        return at
    out.append(arg)
    return at


USAGE: Final = """\
Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-p partitions] [--qos qos]
              [--reservation reservation] [--sort fields] [--start]
              [--step step_id] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
              [-ahjlrsv]
"""


def print_usage(value: bool) -> None:
    """``--usage``'s callback: squeue's brief usage, and stop (exit 0)."""
    if value:
        sys.stdout.write(USAGE)
        raise typer.Exit(0)


def verbose_lines(settings: Mapping[str, Any]) -> list[str]:
    """``-v``: what the listing asks for, a ``name = value`` line each between rules (as
    Slurm's squeue, on stderr here: stdout stays the listing)."""
    rule = "-" * 29
    width = max((len(k) for k in settings), default=0)
    lines = [rule]
    for key, value in settings.items():
        shown = "(null)" if value in (None, [], "") else value
        if isinstance(shown, bool):
            shown = str(shown).lower()
        elif isinstance(shown, list | tuple | frozenset | set):
            shown = ",".join(sorted(str(v) for v in shown))
        lines.append(f"{key.ljust(width)} = {shown}")
    return [*lines, rule]


def _taken(name: str, what: str, *spellings: str) -> Any:
    return typer.Option(*spellings, help=f"Slurm's {name}: taken; {what}.", show_default=False)


AccountOpt = Annotated[
    ListOpt,
    typer.Option(
        "--account", "-A", help="Only these accounts' jobs (fusesched's tenants; a comma list)."
    ),
]
QosOpt = Annotated[
    ListOpt, typer.Option("--qos", "-q", help="Only jobs of these QoS (a comma list).")
]
NodelistOpt = Annotated[
    ListOpt,
    typer.Option(
        "--nodelist", "-w", help="Only jobs on any of these nodes (a host list: n[1-4],gpu1)."
    ),
]
LicensesOpt = Annotated[
    ListOpt,
    typer.Option("--licenses", "-L", help="Only jobs holding any of these licenses (comma list)."),
]
ReservationOpt = Annotated[
    ListOpt,
    typer.Option("--reservation", "-R", help="Only jobs in this advance reservation."),
]
LongOpt = Annotated[
    bool,
    typer.Option(
        "--long",
        "-l",
        help="squeue's long layout (STATE, TIME_LIMIT), after a line with the date.",
    ),
]
StepsOpt = Annotated[
    str | None,
    typer.Option(
        "--steps",
        "--step",
        "-s",
        help="List the running jobs' steps (STEPID NAME PARTITION USER TIME NODELIST); a "
        "value (37.0,38.batch) lists those only. `squeue -s` alone: every step.",
        show_default=False,
    ),
]
SortOpt = Annotated[
    str | None,
    typer.Option(
        "--sort",
        "-S",
        help="Order the lines by format letters, - before one for descending: -S P,-p "
        "(default as squeue: P,t,-p, --start S, steps P,i; as jobs: newest first).",
    ),
]
IterateOpt = Annotated[
    int | None,
    typer.Option(
        "--iterate",
        "-i",
        min=1,
        help="List again every SECONDS (a date line before each header), until interrupted.",
    ),
]
YamlOpt = Annotated[bool, typer.Option("--yaml", help="Print --json's data as YAML.")]
VerboseOpt = Annotated[
    int,
    typer.Option("--verbose", "-v", count=True, help="Say on stderr what the listing asks for."),
]
UsageOpt = Annotated[
    bool,
    typer.Option(
        "--usage",
        help="Print squeue's brief usage and stop.",
        callback=print_usage,
        is_eager=True,
        show_default=False,
    ),
]
ArrayUniqueOpt = Annotated[
    bool,
    typer.Option("--array-unique", help="Each waiting array member on its own row (as -r here)."),
]
AllOpt = Annotated[bool, _taken("-a/--all", "no partition is hidden", "--all", "-a")]
HideOpt = Annotated[bool, _taken("--hide", "no partition is hidden", "--hide")]
LocalOpt = Annotated[bool, _taken("--local", "fusesched is one cluster", "--local")]
FederationOpt = Annotated[bool, _taken("--federation", "no federation", "--federation")]
SiblingOpt = Annotated[bool, _taken("--sibling", "no federation", "--sibling")]
PriorityOpt = Annotated[
    bool, _taken("-P/--priority", "a job waits in one partition", "--priority", "-P")
]
NoconvertOpt = Annotated[
    bool,
    typer.Option("--noconvert", help="%m in megabytes as asked (2048M, not 2G)."),
]
