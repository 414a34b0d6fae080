"""What the controller learns from the agents' samples and health (pure: the caller passes
``now``; no I/O).

:class:`Monitor` keeps one :class:`~fusesched.agent.sample_window.SampleWindow` per task, fed
by :meth:`Monitor.observe` from full heartbeats, and turns what it sees into
:class:`Finding`\\ s at :meth:`Monitor.check`:

* ``hang``: :func:`~fusesched.controller.hang.detect_hang` says a task is hung (run at most
  every ``check_interval_s`` per task; one finding per job and check, once per task);
* ``node``: a node reported unhealthy after being healthy (or unknown): drain it;
* ``gpu``: a job has a task on a GPU that the node reports faulty, or whose sample counts a
  lost GPU (once per task);
* ``node-healthy``: a node that was unhealthy reports healthy again: undrain it.

Deciding what to do about a finding (:func:`~fusesched.controller.hang.next_action`) is the
caller's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from fusesched.agent.sample_window import SampleWindow
from fusesched.agent.sensors import GpuSample, TaskSample
from fusesched.api.wire import SAMPLE_COUNTERS, GpuHealthWire, NodeHealthWire, TaskSampleWire
from fusesched.controller.hang import DEFAULT_HANG_POLICIES, HangPolicy, detect_hang
from fusesched.model.job import JobType

FindingKind = Literal["hang", "gpu", "node", "node-healthy"]
#: What the caller knows of a running task: (job id, job type, the job's own hang policy).
JobInfo = tuple[str, JobType, HangPolicy | None]


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    job_id: str | None  # None for node findings
    node: str
    task_id: str | None  # None for node findings
    reason: str


def task_sample(sample: TaskSampleWire) -> TaskSample:
    """A wire sample as a :class:`TaskSample` whose window row is the same (its GPU readings
    as one summarised GPU, plus one lost GPU per lost GPU)."""
    gpus = []
    if sample.gpu_util_mean is not None or sample.gpu_memory_bytes is not None:
        util = float("nan") if sample.gpu_util_mean is None else sample.gpu_util_mean
        memory = -1 if sample.gpu_memory_bytes is None else sample.gpu_memory_bytes
        gpus.append(GpuSample(-1, utilization_pct=util, memory_used_bytes=memory))
    gpus += [GpuSample(-1, lost=True)] * sample.gpus_lost
    return TaskSample(
        **{name: getattr(sample, name) for name in SAMPLE_COUNTERS},
        gpus=tuple(gpus),
    )


def _gpu_fault(gpu: GpuHealthWire) -> str:
    parts = ["lost"] if gpu.lost else []
    if gpu.xids:
        parts.append("XID " + ", ".join(str(x) for x in gpu.xids))
    if gpu.ecc_uncorrected:
        parts.append(f"{gpu.ecc_uncorrected} uncorrectable ECC errors")
    return f"GPU {gpu.index} faulty: " + ("; ".join(parts) or "reported by the node")


@dataclass(slots=True)
class _Task:
    node: str
    window: SampleWindow
    gpus: frozenset[int] = frozenset()
    checked_at: float | None = None
    reported: set[str] = field(default_factory=set)  # finding kinds already given


class Monitor:
    """Sample windows per task and health per node; findings on :meth:`check`.

    ``policies``: hang policy per job type (a job's own policy overrides); a type not listed
    gets ``HangPolicy()``. ``capacity``: samples kept per task.
    """

    def __init__(
        self,
        *,
        policies: Mapping[JobType, HangPolicy] = DEFAULT_HANG_POLICIES,
        check_interval_s: float = 60.0,
        capacity: int = 720,
    ) -> None:
        self.policies = policies
        self.check_interval_s = check_interval_s
        self.capacity = capacity
        self._tasks: dict[str, _Task] = {}
        self._healthy: dict[str, bool] = {}  # node -> as last reported
        self._node_findings: list[Finding] = []
        self._gpu_faults: dict[str, str] = {}  # task -> reason, not yet reported

    def healthy(self, node: str) -> bool:
        """Whether ``node`` last reported itself healthy (True when it never said)."""
        return self._healthy.get(node, True)

    def observe(
        self,
        node: str,
        samples: list[TaskSampleWire],
        health: NodeHealthWire | None,
        now: float,
    ) -> None:
        """Take one full heartbeat's samples and health (a sample not newer than the task's
        newest one is ignored, so a repeated beat changes nothing)."""
        for sample in samples:
            task = self._tasks.get(sample.task_id)
            if task is None or task.node != node:
                task = _Task(node, SampleWindow(sample.task_id, self.capacity))
                self._tasks[sample.task_id] = task
            task.gpus = frozenset(sample.gpu_indices)
            newest = task.window.newest_time
            if newest is None or sample.time > newest:
                task.window.push(task_sample(sample))
            if sample.gpus_lost and "gpu" not in task.reported:
                self._gpu_faults[sample.task_id] = f"{sample.gpus_lost} of the task's GPUs lost"
        if health is not None:
            self._health(node, health)

    def _health(self, node: str, health: NodeHealthWire) -> None:
        was_healthy = self._healthy.get(node, True)
        self._healthy[node] = health.healthy
        if was_healthy and not health.healthy:
            reason = "; ".join(health.reasons) or "the node reports itself unhealthy"
            self._node_findings.append(Finding("node", None, node, None, reason))
        elif health.healthy and not was_healthy:
            self._node_findings.append(
                Finding("node-healthy", None, node, None, "the node reports healthy again")
            )
        faulty = {g.index: g for g in health.gpus if g.faulty}
        for task_id, task in self._tasks.items():
            hit = sorted(task.gpus & faulty.keys())
            if task.node == node and hit and "gpu" not in task.reported:
                self._gpu_faults[task_id] = "; ".join(_gpu_fault(faulty[i]) for i in hit)

    def forget(self, task_id: str) -> None:
        """Drop an ended task (also before a task id is launched again)."""
        self._tasks.pop(task_id, None)
        self._gpu_faults.pop(task_id, None)

    def check(self, now: float, jobs: Mapping[str, JobInfo]) -> list[Finding]:
        """Findings since the last check. ``jobs``: each running task's job (tasks not in it
        are not judged)."""
        findings, self._node_findings = self._node_findings, []
        flagged: set[tuple[str, str]] = set()  # (kind, job): one finding per job and kind

        def add(kind: FindingKind, task_id: str, reason: str) -> None:
            task = self._tasks[task_id]
            task.reported.add(kind)
            job_id = jobs[task_id][0]
            if (kind, job_id) not in flagged:
                flagged.add((kind, job_id))
                findings.append(Finding(kind, job_id, task.node, task_id, reason))

        for task_id, reason in sorted(self._gpu_faults.items()):
            if task_id in jobs and task_id in self._tasks:
                add("gpu", task_id, reason)
        self._gpu_faults.clear()
        for task_id, task in sorted(self._tasks.items()):
            if task_id not in jobs or "hang" in task.reported or "gpu" in task.reported:
                continue
            if task.checked_at is not None and now - task.checked_at < self.check_interval_s:
                continue
            task.checked_at = now
            _, job_type, override = jobs[task_id]
            policy = override or self.policies.get(job_type, HangPolicy())
            verdict = detect_hang(task.window, policy)
            if verdict.hung:
                add("hang", task_id, verdict.reason)
        return findings
