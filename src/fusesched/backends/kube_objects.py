"""The Kubernetes objects one fusesched job becomes (see ``backends/kubernetes.py``).

Pure functions, no API calls, so the objects can be checked without a cluster. Built-in kinds
(Pod, Job, ConfigMap) are the client's own models, which validate field names and types as
they are built; Volcano's Job and PodGroup are custom resources the client does not know, so
they are dicts whose pod templates come from the models and whose own fields are checked
against a small schema (``backends/volcano_schema.py``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from kubernetes import client

from fusesched.backends.base import BackendRejected, RemoteJob, RemotePlacement
from fusesched.backends.volcano_schema import PODGROUP as PODGROUP
from fusesched.backends.volcano_schema import VOLCANO_JOB as VOLCANO_JOB
from fusesched.backends.volcano_schema import CustomApi as CustomApi
from fusesched.backends.volcano_schema import check_custom as check_custom
from fusesched.backends.volcano_schema import serialise as serialise
from fusesched.model.job import JobType
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.resources import CPU, GPU_MILLI, MEMORY, Resources
from fusesched.submit.identify import identify_type
from fusesched.submit.task_group import TaskGroupRequest

LABEL_JOB_ID: Final = "fusesched.io/job-id"
LABEL_TENANT: Final = "fusesched.io/tenant"
LABEL_QUEUE: Final = "fusesched.io/queue"
LABEL_GROUP: Final = "fusesched.io/group"
LABEL_OBJECT: Final = "fusesched.io/object"  # the external id's name: ties pods to one submit
GROUP_NAME_ANNOTATION: Final = "scheduling.k8s.io/group-name"
CONTAINER: Final = "task"
SCRIPT_DIR: Final = "/fusesched/script"
SCRIPT_KEY: Final = "run"
GANG_MODES: Final = ("volcano-job", "podgroup")
#: A Volcano task's policy for a group whose completion completes the job (``completes_job``).
COMPLETES_JOB: Final = {"event": "TaskCompleted", "action": "CompleteJob"}

_PLAIN_NATIVE: Final = frozenset({MEMORY, "ephemeral-storage"})


class Kind(StrEnum):
    """The first part of an external id: which object stands for the job."""

    JOB = "job"  # batch/v1 Job
    POD = "pod"  # v1 Pod (services)
    VCJOB = "vcjob"  # batch.volcano.sh/v1alpha1 Job
    PODGROUP = "podgroup"  # scheduling.volcano.sh/v1beta1 PodGroup + Pods


@dataclass(frozen=True, slots=True)
class Manifest:
    """Everything to create for one job, in creation order: ConfigMaps first (pods mount
    them), then the object the external id names, then (podgroup mode) its pods."""

    kind: Kind
    name: str
    config_maps: tuple[client.V1ConfigMap, ...] = ()
    batch_job: client.V1Job | None = None
    pods: tuple[client.V1Pod, ...] = ()
    custom: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Options:
    """What the back end's options decide about the objects."""

    namespace: str = "default"
    scheduler_name: str = "volcano"
    default_image: str | None = None
    gang_mode: str = "volcano-job"


# -- names --------------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def dns_label(text: str, max_len: int = 63) -> str:
    """``text`` as a DNS-1123 label; a short hash of the original is appended whenever
    characters had to change, so two ids that differ only in case or punctuation stay apart."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if clean and clean == text and len(clean) <= max_len:
        return clean
    head = clean[: max_len - 7].rstrip("-")
    return f"{head}-{_digest(text)}" if head else _digest(text)


def label_value(text: str) -> str:
    """``text`` as a valid label value (63 characters, alphanumeric at both ends)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)
    clean = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", clean)
    if clean == text and len(clean) <= 63:
        return clean
    head = re.sub(r"[^A-Za-z0-9]+$", "", clean[:56])
    return f"{head}-{_digest(text)}" if head else _digest(text)


def object_name(job_id: str, suffix: str) -> str:
    """``fs-<job id>-<suffix>``: short enough that Volcano's ``<job>-<task>-<index>`` pod
    names stay valid host names; the suffix keeps a requeued job clear of its last run."""
    return f"{dns_label('fs-' + job_id, 32)}-{suffix}"


def task_name(group: str) -> str:
    return dns_label(group, 15)


# -- pieces of a pod ----------------------------------------------------------------------


def quantities(resources: Resources) -> dict[str, str]:
    """Kubernetes quantities for one task's resources (cpu in millicores, bytes as plain
    integers); resources Kubernetes has no name for are refused rather than dropped."""
    out: dict[str, str] = {}
    for name, amount in resources.items():
        if name == CPU:
            out[name] = str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
        elif name == GPU_MILLI:
            raise BackendRejected(f"{GPU_MILLI} (GPU shares) cannot run on a Kubernetes pool")
        elif name in _PLAIN_NATIVE or name.startswith("hugepages-") or "/" in name:
            out[name] = str(amount)
        else:
            raise BackendRejected(
                f"resource {name!r} has no Kubernetes name (use a vendor-qualified name)"
            )
    return out


def labels(job: RemoteJob, name: str, group: str | None = None) -> dict[str, str]:
    """The request's own labels, then fusesched's (which win)."""
    out = dict(job.request.labels)
    out[LABEL_JOB_ID] = label_value(job.job_id)
    out[LABEL_TENANT] = label_value(job.request.tenant)
    out[LABEL_QUEUE] = label_value(job.request.queue)
    out[LABEL_OBJECT] = name
    if group is not None:
        out[LABEL_GROUP] = label_value(group)
    return out


def _image(group: TaskGroupRequest, default_image: str | None) -> str:
    if group.image is not None and group.registry_image:
        return group.image
    if default_image is not None:
        return default_image
    given = f"its image {group.image!r} is a path on fusesched's nodes, and " if group.image else ""
    raise BackendRejected(
        f"group {group.name!r}: no container image: {given}this Kubernetes pool has no "
        "default_image; give a registry image such as docker.io/library/python:3.11"
    )


def _affinity(nodes: Sequence[str]) -> client.V1Affinity:
    """Pin the pod to the nodes fusesched's core chose: the placement is already decided."""
    term = client.V1NodeSelectorTerm(
        match_expressions=[
            client.V1NodeSelectorRequirement(key=LABEL_HOSTNAME, operator="In", values=list(nodes))
        ]
    )
    selector = client.V1NodeSelector(node_selector_terms=[term])
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=selector
        )
    )


def _script_args(job: RemoteJob, group: TaskGroupRequest) -> list[str] | None:
    """The batch script's arguments (``sbatch job.sh ARGS…``): its first group's alone."""
    request = job.request
    return request.script_args if request.groups and request.groups[0] is group else None


def _command(
    group: TaskGroupRequest, config_map: str | None, args: Sequence[str] | None = None
) -> list[str]:
    """argv as is; a script runs as a mounted file (by its own ``#!`` line when it has one)
    so no shell ever re-parses the user's text, with its arguments ``args`` (sbatch's)."""
    if config_map is None:
        return list(group.argv)
    path = f"{SCRIPT_DIR}/{SCRIPT_KEY}"
    run = [path] if (group.script or "").startswith("#!") else ["/bin/sh", path]
    return run + list(args or ())


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One group's pod settings, shared by its tasks."""

    group: TaskGroupRequest
    placement: RemotePlacement
    config_map: str | None  # name of the ConfigMap holding its script


def pod_spec(
    job: RemoteJob, plan: PodPlan, opts: Options, restart: str, nodes: Sequence[str]
) -> client.V1PodSpec:
    group = plan.group
    amounts = quantities(plan.placement.resources)
    env = {**group.env, **job.env}
    container = client.V1Container(
        name=CONTAINER,
        image=_image(group, opts.default_image),
        command=_command(group, plan.config_map, _script_args(job, group)),
        env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()] or None,
        working_dir=group.workdir,
        ports=[client.V1ContainerPort(container_port=p) for p in group.ports] or None,
        resources=client.V1ResourceRequirements(requests=amounts, limits=dict(amounts)),
    )
    volumes = None
    if plan.config_map is not None:
        container.volume_mounts = [
            client.V1VolumeMount(name="script", mount_path=SCRIPT_DIR, read_only=True)
        ]
        source = client.V1ConfigMapVolumeSource(name=plan.config_map, default_mode=0o755)
        volumes = [client.V1Volume(name="script", config_map=source)]
    walltime = job.request.walltime_s
    return client.V1PodSpec(
        scheduler_name=opts.scheduler_name,
        restart_policy=restart,
        containers=[container],
        volumes=volumes,
        affinity=_affinity(nodes),
        active_deadline_seconds=None if walltime is None else math.ceil(walltime),
    )


def restart_policy(job: RemoteJob) -> str:
    """Services restart in place; anything else runs once (fusesched decides on retries)."""
    service = (job.request.type or identify_type(job.request)) == JobType.SERVICE
    return "Always" if service else "Never"


def template(job: RemoteJob, name: str, plan: PodPlan, opts: Options) -> client.V1PodTemplateSpec:
    meta = client.V1ObjectMeta(labels=labels(job, name, plan.group.name))
    spec = pod_spec(job, plan, opts, restart_policy(job), list(plan.placement.tasks_per_node))
    return client.V1PodTemplateSpec(metadata=meta, spec=spec)


# -- whole jobs ---------------------------------------------------------------------------


def plans(job: RemoteJob, name: str) -> list[PodPlan]:
    groups = {g.name: g for g in job.request.groups}
    out = []
    for placement in job.placements:
        group = groups.get(placement.group)
        if group is None:
            raise BackendRejected(f"placement names group {placement.group!r}, not in the job")
        config_map = f"{name}-{task_name(group.name)}-script" if group.script else None
        out.append(PodPlan(group, placement, config_map))
    if not out:
        raise BackendRejected("the job has no placement")
    return out


def _config_maps(
    job: RemoteJob, name: str, pod_plans: Sequence[PodPlan], opts: Options
) -> tuple[client.V1ConfigMap, ...]:
    return tuple(
        client.V1ConfigMap(
            api_version="v1",
            kind="ConfigMap",
            metadata=client.V1ObjectMeta(
                name=p.config_map, namespace=opts.namespace, labels=labels(job, name, p.group.name)
            ),
            data={SCRIPT_KEY: p.group.script or ""},
        )
        for p in pod_plans
        if p.config_map is not None
    )


def build(job: RemoteJob, opts: Options, suffix: str) -> Manifest:
    """The objects for ``job``; ``suffix`` makes the names of this submission unique."""
    if opts.gang_mode not in GANG_MODES:
        raise ValueError(f"gang_mode must be one of {GANG_MODES}, not {opts.gang_mode!r}")
    name = object_name(job.job_id, suffix)
    pod_plans = plans(job, name)
    maps = _config_maps(job, name, pod_plans, opts)
    if job.gang and opts.gang_mode == "podgroup":
        return _podgroup(job, name, pod_plans, opts, maps)
    if job.gang:
        return Manifest(Kind.VCJOB, name, maps, custom=volcano_job(job, name, pod_plans, opts))
    plan = pod_plans[0]
    meta = client.V1ObjectMeta(
        name=name, namespace=opts.namespace, labels=labels(job, name, plan.group.name)
    )
    if restart_policy(job) == "Always":
        spec = pod_spec(job, plan, opts, "Always", list(plan.placement.tasks_per_node))
        pod = client.V1Pod(api_version="v1", kind="Pod", metadata=meta, spec=spec)
        return Manifest(Kind.POD, name, maps, pods=(pod,))
    walltime = job.request.walltime_s
    spec_job = client.V1JobSpec(
        backoff_limit=0,
        active_deadline_seconds=None if walltime is None else math.ceil(walltime),
        template=template(job, name, plan, opts),
    )
    batch = client.V1Job(api_version="batch/v1", kind="Job", metadata=meta, spec=spec_job)
    return Manifest(Kind.JOB, name, maps, batch_job=batch)


def min_member(job: RemoteJob) -> int:
    total = sum(sum(p.tasks_per_node.values()) for p in job.placements)
    wanted = job.request.min_member
    return total if wanted is None else min(wanted, total)


def volcano_job(
    job: RemoteJob, name: str, pod_plans: Sequence[PodPlan], opts: Options
) -> dict[str, Any]:
    """A Volcano Job: one task per group; the first failed or evicted pod aborts the gang
    (fusesched, not Volcano, decides about retries); a group's ``completes_job`` is its
    task's ``TaskCompleted → CompleteJob`` (its pods all succeeded: the others are stopped
    and the job completes)."""
    meta = client.V1ObjectMeta(name=name, namespace=opts.namespace, labels=labels(job, name))
    tasks: list[dict[str, Any]] = []
    for p in pod_plans:
        task = {
            "name": task_name(p.group.name),
            "replicas": sum(p.placement.tasks_per_node.values()),
            "template": serialise(template(job, name, p, opts)),
        }
        if p.group.completes_job:
            task["policies"] = [COMPLETES_JOB]
        tasks.append(task)
    obj = {
        "apiVersion": VOLCANO_JOB.api_version,
        "kind": VOLCANO_JOB.kind,
        "metadata": serialise(meta),
        "spec": {
            "minAvailable": min_member(job),
            "schedulerName": opts.scheduler_name,
            "policies": [
                {"event": "PodFailed", "action": "AbortJob"},
                {"event": "PodEvicted", "action": "AbortJob"},
            ],
            "tasks": tasks,
        },
    }
    check_custom(obj)
    return obj


def _podgroup(
    job: RemoteJob,
    name: str,
    pod_plans: Sequence[PodPlan],
    opts: Options,
    maps: tuple[client.V1ConfigMap, ...],
) -> Manifest:
    """A PodGroup plus one pod per task, each pinned to the very node the core chose."""
    meta = client.V1ObjectMeta(name=name, namespace=opts.namespace, labels=labels(job, name))
    group_obj = {
        "apiVersion": PODGROUP.api_version,
        "kind": PODGROUP.kind,
        "metadata": serialise(meta),
        "spec": {"minMember": min_member(job)},
    }
    check_custom(group_obj)
    pods: list[client.V1Pod] = []
    for plan in pod_plans:
        index = 0
        for node, count in plan.placement.tasks_per_node.items():
            for _ in range(count):
                pod_meta = client.V1ObjectMeta(
                    name=f"{name}-{task_name(plan.group.name)}-{index}",
                    namespace=opts.namespace,
                    labels=labels(job, name, plan.group.name),
                    annotations={GROUP_NAME_ANNOTATION: name},
                )
                spec = pod_spec(job, plan, opts, restart_policy(job), [node])
                pods.append(
                    client.V1Pod(api_version="v1", kind="Pod", metadata=pod_meta, spec=spec)
                )
                index += 1
    return Manifest(Kind.PODGROUP, name, maps, pods=tuple(pods), custom=group_obj)
