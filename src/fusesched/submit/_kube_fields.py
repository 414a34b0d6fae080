"""The Kubernetes fields the Pod/Job reader knows: *used* ones map to the request, *quiet* ones
have no effect on a process-based runtime and are ignored, *warn* ones would change where or how
the pod runs but are not supported (a warning says so). Any other field is an error."""

from __future__ import annotations

from typing import Final

POD_USED: Final = frozenset(
    {
        "containers",
        "initContainers",
        "nodeSelector",
        "nodeName",
        "affinity",
        "schedulerName",
        "activeDeadlineSeconds",
        "priority",
    }
)
POD_QUIET: Final = frozenset(
    {
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "dnsPolicy",
        "enableServiceLinks",
        "automountServiceAccountToken",
        "serviceAccountName",
        "serviceAccount",
        "imagePullSecrets",
    }
)
POD_WARN: Final = frozenset(
    {
        "dnsConfig",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "os",
        "overhead",
        "preemptionPolicy",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "runtimeClassName",
        "schedulingGates",
        "securityContext",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    }
)
CONTAINER_USED: Final = frozenset(
    {
        "name",
        "command",
        "args",
        "env",
        "envFrom",
        "image",
        "workingDir",
        "ports",
        "resources",
        "livenessProbe",  # → the group's liveness and readiness (submit/kube_probes.py)
        "readinessProbe",
    }
)
CONTAINER_QUIET: Final = frozenset(
    {
        "imagePullPolicy",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "stdin",
        "stdinOnce",
        "tty",
    }
)
CONTAINER_WARN: Final = frozenset(
    {
        "lifecycle",
        "startupProbe",
        "resizePolicy",
        "restartPolicy",
        "securityContext",
        "volumeDevices",
        "volumeMounts",
    }
)
JOB_USED: Final = frozenset(
    {
        "template",
        "parallelism",
        "completions",
        "completionMode",
        "activeDeadlineSeconds",
        "suspend",
    }
)
JOB_QUIET: Final = frozenset({"backoffLimit", "ttlSecondsAfterFinished", "selector"})
JOB_WARN: Final = frozenset(
    {
        "backoffLimitPerIndex",
        "manualSelector",
        "maxFailedIndexes",
        "podFailurePolicy",
        "podReplacementPolicy",
        "successPolicy",
        "managedBy",
    }
)
