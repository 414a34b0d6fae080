"""The ``/bin/sh`` shim a task starts as, and how it comes to run as the task's identity.

The shim waits for the agent's go-ahead on stdin (agent/spawn.py pins it and puts it in its
cgroup meanwhile), then ``exec``\\ s the task, its stdin ``/dev/null``, a job step's
standard input forwarded by ``srun`` (a file in the task's folder: agent/task_files.py) or,
for ``fusesched run --pty``, its pseudo-terminal. A task under another identity is started in
``/`` and its shim, already that identity, enters the working directory (``subprocess``
would enter it as root, before switching).

A task that runs under another identity (the agent runs as root) must never let anything
that sees the job's environment hold root (``LD_PRELOAD`` and the like are honoured by the
dynamic loader of every program root runs). Two ways, same result:

* **quick** (``setpriv`` from util-linux installed and usable): the agent spawns
  ``setpriv --reuid --regid --clear-groups -- /bin/sh …`` with an environment of its own (no
  variable of the job's), which ``subprocess`` can start with ``vfork`` (a full ``fork`` of the
  agent copies its page tables and makes its every later write fault: tens of milliseconds
  per task here). The job's environment goes to the shim, which already runs as the task's
  identity, as a file of ``export 'NAME=value'`` lines (the task folder's, mode 0600, owned
  by that identity; the shim deletes it once read);
* **subprocess** (no ``setpriv``, or a variable name a shell cannot export): the child
  switches identity before the shim runs (``subprocess``'s ``user``/``group``/
  ``extra_groups``), which needs a full ``fork``. With such a name the shim runs in bash
  (:func:`shim_shell`): dash would drop the variable.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fusesched.agent.pty_bridge import Pty
from fusesched.agent.task_files import STDIN_NAME
from fusesched.agent.users import Identity
from fusesched.model.text import is_env_name

# Waits for the agent's go-ahead on stdin, then becomes the task (stdin: /dev/null).
_SHIM = 'read -r _ || exit 125\nexec "$@" </dev/null\n'
# The same for a task under another identity: it enters its working directory (the first
# argument) itself, as that identity, never root: the kernel checks the user's own right to
# reach it, at the moment it enters.
_SHIM_CD = 'read -r _ || exit 125\ncd -- "$1" || exit 125\nshift\nexec "$@" </dev/null\n'
# The same, run as the task's identity by setpriv: first takes the job's environment from
# the file named by its first argument (opened, then deleted before it is read, so that no
# failure while reading it leaves it behind); the second is the working directory.
_SHIM_ENV = (
    'read -r _ || exit 125\nexec 3<"$1" || exit 125\ncommand -p rm -f -- "$1"\n'
    '. /dev/fd/3 || exit 125\nexec 3<&-\ncd -- "$2" || exit 125\nshift 2\n'
    'exec "$@" </dev/null\n'
)
#: Names bash keeps read-only: assigning one ends a POSIX shell (bash as /bin/sh, as on
#: RHEL-family nodes) and the task with it, so they are left out of the file (bash sets
#: them itself in every shell anyway).
SHELL_READ_ONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})
ENV_NAME = ".fusesched-env"
#: How a shim gives the task a pseudo-terminal (``fusesched run --pty``) instead of
#: ``/dev/null``: it opens the terminal's slave end itself, as the session leader it is, which
#: makes it the task's controlling terminal as well as its stdin, stdout and stderr.
PTY_ENV = "FUSESCHED_PTY"
_ON_PTY = f' <>"${PTY_ENV}" >&0 2>&0\n'
#: How a shim tells a task with Slurm's variables its process id (``SLURM_TASK_PID``, as
#: Slurm's ``slurmstepd``): the shim's own, which ``exec`` gives the task.
_TASK_PID = 'export SLURM_TASK_PID=$$\nexec "$@"'
#: Where ``setpriv`` is looked for: absolute paths only, never the job's PATH.
SETPRIV_DIRS = "/usr/bin:/bin:/usr/sbin:/sbin"


@functools.cache
def _bash() -> str | None:
    """bash, looked for where :data:`SETPRIV_DIRS` say (never the job's PATH)."""
    return shutil.which("bash", path=SETPRIV_DIRS)


def shim_shell(env: Mapping[str, str]) -> str:
    """The shell a shim with the job's environment ``env`` runs in: ``/bin/sh``, but bash
    where ``env`` holds a name a POSIX shell cannot export (bash's exported functions,
    ``BASH_FUNC_module%%``, which ``module load`` needs): dash, ``/bin/sh`` on Debian and
    Ubuntu, leaves such variables out of the environment of the programs it runs."""
    if all(map(is_env_name, env)):
        return "/bin/sh"
    return _bash() or "/bin/sh"


@dataclass(frozen=True, slots=True)
class ShimStart:
    """How ``subprocess`` starts a task's shim: its command line, folder and environment, and
    whom the child switches to first (None: nobody, or ``setpriv`` does it)."""

    argv: list[str]
    cwd: Path
    env: Mapping[str, str]
    switch: Identity | None


@functools.cache
def find_setpriv() -> str | None:
    """``setpriv`` (util-linux) if it is installed and can switch identities here (probed
    once: it switches to ``nobody`` and runs ``/bin/true``)."""
    found = shutil.which("setpriv", path=SETPRIV_DIRS)
    if found is None or os.geteuid() != 0:
        return None
    try:
        probe = subprocess.run(
            [found, "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/bin/true"],
            capture_output=True,
            timeout=10,
            check=False,
            env={},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found if probe.returncode == 0 else None


def shim_start(
    command: list[str],
    cwd: Path,
    env: Mapping[str, str],
    task_dir: Path,
    who: Identity | None,
    setpriv: str | None,
    pty: Pty | None,
    task_pid: bool = False,
    stdin: bool = False,
) -> ShimStart:
    """How to start ``command`` in ``cwd`` as ``who`` (None: the agent's identity) behind its
    shim (module docstring); ``setpriv``: :func:`find_setpriv`'s. Under ``setpriv`` the job's
    environment is written to ``task_dir``'s :data:`ENV_NAME` (an ``OSError`` if it cannot be).
    ``task_pid``: the shim exports ``SLURM_TASK_PID``, the task's process id; ``stdin``: the
    task's standard input is ``task_dir``'s :data:`STDIN_NAME` (a terminal wins over it)."""
    shell = shim_shell(env)
    given = task_dir.absolute() / STDIN_NAME if stdin else None
    argv = [shell, "-c", _shim(_SHIM, pty, task_pid, given), "fusesched-task", *command]
    argv_tail = command
    if who is not None:  # root must not chdir for it (subprocess's cwd runs before setuid)
        argv_tail = [str(cwd.absolute()), *command]
        shim = _shim(_SHIM_CD, pty, task_pid, given)
        argv = [shell, "-c", shim, "fusesched-task", *argv_tail]
        cwd = Path("/")
    if who is None or setpriv is None or not all(map(is_env_name, env)):
        return ShimStart(argv=argv, cwd=cwd, env=env, switch=who)
    env_file = task_dir / ENV_NAME
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(env_file, flags, 0o600)  # never one the task's user put there
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchown(out.fileno(), who.uid, who.gid)
        out.write(_exports(env))
    ids = [f"--reuid={who.uid}", f"--regid={who.gid}", "--clear-groups"]
    argv = [setpriv, *ids, "--", "/bin/sh", "-c", _shim(_SHIM_ENV, pty, task_pid, given)]
    argv.append("fusesched-task")
    argv += [str(env_file), *argv_tail]
    # nothing of the job's reaches a program that runs as root
    return ShimStart(argv=argv, cwd=cwd, env={}, switch=None)


def _exports(env: Mapping[str, str]) -> str:
    """``env`` as lines a POSIX shell sources: ``export 'NAME=value'`` (single quotes keep
    every byte literal; a quote inside is closed, escaped and reopened); without
    :data:`SHELL_READ_ONLY`'s names."""
    quoted = (
        f"{name}={value}".replace("'", "'\\''")
        for name, value in env.items()
        if name not in SHELL_READ_ONLY
    )
    return "".join(f"export '{item}'\n" for item in quoted)


def _shim(shim: str, pty: Pty | None, task_pid: bool = False, stdin: Path | None = None) -> str:
    """``shim``, ending on the terminal ``pty`` (if any), else on the file ``stdin`` (if
    any: a job step's standard input, opened as the task's identity), rather than
    ``/dev/null``, telling the task its process id first with ``task_pid``."""
    if task_pid:
        shim = shim.replace('exec "$@"', _TASK_PID)
    if pty is not None:
        return shim.replace(" </dev/null\n", _ON_PTY)
    if stdin is not None:
        return shim.replace(" </dev/null\n", f" <{shlex.quote(str(stdin))}\n")
    return shim
