"""Sensors: per-task samples (psutil) and per-GPU samples (NVML), and a window of samples.

Back ends are pluggable (:class:`SensorBackend`), so tests inject scripted values and faults
(:class:`~fusesched.agent.fake_sensors.FakeSensors`) and the hang detector
(:mod:`fusesched.controller.hang`) reads only a
:class:`~fusesched.agent.sample_window.SampleWindow`. Nothing here decides anything: it measures.

* :class:`PsutilTaskSensor` sums CPU time, resident memory and I/O over every process of a
  task: the members of its process group (the runtime starts each task in its own session) and
  of its cgroup (``cgroup.procs``), so a process that left the group still counts. Counters
  never decrease (the hang detector reads them as *activity indicators*). CPU time includes
  reaped children (``children_user``/``children_system``), and Linux adds a reaped child's I/O
  to its parent's ``/proc/<pid>/io``, so short-lived helpers (a ``cp`` between two samples)
  are seen through the parent that waited for them. A task's main process that has exited
  but is not reaped yet (a zombie) still shows its own and its reaped children's times: the
  final sample, taken then, counts the task's CPU time to its end. Each process counts
  once: one that vanishes keeps its last values only when no live process of the task was
  its parent (or an ancestor through parents that vanished with it) at last sight; else
  that ancestor reaped it and counts its time among its children's.
* GPU samples on real nodes come from :class:`~fusesched.agent.nvml_sensor.NvmlGpuSensor`
  (NVML: utilisation, memory, power, temperature, ECC counts, lost GPUs and XID errors).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import psutil

MAX_CHECKPOINT_ENTRIES = 10_000  # files looked at per checkpoint folder and sample


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant. ``-1`` (or ``nan``) where NVML does not support a reading."""

    index: int
    uuid: str = ""
    time: float = 0.0
    utilization_pct: float = float("nan")
    memory_used_bytes: int = -1
    power_w: float = float("nan")
    temperature_c: float = float("nan")
    ecc_uncorrected: int = 0  # volatile (since the last driver load) uncorrectable ECC errors
    xid_errors: tuple[int, ...] = ()  # XIDs reported since the previous sample
    lost: bool = False  # fallen off the bus / no longer answering


@dataclass(frozen=True, slots=True)
class TaskSample:
    """One task at one instant: cumulative counters summed over its processes."""

    task_id: str
    time: float
    cpu_seconds: float = 0.0
    rss_bytes: int = 0
    read_bytes: int = 0  # storage I/O (/proc/<pid>/io read_bytes)
    write_bytes: int = 0
    read_chars: int = 0  # every read()/write() syscall, pipes and sockets included (rchar)
    write_chars: int = 0
    log_bytes: int = 0  # size of the task's output log
    checkpoint_mtime: float | None = None  # newest file under the checkpoint folder
    checkpoint_bytes: int = 0  # size of that newest file
    processes: int = 0  # live processes found (0: the task has no process left)
    gpus: tuple[GpuSample, ...] = ()  # the task's GPUs, when a GPU sensor is present

    @property
    def io_bytes(self) -> int:
        """All I/O counters together (for "did any I/O happen")."""
        return self.read_bytes + self.write_bytes + self.read_chars + self.write_chars


@dataclass(frozen=True, slots=True)
class TaskWatch:
    """What to watch for one task: its process group, cgroup, log, checkpoints and GPUs."""

    task_id: str
    pgid: int | None = None  # the task's process group (= its first pid; own session)
    cgroup_procs: Path | None = None  # the task cgroup's ``cgroup.procs`` file
    log_path: Path | None = None
    checkpoint_dir: Path | None = None  # newest file below it (recursively) is the checkpoint
    gpu_indices: tuple[int, ...] = ()


class SensorBackend(Protocol):
    """Where samples come from: real (psutil + NVML) or scripted (tests)."""

    def sample_tasks(self, watches: Sequence[TaskWatch], now: float) -> list[TaskSample]: ...

    def sample_gpus(self, now: float) -> list[GpuSample]: ...


class GpuSensor(Protocol):
    """Per-GPU samples: NVML on real nodes, scripted GPUs in tests."""

    def sample_gpus(self, now: float) -> list[GpuSample]: ...

    def close(self) -> None: ...


def attach_gpus(
    samples: Iterable[TaskSample], gpus: Sequence[GpuSample], watches: Sequence[TaskWatch]
) -> list[TaskSample]:
    """Each task sample with the samples of the GPUs its watch names."""
    by_index = {g.index: g for g in gpus}
    wanted = {w.task_id: w.gpu_indices for w in watches}
    return [
        replace(s, gpus=tuple(by_index[i] for i in wanted.get(s.task_id, ()) if i in by_index))
        for s in samples
    ]


def collect(
    backend: SensorBackend, watches: Sequence[TaskWatch], now: float
) -> tuple[list[TaskSample], list[GpuSample]]:
    """One sampling round: every task (with its GPUs) and every GPU of the node."""
    gpus = backend.sample_gpus(now)
    return attach_gpus(backend.sample_tasks(watches, now), gpus, watches), gpus


# --- files -------------------------------------------------------------------------------


def _file_size(path: Path | None) -> int:
    if path is None:
        return 0
    try:  # not through a link: the log lies in the task user's folder
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def newest_file(
    folder: Path | None, limit: int = MAX_CHECKPOINT_ENTRIES
) -> tuple[float | None, int]:
    """(mtime, size) of the newest regular file below ``folder``; (None, 0) when none.

    The folder is the task user's and this runs as root: no link is followed, neither one in
    the folder's place nor one swapped for a subfolder while it is walked (each subfolder is
    opened relative to its parent's descriptor, ``O_NOFOLLOW``)."""
    best: tuple[float | None, int] = (None, 0)
    if folder is None:
        return best
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        top = os.open(folder, flags)
    except OSError:
        return best
    stack, seen = [top], 0
    try:
        while stack and seen < limit:
            fd = stack.pop()
            try:
                entries = list(os.scandir(fd))
                for entry in entries:
                    seen += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(os.open(entry.name, flags, dir_fd=fd))
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            if best[0] is None or st.st_mtime > best[0]:
                                best = (st.st_mtime, st.st_size)
                    except OSError:
                        continue
            except OSError:
                continue
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return best


# --- psutil ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Counters:
    cpu: float = 0.0
    read_bytes: int = 0
    write_bytes: int = 0
    read_chars: int = 0
    write_chars: int = 0

    def add(self, other: _Counters) -> None:
        self.cpu += other.cpu
        self.read_bytes += other.read_bytes
        self.write_bytes += other.write_bytes
        self.read_chars += other.read_chars
        self.write_chars += other.write_chars

    def at_least(self, other: _Counters) -> _Counters:
        return _Counters(
            max(self.cpu, other.cpu),
            max(self.read_bytes, other.read_bytes),
            max(self.write_bytes, other.write_bytes),
            max(self.read_chars, other.read_chars),
            max(self.write_chars, other.write_chars),
        )


@dataclass(slots=True)
class _TaskState:
    seen: dict[tuple[int, float], _Counters] = field(default_factory=dict)  # (pid, start)
    retired: _Counters = field(default_factory=_Counters)  # vanished, reaped outside the task
    parents: dict[int, int] = field(default_factory=dict)  # pid -> parent pid, at last sight
    last: _Counters = field(default_factory=_Counters)


def _read_pids(path: Path | None) -> set[int]:
    if path is None:
        return set()
    try:
        return {int(x) for x in path.read_text().split()}
    except (OSError, ValueError):
        return set()


def _process_counters(proc: psutil.Process) -> tuple[_Counters, int, int]:
    """(counters, rss, parent pid) of one process; raises psutil.Error when it is gone."""
    with proc.oneshot():
        times = proc.cpu_times()
        cpu = times.user + times.system + times.children_user + times.children_system
        rss = int(proc.memory_info().rss)
        ppid = int(proc.ppid())
        counters = _Counters(cpu=cpu)
        try:
            io = proc.io_counters()
        except (psutil.AccessDenied, AttributeError, NotImplementedError):
            return counters, rss, ppid  # another user's process, or no I/O accounting here
        counters.read_bytes, counters.write_bytes = int(io.read_bytes), int(io.write_bytes)
        counters.read_chars = int(getattr(io, "read_chars", 0))
        counters.write_chars = int(getattr(io, "write_chars", 0))
        return counters, rss, ppid


def _reaped_inside(pid: int, parents: dict[int, int], live: set[int]) -> bool:
    """Whether vanished process ``pid`` had, at last sight, a live process of the task as its
    parent, or as an ancestor through parents that vanished too: that one waited for it (or
    for the parent that waited for it), so its time is in that one's children's times."""
    walked: set[int] = set()
    parent = parents.get(pid)
    while parent is not None and parent not in walked:
        if parent in live:
            return True
        walked.add(parent)
        parent = parents.get(parent)
    return False


class PsutilTaskSensor:
    """Task samples from psutil: process group ∪ cgroup members, summed; never decreasing."""

    def __init__(self) -> None:
        self._state: dict[str, _TaskState] = {}
        # the sensor thread samples every task, the runtime's poll an exiting one (its final
        # sample, taken before it is reaped): one at a time, so each counts from the other's
        self._lock = threading.Lock()

    def forget(self, task_id: str) -> None:
        """Drop what is remembered about an ended task."""
        with self._lock:
            self._state.pop(task_id, None)

    def sample_gpus(self, now: float) -> list[GpuSample]:
        return []

    def sample_tasks(self, watches: Sequence[TaskWatch], now: float) -> list[TaskSample]:
        groups = {w.pgid for w in watches if w.pgid is not None}
        by_group: dict[int, set[int]] = {g: set() for g in groups}
        if groups:  # one pass over the node's processes for every task
            for proc in psutil.process_iter():
                with contextlib.suppress(OSError, psutil.Error):
                    pgid = os.getpgid(proc.pid)
                    if pgid in by_group:
                        by_group[pgid].add(proc.pid)
        return [
            self._sample(w, by_group.get(w.pgid, set()) if w.pgid else set(), now) for w in watches
        ]

    def _sample(self, watch: TaskWatch, members: set[int], now: float) -> TaskSample:
        with self._lock:
            return self._sample_locked(watch, members, now)

    def _sample_locked(self, watch: TaskWatch, members: set[int], now: float) -> TaskSample:
        state = self._state.setdefault(watch.task_id, _TaskState())
        pids = members | _read_pids(watch.cgroup_procs)
        live: dict[tuple[int, float], _Counters] = {}
        parents: dict[int, int] = {}
        total, rss = _Counters(), 0
        for pid in sorted(pids):
            try:
                proc = psutil.Process(pid)
                key = (pid, proc.create_time())
                counters, proc_rss, parents[pid] = _process_counters(proc)
            except (psutil.Error, OSError):
                parents.pop(pid, None)
                continue  # vanished between listing and reading
            live[key] = counters
            total.add(counters)
            rss += proc_rss
        live_pids = {pid for pid, _ in live}
        for key, counters in state.seen.items():
            # gone: its last values are kept unless a live process of the task reaped it
            # (then they are in that one's children's times: counted once, not twice)
            if key not in live and not _reaped_inside(key[0], state.parents, live_pids):
                state.retired.add(counters)
        state.seen, state.parents = live, parents
        total.add(state.retired)
        total = total.at_least(state.last)  # activity indicators never go backwards
        state.last = total
        mtime, size = newest_file(watch.checkpoint_dir)
        return TaskSample(
            task_id=watch.task_id,
            time=now,
            cpu_seconds=total.cpu,
            rss_bytes=rss,
            read_bytes=total.read_bytes,
            write_bytes=total.write_bytes,
            read_chars=total.read_chars,
            write_chars=total.write_chars,
            log_bytes=_file_size(watch.log_path),
            checkpoint_mtime=mtime,
            checkpoint_bytes=size,
            processes=len(live),
        )


@dataclass(slots=True)
class Sensors:
    """The real back end: task samples from one sensor, GPU samples from another."""

    tasks: PsutilTaskSensor = field(default_factory=PsutilTaskSensor)
    gpus: GpuSensor | None = None

    def sample_tasks(self, watches: Sequence[TaskWatch], now: float) -> list[TaskSample]:
        return self.tasks.sample_tasks(watches, now)

    def sample_gpus(self, now: float) -> list[GpuSample]:
        return [] if self.gpus is None else self.gpus.sample_gpus(now)
