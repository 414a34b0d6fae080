"""A Kubernetes cluster as a fusesched pool, driven through the official ``kubernetes`` client.

fusesched's core has already chosen the nodes, so every pod is pinned to them with a required
node affinity on ``kubernetes.io/hostname``; Kubernetes (or Volcano, for gangs) only starts
them. The objects are built in :mod:`fusesched.backends.kube_objects`.

=====================  ==========================================================  ==========
fusesched job          Kubernetes objects                                          id kind
=====================  ==========================================================  ==========
one task, batch/hpc/ai  ``batch/v1`` Job, backoffLimit 0, activeDeadlineSeconds     ``job``
one task, service       ``v1`` Pod, restartPolicy Always                            ``pod``
gang (>1 task)          Volcano Job ``batch.volcano.sh/v1alpha1``: minAvailable,    ``vcjob``
                        one ``tasks[]`` entry per group
gang, podgroup mode     Volcano PodGroup ``scheduling.volcano.sh/v1beta1``          ``podgroup``
                        (minMember) + one Pod per task, annotated
                        ``scheduling.k8s.io/group-name``
``script``              + a ConfigMap per group, mounted and run as a file          —
=====================  ==========================================================  ==========

External ids are ``<kind>/<namespace>/<name>``. What their objects say (each Kubernetes state
as a :class:`RemoteState`) is read in :mod:`fusesched.backends.kube_status`.

Errors: 4xx from the API server → :class:`BackendRejected` with the server's message (except
401, 408 and 429, which say nothing about the job); 5xx, connection errors and timeouts →
:class:`BackendUnavailable`.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import urllib3
from kubernetes import client
from kubernetes import config as kube_config

from fusesched.backends import kube_objects as ko
from fusesched.backends.base import (
    BackendRejected,
    BackendUnavailable,
    RemoteJob,
    RemoteNode,
    RemoteState,
    RemoteStatus,
)
from fusesched.backends.kube_status import job_verdict, pod_verdict, remote_status, volcano_verdict
from fusesched.model.resources import QuantityError, Resources, parse_quantity
from fusesched.submit.resource_names import resource_name

_NOT_THE_JOBS_FAULT: Final = frozenset({401, 408, 429})
_INIT_OPTIONS: Final = frozenset(
    {"namespace", "scheduler_name", "default_image", "gang_mode", "request_timeout_s"}
)
_CONNECT_OPTIONS: Final = frozenset(
    {"kubeconfig", "context", "host", "token", "ca_cert", "verify_ssl"}
)


def _server_message(exc: client.ApiException) -> str:
    """The ``message`` of the API server's Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return f"{exc.status} {exc.reason}".strip()


@contextlib.contextmanager
def api_errors(action: str) -> Iterator[None]:
    """Turn the client's exceptions into the two errors the controller acts on."""
    try:
        yield
    except client.ApiException as exc:
        status = exc.status or 0
        message = f"{action}: {_server_message(exc)}"
        if 400 <= status < 500 and status not in _NOT_THE_JOBS_FAULT:
            raise BackendRejected(message) from exc
        raise BackendUnavailable(message) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendUnavailable(f"{action}: the API server cannot be reached ({exc})") from exc


def _is_not_found(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, client.ApiException) and cause.status == 404


@contextlib.contextmanager
def _gone_is_fine(action: str) -> Iterator[None]:
    """As :func:`api_errors`, with 404 (already deleted) not an error."""
    try:
        with api_errors(action):
            yield
    except BackendRejected as exc:
        if not _is_not_found(exc):
            raise


def _name(obj: client.V1Pod | client.V1ConfigMap) -> str:
    return (obj.metadata.name if obj.metadata else None) or ""


def _custom_api(kind: ko.Kind) -> ko.CustomApi:
    return ko.VOLCANO_JOB if kind == ko.Kind.VCJOB else ko.PODGROUP


def parse_id(external_id: str) -> tuple[ko.Kind, str, str] | None:
    parts = external_id.split("/")
    if len(parts) != 3 or parts[0] not in ko.Kind.__members__.values():
        return None
    return ko.Kind(parts[0]), parts[1], parts[2]


class KubernetesBackend:
    """A Kubernetes cluster (with Volcano for gangs) as a fusesched pool."""

    kind = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str = "default",
        scheduler_name: str = "volcano",
        default_image: str | None = None,
        gang_mode: str = "volcano-job",
        request_timeout_s: float = 30.0,
    ) -> None:
        if gang_mode not in ko.GANG_MODES:
            raise ValueError(f"gang_mode must be one of {ko.GANG_MODES}, not {gang_mode!r}")
        self.opts = ko.Options(namespace, scheduler_name, default_image, gang_mode)
        self.timeout = request_timeout_s
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @classmethod
    def from_options(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        host: str | None = None,
        token: str | None = None,
        ca_cert: str | None = None,
        verify_ssl: bool = True,
        **options: Any,
    ) -> KubernetesBackend:
        """Build from a pool's options: a kubeconfig file (and context), or an API server URL
        with an optional bearer token, or neither (in-cluster service account). ``options``
        are ``__init__``'s (namespace, scheduler_name, default_image, gang_mode,
        request_timeout_s)."""
        unknown = sorted(set(options) - _INIT_OPTIONS)
        if unknown:
            known = ", ".join(sorted(_INIT_OPTIONS | _CONNECT_OPTIONS))
            raise ValueError(
                f"unknown Kubernetes pool option(s) {', '.join(unknown)}; known: {known}"
            )
        if kubeconfig is not None and host is not None:
            raise ValueError("give kubeconfig or host, not both")
        if kubeconfig is not None:
            api = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context
            )
        else:
            conf = client.Configuration()
            if host is None:
                kube_config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            else:
                conf.host = host
                conf.verify_ssl = verify_ssl
                conf.ssl_ca_cert = ca_cert
                if token:
                    conf.api_key = {"BearerToken": token}
                    conf.api_key_prefix = {"BearerToken": "Bearer"}
            api = client.ApiClient(conf)
        return cls(api, **options)

    # -- nodes ------------------------------------------------------------------------------

    def nodes(self) -> Sequence[RemoteNode]:
        with api_errors("listing nodes"):
            listed = self.core.list_node(_request_timeout=self.timeout)
        return [self._node(node) for node in listed.items]

    @staticmethod
    def _node(node: client.V1Node) -> RemoteNode:
        name = node.metadata.name if node.metadata and node.metadata.name else ""
        status = node.status or client.V1NodeStatus()
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        unschedulable = bool(node.spec and node.spec.unschedulable)
        labels = dict(node.metadata.labels or {}) if node.metadata else {}
        return RemoteNode(
            name, _capacity(status.allocatable or {}), labels, ready and not unschedulable
        )

    # -- submit -----------------------------------------------------------------------------

    def submit(self, job: RemoteJob) -> str:
        manifest = ko.build(job, self.opts, secrets.token_hex(3)[:5])
        external_id = f"{manifest.kind}/{self.opts.namespace}/{manifest.name}"
        try:
            self._create(manifest)
        except BaseException:
            # Leave nothing half-made behind: a gang with half its pods would hold nodes.
            with contextlib.suppress(Exception):
                self.cancel(external_id)
            raise
        return external_id

    def _create(self, manifest: ko.Manifest) -> None:
        ns, t = self.opts.namespace, self.timeout
        for config_map in manifest.config_maps:
            with api_errors(f"creating ConfigMap {_name(config_map)}"):
                self.core.create_namespaced_config_map(ns, config_map, _request_timeout=t)
        if manifest.batch_job is not None:
            with api_errors(f"creating Job {manifest.name}"):
                self.batch.create_namespaced_job(ns, manifest.batch_job, _request_timeout=t)
        if manifest.custom is not None:
            api = _custom_api(manifest.kind)
            with api_errors(f"creating {api.group} {api.kind} {manifest.name}"):
                self.custom.create_namespaced_custom_object(
                    api.group, api.version, ns, api.plural, manifest.custom, _request_timeout=t
                )
        for pod in manifest.pods:
            with api_errors(f"creating Pod {_name(pod)}"):
                self.core.create_namespaced_pod(ns, pod, _request_timeout=t)

    # -- cancel -----------------------------------------------------------------------------

    def release(self, external_id: str) -> None:
        """A finished job's objects (its pods and their logs included) are deleted once the
        controller has stored its final state and output."""
        self.cancel(external_id)

    def cancel(self, external_id: str) -> None:
        """Delete the object (its controller's pods go with it, in the background), then the
        pods of a PodGroup and the ConfigMaps, which nothing else owns."""
        parsed = parse_id(external_id)
        if parsed is None:
            return
        kind, ns, name = parsed
        t = self.timeout
        with _gone_is_fine(f"deleting {external_id}"):
            self._delete_main(kind, ns, name)
        if kind == ko.Kind.PODGROUP:
            for pod in self._pods(ns, name):
                with _gone_is_fine(f"deleting Pod {_name(pod)}"):
                    self.core.delete_namespaced_pod(
                        _name(pod), ns, _request_timeout=t, _preload_content=False
                    )
        with api_errors("listing ConfigMaps"):
            maps = self.core.list_namespaced_config_map(
                ns, label_selector=f"{ko.LABEL_OBJECT}={name}", _request_timeout=t
            )
        for config_map in maps.items:
            with _gone_is_fine(f"deleting ConfigMap {_name(config_map)}"):
                self.core.delete_namespaced_config_map(
                    _name(config_map), ns, _request_timeout=t, _preload_content=False
                )

    def _delete_main(self, kind: ko.Kind, ns: str, name: str) -> None:
        # _preload_content=False: the answer (a Status or the object) is not needed, and not
        # decoding it keeps a server's variant of it from failing the call
        opts: dict[str, Any] = {
            "propagation_policy": "Background",
            "_request_timeout": self.timeout,
            "_preload_content": False,
        }
        if kind == ko.Kind.JOB:
            self.batch.delete_namespaced_job(name, ns, **opts)
        elif kind == ko.Kind.POD:
            self.core.delete_namespaced_pod(name, ns, **opts)
        else:
            api = _custom_api(kind)
            self.custom.delete_namespaced_custom_object(
                api.group, api.version, ns, api.plural, name, **opts
            )

    # -- poll -------------------------------------------------------------------------------

    def poll(self, external_ids: Sequence[str]) -> Sequence[RemoteStatus]:
        out = []
        for external_id in external_ids:
            try:
                status = self._poll_one(external_id)
            except BackendRejected as exc:
                if not _is_not_found(exc):
                    raise
                continue
            if status is not None:
                out.append(status)
        return out

    def _poll_one(self, external_id: str) -> RemoteStatus | None:
        parsed = parse_id(external_id)
        if parsed is None:
            return None
        kind, ns, name = parsed
        t = self.timeout
        if kind == ko.Kind.POD:
            with api_errors(f"reading {external_id}"):
                pod = self.core.read_namespaced_pod(name, ns, _request_timeout=t)
            return remote_status(external_id, *pod_verdict([pod]), [pod])
        if kind == ko.Kind.JOB:
            with api_errors(f"reading {external_id}"):
                batch_job = self.batch.read_namespaced_job(name, ns, _request_timeout=t)
            pods = self._pods(ns, name)
            return remote_status(external_id, *job_verdict(batch_job, pods), pods)
        api = _custom_api(kind)
        with api_errors(f"reading {external_id}"):
            obj = self.custom.get_namespaced_custom_object(
                api.group, api.version, ns, api.plural, name, _request_timeout=t
            )
        pods = self._pods(ns, name)
        if kind == ko.Kind.VCJOB:
            return remote_status(external_id, *volcano_verdict(obj, pods), pods)
        if not pods:
            return RemoteStatus(external_id, RemoteState.FAILED, reason="its pods are gone")
        return remote_status(external_id, *pod_verdict(pods), pods)

    def _pods(self, ns: str, name: str, extra: str = "") -> list[client.V1Pod]:
        selector = f"{ko.LABEL_OBJECT}={name}" + (f",{extra}" if extra else "")
        with api_errors(f"listing the pods of {name}"):
            listed = self.core.list_namespaced_pod(
                ns, label_selector=selector, _request_timeout=self.timeout
            )
        return sorted(listed.items, key=_name)

    # -- logs -------------------------------------------------------------------------------

    def logs(self, external_id: str, job: RemoteJob) -> Mapping[str, bytes]:
        """Each pod's container output (stdout and stderr interleaved, as the kubelet keeps
        them) under ``<pod name>.stdout``; pods not started yet have none."""
        parsed = parse_id(external_id)
        if parsed is None:
            return {}
        _, ns, name = parsed
        out: dict[str, bytes] = {}
        for pod in self._pods(ns, name, f"{ko.LABEL_JOB_ID}={ko.label_value(job.job_id)}"):
            pod_name = _name(pod)
            try:
                with api_errors(f"reading the log of {pod_name}"):
                    raw: object = self.core.read_namespaced_pod_log(
                        pod_name,
                        ns,
                        container=ko.CONTAINER,
                        _request_timeout=self.timeout,
                        _preload_content=False,
                    )
            except BackendRejected:
                continue  # 400: the container has not started; 404: the pod just went
            out[f"{pod_name}.stdout"] = _log_bytes(raw)
        return out


def _log_bytes(raw: object) -> bytes:
    """The log as written: the raw response's body (the client would decode it as text)."""
    data = getattr(raw, "data", raw)
    if isinstance(data, str):
        return data.encode()
    return bytes(data) if isinstance(data, bytes | bytearray) else b""


def _capacity(allocatable: Mapping[str, str]) -> Resources:
    """What a node offers, in fusesched's units; entries fusesched cannot request (pods,
    attachable volumes) are left out."""
    amounts: dict[str, int] = {}
    for raw_name, quantity in allocatable.items():
        try:
            name = resource_name(raw_name)
            amounts[name] = parse_quantity(name, quantity)
        except (ValueError, QuantityError):
            continue
    return Resources(amounts)
