"""Volcano's custom resources as ``backends/kube_objects.py`` writes them: their API names
(:class:`CustomApi`), and the small schema a Volcano Job or PodGroup is checked against before
it is sent (:func:`check_custom`). The Kubernetes client has no models for them, so they are
dicts; their pod templates come from the client's models (:func:`serialise`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client
from pydantic import ValidationError

from fusesched.backends.base import BackendRejected

_SERIALIZER: Final = client.ApiClient()


@dataclass(frozen=True, slots=True)
class CustomApi:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


VOLCANO_JOB: Final = CustomApi("batch.volcano.sh", "v1alpha1", "jobs", "Job")
PODGROUP: Final = CustomApi("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")


def serialise(obj: object) -> dict[str, Any]:
    """A model as the JSON dict the API server receives."""
    data = _SERIALIZER.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    assert isinstance(data, dict)
    return data


_Check = Callable[[object], bool]


def _int_at_least(low: int) -> _Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_str(v: object) -> bool:
    return isinstance(v, str) and bool(v)


def _is_dns_label(v: object) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", v) is not None


def _is_template(v: object) -> bool:
    """Valid for the client's model and nothing lost on the way (``from_dict`` drops keys it
    does not know, so the round trip must give back the same dict)."""
    try:
        return isinstance(v, dict) and serialise(client.V1PodTemplateSpec.from_dict(v)) == v
    except ValidationError:
        return False


_EVENTS: Final = frozenset(
    {"*", "PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted"}
)
_ACTIONS: Final = frozenset(
    {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob", "CompleteJob"}
)

#: field → (required, check) for the parts of Volcano's CRDs ``kube_objects`` writes.
SCHEMA: Final[Mapping[str, Mapping[str, tuple[bool, _Check]]]] = {
    "Job.spec": {
        "minAvailable": (True, _int_at_least(1)),
        "schedulerName": (True, _is_str),
        "queue": (False, _is_str),
        "policies": (False, lambda v: isinstance(v, list)),
        "tasks": (True, lambda v: isinstance(v, list) and bool(v)),
    },
    "Job.spec.tasks[]": {
        "name": (True, _is_dns_label),
        "replicas": (True, _int_at_least(1)),
        "template": (True, _is_template),
        "policies": (False, lambda v: isinstance(v, list)),
    },
    "Job.spec.policies[]": {
        "event": (True, lambda v: v in _EVENTS),
        "action": (True, lambda v: v in _ACTIONS),
    },
    "PodGroup.spec": {"minMember": (True, _int_at_least(1)), "queue": (False, _is_str)},
}


def _check(obj: object, where: str, problems: list[str]) -> None:
    if not isinstance(obj, dict):
        problems.append(f"{where} must be a mapping")
        return
    fields = SCHEMA[where]
    for key in obj.keys() - fields.keys():
        problems.append(f"{where}.{key} is not a field this back end knows")
    for key, (required, ok) in fields.items():
        if key not in obj:
            if required:
                problems.append(f"{where}.{key} is missing")
        elif not ok(obj[key]):
            problems.append(f"{where}.{key} is invalid: {obj[key]!r:.80}")


def check_custom(obj: Mapping[str, Any]) -> None:
    """Check a Volcano Job or PodGroup against :data:`SCHEMA` (and the cross-field rules);
    a failure is a bug here, reported as a rejection so the job fails with the reason."""
    api = VOLCANO_JOB if obj.get("kind") == VOLCANO_JOB.kind else PODGROUP
    problems: list[str] = []
    if obj.get("apiVersion") != api.api_version or obj.get("kind") != api.kind:
        problems.append(f"apiVersion/kind must be {api.api_version} {api.kind}")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not _is_dns_label(meta.get("name")):
        problems.append("metadata.name must be a DNS-1123 label")
    spec = obj.get("spec")
    _check(spec, f"{api.kind}.spec", problems)
    if api is VOLCANO_JOB and isinstance(spec, dict):
        _check_tasks(spec, problems)
    if problems:
        raise BackendRejected("invalid Volcano object: " + "; ".join(problems))


def _check_tasks(spec: Mapping[str, Any], problems: list[str]) -> None:
    """The rules across fields: unique task names, minAvailable within the replicas."""
    tasks = [t for t in _items(spec.get("tasks")) if isinstance(t, dict)]
    for task in _items(spec.get("tasks")):
        _check(task, "Job.spec.tasks[]", problems)
        for policy in _items(task.get("policies") if isinstance(task, dict) else None):
            _check(policy, "Job.spec.policies[]", problems)
    for policy in _items(spec.get("policies")):
        _check(policy, "Job.spec.policies[]", problems)
    names = [t.get("name") for t in tasks]
    if len(set(names)) != len(names):
        problems.append("Job.spec.tasks[].name must be unique")
    total = sum(t["replicas"] for t in tasks if isinstance(t.get("replicas"), int))
    wanted = spec.get("minAvailable")
    if isinstance(wanted, int) and wanted > total:
        problems.append(f"Job.spec.minAvailable exceeds the {total} replicas")


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
