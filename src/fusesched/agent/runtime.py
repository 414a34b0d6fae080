"""The node agent's local runtime: tasks as real OS processes (optionally in a container).

The runtime is not thread-safe (the agent's client serialises calls with a lock) and never
blocks (except ``shutdown``): the agent's loop calls ``start``/``kill``/``set_walltime`` when
the controller says so and ``poll`` regularly (every heartbeat, and at ``next_deadline()`` if
it wants grace periods and walltimes to the tenth of a second). ``poll``
enforces deadlines (and sends a launch's warning signal its lead before the time limit, once),
reaps exited tasks (calling ``on_exit`` first, for the task's final sample) and returns what
happened since the last call. Nothing
raises out of ``start``: a task that cannot start yields a ``FAILED_TO_START`` report that says
why. How a task is started (and switches to its identity) is :mod:`fusesched.agent.spawn`;
what the runtime keeps about a started task and how it signals it is
:mod:`fusesched.agent.task_process`; the cleanup after a task's end and its exit report (and
the killing of an earlier agent's tasks) :mod:`fusesched.agent.task_ends`; the signals sent on
request or before the time limit :mod:`fusesched.agent.task_signals`; log reads
:mod:`fusesched.agent.task_logs`.

Each task's process gets a pidfd (``os.pidfd_open``, Linux 5.3+): :meth:`ProcessRuntime.exit_fds`
lists them, so the agent can sleep in ``poll`` until a task exits and report the exit at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fusesched.agent import output_files
from fusesched.agent.cgroups import MemoryCgroups, TaskCgroup
from fusesched.agent.config import AgentConfig
from fusesched.agent.containers import Bind
from fusesched.agent.datasets import DataGrant, DatasetCache
from fusesched.agent.images import ImageCache
from fusesched.agent.logtext import MAX_LOG_CHUNK
from fusesched.agent.power_caps import PowerCaps
from fusesched.agent.probes import ProbeRunner
from fusesched.agent.pty_bridge import Pty
from fusesched.agent.sensors import TaskWatch
from fusesched.agent.spawn import StartFailure, TaskSpawner, valid_task_id
from fusesched.agent.step_wrapper import install_wrapper
from fusesched.agent.task_data import TaskData
from fusesched.agent.task_ends import exit_report, kill_orphans, release, retire
from fusesched.agent.task_files import make_tmp
from fusesched.agent.task_logs import read_chunk
from fusesched.agent.task_process import PID_NAME, TaskProcess, Usage
from fusesched.agent.task_signals import send_signal, warn
from fusesched.agent.users import Identity, can_switch_users, check_private, resolve
from fusesched.agent.watching import task_watch
from fusesched.api.wire import LogChunk, TaskLaunch, TaskReport, TaskState
from fusesched.model.phases import OOM_REASON

log = logging.getLogger(__name__)

REASON_WALLTIME = "walltime exceeded"
REASON_OOM = OOM_REASON
REASON_SHUTDOWN = "agent shutdown"
REASON_LIVENESS = "liveness probe failed"


class ProcessRuntime:
    """Runs tasks as process groups under ``work_dir/tasks/<task id>/``.

    ``image_cache``: where container images are unpacked (``None``: container tasks fail to
    start). ``memory_cgroups``: how memory limits are enforced (default: detect the cgroup v1
    memory controller; ``MemoryCgroups.disabled(reason)`` for none). ``binds``: extra mounts in
    every container. ``clock``: monotonic seconds, for walltimes and grace periods.
    ``data_cache``: the node-local dataset cache (``None``: tasks read datasets at their shared
    source). ``tmp_dir``: the ``TMPDIR`` of bare-metal tasks (``None``: not set). A launch
    with datasets starts once they are ready (staged in the background); it counts as running
    meanwhile.
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
        tmp_dir: Path | None = None,
    ) -> None:
        if tmp_dir is not None:
            tmp_dir = tmp_dir.absolute()  # (tasks start in their own folders)
            make_tmp(tmp_dir)
        self._spawner = TaskSpawner(
            Path(work_dir).absolute(),  # task commands name files in it
            image_cache,
            memory_cgroups if memory_cgroups is not None else MemoryCgroups.detect(),
            binds,
            identities,  # job user -> who its tasks run as; None: the agent
            clock,
            tmp_dir=tmp_dir,
        )
        self.power = power or PowerCaps({})
        self.data_cache = data_cache
        # datasets of launches being prepared and of tasks
        self.data = TaskData(data_cache, identities)
        self._clock = clock
        self._tasks: dict[str, TaskProcess] = {}  # running (not yet reported as ended)
        self._logs: dict[str, tuple[Path, bool]] = {}  # every task started: log, ended?
        self._pending: list[TaskReport] = []
        self._stale_cgroups: list[TaskCgroup] = []
        self.probes = ProbeRunner()  # the tasks' liveness and readiness probes (a thread)
        # called with a task's watch when its main process has exited, before it is reaped
        # (the agent's final sample: :meth:`fusesched.agent.sensing.Sensing.final`)
        self.on_exit: Callable[[TaskWatch], None] | None = None
        # called with a task's id and what the kernel counted for it once it is reaped (its
        # CPU time and peak memory; the sampler may have missed a short-lived child)
        self.on_reaped: Callable[[str, Usage], None] | None = None
        # given a pseudo-terminal task's terminal as it starts, to relay (the agent's client:
        # agent/pty_bridge.py); None: the terminal is closed at once (the task hangs up)
        self.on_pty: Callable[[str, Pty], None] | None = None
        if identities is not None:  # root, for others: its own folders must be its alone
            folders = [self.work_dir / "tasks"]
            folders += [image_cache.cache_dir] if image_cache is not None else []
            folders += [data_cache.root] if data_cache is not None else []
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
                check_private(folder)
        # only once the work dir is known to be the agent's alone (as root: checked above)
        self._spawner.srun_dir = _srun_dir(self.work_dir)
        # what an earlier agent with this work dir left running is killed now
        self.orphans_killed = kill_orphans(
            self.work_dir, self.memory_cgroups, self._spawner.cgroup_name
        )
        if self.orphans_killed:
            log.warning(
                "killed tasks left running by an earlier agent: %s", ", ".join(self.orphans_killed)
            )

    @property
    def work_dir(self) -> Path:
        return self._spawner.work_dir

    @property
    def image_cache(self) -> ImageCache | None:
        return self._spawner.image_cache

    @property
    def memory_cgroups(self) -> MemoryCgroups:
        return self._spawner.memory_cgroups

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
            data_cache=(
                DatasetCache.from_config(config.data_cache, as_root=identities is not None)
                if config.data_cache
                else None
            ),
            tmp_dir=config.tmp_dir,
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
        if not valid_task_id(launch.task_id):  # before it reaches a power hook (root's argv)
            self.data.release(launch.task_id)
            self._fail(launch, f"invalid task id {launch.task_id!r} (letters, digits, . _ -)")
            return
        capped = self.power.apply(launch)  # before the task draws power, not after
        try:
            task = self._spawner.spawn(launch, data)
        except Exception as exc:
            self.power.reset(launch)
            self.data.release(launch.task_id)
            if not isinstance(exc, StartFailure):  # never out of the runtime
                log.exception("starting task %s failed", launch.task_id)
                exc = StartFailure(f"internal error while starting: {exc!r}")
            self._fail(launch, str(exc))
            return
        task.notes.extend(capped)
        self._tasks[launch.task_id] = task
        if task.pty is not None:
            self._hand_pty(launch.task_id, task)
        self.probes.add(launch.task_id, launch.liveness, launch.readiness, task.probe_context)
        self._logs[launch.task_id] = (task.log_path, False)
        self._pending.append(
            TaskReport(
                task_id=launch.task_id,
                state=TaskState.RUNNING,
                pid=task.pid,
                reason="; ".join(task.notes),
            )
        )

    def _hand_pty(self, task_id: str, task: TaskProcess) -> None:
        """Give the task's terminal to ``on_pty``, which owns it from then on."""
        pty, task.pty = task.pty, None
        if pty is None:
            return
        if self.on_pty is None:
            pty.close()
            return
        try:
            self.on_pty(task_id, pty)
        except Exception:
            log.exception("relaying the terminal of task %s failed", task_id)
            pty.close()

    def _fail(self, launch: TaskLaunch, reason: str) -> None:
        self._pending.append(
            TaskReport(task_id=launch.task_id, state=TaskState.FAILED_TO_START, reason=reason)
        )

    # -- kill ------------------------------------------------------------------------------

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
            self.probes.stopping(task_id)  # no more checks; not ready while it stops
            said = output_files.stop_message(task.launch, reason, time.time())
            if said is not None:  # (slurmstepd's "*** JOB 7 ON n1 CANCELLED AT … ***")
                output_files.say(task.note, task.log_path, said)
        deadline = self._clock() + max(0.0, grace_s)
        if task.kill_deadline is None or deadline < task.kill_deadline:
            task.kill_deadline = deadline
        if grace_s <= 0:
            task.sigkill()
        elif first:
            task.sigterm()

    # -- limit -----------------------------------------------------------------------------

    def set_walltime(self, task_id: str, walltime_s: float) -> None:
        """The task's time limit is now ``walltime_s`` seconds from its start (the controller
        changed its job's limit): ``poll`` kills it at the new deadline, at once if it has
        passed, with the walltime's reason; its warning signal, if not sent yet, comes its
        lead before the new limit (at once if that has passed). A task not running, or being
        killed already, keeps what it has; one still waiting for its datasets starts with
        the new limit."""
        task = self._tasks.get(task_id)
        if task is None:
            self.data.set_walltime(task_id, walltime_s)
            return
        if task.kill_reason is None:
            task.launch = task.launch.model_copy(update={"walltime_s": walltime_s})

    # -- signals ---------------------------------------------------------------------------

    def signal(self, task_id: str, name: str, main_only: bool = False) -> bool:
        """Send the running task signal ``name`` (``USR1``) now: its process group, or its
        main process alone; it keeps running unless the signal ends it. False (and nothing
        sent) for a task not running, one being stopped, or an unknown signal."""
        return send_signal(self._tasks.get(task_id), task_id, name, main_only)

    # -- poll ------------------------------------------------------------------------------

    def poll(self) -> list[TaskReport]:
        """Enforce walltimes and grace periods, reap exits; the reports since the last call."""
        for launch, data in self.data.ready():  # datasets staged (or failed): start now
            if isinstance(data, str):
                self._fail(launch, data)
            else:
                self._launch(launch, data)
        for task_id, why in self.probes.failed().items():  # stopped as a cancel would be
            failing = self._tasks.get(task_id)
            # (one that has exited meanwhile ended on its own: its exit is what it reports)
            if failing is not None and failing.kill_reason is None and not failing.has_exited():
                failing.liveness_failed = True
                self.kill(task_id, failing.launch.grace_s, f"{REASON_LIVENESS}: {why}")
        now = self._clock()
        for task in list(self._tasks.values()):
            warning = task.warning_deadline
            if task.kill_reason is None and warning is not None and now >= warning:
                warn(task)  # the launch's signal, its lead before the time limit
            walltime = task.walltime_deadline
            if task.kill_reason is None and walltime is not None and now >= walltime:
                self.kill(task.launch.task_id, task.launch.grace_s, REASON_WALLTIME)
            if (
                task.kill_deadline is not None
                and not task.sigkill_sent
                and now >= task.kill_deadline
            ):
                task.sigkill()
            if task.has_exited():
                self._exited(task)
                self._pending.append(self._reap(task))
        self._stale_cgroups = [c for c in self._stale_cgroups if not retire(c)]
        reports, self._pending = self._pending, []
        return reports

    def _exited(self, task: TaskProcess) -> None:
        """Tell ``on_exit`` (the final sample) while the task's zombie and whatever it left
        running can still be looked at; never raises."""
        if self.on_exit is None:
            return
        try:
            self.on_exit(self._watch(task))
        except Exception:
            log.exception("exit hook of task %s failed", task.launch.task_id)

    def _reap(self, task: TaskProcess) -> TaskReport:
        # The leader is a zombie, so its pid (the group id) cannot be reused yet: whatever it
        # left behind in its group is killed now, then it is reaped.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(task.pid, signal.SIGKILL)
        code, usage = task.reap()
        if usage is not None and self.on_reaped is not None:
            try:
                self.on_reaped(task.launch.task_id, usage)
            except Exception:
                log.exception("reap hook of task %s failed", task.launch.task_id)
        oom = release(task, self._stale_cgroups)  # its pidfd, cgroup, note, output files
        task_id = task.launch.task_id
        del self._tasks[task_id]
        self.probes.remove(task_id)
        self.power.reset(task.launch)
        self.data.release(task_id)
        with contextlib.suppress(OSError):
            (task.task_dir / PID_NAME).unlink()
        self._logs[task_id] = (task.log_path, True)
        return exit_report(task, code, oom)

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
        return [self._watch(t) for t in self._tasks.values()]

    @staticmethod
    def _watch(task: TaskProcess) -> TaskWatch:
        return task_watch(task.launch, task.pid, task.cgroup, task.log_path, task.checkpoint_dir)

    def next_deadline(self) -> float | None:
        """The earliest clock time at which ``poll`` has a walltime, a SIGKILL or a warning
        signal (``TaskLaunch.signal``) to enforce."""
        times = []
        for task in self._tasks.values():
            if task.kill_deadline is not None and not task.sigkill_sent:
                times.append(task.kill_deadline)
            elif task.kill_reason is None and task.walltime_deadline is not None:
                times.append(task.walltime_deadline)
                if task.warning_deadline is not None:
                    times.append(task.warning_deadline)
        return min(times, default=None)

    def until_deadline(self) -> float | None:
        """Seconds (on the runtime's clock) until :meth:`next_deadline`, at least 0."""
        deadline = self.next_deadline()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def readiness(self) -> dict[str, bool]:
        """Each running task with a readiness probe: whether it is ready (one being stopped
        is not)."""
        return self.probes.readiness()

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
        return read_chunk(task_id, path, ended, offset, max_bytes)

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
        self.probes.close()
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
                        task.sigkill()
            time.sleep(0.02)
        for task in list(self._tasks.values()):  # pragma: no cover - unkillable (D state)
            log.warning("task %s (pid %d) did not exit at shutdown", task.launch.task_id, task.pid)
        self._pending = reports + self._pending


def _srun_dir(work_dir: Path) -> Path | None:
    """The folder of the ``srun`` wrapper for job steps (agent/step.py), written now; ``None``
    (and a warning) when it cannot be."""
    try:
        return install_wrapper(work_dir)
    except OSError as exc:
        log.warning("srun for job steps not installed in %s: %s", work_dir, exc)
        return None
