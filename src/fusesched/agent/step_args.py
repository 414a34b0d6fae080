"""``srun``'s command line inside a job (:mod:`fusesched.agent.step`), read into a
:class:`~fusesched.agent.step_plan.StepOptions` (:func:`parse_args`): the options scripts
write, short and long, their values checked, with the defaults srun's input variables give
those it leaves out (:mod:`fusesched.agent.step_defaults`), and the MPI types ``--mpi`` takes
(:func:`unknown_mpi`, :func:`mpi_listing`). What the step then does with them is
:mod:`fusesched.agent.step_plan`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from fusesched.agent.step_defaults import env_defaults
from fusesched.agent.step_gpus import GPU_OPTIONS, gpu_count
from fusesched.agent.step_plan import StepError, StepOptions, export_vars

USAGE = (
    "usage: srun [-n NTASKS] [-N NODES] [--ntasks-per-node N] [-l] [--overlap] [--mpi=TYPE] "
    "[--het-group=N[,M...]] [--gres=gpu:N | -G N | --gpus-per-task N | --gpus-per-node N] "
    "[-c N] [--mem=SIZE | --mem-per-cpu=SIZE] [-i all|none|RANK|FILE] "
    "[OPTIONS] COMMAND [ARGS...]"
)


# option -> (field, takes a value)
_LONG: dict[str, tuple[str, bool]] = {
    "ntasks": ("ntasks", True),
    "nodes": ("nodes", True),
    "ntasks-per-node": ("ntasks_per_node", True),
    "cpus-per-task": ("cpus_per_task", True),
    "label": ("label", False),
    "mpi": ("mpi", True),
    "export": ("export", True),
    "unbuffered": ("unbuffered", False),
    "kill-on-bad-exit": ("kill_on_bad_exit", False),
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
    "exclusive": ("", False),
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
}
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


def mpi_listing(argv: Sequence[str]) -> str | None:
    """:data:`MPI_LIST` when ``srun ARGV`` asks for it (``--mpi=list``, with or without a
    command: a stand-in one lets the options be read), else ``None``."""
    try:
        options = parse_args([*argv, "true"], {})
    except StepError:
        return None
    return MPI_LIST if options.mpi == "list" else None


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> StepOptions:
    """The options and command of ``srun ARGV``, with the defaults the input variables of
    ``environ`` give those it leaves out (None: this process's, srun's own environment; ``{}``:
    none); :class:`StepError` for a bad one."""
    values: dict[str, object] = {}
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
            if name not in _LONG:
                raise StepError(f"unknown option --{name} (supported: {_supported()})")
            field_name, takes = _LONG[name]
            if name == "kill-on-bad-exit" and eq:  # --kill-on-bad-exit=0|1
                if value not in ("0", "1"):
                    raise StepError(f"--kill-on-bad-exit takes 0 or 1, not {value!r}")
                values[field_name] = value == "1"
                k += 1
                continue
            if name == "immediate":  # --immediate[=seconds]
                values[field_name] = _seconds(value) if eq else 0
                k += 1
                continue
            if takes and not eq:
                if k + 1 >= len(args):
                    raise StepError(f"--{name} needs a value")
                value = args[k + 1]
                k += 1
            elif not takes and eq:
                raise StepError(f"--{name} takes no value")
            if field_name:
                values[field_name] = _value(name, value) if takes else True
            k += 1
            continue
        # short options: -n4, -n 4, -l, -lu, -ln4
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter not in _SHORT:
                raise StepError(f"unknown option -{letter} (supported: {_supported()})")
            name = _SHORT[letter]
            field_name, takes = _LONG[name]
            if name == "immediate":  # -I, -I5: its value attached or none
                values[field_name] = _seconds(arg[j + 1 :]) if arg[j + 1 :] else 0
                break
            if not takes:
                values[field_name] = True
                j += 1
                continue
            value = arg[j + 1 :]
            if not value:
                if k + 1 >= len(args):
                    raise StepError(f"-{letter} needs a value")
                value = args[k + 1]
                k += 1
            values[field_name] = _value(name, value)
            break
        k += 1
    command = tuple(args[k:])
    if not command:
        raise StepError(f"no command to run\n{USAGE}")
    warnings: list[str] = []
    mpi = values.get("mpi")
    said = unknown_mpi(mpi) if isinstance(mpi, str) else None
    if said is not None:
        warnings.append(said)
    export = values.get("export")
    if isinstance(export, str):
        export_vars(export, {})  # refuse a bad one now
    inherited = env_defaults(values, os.environ if environ is None else environ)
    return StepOptions(
        command=command,
        warnings=tuple(warnings),
        inherited=frozenset(inherited),
        **values,  # type: ignore[arg-type]
        **inherited,  # type: ignore[arg-type]
    )


def _supported() -> str:
    return ", ".join(f"--{name}" for name in _LONG)


def takes_value(option: str) -> bool | None:
    """Whether srun's option ``option`` (``--name`` or ``-x``) takes a value in the next word
    when none is attached; None for one it does not know. (``--immediate``, ``-I`` and
    ``--kill-on-bad-exit`` take theirs attached only.)"""
    name = _SHORT.get(option[1:], "") if not option.startswith("--") else option[2:]
    if name not in _LONG:
        return None
    return _LONG[name][1] and name != "immediate"


def _seconds(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise StepError(f"--immediate takes whole seconds, not {text!r}")
    return int(text)


def _value(name: str, text: str) -> object:
    if name in ("ntasks", "nodes", "ntasks-per-node", "cpus-per-task"):
        if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) < 1:
            raise StepError(f"--{name} takes a positive whole number, not {text!r}")
        return int(text)
    if name == "job-name" and not text:
        raise StepError("--job-name needs a name")
    if name == "input" and not text:
        raise StepError("--input takes all, none, a task's rank or a file name")
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
