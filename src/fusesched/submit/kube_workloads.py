"""A Volcano ``batch.volcano.sh/v1alpha1`` Job and an ``apps/v1`` Deployment, for
``schedulerName: fused-scheduler`` (docs/SUBMIT.md has the tables).

**Volcano Job** — one gang job, a task group per ``spec.tasks[]`` entry (``name``, default
``default<i>`` as Volcano's; ``replicas``; the pod ``template``). ``spec.minAvailable`` → the
gang's ``min_member``, ``spec.queue`` → ``queue``, ``spec.maxRetry`` →
``restart.max_restarts``. ``spec.schedulerName``, when given, must be ``fused-scheduler``; the
templates then need not repeat it. ``policies``, ``plugins``, ``priorityClassName``,
``volumes``, per-task ``minAvailable``/``dependsOn``/… are warnings (ignored).

**Deployment** — a long-running ``service`` job of ``replicas`` tasks (one gang: they start
together). Its pods are restarted as Kubernetes restarts a Deployment's: a task that fails
(non-zero exit, failed liveness probe, lost node) restarts the whole job in place after a
back-off (10 s, doubling, at most 30 min), up to 1,000 times; a task that exits 0 is not
restarted (the job completes when all have). ``strategy``, ``selector``,
``revisionHistoryLimit``, ``progressDeadlineSeconds`` are ignored; ``minReadySeconds`` and
``paused`` are warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fusesched.submit._yamldoc import Document
from fusesched.submit.kube_pod import SCHEDULER_NAME, PodReader
from fusesched.submit.problems import Loc
from fusesched.submit.request import ParsedJob

VOLCANO_USED: Final = frozenset({"tasks", "minAvailable", "queue", "schedulerName", "maxRetry"})
VOLCANO_QUIET: Final = frozenset({"ttlSecondsAfterFinished", "runningEstimate"})
VOLCANO_WARN: Final = frozenset(
    {
        "policies",
        "plugins",
        "priorityClassName",
        "volumes",
        "minSuccess",
        "networkTopology",
    }
)
TASK_USED: Final = frozenset({"name", "replicas", "template"})
TASK_WARN: Final = frozenset(
    {"policies", "minAvailable", "maxRetry", "topologyPolicy", "dependsOn", "partitionPolicy"}
)
DEPLOYMENT_USED: Final = frozenset({"replicas", "template"})
DEPLOYMENT_QUIET: Final = frozenset(
    {"selector", "strategy", "revisionHistoryLimit", "progressDeadlineSeconds"}
)
DEPLOYMENT_WARN: Final = frozenset({"minReadySeconds", "paused"})
#: How a Deployment's tasks are restarted (request.RestartRequest): in place, on any failure.
SERVICE_RESTART: Final = {
    "mode": "restart-in-place",
    "max_restarts": 1000,
    "backoff_s": 10.0,
    "retry_application_failures": True,
}


def volcano_job(doc: Document) -> ParsedJob:
    """One gang job from a Volcano Job document."""
    return _WorkloadReader(doc).volcano()


def deployment(doc: Document) -> ParsedJob:
    """One service job from an ``apps/v1`` Deployment document."""
    return _WorkloadReader(doc).deployment()


class _WorkloadReader(PodReader):
    def start(
        self, kind: str, used: frozenset[str], quiet: frozenset[str], warn: frozenset[str]
    ) -> tuple[Mapping[str, object], Mapping[str, object]]:
        meta, spec = self.read_object()
        self.check_fields(spec, ("spec",), used, quiet, warn)
        if "template" in used and "template" not in spec:
            raise self.error(f"a {kind} needs spec.template", ("spec",))
        return meta, spec

    def volcano(self) -> ParsedJob:
        meta, spec = self.start("Job", VOLCANO_USED, VOLCANO_QUIET, VOLCANO_WARN)
        scheduler = spec.get("schedulerName")
        if scheduler is not None and scheduler != SCHEDULER_NAME:
            raise self.error(
                f"must be {SCHEDULER_NAME!r} for fusesched to run this job, not {scheduler!r}",
                ("spec", "schedulerName"),
            )
        tasks_loc: Loc = ("spec", "tasks")
        tasks = self.sequence(spec.get("tasks"), tasks_loc, "tasks")
        if not tasks:
            raise self.error("a Volcano Job needs at least one task", ("spec",))
        data: dict[str, object] = {}
        parts = []
        for index, item in enumerate(tasks):
            loc: Loc = (*tasks_loc, index)
            task = self.mapping(item, loc, "a task")
            self.check_fields(task, loc, TASK_USED, frozenset(), TASK_WARN)
            if "template" not in task:
                raise self.error("a task needs template", loc)
            part = self.template(
                task["template"], (*loc, "template"), index, scheduler_set=scheduler is not None
            )
            name = task.get("name", f"default{index}")
            part.group.update(name=name, replicas=self.count(task, (*loc, "replicas"), 1))
            self.renames[f"groups[{index}].name"] = (*loc, "name")
            self.renames[f"groups[{index}].replicas"] = (*loc, "replicas")
            parts.append(part)
        if "minAvailable" in spec:
            self.set_field(data, "min_member", spec["minAvailable"], ("spec", "minAvailable"))
        if "queue" in spec:
            self.set_field(data, "queue", spec["queue"], ("spec", "queue"))
        if "maxRetry" in spec:
            data["restart"] = {"max_restarts": spec["maxRetry"]}
            self.renames["restart.max_restarts"] = ("spec", "maxRetry")
        self.combine(parts, data)
        self.metadata(meta, data)
        return self.request(data)

    def deployment(self) -> ParsedJob:
        meta, spec = self.start("Deployment", DEPLOYMENT_USED, DEPLOYMENT_QUIET, DEPLOYMENT_WARN)
        part = self.template(spec["template"], ("spec", "template"), 0)
        part.group["replicas"] = self.count(spec, ("spec", "replicas"), 1)
        self.renames["groups[0].replicas"] = ("spec", "replicas")
        data: dict[str, object] = {"type": "service", "restart": dict(SERVICE_RESTART)}
        self.combine([part], data)
        self.metadata(meta, data)
        return self.request(data)
