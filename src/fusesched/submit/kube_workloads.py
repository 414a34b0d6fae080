"""A Volcano ``batch.volcano.sh/v1alpha1`` Job and an ``apps/v1`` Deployment, for
``schedulerName: fused-scheduler`` (docs/SUBMIT.md has the tables).

**Volcano Job** — one gang job, a task group per ``spec.tasks[]`` entry (``name``, unique,
default ``default<i>`` as Volcano's; ``replicas``; the pod ``template``). ``spec.minAvailable``
→ the gang's ``min_member`` (0, Volcano's "unset": the sum of the tasks' ``minAvailable``, each
its replicas by default; a minimum per task that Volcano would enforce, with several tasks, is
refused: fusesched's gang minimum is job-wide), ``spec.queue`` → ``queue``,
``spec.maxRetry`` → ``restart.max_restarts`` (0: Volcano's default, 3). ``spec.schedulerName``,
when given, must be ``fused-scheduler``; the templates then need not repeat it. ``policies``
(the job's and each task's) that restart the job on a failure (``RestartJob``, ``RestartTask``,
``RestartPod`` on ``PodFailed``, ``TaskFailed``, ``*`` or an ``exitCode``) →
``restart.retry_application_failures``: the whole gang restarts, up to ``maxRetry`` times; a
restart on ``PodEvicted``/``Unknown`` and an abort or termination on a failure are what
fusesched does anyway; ``TaskCompleted → CompleteJob`` → the group's ``completes_job`` (the
job's policy: every group's); other policies are warnings (ignored). ``plugins``,
``priorityClassName``, ``volumes``, per-task ``dependsOn``/… are warnings too.

**Deployment** — a long-running ``service`` job of ``replicas`` tasks (one gang: they start
together). Kubernetes restarts each pod of a Deployment by itself, whatever its exit;
fusesched restarts a gang whole (``restart.always``): a task that exits, 0 or not (or fails a
liveness probe, or is lost with its node), restarts the whole job in place after a back-off
(10 s, doubling, at most 30 min), up to 1,000 times. ``strategy``, ``selector``,
``revisionHistoryLimit``, ``progressDeadlineSeconds`` are ignored; ``minReadySeconds`` and
``paused`` are warnings; a pod ``restartPolicy`` other than ``Always`` is refused, as
Kubernetes refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from fusesched.submit._yamldoc import Document
from fusesched.submit.kube_pod import SCHEDULER_NAME, PodReader
from fusesched.submit.problems import Loc, format_loc
from fusesched.submit.request import ParsedJob

VOLCANO_USED: Final = frozenset(
    {"tasks", "minAvailable", "queue", "schedulerName", "maxRetry", "policies"}
)
VOLCANO_QUIET: Final = frozenset({"ttlSecondsAfterFinished", "runningEstimate"})
VOLCANO_WARN: Final = frozenset(
    {"plugins", "priorityClassName", "volumes", "minSuccess", "networkTopology"}
)
#: What Volcano gives a job whose ``maxRetry`` is absent or 0.
VOLCANO_MAX_RETRY: Final = 3
TASK_USED: Final = frozenset({"name", "replicas", "template", "policies", "minAvailable"})
TASK_WARN: Final = frozenset({"maxRetry", "topologyPolicy", "dependsOn", "partitionPolicy"})
POLICY_FIELDS: Final = frozenset({"event", "events", "action", "exitCode", "timeout"})
#: The events and actions Volcano accepts in a policy.
POLICY_EVENTS: Final = (
    "*",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
)
POLICY_ACTIONS: Final = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)
_FAILED: Final = frozenset({"*", "PodFailed", "TaskFailed"})
_RESTARTS: Final = frozenset({"RestartJob", "RestartTask", "RestartPod"})
DEPLOYMENT_USED: Final = frozenset({"replicas", "template"})
DEPLOYMENT_QUIET: Final = frozenset(
    {"selector", "strategy", "revisionHistoryLimit", "progressDeadlineSeconds"}
)
DEPLOYMENT_WARN: Final = frozenset({"minReadySeconds", "paused"})
#: How a Deployment's tasks are restarted (failure_policy.RestartRequest): in place, after any exit.
SERVICE_RESTART: Final = {
    "mode": "restart-in-place",
    "max_restarts": 1000,
    "backoff_s": 10.0,
    "always": True,
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
        names: dict[str, int] = {}
        minimums: list[tuple[str, int, int, Loc]] = []  # each task's minAvailable, replicas
        retried, job_completes = self.policies(spec, ("spec",))
        for index, item in enumerate(tasks):
            loc: Loc = (*tasks_loc, index)
            task = self.mapping(item, loc, "a task")
            self.check_fields(task, loc, TASK_USED, frozenset(), TASK_WARN)
            if "template" not in task:
                raise self.error("a task needs template", loc)
            part = self.template(
                task["template"], (*loc, "template"), index, scheduler_set=scheduler is not None
            )
            name = task.get("name") or f"default{index}"
            if not isinstance(name, str):
                raise self.error("must be a string", (*loc, "name"))
            if name in names:
                raise self.error(
                    f"task name {name!r} is also that of spec.tasks[{names[name]}]: names must "
                    "be unique",
                    (*loc, "name"),
                )
            names[name] = index
            replicas = self.count(task, (*loc, "replicas"), 1)
            least_loc: Loc = (*loc, "minAvailable")
            least = self.count(task, least_loc, replicas, least=0)
            if least > replicas:
                raise self.error(f"{least} is more than the task's {replicas} replicas", least_loc)
            minimums.append((name, least, replicas, least_loc))
            part.group.update(name=name, replicas=replicas)
            self.renames[f"groups[{index}].name"] = (*loc, "name")
            self.renames[f"groups[{index}].replicas"] = (*loc, "replicas")
            task_retried, completes = self.policies(task, loc)
            retried = retried or task_retried
            if completes or job_completes:  # (the job's policy: any task's completion)
                part.group["completes_job"] = True
            parts.append(part)
        self.gang_minimum(spec, minimums, data)
        if "queue" in spec:
            self.set_field(data, "queue", spec["queue"], ("spec", "queue"))
        restart: dict[str, object] = {}
        if "maxRetry" in spec:
            retries = self.count(spec, ("spec", "maxRetry"), 0, least=0)
            restart["max_restarts"] = retries or VOLCANO_MAX_RETRY
            self.renames["restart.max_restarts"] = ("spec", "maxRetry")
        if retried:
            restart["retry_application_failures"] = True
        if restart:
            data["restart"] = restart
        self.combine(parts, data)
        self.metadata(meta, data)
        return self.request(data)

    def gang_minimum(
        self,
        spec: Mapping[str, object],
        minimums: Sequence[tuple[str, int, int, Loc]],
        data: dict[str, object],
    ) -> None:
        """``min_member`` from the job's ``minAvailable`` — 0 or absent: the sum of the tasks'
        (each its replicas by default), as Volcano's webhook sets it — and the tasks'. Volcano
        holds each task to its own minimum only when the job's is at least their sum; fusesched's
        gang minimum is job-wide, so that is refused when some task of several may start short."""
        loc: Loc = ("spec", "minAvailable")
        tasks_least = sum(least for _, least, _, _ in minimums)
        given = self.count(spec, loc, 0, least=0)
        least = given or max(tasks_least, 1)
        total = sum(replicas for _, _, replicas, _ in minimums)
        short = [(n, m, r, at) for n, m, r, at in minimums if m < r]
        if len(minimums) > 1 and 0 < tasks_least <= least < total:
            name, task_least, replicas, at = short[0]
            raise self.error(
                f"task {name!r} may start with {task_least} of its {replicas} replicas, each "
                f"task held to its own minAvailable (the job's, {least}, is at least their sum, "
                f"{tasks_least}): fusesched's gang minimum is the job's only (min_member), it "
                "cannot keep one per task; give this task minAvailable equal to its replicas, "
                f"or the job a minAvailable below {tasks_least} (Volcano then checks only the "
                "job's)",
                at,
            )
        if given:
            self.set_field(data, "min_member", least, loc)
        elif least < total:  # (the tasks' own minimums, summed)
            self.set_field(data, "min_member", least, short[0][3])

    def policies(self, owner: Mapping[str, object], owner_loc: Loc) -> tuple[bool, bool]:
        """Check the ``policies`` of the job or of a task: whether one restarts the job after
        a failing exit, and whether one completes it when a task completes
        (``TaskCompleted → CompleteJob``). Those fusesched cannot follow are warnings."""
        loc: Loc = (*owner_loc, "policies")
        retried = completes = False
        for i, item in enumerate(self.sequence(owner.get("policies"), loc, "policies")):
            at: Loc = (*loc, i)
            policy = self.mapping(item, at, "a policy")
            self.check_fields(policy, at, POLICY_FIELDS, frozenset(), frozenset())
            if "action" not in policy:
                raise self.error("a policy needs an action", at)
            action = self.one_of(policy["action"], (*at, "action"), POLICY_ACTIONS)
            listed = self.sequence(policy.get("events"), (*at, "events"), "events")
            events = [
                self.one_of(e, (*at, "events", j), POLICY_EVENTS) for j, e in enumerate(listed)
            ]
            if "event" in policy:
                events.append(self.one_of(policy["event"], (*at, "event"), POLICY_EVENTS))
            code = policy.get("exitCode")
            if (code is None) != bool(events):
                raise self.error("a policy needs an event (or events) or an exitCode, not both", at)
            if code is not None and (
                isinstance(code, bool) or not isinstance(code, int) or not code
            ):
                raise self.error("must be a whole number other than 0", (*at, "exitCode"))
            if "timeout" in policy:
                self.ignored((*at, "timeout"), " (the action is taken at once)")
            failed = code is not None or any(e in _FAILED for e in events)
            said = f"{' or '.join(events) or f'exitCode {code}'} → {action}"
            if action in _RESTARTS and failed:
                retried = True
                if action != "RestartJob" or code is not None:
                    self.warn(
                        f"{format_loc(at)} ({said}): fusesched restarts the whole job after any "
                        "failing exit",
                        at,
                    )
            elif action == "CompleteJob" and events == ["TaskCompleted"]:
                completes = True
            elif not _as_fusesched_does(action, events, failed):
                self.warn(f"{format_loc(at)} ({said}) is not supported; ignored", at)
        return retried, completes

    def deployment(self) -> ParsedJob:
        meta, spec = self.start("Deployment", DEPLOYMENT_USED, DEPLOYMENT_QUIET, DEPLOYMENT_WARN)
        part = self.template(spec["template"], ("spec", "template"), 0)
        pod = self.mapping(spec["template"], ("spec", "template"), "template").get("spec")
        policy = pod.get("restartPolicy", "Always") if isinstance(pod, Mapping) else "Always"
        if policy != "Always":  # (Kubernetes refuses it too)
            raise self.error(
                f"must be Always, not {policy!r}: a Deployment's pods are always restarted",
                (*part.loc, "restartPolicy"),
            )
        part.group["replicas"] = self.count(spec, ("spec", "replicas"), 1)
        self.renames["groups[0].replicas"] = ("spec", "replicas")
        data: dict[str, object] = {"type": "service", "restart": dict(SERVICE_RESTART)}
        self.combine([part], data)
        self.metadata(meta, data)
        return self.request(data)


def _as_fusesched_does(action: str, events: list[str], failed: bool) -> bool:
    """A policy that asks for what fusesched does anyway: a restart after an eviction or a
    lost pod (node faults and lost tasks restart the job), an end after a failure (the first
    failing task stops the gang)."""
    if action == "RestartJob":
        return bool(events) and set(events) <= {"PodEvicted", "Unknown"}
    return action in ("AbortJob", "TerminateJob") and failed
