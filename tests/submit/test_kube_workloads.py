"""Volcano Job and apps/v1 Deployment YAML (submit/kube_workloads.py)."""

from __future__ import annotations

import pytest

from fusesched.model.job import JobType
from fusesched.submit import SubmitError, parse_kube_yaml, parse_submission

VOLCANO = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: tf, namespace: team-b}
spec:
  schedulerName: fused-scheduler
  minAvailable: 2
  queue: research
  maxRetry: 5
  ttlSecondsAfterFinished: 60
  tasks:
    - name: ps
      replicas: 1
      template:
        spec:
          containers:
            - {name: ps, command: [python, ps.py], resources: {requests: {cpu: "1"}}}
    - replicas: 2
      template:
        spec:
          activeDeadlineSeconds: 300
          containers:
            - name: worker
              command: [python, worker.py]
              resources: {requests: {cpu: "2", memory: 1Gi}}
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {kueue.x-k8s.io/queue-name: services}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate}
  template:
    metadata: {labels: {app: web}}
    spec:
      schedulerName: fused-scheduler
      containers:
        - name: web
          command: [python, -m, http.server, "8080"]
          ports: [{containerPort: 8080}]
          readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 2}
          resources: {requests: {cpu: 250m, memory: 64Mi}}
"""


def test_volcano_job_is_a_gang_of_its_tasks() -> None:
    (parsed,) = parse_kube_yaml(VOLCANO, "vc.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    assert (req.name, req.tenant, req.queue, req.min_member) == ("tf", "team-b", "research", 2)
    assert req.restart.max_restarts == 5 and req.walltime_s == 300
    ps, worker = req.groups
    assert (ps.name, ps.replicas, ps.argv) == ("ps", 1, ["python", "ps.py"])
    assert (worker.name, worker.replicas) == ("default1", 2)  # Volcano's default task name
    assert worker.resources == {"cpu": "2", "memory": "1Gi"}
    assert req.identified().type is JobType.BATCH


def test_volcano_templates_name_the_scheduler_without_the_jobs() -> None:
    text = VOLCANO.replace("  schedulerName: fused-scheduler\n", "").replace(
        "        spec:\n", "        spec:\n          schedulerName: fused-scheduler\n"
    )
    (parsed,) = parse_kube_yaml(text)
    assert len(parsed.request.groups) == 2
    with pytest.raises(SubmitError, match=r"spec\.tasks\[0\]\.template\.spec: schedulerName: "):
        parse_kube_yaml(VOLCANO.replace("  schedulerName: fused-scheduler\n", ""))


def test_volcano_warns_of_what_it_ignores() -> None:
    text = VOLCANO.replace(
        "  maxRetry: 5\n",
        "  maxRetry: 5\n  priorityClassName: high\n  policies: [{event: PodEvicted, action: "
        "RestartJob}]\n  plugins: {svc: [], env: []}\n",
    ).replace("      replicas: 1\n", "      replicas: 1\n      dependsOn: {name: [worker]}\n")
    (parsed,) = parse_kube_yaml(text, "vc.yaml")
    assert parsed.warnings == (
        "vc.yaml:9: spec.priorityClassName is not supported; ignored",
        "vc.yaml:11: spec.plugins is not supported; ignored",
        "vc.yaml:16: spec.tasks[0].dependsOn is not supported; ignored",
    )


def test_deployment_is_a_restarted_service() -> None:
    (parsed,) = parse_submission(DEPLOYMENT, source="d.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    assert (req.name, req.queue, req.type) == ("web", "services", JobType.SERVICE)
    (group,) = req.groups
    assert group.replicas == 3 and group.ports == [8080]
    assert group.readiness is not None and group.readiness.period_s == 2
    restart = req.restart
    assert (restart.mode, restart.max_restarts, restart.backoff_s) == ("restart-in-place", 1000, 10)
    assert restart.always and restart.retry_application_failures  # after any exit, 0 included
    assert req.walltime_s is None


def test_deployment_default_replicas_and_type_annotation() -> None:
    text = DEPLOYMENT.replace("  replicas: 3\n", "").replace(
        "  labels:", "  annotations: {fusesched.io/type: ai-infer}\n  labels:"
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.groups[0].replicas == 1
    assert parsed.request.type is JobType.AI_INFER


BAD: list[tuple[str, str, str]] = [
    (
        "volcano scheduler",
        VOLCANO.replace("schedulerName: fused-scheduler", "schedulerName: volcano"),
        "vc.yaml:5: spec.schedulerName: must be 'fused-scheduler' for fusesched to run this job, "
        "not 'volcano'",
    ),
    ("no tasks", VOLCANO.split("  tasks:")[0], "vc.yaml:4: spec: a Volcano Job needs at least one"),
    (
        "task typo",
        VOLCANO.replace("      replicas: 1\n", "      replica: 1\n"),
        "vc.yaml:12: spec.tasks[0].replica: unknown field 'replica'; did you mean 'replicas'?",
    ),
    (
        "spec typo",
        VOLCANO.replace("minAvailable: 2", "minAvailble: 2"),
        "spec.minAvailble: unknown field 'minAvailble'; did you mean 'minAvailable'?",
    ),
    (
        "min available",
        VOLCANO.replace("minAvailable: 2", "minAvailable: 4"),
        "vc.yaml:6: spec.minAvailable: 4 is more than the job's 3 tasks",
    ),
    (
        "min available type",
        VOLCANO.replace("minAvailable: 2", "minAvailable: many"),
        "vc.yaml:6: spec.minAvailable: must be a whole number ≥ 0",
    ),
    (
        "duplicate names",
        VOLCANO.replace("    - replicas: 2\n", "    - name: ps\n      replicas: 2\n"),
        "vc.yaml:17: spec.tasks[1].name: task name 'ps' is also that of spec.tasks[0]: names "
        "must be unique",
    ),
    (
        "task name",
        VOLCANO.replace("name: ps\n", "name: -ps\n"),
        "vc.yaml:11: spec.tasks[0].name: String should match pattern",
    ),
    ("task template", VOLCANO.split("      template:")[0], "spec.tasks[0]: a task needs template"),
    (
        "replicas",
        VOLCANO.replace("replicas: 2", "replicas: 0"),
        "vc.yaml:17: spec.tasks[1].replicas: must be a whole number ≥ 1",
    ),
    (
        "max retry",
        VOLCANO.replace("maxRetry: 5", "maxRetry: 5000"),
        "vc.yaml:8: spec.maxRetry: Input should be less than or equal to 1000",
    ),
    (
        "template field",
        VOLCANO.replace(
            "      template:\n        spec:\n          containers:",
            "      template:\n        spc: {}\n        spec:\n          containers:",
        ),
        "spec.tasks[0].template: unknown field 'spc' (a template has metadata and spec)",
    ),
    (
        "deployment replicas",
        DEPLOYMENT.replace("replicas: 3", "replicas: 0"),
        "vc.yaml:7: spec.replicas: must be a whole number ≥ 1",
    ),
    (
        "deployment template",
        DEPLOYMENT.split("  template:")[0],
        "vc.yaml:6: spec: a Deployment needs spec.template",
    ),
    (
        "deployment typo",
        DEPLOYMENT.replace("replicas: 3", "replica: 3"),
        "spec.replica: unknown field 'replica'; did you mean 'replicas'?",
    ),
    (
        "deployment version",
        DEPLOYMENT.replace("apps/v1", "extensions/v1beta1"),
        "vc.yaml:1: apiVersion: a Deployment needs apiVersion 'apps/v1', not 'extensions/v1beta1'",
    ),
    (
        "deployment scheduler",
        DEPLOYMENT.replace("      schedulerName: fused-scheduler\n", ""),
        "vc.yaml:12: spec.template.spec: schedulerName: fused-scheduler is missing",
    ),
    (
        "deployment probe",
        DEPLOYMENT.replace("periodSeconds: 2", "periodSeconds: 0"),
        "vc.yaml:18: spec.template.spec.containers[0].readinessProbe.periodSeconds: Input should "
        "be greater than or equal to 0.5",
    ),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in BAD], ids=[c for c, *_ in BAD])
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(text, "vc.yaml")
    assert message in str(caught.value)


def test_deployment_warns_of_what_it_ignores() -> None:
    text = DEPLOYMENT.replace("  replicas: 3\n", "  replicas: 3\n  paused: true\n")
    (parsed,) = parse_kube_yaml(text, "d.yaml")
    assert parsed.warnings == ("d.yaml:8: spec.paused is not supported; ignored",)


def test_volcano_zero_is_the_default_min_available_and_max_retry() -> None:
    """Volcano reads minAvailable 0 as every task and maxRetry 0 as its default, 3."""
    text = VOLCANO.replace("minAvailable: 2", "minAvailable: 0").replace(
        "maxRetry: 5", "maxRetry: 0"
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.min_member is None
    assert parsed.request.restart.max_restarts == 3


def _with_minimums(job: int | None, ps: int | None, worker: int | None) -> str:
    """VOLCANO with the job's minAvailable (None: left out) and the tasks' (ps: 1 replica,
    the worker task: 2)."""
    text = VOLCANO.replace("  minAvailable: 2\n", "" if job is None else f"  minAvailable: {job}\n")
    if ps is not None:
        text = text.replace("      replicas: 1\n", f"      replicas: 1\n      minAvailable: {ps}\n")
    if worker is not None:
        text = text.replace(
            "    - replicas: 2\n", f"    - replicas: 2\n      minAvailable: {worker}\n"
        )
    return text


@pytest.mark.parametrize(
    ("job", "ps", "worker", "min_member"),
    [
        (None, None, None, None),  # every task whole: the whole gang
        (2, None, 2, 2),  # the job's below the tasks' sum (3): Volcano checks the job's only
        (None, 0, 0, 1),  # no task has a minimum: any one task may start
        (0, 0, 0, 1),  # (0 is Volcano's "unset")
        (3, 1, 1, 3),  # the job's is every task: each task is whole anyway
    ],
)
def test_volcano_task_min_available(
    job: int | None, ps: int | None, worker: int | None, min_member: int | None
) -> None:
    (parsed,) = parse_kube_yaml(_with_minimums(job, ps, worker), "vc.yaml")
    assert parsed.request.min_member == min_member
    assert not [w for w in parsed.warnings if "minAvailable" in w]


def test_volcano_single_task_min_available_is_the_gangs() -> None:
    """One task: its minAvailable (or the job's, when larger) is the gang's minimum."""
    ps = VOLCANO[VOLCANO.index("    - name: ps") : VOLCANO.index("    - replicas: 2")]
    for job, min_member in ((None, 1), (2, 2)):
        (parsed,) = parse_kube_yaml(_with_minimums(job, None, 1).replace(ps, ""), "vc.yaml")
        assert (parsed.request.min_member, parsed.request.task_count) == (min_member, 2)


@pytest.mark.parametrize(
    ("job", "ps", "worker", "message"),
    [
        (
            None,
            None,
            1,
            "vc.yaml:17: spec.tasks[1].minAvailable: task 'default1' may start with 1 of its 2 "
            "replicas, each task held to its own minAvailable (the job's, 2, is at least their "
            "sum, 2): fusesched's gang minimum is the job's only (min_member)",
        ),
        (2, None, 1, "task 'default1' may start with 1 of its 2 replicas"),
        (None, None, 3, "vc.yaml:17: spec.tasks[1].minAvailable: 3 is more than the task's 2"),
        (None, -1, None, "vc.yaml:12: spec.tasks[0].minAvailable: must be a whole number ≥ 0"),
    ],
)
def test_volcano_task_min_available_refused(
    job: int | None, ps: int | None, worker: int | None, message: str
) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(_with_minimums(job, ps, worker), "vc.yaml")
    assert message in str(caught.value)


def _with_policies(job: str, task: str = "") -> str:
    text = VOLCANO.replace("  maxRetry: 5\n", f"  maxRetry: 5\n  policies: {job}\n")
    if task:
        text = text.replace("    - replicas: 2\n", f"    - replicas: 2\n      policies: {task}\n")
    return text


@pytest.mark.parametrize(
    ("job", "task", "retried", "warnings"),
    [
        ("[{event: PodFailed, action: RestartJob}]", "", True, []),
        ("[{events: [TaskFailed], action: RestartJob}]", "", True, []),
        ("[{event: PodEvicted, action: RestartJob}]", "", False, []),
        ("[{event: PodFailed, action: AbortJob}]", "", False, []),
        (
            "[]",
            "[{event: PodFailed, action: RestartTask}]",
            True,
            [
                "vc.yaml:19: spec.tasks[1].policies[0] (PodFailed → RestartTask): fusesched "
                "restarts the whole job after any failing exit"
            ],
        ),
        (
            "[{exitCode: 3, action: RestartJob}]",
            "",
            True,
            [
                "vc.yaml:9: spec.policies[0] (exitCode 3 → RestartJob): fusesched restarts the "
                "whole job after any failing exit"
            ],
        ),
        (
            "[{event: TaskCompleted, action: TerminateJob}]",
            "",
            False,
            [
                "vc.yaml:9: spec.policies[0] (TaskCompleted → TerminateJob) is not supported; "
                "ignored"
            ],
        ),
    ],
)
def test_volcano_policies(job: str, task: str, retried: bool, warnings: list[str]) -> None:
    """A policy restarting the job after a failure retries its application failures; one
    asking for what fusesched does anyway is silent; the others are warnings."""
    (parsed,) = parse_kube_yaml(_with_policies(job, task), "vc.yaml")
    assert parsed.request.restart.retry_application_failures is retried
    assert parsed.request.restart.max_restarts == 5
    assert list(parsed.warnings) == warnings


@pytest.mark.parametrize(
    ("job", "task", "completes"),
    [
        # on a task: that task's completion completes the job
        ("[]", "[{event: TaskCompleted, action: CompleteJob}]", [False, True]),
        # on the job: any task's
        ("[{events: [TaskCompleted], action: CompleteJob}]", "", [True, True]),
        ("[]", "", [False, False]),
    ],
)
def test_volcano_task_completed_completes_the_job(
    job: str, task: str, completes: list[bool]
) -> None:
    (parsed,) = parse_kube_yaml(_with_policies(job, task), "vc.yaml")
    assert [g.completes_job for g in parsed.request.groups] == completes
    assert parsed.warnings == ()
    dumped = parsed.request.model_dump(mode="json")["groups"]
    assert ["completes_job" in g for g in dumped] == completes  # (an older controller: absent)


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ("{event: PodFailed}", "vc.yaml:9: spec.policies: must be a list, not a mapping"),
        ("[{event: PodFailed}]", "vc.yaml:9: spec.policies[0]: a policy needs an action"),
        (
            "[{event: PodFailed, action: Restart}]",
            "spec.policies[0].action: must be one of AbortJob, RestartJob, RestartTask, "
            "RestartPod, TerminateJob, CompleteJob, ResumeJob, not 'Restart'",
        ),
        (
            "[{events: [PodFail], action: RestartJob}]",
            "spec.policies[0].events[0]: must be one of *, PodFailed,",
        ),
        (
            "[{event: PodFailed, exitCode: 1, action: RestartJob}]",
            "spec.policies[0]: a policy needs an event (or events) or an exitCode, not both",
        ),
        ("[{action: RestartJob}]", "spec.policies[0]: a policy needs an event (or events)"),
        (
            "[{exitCode: 0, action: RestartJob}]",
            "spec.policies[0].exitCode: must be a whole number other than 0",
        ),
        (
            "[{event: PodFailed, action: RestartJob, evnt: x}]",
            "spec.policies[0].evnt: unknown field 'evnt'; did you mean 'event'?",
        ),
    ],
)
def test_volcano_policy_errors(job: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(_with_policies(job), "vc.yaml")
    assert message in str(caught.value)


def test_deployment_pods_restart_always() -> None:
    """Kubernetes takes only restartPolicy Always in a Deployment's pods: so does fusesched."""
    always = DEPLOYMENT.replace(
        "      schedulerName: fused-scheduler\n",
        "      schedulerName: fused-scheduler\n      restartPolicy: Always\n",
    )
    assert parse_kube_yaml(always)[0].request.restart.always
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(always.replace("restartPolicy: Always", "restartPolicy: Never"), "d.yaml")
    assert str(caught.value) == (
        "d.yaml:14: spec.template.spec.restartPolicy: must be Always, not 'Never': a "
        "Deployment's pods are always restarted"
    )
