"""How the runtime starts a task: its folder, environment, identity, cgroup and process.

:meth:`TaskSpawner.spawn` turns a launch into a running :class:`TaskProcess` or raises
:class:`StartFailure` saying why it cannot start. It works without ``preexec_fn``, which is
unsafe in a threaded agent:

1. ``/bin/sh`` (a three-line shim) is spawned in a new session (so the task is its own process
   group), stdin a pipe, stdout+stderr the task's log file; it blocks reading the pipe;
2. the agent pins it (``sched_setaffinity``) and moves it into the task's memory cgroup;
3. the agent writes one line to the pipe and the shim ``exec``\\ s the command (bare metal) or
   ``bwrap … -- command`` (container), so every process of the task inherits both.

The shim, and how it comes to run as the task's identity (``setpriv`` or in the child), are
:mod:`fusesched.agent.task_shim`; the task's environment is :mod:`fusesched.agent.task_env`.

The task's folder is made and filled while it is root's alone (mode 0700), then handed over
bottom-up, the folder itself last, without following links; what the agent creates in it
later is opened ``O_EXCL | O_NOFOLLOW`` (docs/AGENT.md, "Security").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fusesched.agent import output_files
from fusesched.agent.cgroups import MemoryCgroups, TaskCgroup
from fusesched.agent.containers import TASK_DIR_IN_CONTAINER, Bind, bwrap_argv, find_bwrap
from fusesched.agent.dataset_staging import DatasetError
from fusesched.agent.datasets import DataGrant
from fusesched.agent.images import ImageCache, ImageError
from fusesched.agent.probe_checks import exec_context
from fusesched.agent.pty_bridge import Pty, open_pty
from fusesched.agent.step_wrapper import BASH_ENV_NAME, OWN_BASH_ENV, agents_bash_env
from fusesched.agent.task_data import task_view
from fusesched.agent.task_env import cpu_list, slurm_identity_env, task_environment
from fusesched.agent.task_files import STDIN_FILE, write_stdin
from fusesched.agent.task_process import PID_NAME, TaskProcess, open_pidfd, start_time
from fusesched.agent.task_shim import ENV_NAME, PTY_ENV, find_setpriv, shim_start
from fusesched.agent.users import Identity, IdentityError, check_reachable
from fusesched.agent.watching import checkpoint_dir, prepare_checkpoint_dir
from fusesched.api.wire import TaskLaunch

LOG_NAME = "output.log"
SCRIPT_NAME = "script.sh"

_FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def valid_task_id(task_id: str) -> bool:
    """Whether ``task_id`` may name a folder (and reach the agent's hooks): letters, digits,
    ``.``, ``_`` and ``-``, starting with a letter or digit."""
    return bool(_TASK_ID_RE.fullmatch(task_id))


class StartFailure(Exception):
    """The task cannot start; the message says why (it becomes the ``FAILED_TO_START``
    report's reason)."""


class TaskSpawner:
    """Starts tasks under ``work_dir/tasks/<task id>/`` (see the module docstring).

    ``image_cache``: where container images are unpacked (``None``: container tasks fail to
    start). ``memory_cgroups``: how memory limits are enforced. ``binds``: extra mounts in every
    container. ``identities``: job user -> who its tasks run as (``None``: the agent itself).
    ``clock``: monotonic seconds, a task's ``started_at``. ``tmp_dir``: the ``TMPDIR`` of
    bare-metal tasks (the job's own ``TMPDIR`` wins; ``None``: not set).
    """

    def __init__(
        self,
        work_dir: Path,
        image_cache: ImageCache | None,
        memory_cgroups: MemoryCgroups,
        binds: Sequence[Bind],
        identities: Callable[[str], Identity] | None,
        clock: Callable[[], float],
        *,
        tmp_dir: Path | None = None,
        srun_dir: Path | None = None,
    ) -> None:
        self.work_dir = work_dir
        self.tmp_dir = tmp_dir
        # the folder of fusesched's ``srun`` (agent/step.py), first on the PATH of the tasks
        # of jobs with Slurm's variables (``slurm_env``) that run on the node itself
        self.srun_dir = srun_dir
        self.image_cache = image_cache
        self.memory_cgroups = memory_cgroups
        self.binds = tuple(binds)
        self.identities = identities
        self._clock = clock
        # memory cgroups are named per agent: agents sharing a machine (and its cgroup
        # parent) may run tasks of the same id for different controllers
        self._cgroup_tag = hashlib.sha1(str(work_dir).encode()).hexdigest()[:10]

    def cgroup_name(self, task_id: str) -> str:
        return f"{self._cgroup_tag}.{task_id}"

    def spawn(self, launch: TaskLaunch, data: list[DataGrant]) -> TaskProcess:
        """Start ``launch`` reading the datasets ``data``; raises :class:`StartFailure`."""
        if not _TASK_ID_RE.fullmatch(launch.task_id):
            raise StartFailure(f"invalid task id {launch.task_id!r} (letters, digits, . _ -)")
        if launch.cpu_ids:
            allowed = os.sched_getaffinity(0)
            missing = sorted(set(launch.cpu_ids) - allowed)
            if missing:
                raise StartFailure(
                    f"CPUs {cpu_list(missing)} are not available here "
                    f"(allowed: {cpu_list(sorted(allowed))})"
                )
        who = self._identity(launch)
        task_dir = self.work_dir / "tasks" / launch.task_id
        if task_dir.exists():
            shutil.rmtree(task_dir)
        task_dir.mkdir(parents=True)
        task_dir.chmod(0o700)  # the task's script, files and log: its user's (and the agent's)
        container = launch.image is not None
        inside = TASK_DIR_IN_CONTAINER if container else str(task_dir)
        command = _command(launch, task_dir, inside)
        try:
            prepare_checkpoint_dir(checkpoint_dir(launch, task_dir), who, task_dir)
        except (OSError, IdentityError, subprocess.SubprocessError) as exc:
            raise StartFailure(f"cannot prepare the checkpoint folder: {exc}") from None
        if who is not None:
            _hand_over(task_dir, who)
        notes: list[str] = []
        cgroup = self._memory(launch, notes)
        tmp = None if container or self.tmp_dir is None else str(self.tmp_dir)
        env = task_environment(launch, inside, launch.memory_bytes if cgroup else None, tmp)
        if who is not None:
            env.update({"USER": who.name, "LOGNAME": who.name})
        slurm = "SLURM_JOB_ID" in launch.env  # (a job with Slurm's variables)
        if slurm:
            env.update(slurm_identity_env(who))
        if self.srun_dir is not None and not container and slurm:
            env["PATH"] = f"{self.srun_dir}:{env['PATH']}"  # before any other srun
            own = env.get("BASH_ENV")
            if own and not agents_bash_env(own):  # (the job's own: read after the agent's)
                env[OWN_BASH_ENV] = own
            env["BASH_ENV"] = str(self.srun_dir / BASH_ENV_NAME)  # (bash -l resets PATH)
        try:
            data_env, data_binds = task_view(data, container=container, who=who)
        except DatasetError as exc:
            raise StartFailure(str(exc)) from None
        env.update(data_env)
        pty = _open_pty(launch, who)
        if pty is not None and launch.pty is not None:
            env.update({"TERM": launch.pty.term, PTY_ENV: pty.path})
        try:
            return self._exec(launch, task_dir, command, env, cgroup, notes, who, data_binds, pty)
        except BaseException:
            if cgroup is not None:
                cgroup.kill_all()
                cgroup.remove()
            if pty is not None:
                pty.close()
            raise

    def _identity(self, launch: TaskLaunch) -> Identity | None:
        if self.identities is None:
            return None
        try:
            return self.identities(launch.user)
        except IdentityError as exc:
            raise StartFailure(str(exc)) from None

    def _memory(self, launch: TaskLaunch, notes: list[str]) -> TaskCgroup | None:
        if launch.memory_bytes is None:
            return None
        if not self.memory_cgroups.available:
            notes.append(f"memory limit not enforced: {self.memory_cgroups.unavailable_reason}")
            return None
        try:
            return self.memory_cgroups.create(self.cgroup_name(launch.task_id), launch.memory_bytes)
        except OSError as exc:
            notes.append(f"memory limit not enforced: {exc}")
            return None

    def _exec(
        self,
        launch: TaskLaunch,
        task_dir: Path,
        command: list[str],
        env: Mapping[str, str],
        cgroup: TaskCgroup | None,
        notes: list[str],
        who: Identity | None = None,
        data_binds: Sequence[Bind] = (),
        pty: Pty | None = None,
    ) -> TaskProcess:
        task_command = command  # (in a container: what the sandbox runs)
        writing = launch  # (what its output files' writers take: without those in that folder)
        moved: str | None = None  # (why it does not run in the folder it was submitted from)
        if launch.image is not None:
            if self.image_cache is None:
                raise StartFailure("container images are not enabled on this agent")
            bwrap = find_bwrap()
            if bwrap is None:
                raise StartFailure("cannot run images here: bubblewrap (bwrap) is not installed")
            try:  # root unpacks a tarball: its user must read that very file
                rootfs = self.image_cache.resolve(launch.image, who)
            except ImageError as exc:
                raise StartFailure(str(exc)) from None
            except IdentityError as exc:
                raise StartFailure(f"image {launch.image}: {exc}") from None
            has_gpus = bool(launch.gpu_indices or launch.gpu_uuids)
            command = bwrap_argv(
                rootfs,
                command,
                task_dir=task_dir,
                workdir=launch.workdir,
                binds=[*self.binds, *data_binds],
                gpus=has_gpus,
                bwrap=bwrap,
                unshare_user=True if who is not None else None,
            )
            cwd = task_dir
        else:
            cwd = task_dir / launch.workdir if launch.workdir else task_dir  # relative: to it
            if not launch.workdir and launch.submit_dir is not None:  # (sbatch's default)
                why = _cannot_enter(launch.submit_dir, who)
                if why is None:
                    cwd = Path(launch.submit_dir)
                else:
                    writing, lost = _outside(launch, launch.submit_dir)
                    moved = _moved(launch.submit_dir, why, lost)
                    notes.append(moved)  # (the job's events)
            if not cwd.is_dir():
                raise StartFailure(f"working directory does not exist: {cwd}")
            program = _check_executable(command[0], cwd, env["PATH"])
            if who is not None:
                try:
                    check_reachable(program, who, execute=True)
                except IdentityError as exc:
                    raise StartFailure(str(exc)) from None
                try:  # the shim enters it as ``who``; this only makes the failure clear
                    check_reachable(cwd, who, execute=True)
                except IdentityError:
                    raise StartFailure(
                        f"working directory {cwd} is not reachable by {who.name} (uid {who.uid})"
                    ) from None

        probing = launch.liveness is not None or launch.readiness is not None
        as_who = None if who is None else (who.uid, who.gid)  # its exec probes run as it does
        probes = exec_context(env, cwd, as_who, command, task_command) if probing else None
        log_path = task_dir / LOG_NAME
        setpriv = find_setpriv() if who is not None else None
        try:
            told_pid = "SLURM_JOB_ID" in launch.env and launch.image is None  # (SLURM_TASK_PID)
            stdin = STDIN_FILE in launch.files  # (written by _command)
            shim = shim_start(command, cwd, env, task_dir, who, setpriv, pty, told_pid, stdin)
        except OSError as exc:
            raise StartFailure(f"cannot write the task's environment: {exc}") from None
        # the folder is the task's user's by now: a link planted there is never followed
        log_flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND
        try:
            log_fd = os.open(log_path, log_flags, 0o600)
        except OSError as exc:
            (task_dir / ENV_NAME).unlink(missing_ok=True)
            raise StartFailure(f"cannot create the task's log {log_path}: {exc}") from None
        if moved is not None:  # its log's first line says so (as Slurm's job's stderr would)
            with contextlib.suppress(OSError):
                os.write(log_fd, f"fusesched: {moved}\n".encode("utf-8", "replace"))
        try:  # its output files (sbatch -o/-e): it writes to their writers, they to its log
            outputs = output_files.start(writing, log_fd, who, setpriv)
        except output_files.OutputFileError as exc:
            os.close(log_fd)
            (task_dir / ENV_NAME).unlink(missing_ok=True)
            raise StartFailure(str(exc)) from None
        go_read, go_write = os.pipe()
        try:
            popen = subprocess.Popen(
                shim.argv,
                stdin=go_read,
                stdout=log_fd if outputs is None else outputs.stdout,
                stderr=subprocess.STDOUT if outputs is None else outputs.stderr,
                cwd=shim.cwd,
                env=dict(shim.env),
                start_new_session=True,
                user=shim.switch.uid if shim.switch is not None else None,
                group=shim.switch.gid if shim.switch is not None else None,
                extra_groups=[] if shim.switch is not None else None,
            )
        except OSError as exc:
            os.close(go_write)
            (task_dir / ENV_NAME).unlink(missing_ok=True)
            _end_outputs(outputs)
            raise StartFailure(f"cannot start: {exc}") from None
        finally:
            os.close(go_read)
            os.close(log_fd)
            if outputs is not None:
                outputs.close_task_ends()
        try:
            cgroup = _place(launch, popen, task_dir, go_write, cgroup, notes)
        except BaseException:
            popen.kill()  # still the shim, waiting for its go-ahead
            popen.wait()
            (task_dir / ENV_NAME).unlink(missing_ok=True)  # never read: the job's secrets
            _end_outputs(outputs)
            raise
        return TaskProcess(
            launch=launch,
            popen=popen,
            task_dir=task_dir,
            log_path=log_path,
            started_at=self._clock(),
            container=launch.image is not None,
            cgroup=cgroup,
            checkpoint_dir=_watched_checkpoints(launch, task_dir, who),
            notes=notes,
            pidfd=open_pidfd(popen.pid),
            probe_context=probes,
            writers=[] if outputs is None else outputs.writers,
            note=-1 if outputs is None else outputs.note,
            pty=pty,
        )


def _open_pty(launch: TaskLaunch, who: Identity | None) -> Pty | None:
    """The launch's pseudo-terminal, its slave end ``who``'s (None: no ``pty``)."""
    if launch.pty is None:
        return None
    try:
        return open_pty(launch.pty, None if who is None else who.uid)
    except OSError as exc:
        raise StartFailure(f"cannot open a pseudo-terminal: {exc}") from None


def _cannot_enter(folder: str, who: Identity | None) -> str | None:
    """Why a task cannot start in ``folder`` (the one its job was submitted from, which it
    enters as its user), or None: it must be a folder here that its user can reach."""
    path = Path(folder)
    try:
        if not path.is_dir():
            return "is not a folder on this node"
        if who is None:
            return None if os.access(path, os.X_OK) else "cannot be entered by the agent's user"
        check_reachable(path, who, execute=True)
    except IdentityError as exc:
        return f"cannot be entered: {exc}"
    except OSError as exc:
        return f"cannot be entered: {exc.strerror or exc}"
    return None


def _in_folder(path: str | None, folder: str) -> bool:
    return path is not None and path.startswith(folder.rstrip("/") + "/")


def _outside(launch: TaskLaunch, folder: str) -> tuple[TaskLaunch, list[str]]:
    """``launch`` without its output files if the output file is in ``folder`` (which its
    task cannot enter; an error file goes with it: it is written beside the output), and the
    files so left out."""
    if _in_folder(launch.output_file, folder):
        lost = [p for p in (launch.output_file, launch.error_file) if p is not None]
        return launch.model_copy(update={"output_file": None, "error_file": None}), lost
    if _in_folder(launch.error_file, folder):
        assert launch.error_file is not None
        return launch.model_copy(update={"error_file": None}), [launch.error_file]
    return launch, []


def _moved(folder: str, why: str, lost: list[str]) -> str:
    """What a batch task that runs in its task folder instead of ``folder``, the one its job
    was submitted from (Slurm's would run in ``/tmp``), says in its log and the job's events."""
    files = ""
    if lost:
        which = f"file {lost[0]} is" if len(lost) == 1 else f"files {' and '.join(lost)} are"
        files = f"; its output {which} not written (its log has all of its output)"
    return (
        f"the job runs in its task folder: {folder}, the folder it was submitted from, {why}{files}"
    )


def _end_outputs(outputs: output_files.OutputWriters | None) -> None:
    """A task that did not start: its output files' writers end (their pipes are closed)."""
    if outputs is not None:
        outputs.close_task_ends()
        output_files.close_note(outputs.note)
        output_files.finish(outputs.writers)


def _watched_checkpoints(launch: TaskLaunch, task_dir: Path, who: Identity | None) -> Path | None:
    """The checkpoint folder the sensors (root) may watch: one outside the task's folder only
    if it is the task user's own (root must not report on a folder the user cannot list)."""
    folder = checkpoint_dir(launch, task_dir)
    if who is None or os.path.normpath(folder).startswith(os.path.normpath(task_dir) + os.sep):
        return folder
    try:
        return folder if os.stat(folder).st_uid == who.uid else None
    except OSError:
        return None


def _command(launch: TaskLaunch, task_dir: Path, inside: str) -> list[str]:
    for name, text in launch.files.items():  # e.g. the hostfile of an MPI job
        if not _FILE_NAME_RE.fullmatch(name) or name in (SCRIPT_NAME, LOG_NAME, PID_NAME):
            raise StartFailure(f"bad file name {name!r} in the launch")
        if name != STDIN_FILE:
            (task_dir / name).write_text(text, encoding="utf-8")
            continue
        try:  # (a step's standard input: its shim's; a full disk is said, not internal)
            if not write_stdin(task_dir, text):
                raise StartFailure("the launch's standard input (srun's) is not base64")
        except OSError as exc:
            raise StartFailure(f"cannot write the task's standard input: {exc}") from None
    if launch.script is not None:
        (task_dir / SCRIPT_NAME).write_text(launch.script, encoding="utf-8")
        return script_command(launch.script, f"{inside}/{SCRIPT_NAME}", launch.argv)
    if launch.argv:
        return list(launch.argv)
    raise StartFailure("nothing to run: the launch has neither argv nor script")


def script_command(script: str, path: str, argv: Sequence[str]) -> list[str]:
    """How a batch script at ``path`` runs: as the kernel runs a script, by the interpreter
    its ``#!`` line names, with the one argument that line may add, as one word
    (``#!/usr/bin/env python3``, ``#!/bin/bash -l``: Slurm executes the script, so a Python
    script is run by Python and ``-l`` makes a login shell); a script without one (a job
    file's ``script:``) by bash."""
    first = script.split("\n", 1)[0]
    if first.startswith("#!"):
        words = first[2:].strip().split(None, 1)
        if words:
            return [*words, path, *argv]
    return ["bash", path, *argv]


def _check_executable(command: str, cwd: Path, path_var: str) -> Path:
    """The program ``command`` names (relative to ``cwd`` or on ``PATH``)."""
    if "/" in command:
        target = cwd / command
        if not target.is_file():
            raise StartFailure(f"executable not found: {command}")
        if not os.access(target, os.X_OK):
            raise StartFailure(f"not executable: {command}")
        return target
    found = shutil.which(command, path=path_var)
    if found is None:
        raise StartFailure(f"executable not found: {command} (PATH={path_var})")
    return Path(found)


def _hand_over(task_dir: Path, who: Identity) -> None:
    """Give the task's folder (and all the agent wrote into it) to the task's identity.
    Links are not followed, and the folder itself (root's, mode 0700, until then) is handed
    over last: until everything in it is the user's, none of the user's processes can get in
    to swap a folder the walk is about to enter for a link (which would make root chown
    whatever the link points into)."""
    for folder, dirs, files in os.walk(task_dir, topdown=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(folder, name), who.uid, who.gid, follow_symlinks=False)
    os.chown(task_dir, who.uid, who.gid, follow_symlinks=False)
    try:
        check_reachable(task_dir, who)
    except IdentityError as exc:
        raise StartFailure(f"{exc}; make the agent's work dir reachable") from None


def _place(
    launch: TaskLaunch,
    popen: subprocess.Popen[bytes],
    task_dir: Path,
    go_write: int,
    cgroup: TaskCgroup | None,
    notes: list[str],
) -> TaskCgroup | None:
    """Pin the waiting shim and put it in its cgroup, then let it exec the task."""
    with os.fdopen(go_write, "wb") as go:
        try:
            if launch.cpu_ids:
                os.sched_setaffinity(popen.pid, launch.cpu_ids)
        except OSError as exc:
            raise StartFailure(f"cannot pin to CPUs {cpu_list(launch.cpu_ids)}: {exc}") from None
        if cgroup is not None:
            try:
                cgroup.add(popen.pid)
            except OSError as exc:
                notes.append(f"memory limit not enforced: cannot join {cgroup.path}: {exc}")
                cgroup.remove()
                cgroup = None
        start = start_time(popen.pid)  # for the next agent, should this one crash
        try:  # the folder is the task user's: never through a link, never a file it made
            fd = os.open(task_dir / PID_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        except OSError as exc:
            raise StartFailure(f"cannot write the task's pid file: {exc}") from None
        with os.fdopen(fd, "w") as out:
            out.write(f"{popen.pid} {start or 0}\n")
        with contextlib.suppress(BrokenPipeError):
            go.write(b"go\n")
    return cgroup
