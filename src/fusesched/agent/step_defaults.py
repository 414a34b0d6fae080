"""``srun``'s input environment variables inside a job, as Slurm 22.05's srun reads them: the
options a script (or the job, whose told option variables its script inherits:
submit/slurm_options.py) sets through the environment, each a default that the command line
beats (:func:`env_defaults`). Without I/O: the environment is given.

What each is the default of, and how its value is read (as Slurm's srun, by experiment):

* a count (``SLURM_NTASKS_PER_NODE``, ``SRUN_CPUS_PER_TASK``): a positive whole number
  (ASCII digits, as C's ``strtol`` reads them: blanks before it, a sign, leading zeros);
* GPUs per task (``SLURM_GPUS_PER_TASK``): ``[type:]count``, as the job was given them
  (empty: not taken); a GPU option on the command line drops it. Not ``SLURM_GPUS`` and
  ``SLURM_GPUS_PER_NODE``, which Slurm's srun takes too: fusesched books a job's ``-G`` and
  ``--gpus-per-node`` as an even share per task, so with tasks spread unevenly over the
  nodes the job's value does not hold on every node, and a plain ``srun`` that took it
  would ask for GPUs the job does not have there (found in review);
* a flag (``SLURM_LABELIO``, ``SLURM_UNBUFFEREDIO``): on when empty, ``yes`` (any case) or a
  number other than 0; any other value leaves it off;
* ``SLURM_OVERLAP``: on whatever its value; ``SLURM_KILL_BAD_EXIT``: a number, on unless 0.

A bad value is an error that names its variable, even where the command line gives the
option (as Slurm's). ``SLURM_NTASKS``/``SLURM_NPROCS`` are only checked here: the step's
shape reads them (:func:`fusesched.agent.step_plan.step_shape`; a heterogeneous job's
components have their own). The job's told resource variables (tasks per node, GPUs) are not
taken in a heterogeneous job, whose components differ in them.

Not read: ``SLURM_CPUS_PER_TASK`` (22.05's srun does not: the job's ``-c`` is the step's
default anyway); ``SLURM_MEM_PER_CPU`` and ``SLURM_MEM_PER_NODE`` (Slurm's srun takes them:
here a step that names no memory is not limited and holds none, and its tasks are not told
``SLURM_MEM_PER_NODE``, as in Slurm for a job given ``--mem-per-cpu``); ``SLURM_JOB_NAME``
and ``SLURM_IMMEDIATE`` (which Slurm's srun ignores inside a job); those of options this
srun does not have (``SLURM_DISTRIBUTION``, ``SLURM_TIMELIMIT``, ``SLURM_CPUS_PER_GPU``,
``SLURM_MEM_PER_GPU``…). ``SLURM_EXPORT_ENV`` and ``SLURM_MPI_TYPE`` are read where they
are used (step_plan.py, step.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from fusesched.agent.step_gpus import gpu_count
from fusesched.agent.step_plan import StepError

#: Each variable taken as a default, with the option it stands for and its field.
INPUT_VARIABLES: Final = {
    "SLURM_NTASKS_PER_NODE": ("ntasks-per-node", "ntasks_per_node"),
    "SRUN_CPUS_PER_TASK": ("cpus-per-task", "cpus_per_task"),
    "SLURM_GPUS_PER_TASK": ("gpus-per-task", "gpus_per_task"),
    "SLURM_LABELIO": ("label", "label"),
    "SLURM_UNBUFFEREDIO": ("unbuffered", "unbuffered"),
    "SLURM_OVERLAP": ("overlap", "overlap"),
    "SLURM_KILL_BAD_EXIT": ("kill-on-bad-exit", "kill_on_bad_exit"),
}
#: The task count's variables, checked only.
TASK_COUNT_VARIABLES: Final = ("SLURM_NTASKS", "SLURM_NPROCS")
_COUNTS: Final = frozenset({"SLURM_NTASKS_PER_NODE", "SRUN_CPUS_PER_TASK"})
_FLAGS: Final = frozenset({"SLURM_LABELIO", "SLURM_UNBUFFEREDIO"})
#: The fields of a step's GPUs: one on the command line, and none of the variables counts.
_GPU_FIELDS: Final = frozenset({"gres", "gpus", "gpus_per_task", "gpus_per_node"})
#: The job's told resource variables, not taken in a heterogeneous job.
_JOB_RESOURCES: Final = frozenset({"SLURM_NTASKS_PER_NODE", "SLURM_GPUS_PER_TASK"})
_HET_SIZE = "SLURM_HET_SIZE"
# a number as C's strtol takes it whole: ASCII blanks before it, a sign, ASCII digits, as
# many as given (leading zeros; a flag's may be longer than any int: only not 0 counts)
_NUMBER = re.compile(r"\s*([+-]?)([0-9]+)", re.ASCII)
#: The most digits (leading zeros aside) a count may have: more is an error, not a traceback.
_COUNT_DIGITS = 9


def env_defaults(given: Mapping[str, object], environ: Mapping[str, str]) -> dict[str, object]:
    """The option fields ``environ``'s input variables give that the command line (``given``:
    the fields it set) did not; :class:`StepError` naming the variable for a bad value."""
    for name in TASK_COUNT_VARIABLES:
        if name in environ:
            _count(name, "ntasks", environ[name])
    het = _HET_SIZE in environ
    out: dict[str, object] = {}
    for name, (option, field) in INPUT_VARIABLES.items():
        if name not in environ:
            continue
        value = _read(name, option, environ[name])
        if value is None or field in given or (het and name in _JOB_RESOURCES):
            continue
        if field in _GPU_FIELDS and (_GPU_FIELDS & (given.keys() | out.keys())):
            continue  # (the command line's GPUs, or a more particular variable's)
        out[field] = value
    return out


def _read(name: str, option: str, text: str) -> object:
    """The value ``text`` of variable ``name`` gives its option (None: none)."""
    if name in _COUNTS:
        return _count(name, option, text)
    if name in _FLAGS:
        return _flag(text) or None
    if name == "SLURM_OVERLAP":
        return True
    if name == "SLURM_KILL_BAD_EXIT":
        if not text.strip():
            return None
        number = _number(text)
        if number is None:
            raise _bad(name, f"--{option} takes 0 or 1, not {text!r}")
        return number[1] != ""
    if not text:
        return None  # (an empty GPU variable is not taken: Slurm's srun ignores it)
    try:
        return gpu_count(option, text.strip())
    except ValueError as exc:
        raise _bad(name, str(exc)) from None


def _number(text: str) -> tuple[bool, str] | None:
    """Whether the number ``text`` is negative, and its digits without leading zeros ("" for
    0); None when it is no number."""
    found = _NUMBER.fullmatch(text)
    return None if found is None else (found[1] == "-", found[2].lstrip("0"))


def _count(name: str, option: str, text: str) -> int:
    number = _number(text)
    if number is None or number[0] or not 0 < len(number[1]) <= _COUNT_DIGITS:
        raise _bad(name, f"--{option} takes a positive whole number, not {text!r}")
    return int(number[1])


def _flag(text: str) -> bool:
    """Whether a flag's variable turns it on: empty, ``yes`` or a number other than 0."""
    if not text or text.lower() == "yes":
        return True
    number = _number(text)
    return number is not None and number[1] != ""


def _bad(name: str, message: str) -> StepError:
    return StepError(f"{name} (in the environment): {message}")
