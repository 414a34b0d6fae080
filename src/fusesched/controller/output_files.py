"""Where a batch job's output files go (``sbatch -o/--output``, ``-e/--error``): the job's
filename patterns expanded for its start, as Slurm expands them, and resolved against its
working directory. The agent writes them (agent/output_files.py). Pure.

Patterns: ``%%`` a ``%``; ``%j`` the job's id (an array member's: ``12_3``); ``%J`` the
job's id and step, ``<id>.batch``; ``%s`` the step, ``batch``; ``%A`` the array's id (a job
that is no array member: its own); ``%a`` the array index (none: 4294967294, Slurm's "no
value"); ``%b`` the index modulo 10; ``%x`` the job's name; ``%u`` its user; ``%N`` the
first node's short name; ``%n`` and ``%t`` 0 (the batch script runs as the first task on
the first node). A number between ``%`` and the letter pads a number with zeros to that
width (``%4a``: ``0007``). Other ``%`` sequences are kept as written.

A relative path is relative to the job's working directory (``-D``), as in Slurm. A job
that names none runs in its task's own folder, where the agent keeps its log already: its
relative output files are not written (only an absolute path, or a relative one under an
absolute ``-D``, is).
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob

#: ``%a`` of a job that is no array member (Slurm's NO_VAL).
NO_ARRAY_INDEX: Final = "4294967294"
#: The longest output path the agents take (``TaskLaunch.output_file``).
MAX_PATH: Final = 4096
#: What :func:`launch_outputs` says of a task that writes no output files.
NO_OUTPUTS: Final[tuple[str | None, str | None, bool]] = (None, None, False)


def expand(
    pattern: str,
    *,
    job_id: str,
    array_job: str | None,
    array_index: int | None,
    user: str,
    name: str,
    node: str,
) -> str:
    """``pattern`` with its ``%`` sequences replaced (see the module's docstring)."""
    index = NO_ARRAY_INDEX if array_index is None else str(array_index)
    values = {
        "%": "%",
        "j": job_id,
        "J": f"{job_id}.batch",
        "s": "batch",
        "A": array_job or job_id,
        "a": index,
        "b": "" if array_index is None else str(array_index % 10),
        "x": name,
        "u": user,
        "N": node.split(".", 1)[0],
        "n": "0",
        "t": "0",
    }
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        end = i + 1
        while end < len(pattern) and pattern[end].isascii() and pattern[end].isdigit():
            end += 1
        letter = pattern[end] if end < len(pattern) else ""
        if letter not in values:
            out.append(pattern[i : end + 1])  # (kept as written)
            i = end + 1
            continue
        value = values[letter]
        width = pattern[i + 1 : end]
        if width and value.isdigit():
            value = value.zfill(min(int(width), 64))
        out.append(value)
        i = end + 1
    return "".join(out)


def resolve(path: str, workdir: str | None) -> str | None:
    """The absolute file an expanded pattern names, or None when it is not written (a
    relative path without an absolute working directory: inside the task's own folder; or a
    path the agents would refuse)."""
    if not posixpath.isabs(path):
        if workdir is None or not posixpath.isabs(workdir):
            return None
        path = posixpath.join(workdir, path)
    path = posixpath.normpath(path)
    if len(path) > MAX_PATH or "\x00" in path or path == "/":
        return None
    return path


def batch_outputs(
    output: str | None,
    error: str | None,
    workdir: str | None,
    *,
    job_id: str,
    array_job: str | None,
    array_index: int | None,
    user: str,
    name: str,
    node: str,
) -> tuple[str | None, str | None]:
    """(output file, error file) of a batch task: the ``output`` and ``error`` patterns
    expanded (:func:`expand`) and resolved against ``workdir``. No output file: none is
    written; no error file (no ``error`` pattern, the same file, or one not written):
    standard error goes with the output."""
    if output is None:
        return None, None

    def path(pattern: str) -> str | None:
        expanded = expand(
            pattern,
            job_id=job_id,
            array_job=array_job,
            array_index=array_index,
            user=user,
            name=name,
            node=node,
        )
        return resolve(expanded, workdir)

    out = path(output)
    if out is None:
        return None, None
    err = None if error is None else path(error)
    return out, None if err == out else err


def launch_outputs(live: LiveJob, node: str) -> tuple[str | None, str | None, bool]:
    """(output file, error file, append?) of the task that runs ``live``'s batch script on
    ``node`` (its first group's working directory; ``--open-mode``)."""
    request, spec = live.request, live.spec
    out, err = batch_outputs(
        request.output,
        request.error,
        request.groups[0].workdir,
        job_id=live.id,
        array_job=spec.array_parent,
        array_index=spec.array_index,
        user=spec.user,
        name=request.name,
        node=node,
    )
    return out, err, out is not None and request.open_mode == "append"
