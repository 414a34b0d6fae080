"""Where a batch job's output files go (``sbatch -o/--output``, ``-e/--error``): the job's
filename patterns expanded for its start, as Slurm expands them, and resolved against its
working directory. The agent writes them (agent/output_files.py). Pure.

Patterns: :func:`fusesched.output_patterns.expand` (``%j``, ``%A_%a``, ``%x``…); for a batch
script ``%J`` is ``<id>.batch``, ``%s`` ``batch``, ``%N`` the first node's short name and ``%n``
and ``%t`` 0 (the batch script runs as the first task on the first node).

A relative path is relative to the job's working directory, as in Slurm: ``-D``, else the
folder sbatch ran in (the request's ``submit_dir``; a relative ``-D`` is relative to it too:
:func:`batch_dirs`). A job with neither (a client older than ``submit_dir``, a request made
by hand) runs in its task's own folder, where the agent keeps its log already: its relative
output files are not written.

Agents older than output files refuse the launch fields they do not know: a controller sends
them only to agents that say ``outputs=true`` (:func:`without_outputs`).
"""

from __future__ import annotations

import logging
import posixpath
from typing import TYPE_CHECKING, Final

from fusesched.api.wire import TaskLaunch
from fusesched.output_patterns import expand

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.submit.request import JobRequest

log = logging.getLogger(__name__)

#: The longest output path the agents take (``TaskLaunch.output_file``).
MAX_PATH: Final = 4096
#: What :func:`launch_outputs` says of a task that writes no output files.
NO_OUTPUTS: Final[tuple[str | None, str | None, bool]] = (None, None, False)


def resolve(path: str, workdir: str | None) -> str | None:
    """The absolute file an expanded pattern names, or None when it is not written (a
    relative path without an absolute working directory: inside the task's own folder; or a
    path the agents would refuse)."""
    if not posixpath.isabs(path):
        if workdir is None or not posixpath.isabs(workdir):
            return None
        path = posixpath.join(workdir, path)
    # (not normalised: ``..`` after a link is the link target's parent, as the kernel sees it)
    if len(path) > MAX_PATH or "\x00" in path or posixpath.normpath(path) == "/":
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
    same = err is not None and posixpath.normpath(err) == posixpath.normpath(out)
    return out, None if same else err


def batch_dirs(request: JobRequest) -> tuple[str | None, str | None]:
    """(workdir, submit_dir) of the task that runs ``request``'s batch script
    (:func:`start_dirs`)."""
    return start_dirs(request.groups[0].workdir, request.submit_dir)


def start_dirs(workdir: str | None, submitted: str | None) -> tuple[str | None, str | None]:
    """(workdir, submit_dir) of a task (not a container's) whose ``-D`` is ``workdir`` and
    whose job was submitted from ``submitted`` (sbatch's script, run's tasks): its ``-D``,
    made absolute against that folder when relative (as Slurm); no ``-D``: that folder,
    which the agent enters where its node has it (else the task's own folder), as
    ``TaskLaunch.submit_dir``."""
    if submitted is None:
        return workdir, None
    if workdir is None:
        return None, submitted
    return posixpath.join(submitted, workdir), None  # (as the kernel resolves it: no normpath)


def launch_outputs(live: LiveJob, node: str) -> tuple[str | None, str | None, bool]:
    """(output file, error file, append?) of the task that runs ``live``'s batch script on
    ``node`` (resolved against its working directory, :func:`batch_dirs`; ``--open-mode``)."""
    request, spec = live.request, live.spec
    workdir, submitted = batch_dirs(request)
    out, err = batch_outputs(
        request.output,
        request.error,
        workdir or submitted,
        job_id=live.id,
        array_job=spec.array_parent,
        array_index=spec.array_index,
        user=spec.user,
        name=request.name,
        node=node,
    )
    return out, err, out is not None and request.open_mode == "append"


def without_outputs(node: str, launches: list[TaskLaunch]) -> list[TaskLaunch]:
    """``launches`` for an agent too old for output files and the submit folder (its reply
    model would refuse the whole reply): without them (logged). Such a task runs in its task
    folder and writes its output to its log alone, as before."""
    out: list[TaskLaunch] = []
    for sent in launches:
        if sent.output_file is not None or sent.submit_dir is not None:
            log.warning(
                "node %s's agent is too old for output files: task %s starts without its "
                "output file (%s)%s",
                node,
                sent.task_id,
                sent.output_file or "none",
                "" if sent.submit_dir is None else f", in its task folder, not {sent.submit_dir}",
            )
            sent = sent.model_copy(
                update={
                    "output_file": None,
                    "error_file": None,
                    "output_append": False,
                    "submit_dir": None,
                }
            )
        out.append(sent)
    return out
