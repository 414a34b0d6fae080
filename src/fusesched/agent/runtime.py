"""The node agent's local runtime: tasks as real OS processes (optionally in a container).

The runtime is not thread-safe (the agent's client serialises calls with a lock) and never
blocks (except ``shutdown``): the agent's loop calls
``start``/``kill`` when the controller says so and ``poll`` regularly (every heartbeat, and at
``next_deadline()`` if it wants grace periods and walltimes to the tenth of a second). ``poll``
enforces deadlines, reaps exited tasks and returns what happened since the last call. Nothing
raises out of ``start``: a task that cannot start yields a ``FAILED_TO_START`` report that says
why.

How a task is started — without ``preexec_fn``, which is unsafe in a threaded agent:

1. ``/bin/sh`` (a three-line shim) is spawned in a new session (so the task is its own process
   group), stdin a pipe, stdout+stderr the task's log file; it blocks reading the pipe;
2. the agent pins it (``sched_setaffinity``) and moves it into the task's memory cgroup;
3. the agent writes one line to the pipe and the shim ``exec``\\ s the command (bare metal) or
   ``bwrap … -- command`` (container), so every process of the task inherits both.

A task that runs under another identity (the agent runs as root) switches to it in the child
before the shim runs (``subprocess``'s ``user``/``group``/``extra_groups``), so nothing that
sees the task's environment ever holds root. (Spawning the shim as root and switching at its
exec through ``setpriv`` was tried for speed and removed: the root stages would honour
``LD_PRELOAD`` and the like from the job's environment.)

Each task's process gets a pidfd (``os.pidfd_open``, Linux 5.3+): :meth:`ProcessRuntime.exit_fds`
lists them, so the agent can sleep in ``poll`` until a task exits and report the exit at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fusesched.agent.cgroups import MemoryCgroups, TaskCgroup
from fusesched.agent.config import AgentConfig
from fusesched.agent.containers import TASK_DIR_IN_CONTAINER, Bind, bwrap_argv, find_bwrap
from fusesched.agent.datasets import DataGrant, DatasetCache, DatasetError, TaskData, task_view
from fusesched.agent.images import ImageCache, ImageError
from fusesched.agent.logtext import MAX_LOG_CHUNK, complete_utf8, decode_log_bytes
from fusesched.agent.power_caps import PowerCaps
from fusesched.agent.sensors import TaskWatch
from fusesched.agent.users import (
    Identity,
    IdentityError,
    can_switch_users,
    check_reachable,
    resolve,
)
from fusesched.agent.watching import (
    CHECKPOINT_ENV,
    checkpoint_dir,
    checkpoint_env,
    prepare_checkpoint_dir,
    task_watch,
)
from fusesched.api.wire import TASK_DIR_PLACEHOLDER, LogChunk, TaskLaunch, TaskReport, TaskState

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOG_NAME = "output.log"
SCRIPT_NAME = "script.sh"
PID_NAME = "pid"
REASON_WALLTIME = "walltime exceeded"
REASON_OOM = "memory limit exceeded (killed by the kernel's OOM killer)"
REASON_SHUTDOWN = "agent shutdown"

# Waits for the agent's go-ahead on stdin, then becomes the task (stdin: /dev/null).
_SHIM = 'read -r _ || exit 125\nexec "$@" </dev/null\n'

_FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def cuda_visible_devices(launch: TaskLaunch) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a launch: the UUIDs if any (MIG), else the indices.

    Empty when the task has no GPUs, so it cannot use GPUs given to other tasks.
    """
    if launch.gpu_uuids:
        return ",".join(launch.gpu_uuids)
    return ",".join(str(index) for index in launch.gpu_indices)


def _cpu_list(cpus: Sequence[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


class _StartFailure(Exception):
    pass


@dataclass
class _Task:
    launch: TaskLaunch
    popen: subprocess.Popen[bytes]
    task_dir: Path
    log_path: Path
    started_at: float
    container: bool
    cgroup: TaskCgroup | None
    checkpoint_dir: Path
    notes: list[str] = field(default_factory=list)
    pidfd: int | None = None  # readable once the task's process has exited
    kill_reason: str | None = None
    kill_deadline: float | None = None
    sigkill_sent: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def walltime_deadline(self) -> float | None:
        walltime = self.launch.walltime_s
        return None if walltime is None else self.started_at + walltime


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
    return members


def _pidfd(pid: int) -> int | None:
    """A pidfd for the (child) process ``pid``: readable once it has exited; ``None`` where
    the kernel has no ``pidfd_open`` (before Linux 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), ``None`` if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


class ProcessRuntime:
    """Runs tasks as process groups under ``work_dir/tasks/<task id>/``.

    ``image_cache``: where container images are unpacked (``None``: container tasks fail to
    start). ``memory_cgroups``: how memory limits are enforced (default: detect the cgroup v1
    memory controller; ``MemoryCgroups.disabled(reason)`` for none). ``binds``: extra mounts in
    every container. ``clock``: monotonic seconds, for walltimes and grace periods.
    ``data_cache``: the node-local dataset cache (``None``: tasks read datasets at their shared
    source). A launch with datasets starts once they are ready (staged in the background); it
    counts as running meanwhile.
    """

    def __init__(
        self,
        work_dir: Path | str,
        image_cache: ImageCache | None = None,
        *,
        memory_cgroups: MemoryCgroups | None = None,
        binds: Sequence[Bind] = (),
        clock: Callable[[], float] = time.monotonic,
        identities: Callable[[str], Identity] | None = None,
        power: PowerCaps | None = None,
        data_cache: DatasetCache | None = None,
    ) -> None:
        self.work_dir = Path(work_dir).absolute()  # task commands name files in it
        # memory cgroups are named per agent: agents sharing a machine (and its cgroup
        # parent) may run tasks of the same id for different controllers
        self._cgroup_tag = hashlib.sha1(str(self.work_dir).encode()).hexdigest()[:10]
        self.identities = identities  # job user -> who its tasks run as; None: the agent
        self.image_cache = image_cache
        self.memory_cgroups = (
            memory_cgroups if memory_cgroups is not None else MemoryCgroups.detect()
        )
        self.binds = tuple(binds)
        self.power = power or PowerCaps({})
        self.data_cache = data_cache
        self.data = TaskData(data_cache)  # datasets of launches being prepared and of tasks
        self._clock = clock
        self._tasks: dict[str, _Task] = {}  # running (not yet reported as ended)
        self._logs: dict[str, tuple[Path, bool]] = {}  # every task started: log, ended?
        self._pending: list[TaskReport] = []
        self._stale_cgroups: list[TaskCgroup] = []
        self.orphans_killed = self._kill_orphans()

    def _cgroup_name(self, task_id: str) -> str:
        return f"{self._cgroup_tag}.{task_id}"

    def _kill_orphans(self) -> list[str]:
        """Kill what an earlier agent with this work dir left running; the task ids.

        The controller treats a restarted agent's tasks as gone, so they must be: each task
        folder holds ``pid`` ("<pid> <start time>"); a group whose leader is alive with that
        start time, or dead (its pid cannot be reused while its group exists), is SIGKILLed.
        """
        killed = []
        for pid_file in sorted((self.work_dir / "tasks").glob(f"*/{PID_NAME}")):
            try:
                pid_text, start_text = pid_file.read_text().split()
                pid, start = int(pid_text), int(start_text)
            except (OSError, ValueError):
                continue
            now_start = _start_time(pid)
            if now_start is None or now_start == start:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    killed.append(pid_file.parent.name)
                except (ProcessLookupError, PermissionError):
                    pass
            if self.memory_cgroups.parent is not None:
                name = self._cgroup_name(pid_file.parent.name)
                self._retire(TaskCgroup(self.memory_cgroups.parent / name))
            with contextlib.suppress(OSError):
                pid_file.unlink()
        if killed:
            log.warning("killed tasks left running by an earlier agent: %s", ", ".join(killed))
        return killed

    @classmethod
    def from_config(cls, config: AgentConfig) -> ProcessRuntime:
        """The runtime an agent with ``config`` uses (work dir, image cache, cgroups, binds)."""
        cgroups = (
            MemoryCgroups.detect()
            if config.memory_cgroup
            else MemoryCgroups.disabled("memory cgroups are disabled in the agent's config")
        )
        binds = [Bind(b.src, b.dst, b.read_only) for b in config.container_binds]
        identities = None
        if config.run_as_users and can_switch_users():

            def identities(user: str) -> Identity:
                return resolve(
                    user, uid_map=config.uid_map, uid_min=config.uid_min, uid_count=config.uid_count
                )

        return cls(
            config.work_dir,
            ImageCache(config.image_cache_dir),
            memory_cgroups=cgroups,
            binds=binds,
            identities=identities,
            power=PowerCaps(config.power_hooks),
            data_cache=DatasetCache.from_config(config.data_cache) if config.data_cache else None,
        )

    # -- start -----------------------------------------------------------------------------

    def start(self, launch: TaskLaunch) -> None:
        """Start the task; a ``RUNNING`` or ``FAILED_TO_START`` report follows at ``poll()``.

        Starting a task id that is still running is ignored (a controller may resend a launch).
        """
        if launch.task_id in self._tasks or self.data.is_preparing(launch.task_id):
            log.info("task %s is already running; launch ignored", launch.task_id)
            return
        if launch.datasets:
            self.data.begin(launch)  # the task starts at the poll that finds them ready
        else:
            self._launch(launch, [])

    def _launch(self, launch: TaskLaunch, data: list[DataGrant]) -> None:
        capped = self.power.apply(launch)  # before the task draws power, not after
        try:
            task = self._spawn(launch, data)
        except Exception as exc:
            self.power.reset(launch)
            self.data.release(launch.task_id)
            if not isinstance(exc, _StartFailure):  # never out of the runtime
                log.exception("starting task %s failed", launch.task_id)
                exc = _StartFailure(f"internal error while starting: {exc!r}")
            self._fail(launch, str(exc))
            return
        task.notes.extend(capped)
        self._tasks[launch.task_id] = task
        self._logs[launch.task_id] = (task.log_path, False)
        self._pending.append(
            TaskReport(
                task_id=launch.task_id,
                state=TaskState.RUNNING,
                pid=task.pid,
                reason="; ".join(task.notes),
            )
        )

    def _fail(self, launch: TaskLaunch, reason: str) -> None:
        self._pending.append(
            TaskReport(task_id=launch.task_id, state=TaskState.FAILED_TO_START, reason=reason)
        )

    def _environment(
        self, launch: TaskLaunch, task_dir: str, memory_limit: int | None
    ) -> dict[str, str]:
        env = {"PATH": DEFAULT_PATH, "HOME": task_dir, "LANG": "C.UTF-8"}
        env.update({k: v.replace(TASK_DIR_PLACEHOLDER, task_dir) for k, v in launch.env.items()})
        env.update(
            {
                "FUSESCHED_TASK_ID": launch.task_id,
                "FUSESCHED_JOB_ID": launch.job_id,
                "FUSESCHED_TASK_DIR": task_dir,
                "FUSESCHED_CPU_IDS": _cpu_list(launch.cpu_ids),
                "FUSESCHED_GPU_INDICES": ",".join(str(i) for i in launch.gpu_indices),
                "CUDA_VISIBLE_DEVICES": cuda_visible_devices(launch),
                CHECKPOINT_ENV: checkpoint_env(launch, task_dir),
            }
        )
        if memory_limit is not None:
            env["FUSESCHED_MEMORY_LIMIT_BYTES"] = str(memory_limit)
        return env

    def _command(self, launch: TaskLaunch, task_dir: Path, inside: str) -> list[str]:
        for name, text in launch.files.items():  # e.g. the hostfile of an MPI job
            if not _FILE_NAME_RE.match(name) or name in (SCRIPT_NAME, LOG_NAME, PID_NAME):
                raise _StartFailure(f"bad file name {name!r} in the launch")
            (task_dir / name).write_text(text, encoding="utf-8")
        if launch.script is not None:
            (task_dir / SCRIPT_NAME).write_text(launch.script, encoding="utf-8")
            return ["bash", f"{inside}/{SCRIPT_NAME}", *launch.argv]
        if launch.argv:
            return list(launch.argv)
        raise _StartFailure("nothing to run: the launch has neither argv nor script")

    @staticmethod
    def _check_executable(command: str, cwd: Path, path_var: str) -> Path:
        """The program ``command`` names (relative to ``cwd`` or on ``PATH``)."""
        if "/" in command:
            target = cwd / command
            if not target.is_file():
                raise _StartFailure(f"executable not found: {command}")
            if not os.access(target, os.X_OK):
                raise _StartFailure(f"not executable: {command}")
            return target
        found = shutil.which(command, path=path_var)
        if found is None:
            raise _StartFailure(f"executable not found: {command} (PATH={path_var})")
        return Path(found)

    def _identity(self, launch: TaskLaunch) -> Identity | None:
        if self.identities is None:
            return None
        try:
            return self.identities(launch.user)
        except IdentityError as exc:
            raise _StartFailure(str(exc)) from None

    @staticmethod
    def _hand_over(task_dir: Path, who: Identity) -> None:
        """Give the task's folder (and the files written into it) to the task's identity."""
        for path in (task_dir, *task_dir.iterdir()):
            os.chown(path, who.uid, who.gid)
        try:
            check_reachable(task_dir, who)
        except IdentityError as exc:
            raise _StartFailure(f"{exc}; make the agent's work dir reachable") from None

    def _memory(self, launch: TaskLaunch, notes: list[str]) -> TaskCgroup | None:
        if launch.memory_bytes is None:
            return None
        if not self.memory_cgroups.available:
            notes.append(f"memory limit not enforced: {self.memory_cgroups.unavailable_reason}")
            return None
        try:
            return self.memory_cgroups.create(
                self._cgroup_name(launch.task_id), launch.memory_bytes
            )
        except OSError as exc:
            notes.append(f"memory limit not enforced: {exc}")
            return None

    def _spawn(self, launch: TaskLaunch, data: list[DataGrant]) -> _Task:
        if not _TASK_ID_RE.match(launch.task_id):
            raise _StartFailure(f"invalid task id {launch.task_id!r} (letters, digits, . _ -)")
        if launch.cpu_ids:
            allowed = os.sched_getaffinity(0)
            missing = sorted(set(launch.cpu_ids) - allowed)
            if missing:
                raise _StartFailure(
                    f"CPUs {_cpu_list(missing)} are not available here "
                    f"(allowed: {_cpu_list(sorted(allowed))})"
                )
        who = self._identity(launch)
        task_dir = self.work_dir / "tasks" / launch.task_id
        if task_dir.exists():
            shutil.rmtree(task_dir)
        task_dir.mkdir(parents=True)
        task_dir.chmod(0o700)  # the task's script, files and log: its user's (and the agent's)
        container = launch.image is not None
        inside = TASK_DIR_IN_CONTAINER if container else str(task_dir)
        command = self._command(launch, task_dir, inside)
        if who is not None:
            self._hand_over(task_dir, who)
        try:
            prepare_checkpoint_dir(checkpoint_dir(launch, task_dir), who)
        except (OSError, IdentityError) as exc:
            raise _StartFailure(f"cannot prepare the checkpoint folder: {exc}") from None
        notes: list[str] = []
        cgroup = self._memory(launch, notes)
        env = self._environment(launch, inside, launch.memory_bytes if cgroup else None)
        if who is not None:
            env.update({"USER": who.name, "LOGNAME": who.name})
        try:
            data_env, data_binds = task_view(data, container=container, who=who)
        except DatasetError as exc:
            raise _StartFailure(str(exc)) from None
        env.update(data_env)
        try:
            return self._exec(launch, task_dir, command, env, cgroup, notes, who, data_binds)
        except BaseException:
            if cgroup is not None:
                cgroup.kill_all()
                cgroup.remove()
            raise

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
    ) -> _Task:
        if launch.image is not None:
            if self.image_cache is None:
                raise _StartFailure("container images are not enabled on this agent")
            bwrap = find_bwrap()
            if bwrap is None:
                raise _StartFailure("cannot run images here: bubblewrap (bwrap) is not installed")
            try:
                rootfs = self.image_cache.resolve(launch.image)
            except ImageError as exc:
                raise _StartFailure(str(exc)) from None
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
            if not cwd.is_dir():
                raise _StartFailure(f"working directory does not exist: {cwd}")
            program = self._check_executable(command[0], cwd, env["PATH"])
            if who is not None:
                try:
                    check_reachable(program, who, execute=True)
                except IdentityError as exc:
                    raise _StartFailure(str(exc)) from None

        log_path = task_dir / LOG_NAME
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        go_read, go_write = os.pipe()
        try:
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _SHIM, "fusesched-task", *command],
                stdin=go_read,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                user=who.uid if who is not None else None,
                group=who.gid if who is not None else None,
                extra_groups=[] if who is not None else None,
            )
        except OSError as exc:
            os.close(go_write)
            raise _StartFailure(f"cannot start: {exc}") from None
        finally:
            os.close(go_read)
            os.close(log_fd)
        try:
            cgroup = self._place(launch, popen, task_dir, go_write, cgroup, notes)
        except BaseException:
            popen.kill()  # still the shim, waiting for its go-ahead
            popen.wait()
            raise
        return _Task(
            launch=launch,
            popen=popen,
            task_dir=task_dir,
            log_path=log_path,
            started_at=self._clock(),
            container=launch.image is not None,
            cgroup=cgroup,
            checkpoint_dir=checkpoint_dir(launch, task_dir),
            notes=notes,
            pidfd=_pidfd(popen.pid),
        )

    @staticmethod
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
                raise _StartFailure(
                    f"cannot pin to CPUs {_cpu_list(launch.cpu_ids)}: {exc}"
                ) from None
            if cgroup is not None:
                try:
                    cgroup.add(popen.pid)
                except OSError as exc:
                    notes.append(f"memory limit not enforced: cannot join {cgroup.path}: {exc}")
                    cgroup.remove()
                    cgroup = None
            start = _start_time(popen.pid)  # for the next agent, should this one crash
            (task_dir / PID_NAME).write_text(f"{popen.pid} {start or 0}\n")
            with contextlib.suppress(BrokenPipeError):
                go.write(b"go\n")
        return cgroup

    # -- signals ---------------------------------------------------------------------------

    def _sigterm(self, task: _Task) -> None:
        if task.container:
            # bwrap's outer process (the group leader) would die at once and take the sandbox
            # with it; signal everything else in the group so the command can exit cleanly.
            for pid in _group_members(task.pid):
                if pid != task.pid:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGTERM)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.pid, signal.SIGTERM)

    def _sigkill(self, task: _Task) -> None:
        task.sigkill_sent = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.pid, signal.SIGKILL)
        if task.cgroup is not None:
            task.cgroup.kill_all()

    def kill(self, task_id: str, grace_s: float = 10.0, reason: str = "cancelled") -> None:
        """SIGTERM the task's process group now, SIGKILL it ``grace_s`` later (at a ``poll``).

        The exit report carries the first ``reason`` given. A task not running: nothing happens.
        """
        task = self._tasks.get(task_id)
        if task is None:
            if self.data.cancel(task_id):  # still waiting for its datasets: never started
                self._pending.append(
                    TaskReport(
                        task_id=task_id, state=TaskState.EXITED, exit_code=-15, reason=reason
                    )
                )
            return
        first = task.kill_reason is None
        if first:
            task.kill_reason = reason
        deadline = self._clock() + max(0.0, grace_s)
        if task.kill_deadline is None or deadline < task.kill_deadline:
            task.kill_deadline = deadline
        if grace_s <= 0:
            self._sigkill(task)
        elif first:
            self._sigterm(task)

    # -- poll ------------------------------------------------------------------------------

    def poll(self) -> list[TaskReport]:
        """Enforce walltimes and grace periods, reap exits; the reports since the last call."""
        for launch, data in self.data.ready():  # datasets staged (or failed): start now
            if isinstance(data, str):
                self._fail(launch, data)
            else:
                self._launch(launch, data)
        now = self._clock()
        for task in list(self._tasks.values()):
            walltime = task.walltime_deadline
            if task.kill_reason is None and walltime is not None and now >= walltime:
                self.kill(task.launch.task_id, task.launch.grace_s, REASON_WALLTIME)
            if (
                task.kill_deadline is not None
                and not task.sigkill_sent
                and now >= task.kill_deadline
            ):
                self._sigkill(task)
            if self._has_exited(task):
                self._pending.append(self._reap(task))
        self._stale_cgroups = [c for c in self._stale_cgroups if not self._retire(c)]
        reports, self._pending = self._pending, []
        return reports

    @staticmethod
    def _has_exited(task: _Task) -> bool:
        try:
            return os.waitid(os.P_PID, task.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped elsewhere
            return task.popen.poll() is not None

    @staticmethod
    def _retire(cgroup: TaskCgroup) -> bool:
        cgroup.kill_all()
        try:
            return cgroup.remove()
        except OSError:
            return False

    def _reap(self, task: _Task) -> TaskReport:
        # The leader is a zombie, so its pid (the group id) cannot be reused yet: whatever it
        # left behind in its group is killed now, then it is reaped.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.pid, signal.SIGKILL)
        code = task.popen.wait()
        if task.pidfd is not None:
            os.close(task.pidfd)
            task.pidfd = None
        oom = 0
        if task.cgroup is not None:
            oom = task.cgroup.oom_kills()
            if not self._retire(task.cgroup):
                self._stale_cgroups.append(task.cgroup)
        task_id = task.launch.task_id
        del self._tasks[task_id]
        self.power.reset(task.launch)
        self.data.release(task_id)
        with contextlib.suppress(OSError):
            (task.task_dir / PID_NAME).unlink()
        self._logs[task_id] = (task.log_path, True)
        state = TaskState.EXITED
        reason = task.kill_reason or (REASON_OOM if oom else "")
        if task.container and reason and 128 < code <= 128 + 64:
            code = 128 - code  # bwrap exits 128+N for a command killed by signal N: say -N
        if task.container and code == 1 and not reason:
            setup_error = self._bwrap_error(task.log_path)
            if setup_error:
                state, reason = TaskState.FAILED_TO_START, f"container: {setup_error}"
        return TaskReport(
            task_id=task_id,
            state=state,
            exit_code=None if state is TaskState.FAILED_TO_START else code,
            reason=reason,
            pid=task.pid,
        )

    @staticmethod
    def _bwrap_error(log_path: Path) -> str:
        """bwrap's own message when it failed before or at ``exec`` (exit status 1)."""
        try:
            with log_path.open("rb") as handle:
                handle.seek(max(0, log_path.stat().st_size - 4096))
                tail = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line for line in tail.splitlines() if line.strip()]
        if lines and lines[-1].startswith("bwrap: "):
            return lines[-1].removeprefix("bwrap: ")
        return ""

    # -- queries ---------------------------------------------------------------------------

    def running(self) -> list[str]:
        """Every task started and not yet reported as ended (including those being killed and
        those waiting for their datasets)."""
        return sorted([*self._tasks, *(launch.task_id for launch in self.data.preparing())])

    def exit_fds(self) -> list[int] | None:
        """A pidfd per live task (each readable once its task's process has exited), for an
        agent that sleeps until something happens; ``None`` when some task has none (exits
        must then be found by calling ``poll`` regularly)."""
        fds = [t.pidfd for t in self._tasks.values()]
        if any(fd is None for fd in fds):
            return None
        return [fd for fd in fds if fd is not None]

    def launches(self) -> list[TaskLaunch]:
        """The launch of every task still running (a restarted controller adopts them)."""
        live = [t.launch for t in self._tasks.values() if t.popen.poll() is None]
        return live + self.data.preparing()

    def watches(self) -> list[TaskWatch]:
        """What the sensors watch for each live task (:mod:`fusesched.agent.sensors`)."""
        return [
            task_watch(t.launch, t.pid, t.cgroup, t.log_path, t.checkpoint_dir)
            for t in self._tasks.values()
        ]

    def next_deadline(self) -> float | None:
        """The earliest clock time at which ``poll`` has a walltime or SIGKILL to enforce."""
        times = []
        for task in self._tasks.values():
            if task.kill_deadline is not None and not task.sigkill_sent:
                times.append(task.kill_deadline)
            elif task.kill_reason is None and task.walltime_deadline is not None:
                times.append(task.walltime_deadline)
        return min(times, default=None)

    def until_deadline(self) -> float | None:
        """Seconds (on the runtime's clock) until :meth:`next_deadline`, at least 0."""
        deadline = self.next_deadline()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def log_path(self, task_id: str) -> Path | None:
        entry = self._logs.get(task_id)
        return None if entry is None else entry[0]

    def read_log(
        self, task_id: str, offset: int = 0, max_bytes: int = MAX_LOG_CHUNK
    ) -> LogChunk | None:
        """Up to ``max_bytes`` of the task's combined stdout/stderr from byte ``offset``.

        ``None`` when there is nothing new (or the task is unknown). A chunk never ends inside a
        UTF-8 character of a running task; bytes that are not UTF-8 read as ``?``, one per
        byte, so ``chunk_end(chunk)`` is always the next offset.
        """
        entry = self._logs.get(task_id)
        if entry is None:
            return None
        path, ended = entry
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                raw = handle.read(max(4, max_bytes))
                at_end = not handle.read(1)
        except OSError:
            return None
        if not (ended and at_end):
            raw = complete_utf8(raw)
        if not raw:
            return None
        return LogChunk(task_id=task_id, offset=offset, data=decode_log_bytes(raw))

    # -- shutdown --------------------------------------------------------------------------

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Kill every task (SIGTERM, then SIGKILL after at most ``grace_s``), wait, clean up.

        Blocks until all have exited (or ``grace_s`` + 5 s). Their exit reports (and any others
        not yet collected) are returned by the next ``poll()``.
        """
        for launch in self.data.preparing():
            self.kill(launch.task_id, 0.0, REASON_SHUTDOWN)
        for task_id, task in list(self._tasks.items()):
            self.kill(task_id, min(grace_s, task.launch.grace_s), REASON_SHUTDOWN)
        if self.data_cache is not None:
            self.data_cache.close()
        reports: list[TaskReport] = []  # handed back to the next poll()
        escalate = time.monotonic() + grace_s  # real time: the runtime's clock may be a fake
        limit = escalate + 5.0
        while True:
            reports += self.poll()
            now = time.monotonic()
            if not self._tasks or now > limit:
                break
            if now > escalate:
                for task in self._tasks.values():
                    if not task.sigkill_sent:
                        self._sigkill(task)
            time.sleep(0.02)
        for task in list(self._tasks.values()):  # pragma: no cover - unkillable (D state)
            log.warning("task %s (pid %d) did not exit at shutdown", task.launch.task_id, task.pid)
        self._pending = reports + self._pending
