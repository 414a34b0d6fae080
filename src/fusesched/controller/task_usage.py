"""What each running task has used so far, from its agent's samples: the newest cumulative
CPU time, the peak resident memory, the time-weighted mean GPU utilisation and the peak GPU
memory (the ``fusesched eff`` report, docs/LIVE.md "Job efficiency").

The samples arrive with the agents' full heartbeats (:func:`observe`, called from
``failures.observe`` with the controller's lock held). Nothing is written per heartbeat: a
task's usage stays in memory while it runs (:func:`live_usage` reads it) and is written with
its end (:func:`task_ended`, from ``endings.finish_task``), after which it is forgotten. Tasks
that end without passing there (their job forgotten first) are dropped by :meth:`UsageBook.prune`,
so the book never holds more than the controller's live tasks.

Being in memory, a tally does not outlive its controller: after a restart, a task that was
running is tallied afresh from its next sample. Its CPU time stays right (the agent's counter
is cumulative), but its peak memory, peak GPU memory and GPU mean cover only the time since
the restart (:attr:`TaskUsage.since`; the report notes it while the task runs).

Samples come from the agent's sensor thread every ``sample_interval_s`` (10 s by default): a
task shorter than that may have no sample at all, and its usage is then unknown (``None``),
not zero.

A reading that cannot be real (memory beyond :data:`MAX_BYTES`, a utilisation outside 0-100 %,
a negative or absurd CPU time) is dropped here: it never reaches the store, whose integer
columns hold 63 bits.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fusesched.api.wire import TaskSampleWire

if TYPE_CHECKING:
    from fusesched.controller.records import LiveTask
    from fusesched.controller.service import Controller

__all__ = [
    "MAX_BYTES",
    "MAX_CPU_SECONDS",
    "MAX_GAP_S",
    "TaskUsage",
    "UsageBook",
    "UsageTally",
    "live_usage",
    "observe",
    "task_ended",
    "usage_for",
]

#: A GPU reading weighs at most this many seconds: a node silent for longer (a partition)
#: does not let one reading stand for the whole gap.
MAX_GAP_S = 300.0

#: memory readings beyond this (4 EiB) are not real: dropped, never passed to the store
MAX_BYTES = 2**62

#: CPU-seconds beyond this (a million cores for a century) are not real either
MAX_CPU_SECONDS = 1e14


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """What one task used; ``None``: not measured (no sample, or no GPU reading)."""

    cpu_seconds: float | None = None
    max_rss_bytes: int | None = None
    gpu_util_mean: float | None = None  # percent, time-weighted over its samples
    max_gpu_memory_bytes: int | None = None
    samples: int = 0
    # the first sample's time (of this controller: a restart starts the tally afresh, so the
    # peaks and the GPU mean then cover only the time since; the CPU counter is cumulative)
    since: float | None = field(default=None, compare=False)

    @property
    def sampled(self) -> bool:
        return self.samples > 0


class UsageTally:
    """The running totals of one task's samples (fed in time order; repeats are ignored).

    CPU time is the agent's cumulative counter: the newest value is the task's total. Should
    the counter go back (the task's processes were started afresh under the same id, so the
    agent counts from zero again), what was counted before is kept and the new counter is
    added to it. GPU utilisation is weighted by the time since the previous sample (at most
    :data:`MAX_GAP_S`); a task with a single reading has that reading as its mean."""

    __slots__ = (
        "_cpu_base",
        "_cpu_last",
        "_first_time",
        "_gpu_first",
        "_gpu_mem",
        "_gpu_seconds",
        "_gpu_weighted",
        "_last_time",
        "_rss",
        "samples",
    )

    def __init__(self) -> None:
        self.samples = 0
        self._last_time: float | None = None
        self._first_time: float | None = None
        self._cpu_base = 0.0  # counted before the counter was reset
        self._cpu_last = 0.0
        self._rss = 0
        self._gpu_first: float | None = None
        self._gpu_seconds = 0.0
        self._gpu_weighted = 0.0
        self._gpu_mem: int | None = None

    def add(self, sample: TaskSampleWire) -> bool:
        """Take one sample; False when it is not newer than the last (a beat sent again)."""
        previous = self._last_time
        if previous is not None and sample.time <= previous:
            return False
        self.samples += 1
        self._last_time = sample.time
        if self._first_time is None:
            self._first_time = sample.time
        cpu = sample.cpu_seconds
        if 0.0 <= cpu <= MAX_CPU_SECONDS:  # else not real: the previous total stands
            if cpu < self._cpu_last:  # counted from zero again: keep what was counted
                self._cpu_base += self._cpu_last
            self._cpu_last = cpu
        if 0 <= sample.rss_bytes <= MAX_BYTES:
            self._rss = max(self._rss, sample.rss_bytes)
        util = sample.gpu_util_mean
        if util is not None and 0 <= util <= 100:
            if self._gpu_first is None:
                self._gpu_first = util
            if previous is not None:
                seconds = min(sample.time - previous, MAX_GAP_S)
                self._gpu_seconds += seconds
                self._gpu_weighted += util * seconds
        memory = sample.gpu_memory_bytes
        if memory is not None and 0 <= memory <= MAX_BYTES:
            self._gpu_mem = memory if self._gpu_mem is None else max(self._gpu_mem, memory)
        return True

    def usage(self) -> TaskUsage:
        if not self.samples:
            return TaskUsage()
        if self._gpu_seconds > 0:
            gpu_util: float | None = self._gpu_weighted / self._gpu_seconds
        else:
            gpu_util = self._gpu_first
        return TaskUsage(
            cpu_seconds=self._cpu_base + self._cpu_last,
            # no sample saw resident memory (only the exited main process was left, and the
            # kernel's peak could not be told from the agent's): not measured, not zero
            max_rss_bytes=self._rss or None,
            gpu_util_mean=gpu_util,
            max_gpu_memory_bytes=self._gpu_mem,
            samples=self.samples,
            since=self._first_time,
        )


class UsageBook:
    """The tallies of one controller's running tasks, by task id."""

    def __init__(self) -> None:
        self._tallies: dict[str, UsageTally] = {}

    def __len__(self) -> int:
        return len(self._tallies)

    def add(self, sample: TaskSampleWire) -> None:
        tally = self._tallies.get(sample.task_id)
        if tally is None:
            tally = self._tallies[sample.task_id] = UsageTally()
        tally.add(sample)

    def get(self, task_id: str) -> TaskUsage | None:
        tally = self._tallies.get(task_id)
        return None if tally is None else tally.usage()

    def pop(self, task_id: str) -> TaskUsage | None:
        tally = self._tallies.pop(task_id, None)
        return None if tally is None else tally.usage()

    def prune(self, alive: Container[str]) -> None:
        """Forget the tasks not in ``alive``."""
        for task_id in [t for t in self._tallies if t not in alive]:
            del self._tallies[task_id]


_BY_CONTROLLER: weakref.WeakKeyDictionary[Controller, UsageBook] = weakref.WeakKeyDictionary()
_MAKING = threading.Lock()


def usage_for(ctl: Controller) -> UsageBook:
    """The usage book of ``ctl`` (made on first use; one per controller)."""
    with _MAKING:
        found = _BY_CONTROLLER.get(ctl)
        if found is None:
            found = _BY_CONTROLLER[ctl] = UsageBook()
        return found


def observe(ctl: Controller, samples: Iterable[TaskSampleWire]) -> None:
    """Tally a heartbeat's samples (of tasks on the node that sent it; lock held). A sample
    of a task that has already ended comes too late: its usage was written."""
    book = usage_for(ctl)
    for sample in samples:
        entry = ctl.tasks.get(sample.task_id)
        if entry is not None and entry[1].state != "exited":
            book.add(sample)
    if len(book) > len(ctl.tasks):  # some ended without task_ended (forgotten with their job)
        book.prune(ctl.tasks)


def task_ended(ctl: Controller, task: LiveTask) -> None:
    """``task`` ended (lock held): its usage, if it was sampled, is written with its end and
    forgotten here."""
    usage = usage_for(ctl).pop(task.launch.task_id)
    if usage is not None and usage.sampled:
        ctl.persist.task_usage(task.launch.task_id, usage)


def live_usage(ctl: Controller, job_id: str) -> dict[str, TaskUsage]:
    """The usage so far of the job's running tasks that were sampled, by task id (read
    before the store: a task that ends meanwhile is found there with what it used)."""
    book = usage_for(ctl)
    out: dict[str, TaskUsage] = {}
    with ctl.lock:
        live = ctl.jobs.get(job_id)
        for task_id in live.tasks if live is not None else ():
            usage = book.get(task_id)
            if usage is not None and usage.sampled:
                out[task_id] = usage
    return out
