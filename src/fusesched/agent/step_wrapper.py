"""The agent's ``srun`` wrapper for job steps: ``<work dir>/bin/srun``, first on the PATH of
``slurm_env`` tasks, runs ``python -I -m fusesched.agent.step``; beside it ``scontrol``, for
the host lists batch scripts ask it for (:mod:`fusesched.scontrol`).

Kept apart from :mod:`fusesched.agent.step` on purpose: the agent package imports this
module, and a module already imported when ``python -m`` runs it makes Python warn on every
step ("found in sys.modules after import of package").
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

#: The wrapper the agent installs (``<work dir>/bin/srun``) and puts first on tasks' PATH.
WRAPPER_DIR = "bin"
WRAPPER_NAME = "srun"
#: The commands of that folder and the module each runs: ``srun`` for job steps and
#: ``scontrol`` for the host lists scripts ask it for (:mod:`fusesched.scontrol`).
WRAPPERS = {WRAPPER_NAME: "fusesched.agent.step", "scontrol": "fusesched.scontrol"}


def install_wrapper(work_dir: Path, python: str = sys.executable) -> Path:
    """Write ``<work_dir>/bin/srun`` (``exec <python> -I -m fusesched.agent.step "$@"``) and
    ``<work_dir>/bin/scontrol`` (:data:`WRAPPERS`), readable and runnable by everyone,
    writable by the agent only; returns their folder. :class:`OSError` when
    ``<work_dir>/bin`` is a link or not the agent's own."""
    folder = work_dir / WRAPPER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    found = os.lstat(folder)  # never through a link: chmod and the write would follow it
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise OSError(f"{folder} is not a folder of the agent's own (a link?): not used")
    folder.chmod(0o755)
    for name, module in WRAPPERS.items():
        # -I: the task's working folder and PYTHON* variables (a module of the job's own
        # named like one of fusesched's imports) must not change what the agent's python
        # imports
        _write(folder, name, f'#!/bin/sh\nexec {_sh_quote(python)} -I -m {module} "$@"\n')
    _write(folder, BASH_ENV_NAME, _bash_env(folder))
    return folder


#: The file a job's bash reads first (``BASH_ENV``, set by the agent): a login shell
#: (``#!/bin/bash -l``, common in HPC scripts for ``module``) resets ``PATH`` from
#: ``/etc/profile``, which would drop the agent's ``srun`` and ``scontrol``; bash reads this
#: file after the profile, and it puts the folder first again (then the job's own
#: ``BASH_ENV``, kept as ``FUSESCHED_BASH_ENV``).
BASH_ENV_NAME = "bash_env"
#: The variable the job's own ``BASH_ENV`` is kept in.
OWN_BASH_ENV = "FUSESCHED_BASH_ENV"
#: Set (not exported) while the file reads the job's own: a job's file that names an agent's
#: is not read again and again until bash runs out of stack.
_READING = "_fusesched_bash_env"


def agents_bash_env(path: str) -> bool:
    """Whether ``path`` is an agent's file (``<work dir>/bin/bash_env``), not a job's own: a
    job step inherits the ``BASH_ENV`` its batch script was given (by this agent or by
    another node's), which must not become the step's own."""
    found = Path(path)
    return found.name == BASH_ENV_NAME and found.parent.name == WRAPPER_DIR


def _bash_env(folder: Path) -> str:
    where = _sh_quote(str(folder))
    return (
        "# fusesched: the job's srun and scontrol first on PATH, also after a login shell's "
        "/etc/profile\n"
        f'case ":$PATH:" in *:{where}:*) ;; *) PATH={where}":$PATH" ;; esac\n'
        f'if [ -n "${{{OWN_BASH_ENV}-}}" ] && [ -z "${{{_READING}-}}" ]; then\n'
        f'    {_READING}=1; . "${OWN_BASH_ENV}"; unset {_READING}\n'
        "fi\n"
    )


def _write(folder: Path, name: str, text: str) -> None:
    """``folder/name`` holding ``text``, replaced whole (never written through a link)."""
    target = folder / name
    if target.is_file() and not target.is_symlink():
        with contextlib.suppress(OSError):
            if target.read_text(encoding="utf-8") == text:
                return
    scratch = folder / f".{name}.{os.getpid()}"
    scratch.unlink(missing_ok=True)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(scratch, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    os.replace(scratch, target)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
