"""How a job step's task starts when srun asked for more than running its command
(``srun -D``, ``-t``, ``--signal``, ``--task-prolog``, ``--task-epilog`` inside a job):
``python -I -m fusesched.step_start [SETTINGS...] -- COMMAND...``, where the task runs, as
Slurm's slurmstepd does each of these for each task.

* ``--chdir DIR``: the task starts in ``DIR`` (relative: to srun's folder, where the task
  is when this starts); one it cannot enter is said on standard error, and the task starts
  where it is (as slurmstepd: ``couldn't chdir … going to … instead``).
* ``--prolog PROGRAM``: run first, with the task's variables; its output's lines
  ``export NAME=value`` and ``unset NAME`` change the task's variables and ``print TEXT``
  writes ``TEXT`` to the task's output. One that fails ends the task with its exit status,
  the command not run.
* ``--time SECONDS``: the task's time limit: then it is sent SIGTERM (its whole process
  group), and SIGKILL :data:`KILL_WAIT_S` seconds later; the first task on a node says so
  (``*** STEP … CANCELLED AT … DUE TO TIME LIMIT ***``). ``--signal NUMBER@SECONDS``: that
  signal that long before the limit.
* ``--epilog PROGRAM``: run once the command has ended (its output discarded; killed after
  :data:`EPILOG_S` seconds).
* ``--fail MESSAGE``: no command to run: ``MESSAGE`` on standard error, exit status 1.

With no time limit nor epilog, this process becomes the command. Standard library only:
every task of such a step starts with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

#: Between the time limit's SIGTERM and its SIGKILL (Slurm's KillWait default).
KILL_WAIT_S = 30.0
#: How long a task epilog may run.
EPILOG_S = 10.0
_VALUED = ("--chdir", "--prolog", "--epilog", "--time", "--signal", "--fail")


def main(argv: Sequence[str]) -> int:
    settings: dict[str, str] = {}
    args = list(argv)
    while args and args[0] in _VALUED and len(args) > 1:
        settings[args[0][2:]] = args[1]
        del args[:2]
    if not args or args[0] != "--":
        return _fail("usage: python -m fusesched.step_start [--SETTING VALUE...] -- COMMAND...", 2)
    command = args[1:]
    if "fail" in settings:
        return _fail(f"srun: error: {settings['fail']}", 1)
    if not command:
        return _fail("srun: error: no command", 2)
    if "chdir" in settings:
        _enter(settings["chdir"])
    env = dict(os.environ)
    if "prolog" in settings:
        failed = _prolog(settings["prolog"], env)
        if failed is not None:
            return failed
    limit = float(settings["time"]) if "time" in settings else None
    if limit is None and "epilog" not in settings:
        return _become(command, env)
    code = _supervise(command, env, limit, _warning(settings.get("signal")))
    if "epilog" in settings:
        _epilog(settings["epilog"], env)
    return code


def _enter(folder: str) -> None:
    try:
        os.chdir(folder)
    except OSError as exc:
        _fail(
            f"srun: error: couldn't chdir to `{folder}': {exc.strerror}: going to "
            f"{os.getcwd()} instead",
            0,
        )


def _prolog(program: str, env: dict[str, str]) -> int | None:
    """Run the task prolog and take its settings into ``env``; the task's exit status when it
    fails, else None."""
    try:
        done = subprocess.run(
            [program],
            env=env | {"SLURM_TASK_PID": str(os.getpid())},
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError as exc:
        return _fail(f"srun: error: --task-prolog {program}: {exc.strerror}", 1)
    if done.returncode != 0:
        code = done.returncode if done.returncode > 0 else 128 - done.returncode
        return _fail(f"srun: error: --task-prolog failed status={code}", code)
    for line in done.stdout.decode("utf-8", errors="replace").splitlines():
        word, _, rest = line.partition(" ")
        if word == "export":
            name, eq, value = rest.strip().partition("=")
            if eq and name:
                env[name] = value
        elif word == "unset":
            env.pop(rest.strip(), None)
        elif word == "print":
            sys.stdout.write(rest + "\n")
    sys.stdout.flush()
    return None


def _become(command: list[str], env: dict[str, str]) -> int:
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return _fail(f"srun: error: {command[0]}: {exc.strerror}", code)


def _warning(text: str | None) -> tuple[int, float] | None:
    if not text:
        return None
    number, _, before = text.partition("@")
    return int(number), float(before)


def _supervise(
    command: list[str], env: dict[str, str], limit: float | None, warn: tuple[int, float] | None
) -> int:
    """Run the command as a child (in this process group, which the agent signals whole)
    until it ends, applying the time limit; its exit status (a signal N: 128+N)."""
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return _fail(f"srun: error: {command[0]}: {exc.strerror}", code)
    ignored = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, *([warn[0]] if warn else [])}
    for signum in ignored:  # (the group's signals reach the child too; its own end counts)
        signal.signal(signum, lambda *_: None)
    start = time.monotonic()
    warned = warn is None
    killed_at: float | None = None
    while True:
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if limit is None:
            continue
        spent = time.monotonic() - start
        if not warned and warn is not None and spent >= limit - warn[1]:
            warned = True
            _group(warn[0], child)
        if killed_at is None and spent >= limit:
            killed_at = time.monotonic()
            _say_time_limit()
            _group(signal.SIGTERM, child)
        elif killed_at is not None and time.monotonic() - killed_at >= KILL_WAIT_S:
            child.kill()
    return 128 - code if code < 0 else code


def _group(signum: int, child: subprocess.Popen[bytes]) -> None:
    """``signum`` to the task's process group, which this process leads as a task's first
    process (it ignores the signal: see :func:`_supervise`); to the command alone when it
    leads none (started by hand, in another's group)."""
    with contextlib.suppress(OSError):
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signum)
        else:
            child.send_signal(signum)


def _say_time_limit() -> None:
    if os.environ.get("SLURM_LOCALID", "0") != "0":
        return  # (once per node, as slurmstepd)
    step = f"{os.environ.get('SLURM_JOB_ID', '')}.{os.environ.get('SLURM_STEP_ID', '')}"
    node = os.environ.get("SLURMD_NODENAME", "")
    at = time.strftime("%Y-%m-%dT%H:%M:%S")
    _fail(f"srun: error: *** STEP {step} ON {node} CANCELLED AT {at} DUE TO TIME LIMIT ***", 0)


def _epilog(program: str, env: dict[str, str]) -> None:
    try:
        subprocess.run(
            [program],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=EPILOG_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _fail(f"srun: error: --task-epilog {program}: {exc}", 0)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
