"""A job step's task with its output in files (``srun --output``/``--error`` inside a job):
``python -I -m fusesched.step_output OUTPUT ERROR MODE COMMAND...``.

``srun`` (:mod:`fusesched.agent.step_files`) starts each task of such a step through this
module, which opens the task's files as the task's user, where the task runs (as Slurm's
slurmstepd opens them), puts them in place of its standard output and error and becomes
``COMMAND``. ``OUTPUT`` and ``ERROR`` are Slurm filename patterns (``%j``, ``%t``…:
:mod:`fusesched.output_patterns`), expanded with this task's values (:func:`names`, read
from its variables), or empty for none: no ``OUTPUT``, standard output stays the task's log;
no ``ERROR``, standard error goes where standard output goes. ``MODE`` is ``truncate`` (the
files are emptied first) or ``append``. A relative path is relative to the task's working
folder.

A file that cannot be opened ends the task with exit status 1, said on its standard error
(as slurmstepd's "Could not open stdout file"); a command that cannot be run ends it with
126 or 127, as a shell's. Standard library only: every task of such a step starts with it.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import TypedDict

from fusesched.output_patterns import expand

MODES = ("truncate", "append")


class Names(TypedDict):
    """What a task's patterns are expanded with (:func:`expand`'s keywords)."""

    job_id: str
    array_job: str | None
    array_index: int | None
    user: str
    name: str
    node: str
    step: str
    node_index: int
    task: int


def names(env: Mapping[str, str]) -> Names:
    """The values a task's patterns are expanded with (:func:`expand`'s keywords), from its
    variables: the job's id as fusesched names it (an array member's ``12_3``, as ``sbatch
    -o``'s ``%j``), the array's, the user, the job's name, the node, the step, the node's
    place in the step and the task's rank."""
    index = env.get("SLURM_ARRAY_TASK_ID", "")
    return Names(
        job_id=env.get("FUSESCHED_JOB_ID") or env.get("SLURM_JOB_ID", ""),
        array_job=env.get("SLURM_ARRAY_JOB_ID") or None,
        array_index=int(index) if index.isascii() and index.isdigit() else None,
        user=env.get("SLURM_JOB_USER") or env.get("USER", ""),
        name=env.get("SLURM_JOB_NAME", ""),
        node=env.get("SLURMD_NODENAME") or socket.gethostname(),
        step=env.get("SLURM_STEP_ID", ""),
        node_index=_number(env.get("SLURM_NODEID", "")),
        task=_number(env.get("SLURM_PROCID", "")),
    )


def _number(text: str) -> int:
    return int(text) if text.isascii() and text.isdigit() else 0


def main(argv: Sequence[str]) -> int:
    """Redirect and become the command; the exit status when that fails."""
    if len(argv) < 4 or argv[2] not in MODES:
        return _fail(
            "usage: python -m fusesched.step_output OUTPUT ERROR truncate|append COMMAND...", 2
        )
    output, error, mode, command = argv[0], argv[1], argv[2], list(argv[3:])
    values = names(os.environ)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "append" else os.O_TRUNC)
    out = expand(output, **values) if output else None
    err = expand(error, **values) if error else None
    try:
        if out is not None:
            _onto(out, flags, 1)
        if err is not None and err != out:
            _onto(err, flags, 2)
        elif out is not None:
            os.dup2(1, 2)
    except OSError as exc:
        which = exc.filename or ""
        return _fail(f"srun: error: could not open output file {which}: {exc.strerror}", 1)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return _fail(f"srun: error: {command[0]}: {exc.strerror}", code)


def _onto(path: str, flags: int, fd: int) -> None:
    opened = os.open(path, flags, 0o666)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(message + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
