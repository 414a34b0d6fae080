"""``srun``'s command line inside a job (:mod:`fusesched.agent.step`), read into a
:class:`~fusesched.agent.step_plan.StepOptions` (:func:`parse_args`): the options scripts
write, short and long, their values checked, with the defaults srun's input variables give
those it leaves out (:mod:`fusesched.agent.step_defaults`), and the MPI types ``--mpi`` takes
(:func:`unknown_mpi`, :func:`mpi_listing`). What the step then does with them is
:mod:`fusesched.agent.step_plan`'s.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping, Sequence

from fusesched.agent import step_option_values as read
from fusesched.agent.step_defaults import env_defaults
from fusesched.agent.step_gpus import GPU_OPTIONS, gpu_count
from fusesched.agent.step_option_table import (
    ACCEPTED,
    REFUSED,
    SHORT,
    Takes,
    binding_note,
    check_value,
)
from fusesched.agent.step_plan import StepError, StepOptions, export_vars
from fusesched.slurm_release import version_line

USAGE = (
    "usage: srun [-n NTASKS] [-N NODES] [--ntasks-per-node N] [-l] [--overlap] [--mpi=TYPE] "
    "[--het-group=N[,M...]] [--gres=gpu:N | -G N | --gpus-per-task N | --gpus-per-node N] "
    "[-c N] [--mem=SIZE | --mem-per-cpu=SIZE] [-i all|none|RANK|FILE] "
    "[OPTIONS] COMMAND [ARGS...]"
)


# option -> (field, takes a value); the options a step applies (those it accepts or
# refuses without a field: agent/step_option_table.py)
_LONG: dict[str, tuple[str, bool]] = {
    "ntasks": ("ntasks", True),
    "nodes": ("nodes", True),
    "ntasks-per-node": ("ntasks_per_node", True),
    "cpus-per-task": ("cpus_per_task", True),
    "label": ("label", False),
    "mpi": ("mpi", True),
    "export": ("export", True),
    "unbuffered": ("unbuffered", False),
    "kill-on-bad-exit": ("kill_on_bad_exit", False),  # (its value, optional, attached only)
    "job-name": ("job_name", True),
    "overlap": ("overlap", False),
    "pty": ("pty", False),
    "immediate": ("immediate", False),  # (its value, optional, only as --immediate=N)
    "het-group": ("het_groups", True),
    "pack-group": ("het_groups", True),  # (Slurm's older name for it)
    "gres": ("gres", True),
    "gpus": ("gpus", True),
    "gpus-per-task": ("gpus_per_task", True),
    "gpus-per-node": ("gpus_per_node", True),
    "mem": ("mem", True),
    "mem-per-cpu": ("mem_per_cpu", True),
    "input": ("input", True),  # (what it means: agent/step_stdin.py)
    # steps get their own share of the job's slots anyway (Slurm's --exact/--exclusive)
    "exact": ("", False),
    "exclusive": ("", False),  # (=user, =mcs: its value attached only)
    # where and how each task starts (agent/step_files.py, fusesched/step_start.py)
    "chdir": ("chdir", True),
    "time": ("time_limit", True),
    "signal": ("signal", True),
    "task-prolog": ("task_prolog", True),
    "task-epilog": ("task_epilog", True),
    "multi-prog": ("multi_prog", False),
    # placement (agent/step_place.py)
    "nodelist": ("nodelist", True),
    "exclude": ("exclude", True),
    "relative": ("relative", True),
    "distribution": ("distribution", True),
    "wait": ("wait", True),
    "jobid": ("", True),  # (the job's own only)
    "preserve-env": ("", False),  # (the job's task and node counts over -n and -N)
    "help": ("show", False),
    "usage": ("show", False),
    "version": ("show", False),
}
_SHORT: dict[str, str] = {
    "n": "ntasks",
    "N": "nodes",
    "c": "cpus-per-task",
    "l": "label",
    "u": "unbuffered",
    "K": "kill-on-bad-exit",
    "J": "job-name",
    "I": "immediate",
    "G": "gpus",
    "i": "input",
    "D": "chdir",
    "t": "time",
    "w": "nodelist",
    "x": "exclude",
    "r": "relative",
    "m": "distribution",
    "W": "wait",
    "E": "preserve-env",
    "h": "help",
    "V": "version",
    **SHORT,
}
#: Options whose value is optional and attached only (``--nice=5``, ``-I5``).
_ATTACHED = frozenset({"immediate", "kill-on-bad-exit", "exclusive"})
#: ``--mpi`` (or ``$SLURM_MPI_TYPE``) values that start the step through mpirun
#: (:mod:`fusesched.agent.step_mpi`); ``none`` starts N separate tasks.
PMI_TYPES = re.compile(r"^(pmix(_v\d+)?|pmi2)$")


def unknown_mpi(value: str) -> str | None:
    """A warning for an MPI type that neither starts mpirun nor is ``none`` (or ``list``)."""
    if value in ("none", "list") or PMI_TYPES.match(value):
        return None
    return (
        f"--mpi={value} is not supported; the tasks start without any PMI (pmix, pmix_v*, "
        "pmi2: the step runs through mpirun)"
    )


#: What ``srun --mpi=list`` prints, as Slurm's lists its MPI plugins: the types it takes
#: (a ``pmix_v*`` version is taken as pmix).
MPI_LIST = "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n"
#: What ``srun -V`` prints: the line of every command by Slurm's name.
VERSION = version_line() + "\n"


def mpi_listing(argv: Sequence[str]) -> str | None:
    """What ``srun ARGV`` prints instead of starting a step, when it asks for that: the MPI
    types (:data:`MPI_LIST`: ``--mpi=list``), its usage (``-h``, ``--help``, ``--usage``) or
    its version (``-V``), with or without a command (a stand-in one lets the options be
    read); else ``None``."""
    try:
        options = parse_args([*argv, "true"], {})
    except StepError:
        return None
    if options.show in ("help", "usage"):
        return f'{USAGE}\n(docs/SUBMIT.md, "srun\'s options", lists every option)\n'
    if options.show == "version":
        return VERSION
    return MPI_LIST if options.mpi == "list" else None


def _takes(name: str) -> Takes | None:
    """How option ``--NAME`` takes its value; None for one srun does not know."""
    if name in _LONG:
        return "attached" if name in _ATTACHED else "yes" if _LONG[name][1] else "no"
    known = ACCEPTED.get(name) or REFUSED.get(name)
    return known.takes if known is not None else None


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> StepOptions:
    """The options and command of ``srun ARGV``, with the defaults the input variables of
    ``environ`` give those it leaves out (None: this process's, srun's own environment; ``{}``:
    none); :class:`StepError` for a bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    notes: list[str] = []
    args = list(argv)
    k = 0
    while k < len(args):
        arg = args[k]
        if arg == "--":
            k += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            takes = _takes(name)
            if takes is None:
                raise StepError(_unknown(f"--{name}"))
            if takes == "yes" and not eq:
                if k + 1 >= len(args):
                    raise StepError(f"--{name} needs a value")
                value = args[k + 1]
                k += 1
            elif takes == "no" and eq:
                raise StepError(f"--{name} takes no value")
            _take(name, value if eq or takes == "yes" else None, values, notes, env)
            k += 1
            continue
        # short options: -n4, -n 4, -l, -lu, -ln4
        j = 1
        while j < len(arg):
            letter = arg[j]
            name = _SHORT.get(letter, "")
            takes = _takes(name) if name else None
            if takes is None:
                raise StepError(_unknown(f"-{letter}"))
            rest = arg[j + 1 :]
            if takes == "attached" and (letter == "I" or rest[:1] in ("0", "1")):
                _take(name, rest or None, values, notes, env)  # (-I5, -K1)
                break
            if takes != "yes":
                _take(name, None, values, notes, env)
                j += 1
                continue
            if not rest:
                if k + 1 >= len(args):
                    raise StepError(f"-{letter} needs a value")
                rest = args[k + 1]
                k += 1
            _take(name, rest, values, notes, env)
            break
        k += 1
    command = tuple(args[k:])
    if not command:
        raise StepError(f"no command to run\n{USAGE}")
    _check(values, env)
    warnings = list(dict.fromkeys(notes))
    mpi = values.get("mpi")
    said = unknown_mpi(mpi) if isinstance(mpi, str) else None
    if said is not None:
        warnings.append(said)
    export = values.get("export")
    if isinstance(export, str):
        export_vars(export, {})  # refuse a bad one now
    if values.pop("preserve_env", False):  # -E: the job's counts over -n and -N
        values.pop("ntasks", None)
        values.pop("nodes", None)
    inherited = env_defaults(values, env)
    return StepOptions(
        command=command,
        warnings=tuple(warnings),
        inherited=frozenset(inherited),
        **values,  # type: ignore[arg-type]
        **inherited,  # type: ignore[arg-type]
    )


def _take(
    name: str,
    value: str | None,
    values: dict[str, object],
    notes: list[str],
    env: Mapping[str, str],
) -> None:
    """Option ``--NAME`` with ``value`` (None: none given) into ``values`` (its field's) or
    ``notes`` (what the step says of it); :class:`StepError` for a refused one or a bad
    value."""
    if name in REFUSED:
        raise StepError(f"--{name} is not supported inside a job: {REFUSED[name].said}")
    if name in ACCEPTED:
        said = check_value(name, value) if value is not None else None
        if said is not None:
            raise StepError(said)
        note = binding_note(value) if name == "cpu-bind" and value else ACCEPTED[name].said
        if note:
            notes.append(note)
        return
    field_name, takes = _LONG[name]
    if name == "kill-on-bad-exit" and value is not None:  # --kill-on-bad-exit=0|1
        if value not in ("0", "1"):
            raise StepError(f"--kill-on-bad-exit takes 0 or 1, not {value!r}")
        values[field_name] = value == "1"
    elif name == "immediate":  # --immediate[=seconds]
        values[field_name] = _seconds(name, value) if value is not None else 0
    elif name == "exclusive":
        if value not in (None, "user", "mcs"):
            raise StepError(f"--exclusive takes user or mcs (or nothing), not {value!r}")
    elif name == "jobid":
        _own_job(value or "", env)
    elif name == "preserve-env":
        values["preserve_env"] = True
    elif name in ("help", "usage", "version"):
        values[field_name] = name
    elif field_name:
        values[field_name] = _value(name, value) if takes and value is not None else True


def _check(values: Mapping[str, object], env: Mapping[str, str]) -> None:
    """What the options given are together: :class:`StepError` for what cannot be."""
    if values.get("relative") is not None and (
        values.get("nodelist") is not None or values.get("exclude") is not None
    ):
        raise StepError("-r/--relative cannot be given with -w/--nodelist or -x/--exclude")
    placing = [f for f in ("nodelist", "exclude", "relative") if values.get(f) is not None]
    if values.get("het_groups") is not None and (
        placing or values.get("distribution") not in (None, "block")
    ):
        raise StepError(
            "--het-group: a heterogeneous job's step runs on its components' nodes as they "
            "are; -w, -x, -r and -m are not supported with it"
        )
    started = [f for f in ("chdir", "task_prolog", "task_epilog", "multi_prog") if values.get(f)]
    if values.get("pty") and (started or values.get("time_limit")):
        raise StepError(
            "--pty runs its one task on this terminal as it is: -D, -t, --task-prolog, "
            "--task-epilog and --multi-prog are not supported with it (cd first)"
        )
    mpi = values.get("mpi") or env.get("SLURM_MPI_TYPE")
    if values.get("multi_prog") and isinstance(mpi, str) and PMI_TYPES.match(mpi):
        raise StepError(
            f"--multi-prog with --mpi={mpi}: an MPI step starts its ranks through one mpirun, "
            "all running one program; give --mpi=none for a task per line of the configuration"
        )


def _own_job(value: str, env: Mapping[str, str]) -> None:
    own = {env.get("SLURM_JOB_ID"), env.get("FUSESCHED_JOB_ID")} - {None, ""}
    if not own or value in own:
        return
    mine = " or ".join(sorted(own))  # type: ignore[arg-type]
    raise StepError(
        f"--jobid={value}: this srun runs steps of its own job ({mine}) only; to run in "
        f"another, from outside it: fusesched run --jobid {value} --overlap --pty COMMAND"
    )


def _unknown(option: str) -> str:
    known = [f"--{n}" for n in (*_LONG, *ACCEPTED, *REFUSED)] + [f"-{s}" for s in _SHORT]
    close = difflib.get_close_matches(option, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown option {option}{hint}: not one of Slurm's srun options (srun --help)"


def takes_value(option: str) -> bool | None:
    """Whether srun's option ``option`` (``--name`` or ``-x``) takes a value in the next word
    when none is attached; None for one it does not know. (``--immediate``, ``-I``,
    ``--kill-on-bad-exit`` and the like take theirs attached only.)"""
    name = _SHORT.get(option[1:], "") if not option.startswith("--") else option[2:]
    takes = _takes(name) if name else None
    return None if takes is None else takes == "yes"


def _seconds(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise StepError(f"--{name} takes whole seconds, not {text!r}")
    return int(text)


#: How the values of the options a step applies beyond its shape are read.
_READERS: dict[str, Callable[[str], object]] = {
    "time": read.time_limit,
    "signal": read.signal_before,
    "nodelist": lambda text: read.hosts("-w/--nodelist", text),
    "exclude": lambda text: read.hosts("-x/--exclude", text),
    "relative": lambda text: read.seconds("-r/--relative", text, 10**6),
    "wait": lambda text: read.seconds("-W/--wait", text),
    "distribution": read.step_distribution,
}


def _value(name: str, text: str) -> object:
    if name in ("ntasks", "nodes", "ntasks-per-node", "cpus-per-task"):
        if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) < 1:
            raise StepError(f"--{name} takes a positive whole number, not {text!r}")
        return int(text)
    if name == "job-name" and not text:
        raise StepError("--job-name needs a name")
    if name == "input" and not text:
        raise StepError("--input takes all, none, a task's rank or a file name")
    if name in ("chdir", "task-prolog", "task-epilog") and not text:
        raise StepError(f"--{name} needs a path")
    if name in _READERS:
        try:
            return _READERS[name](text)
        except ValueError as exc:
            raise StepError(str(exc)) from None
    if name in ("het-group", "pack-group"):
        return het_group_list(name, text)
    if name in GPU_OPTIONS:
        try:
            return gpu_count(name, text)
        except ValueError as exc:
            raise StepError(str(exc)) from None
    return text


#: The most components ``--het-group`` may name.
MAX_HET_GROUPS = 1000


def het_group_list(name: str, text: str) -> tuple[int, ...]:
    """The components ``--het-group=TEXT`` names: numbers and ranges joined by commas
    (``1``, ``0,2``, ``1,3-5``), in order, each once."""
    groups: set[int] = set()
    for item in text.split(","):
        low, dash, high = item.partition("-")
        if not _number(low) or (dash and not _number(high)):
            raise StepError(f"--{name} takes component numbers such as 1, 0,2 or 1-3, not {text!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last >= MAX_HET_GROUPS:
            top = MAX_HET_GROUPS - 1
            raise StepError(f"--{name}: {item!r} is not a range of components 0-{top}")
        groups.update(range(first, last + 1))
    return tuple(sorted(groups))


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 6
