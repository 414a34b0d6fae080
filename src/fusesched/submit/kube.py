"""Kubernetes-style Pod (``v1``) and Job (``batch/v1``) YAML for ``schedulerName:
fused-scheduler``.

Mapping (docs/SUBMIT.md has the table):

* each container's requests, with its limits filling requests it lacks (as Kubernetes does),
  summed over containers, and at least the largest init container → one task's resources;
* the main container (annotation ``kubectl.kubernetes.io/default-container``, else the first)
  gives argv (``command`` + ``args``), env (plain ``value`` only), ``image``, ``workingDir``
  and ports, and its ``livenessProbe``/``readinessProbe`` become the group's ``liveness``/
  ``readiness`` (:mod:`fusesched.submit.kube_probes`); other containers are not started (a
  warning says so);
* ``nodeSelector``, ``nodeName`` and ``affinity.nodeAffinity`` (one required term of
  ``matchExpressions``, and preferred terms) → placement;
* Job ``parallelism``/``completions`` → replicas (a gang); completions above parallelism →
  an array of single-task jobs, ``parallelism`` at a time; ``activeDeadlineSeconds`` →
  walltime; ``suspend: true`` → submitted held (``fusesched release`` resumes it);
  ``metadata.namespace`` → tenant; annotations ``fusesched.io/queue``, ``/qos``, ``/type``,
  ``/priority``, ``/min-member``, ``/notify``, ``/licenses`` and label
  ``kueue.x-k8s.io/queue-name`` → the fields of the same name.

Fields that would change where or how the pod runs but are not supported (tolerations, pod
(anti-)affinity, volumes, startup and gRPC probes, …) are returned as warnings; unknown fields are
errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.resources import QuantityError, Resources, parse_quantity
from fusesched.submit._kube_fields import (
    CONTAINER_QUIET,
    CONTAINER_USED,
    CONTAINER_WARN,
    JOB_QUIET,
    JOB_USED,
    JOB_WARN,
    POD_QUIET,
    POD_USED,
    POD_WARN,
)
from fusesched.submit._yamldoc import Document, load_documents
from fusesched.submit.errors import SubmitError, read_source
from fusesched.submit.kube_probes import add_probes
from fusesched.submit.problems import Loc
from fusesched.submit.request import ParsedJob, parse_request
from fusesched.submit.resource_names import resource_name

SCHEDULER_NAME: Final = "fused-scheduler"
KINDS: Final = {"Pod": "v1", "Job": "batch/v1"}
ANNOTATION_PREFIX: Final = "fusesched.io/"
ANNOTATED_FIELDS: Final = {
    "queue": "queue",
    "qos": "qos",
    "type": "type",
    "priority": "priority",
    "min-member": "min_member",
    "notify": "notify",  # mail types, as sbatch --mail-type ("END,FAIL"): to the job's user
    "licenses": "licenses",  # cluster licenses, as sbatch -L ("matlab:2,ansys")
}
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
DEFAULT_CONTAINER: Final = "kubectl.kubernetes.io/default-container"

_OPS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def looks_like_kube(data: object) -> bool:
    """True for a mapping with an ``apiVersion`` other than fusesched's own."""
    if not isinstance(data, Mapping) or data.get("apiVersion") is None:
        return False
    return not str(data["apiVersion"]).startswith("fusesched.io/")


def parse_kube_yaml(text: str, source: str = "<string>") -> list[ParsedJob]:
    """One job per Pod or Job document of a Kubernetes YAML text."""
    docs = load_documents(text, source)
    if not docs:
        raise SubmitError("no Pod or Job in the file (it is empty)", source=source)
    return [job_from_kube(doc) for doc in docs]


def load_kube_yaml(path: str | Path) -> list[ParsedJob]:
    """:func:`parse_kube_yaml` on a file."""
    text, name = read_source(path, "the file")
    return parse_kube_yaml(text, source=name)


def job_from_kube(doc: Document) -> ParsedJob:
    """One job from one Kubernetes Pod or Job document."""
    return _KubeReader(doc).job()


def _mapping(value: object, doc: Document, loc: Loc, what: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise doc.error(f"{what} must be a mapping", loc)
    return {str(k): v for k, v in value.items()}


def _list(value: object, doc: Document, loc: Loc, what: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise doc.error(f"{what} must be a list", loc)
    return value


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _KubeReader:
    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.warnings: list[str] = []
        self.renames: dict[str, Loc] = {}
        self.default_container = ""

    def error(self, message: str, loc: Loc) -> SubmitError:
        return self.doc.error(message, loc, field=_dotted(loc) or None)

    def warn(self, message: str, loc: Loc) -> None:
        self.warnings.append(f"{self.doc.source}:{self.doc.line_of(loc)}: {message}")

    def check_fields(
        self,
        obj: Mapping[str, object],
        loc: Loc,
        used: frozenset[str],
        quiet: frozenset[str],
        warn: frozenset[str],
    ) -> None:
        known = used | quiet | warn
        for key in obj:
            if key in warn:
                self.warn(f"{_dotted((*loc, key))} is not supported; ignored", (*loc, key))
            elif key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(f"unknown field {key!r}{hint}", (*loc, key))

    # -- the object -------------------------------------------------------------------------

    def job(self) -> ParsedJob:
        doc = self.doc
        obj = _mapping(doc.data, doc, (), "a Kubernetes object")
        kind, version = obj.get("kind"), obj.get("apiVersion")
        if kind not in KINDS:
            hint = (
                f" (a fusesched job file has apiVersion fusesched.io/v1, not {version!r})"
                if "fusesched" in str(version)
                else ""
            )
            raise self.error(
                f"{kind!r} is not supported; submit a Pod (v1) or a Job (batch/v1){hint}",
                ("kind",),
            )
        assert isinstance(kind, str)
        if version != KINDS[kind]:
            raise self.error(
                f"a {kind} needs apiVersion {KINDS[kind]!r}, not {version!r}", ("apiVersion",)
            )
        for key in obj:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                raise self.error(f"unknown field {key!r}", (key,))
        meta = _mapping(obj.get("metadata"), doc, ("metadata",), "metadata")
        spec = _mapping(obj.get("spec"), doc, ("spec",), "spec")
        data: dict[str, object] = {}
        pod_loc: Loc = ("spec",)
        replicas = 1
        if kind == "Job":
            self.check_fields(spec, ("spec",), JOB_USED, JOB_QUIET, JOB_WARN)
            replicas = self.job_counts(spec, data)
            if "activeDeadlineSeconds" in spec:
                data["walltime_s"] = self.seconds(spec, ("spec", "activeDeadlineSeconds"))
            if "suspend" in spec:  # a suspended Job waits for its release, as Kueue's do
                if not isinstance(spec["suspend"], bool):
                    raise self.error("must be true or false", ("spec", "suspend"))
                data["hold"] = spec["suspend"]
            template = _mapping(spec.get("template"), doc, ("spec", "template"), "template")
            if not template:
                raise self.error("a Job needs spec.template", ("spec",))
            pod_loc = ("spec", "template", "spec")
            spec = _mapping(template.get("spec"), doc, pod_loc, "spec.template.spec")
            template_meta = _mapping(
                template.get("metadata"), doc, ("spec", "template", "metadata"), "metadata"
            )
            meta = {**meta, "annotations": self.merged_annotations(meta, template_meta)}
        notes = meta.get("annotations")
        if isinstance(notes, Mapping):
            self.default_container = str(notes.get(DEFAULT_CONTAINER, ""))
        self.pod(spec, pod_loc, data, replicas)
        self.metadata(meta, data)
        request = parse_request(data, source=doc.source, locate=doc.line_of, rename=self.rename)
        return ParsedJob(request, tuple(self.warnings))

    def rename(self, loc: Loc) -> Loc:
        for end in range(len(loc), 0, -1):
            found = self.renames.get(_dotted(loc[:end]))
            if found is not None:
                return found
        return loc

    def merged_annotations(
        self, meta: Mapping[str, object], template_meta: Mapping[str, object]
    ) -> dict[str, object]:
        out: dict[str, object] = {}
        for source in (template_meta, meta):
            value = source.get("annotations")
            if isinstance(value, Mapping):
                out.update({str(k): v for k, v in value.items()})
        return out

    def seconds(self, obj: Mapping[str, object], loc: Loc) -> float:
        value = obj.get(str(loc[-1]))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error("must be a whole number of seconds ≥ 1", loc)
        return float(value)

    def count(self, obj: Mapping[str, object], loc: Loc, default: int) -> int:
        value = obj.get(str(loc[-1]), default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error("must be a whole number ≥ 1", loc)
        return value

    def job_counts(self, spec: Mapping[str, object], data: dict[str, object]) -> int:
        parallelism = self.count(spec, ("spec", "parallelism"), 1)
        if "completions" not in spec:
            return parallelism
        completions = self.count(spec, ("spec", "completions"), 1)
        if completions <= parallelism:
            return completions
        data["array"] = {
            "start": 0,
            "stop": completions - 1,
            "max_parallel": parallelism,
        }
        self.warn(
            f"completions ({completions}) above parallelism ({parallelism}): submitted as an "
            f"array of {completions} one-pod jobs, {parallelism} at a time",
            ("spec", "completions"),
        )
        return 1

    def metadata(self, meta: Mapping[str, object], data: dict[str, object]) -> None:
        doc = self.doc
        name = meta.get("name") or meta.get("generateName") or ""
        if not isinstance(name, str):
            raise self.error("metadata.name must be a string", ("metadata", "name"))
        data["name"] = name
        self.renames["name"] = ("metadata", "name")
        namespace = meta.get("namespace")
        if namespace is not None:
            data["tenant"] = namespace
            self.renames["tenant"] = ("metadata", "namespace")
        labels = _mapping(meta.get("labels"), doc, ("metadata", "labels"), "labels")
        if KUEUE_QUEUE_LABEL in labels:
            data["queue"] = labels[KUEUE_QUEUE_LABEL]
            self.renames["queue"] = ("metadata", "labels", KUEUE_QUEUE_LABEL)
        notes = _mapping(meta.get("annotations"), doc, ("metadata", "annotations"), "annotations")
        for key, value in notes.items():
            if not key.startswith(ANNOTATION_PREFIX):
                continue
            short = key.removeprefix(ANNOTATION_PREFIX)
            field = ANNOTATED_FIELDS.get(short)
            loc: Loc = ("metadata", "annotations", key)
            if field is None:
                raise self.error(
                    f"unknown annotation {key!r} (known: "
                    + ", ".join(ANNOTATION_PREFIX + k for k in ANNOTATED_FIELDS)
                    + ")",
                    loc,
                )
            if field in ("priority", "min_member"):
                try:
                    value = int(str(value))
                except ValueError:
                    raise self.error(f"{key} must be a whole number", loc) from None
            data[field] = value
            self.renames[field] = loc

    # -- the pod ----------------------------------------------------------------------------

    def pod(
        self, spec: Mapping[str, object], loc: Loc, data: dict[str, object], replicas: int
    ) -> None:
        doc = self.doc
        if not spec:
            raise self.error("the pod spec is empty", loc)
        scheduler = spec.get("schedulerName")
        if scheduler != SCHEDULER_NAME:
            if scheduler is None:
                raise self.error(
                    f"schedulerName: {SCHEDULER_NAME} is missing; fusesched runs only pods "
                    "that name it",
                    loc,
                )
            raise self.error(
                f"must be {SCHEDULER_NAME!r} for fusesched to run this pod, not {scheduler!r}",
                (*loc, "schedulerName"),
            )
        self.check_fields(spec, loc, POD_USED, POD_QUIET, POD_WARN)
        if "activeDeadlineSeconds" in spec:
            pod_deadline = self.seconds(spec, (*loc, "activeDeadlineSeconds"))
            current = data.get("walltime_s")
            data["walltime_s"] = (
                pod_deadline if not isinstance(current, float) else min(current, pod_deadline)
            )
        if "priority" in spec:
            data["priority"] = spec["priority"]
            self.renames["priority"] = (*loc, "priority")

        containers = _list(spec.get("containers"), doc, (*loc, "containers"), "containers")
        if not containers:
            raise self.error("a pod needs at least one container", (*loc, "containers"))
        parsed = [self.container(c, (*loc, "containers", i)) for i, c in enumerate(containers)]
        total = Resources()
        for _, amount in parsed:
            total = total + amount
        inits = _list(spec.get("initContainers"), doc, (*loc, "initContainers"), "initContainers")
        for i, init in enumerate(inits):
            init_container, amount = self.container(init, (*loc, "initContainers", i))
            self.warn(
                f"init container {str(init_container.get('name', ''))!r} is not run: fusesched "
                "runs one program per task (its resources are counted)",
                (*loc, "initContainers", i),
            )
            total = Resources({k: max(total.get(k), amount.get(k)) for k in {*total, *amount}})
        if not total:
            raise self.error(
                "no container requests any resource: give resources.requests (cpu, memory, "
                "nvidia.com/gpu, …)",
                (*loc, "containers"),
            )
        names = [str(c.get("name", "")) for c, _ in parsed]
        main = self.main_container(names, loc)
        for i, name in enumerate(names):
            if i != main:
                self.warn(
                    f"container {name!r} is not started: fusesched runs one program per task "
                    "(its resources are counted)",
                    (*loc, "containers", i),
                )
        group = self.group(parsed[main][0], (*loc, "containers", main))
        group["replicas"] = replicas
        group["resources"] = total.to_spec()
        self.renames["groups[0].resources"] = (*loc, "containers")
        data["groups"] = [group]
        data["placement"] = self.placement(spec, loc)

    def main_container(self, names: list[str], loc: Loc) -> int:
        if not self.default_container:
            return 0
        if self.default_container not in names:
            raise self.error(
                f"annotation {DEFAULT_CONTAINER} names {self.default_container!r}, which is "
                "not a container of the pod",
                (*loc, "containers"),
            )
        return names.index(self.default_container)

    def container(self, value: object, loc: Loc) -> tuple[Mapping[str, object], Resources]:
        doc = self.doc
        container = _mapping(value, doc, loc, "a container")
        self.check_fields(container, loc, CONTAINER_USED, CONTAINER_QUIET, CONTAINER_WARN)
        res = _mapping(container.get("resources"), doc, (*loc, "resources"), "resources")
        for key in res:
            if key == "claims":
                claims_loc: Loc = (*loc, "resources", key)
                self.warn(f"{_dotted(claims_loc)} is not supported; ignored", claims_loc)
            elif key not in ("requests", "limits"):
                raise self.error(f"unknown field {key!r}", (*loc, "resources", key))
        requests = self.quantities(res.get("requests"), (*loc, "resources", "requests"))
        limits = self.quantities(res.get("limits"), (*loc, "resources", "limits"))
        for name, amount in requests.items():
            if name in limits and limits[name] < amount:
                raise self.error(
                    f"the {name} request is above its limit", (*loc, "resources", "requests")
                )
        merged = {**limits, **requests}
        return container, Resources(merged)

    def quantities(self, value: object, loc: Loc) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, amount in _mapping(value, self.doc, loc, "resources").items():
            try:
                name = resource_name(key)
                if not isinstance(amount, str | int | float):
                    raise ValueError(f"{name}: a quantity must be a number or a string")
                out[name] = out.get(name, 0) + parse_quantity(name, amount)
            except (ValueError, QuantityError) as exc:
                raise self.error(str(exc), (*loc, key)) from None
        return out

    def group(self, container: Mapping[str, object], loc: Loc) -> dict[str, object]:
        doc = self.doc
        command = _list(container.get("command"), doc, (*loc, "command"), "command")
        args = _list(container.get("args"), doc, (*loc, "args"), "args")
        if not command:
            raise self.error(
                "command is required: fusesched cannot read an image's entrypoint",
                loc if "args" not in container else (*loc, "args"),
            )
        argv = [
            str(w) if isinstance(w, int | float) and not isinstance(w, bool) else w
            for w in [*command, *args]
        ]
        group: dict[str, object] = {"name": "main", "argv": argv}
        self.renames["groups[0].argv"] = (*loc, "command")
        env: dict[str, object] = {}
        if "envFrom" in container:
            raise self.error(
                "envFrom is not supported: list the variables under env with values",
                (*loc, "envFrom"),
            )
        for i, item in enumerate(_list(container.get("env"), doc, (*loc, "env"), "env")):
            entry = _mapping(item, doc, (*loc, "env", i), "an env entry")
            if "valueFrom" in entry:
                raise self.error(
                    f"env {entry.get('name')!r}: valueFrom is not supported; give a value",
                    (*loc, "env", i),
                )
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise self.error("env entry needs a name", (*loc, "env", i))
            value = entry.get("value", "")
            env[name] = value if isinstance(value, str) else str(value)
        if env:
            group["env"] = env
            self.renames["groups[0].env"] = (*loc, "env")
        if "image" in container:
            group["image"] = container["image"]
            self.renames["groups[0].image"] = (*loc, "image")
        if "workingDir" in container:
            group["workdir"] = container["workingDir"]
            self.renames["groups[0].workdir"] = (*loc, "workingDir")
        ports = []
        for i, item in enumerate(_list(container.get("ports"), doc, (*loc, "ports"), "ports")):
            entry = _mapping(item, doc, (*loc, "ports", i), "a port")
            if "containerPort" not in entry:
                raise self.error("a port needs containerPort", (*loc, "ports", i))
            ports.append(entry["containerPort"])
        if ports:
            group["ports"] = ports
            self.renames["groups[0].ports"] = (*loc, "ports")
        add_probes(self, container, loc, group)
        return group

    def placement(self, spec: Mapping[str, object], loc: Loc) -> dict[str, object]:
        doc = self.doc
        selector = dict(
            _mapping(spec.get("nodeSelector"), doc, (*loc, "nodeSelector"), "nodeSelector")
        )
        self.renames["placement.node_selector"] = (*loc, "nodeSelector")
        if "nodeName" in spec:
            selector[LABEL_HOSTNAME] = spec["nodeName"]
        out: dict[str, object] = {"node_selector": selector}
        affinity = _mapping(spec.get("affinity"), doc, (*loc, "affinity"), "affinity")
        for key in affinity:
            if key in ("podAffinity", "podAntiAffinity"):
                key_loc: Loc = (*loc, "affinity", key)
                self.warn(f"{_dotted(key_loc)} is not supported; ignored", key_loc)
            elif key != "nodeAffinity":
                raise self.error(f"unknown field {key!r}", (*loc, "affinity", key))
        node_loc: Loc = (*loc, "affinity", "nodeAffinity")
        node = _mapping(affinity.get("nodeAffinity"), doc, node_loc, "nodeAffinity")
        required_key = "requiredDuringSchedulingIgnoredDuringExecution"
        preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
        for key in node:
            if key not in (required_key, preferred_key):
                raise self.error(f"unknown field {key!r}", (*node_loc, key))
        if required_key in node:
            req_loc: Loc = (*node_loc, required_key)
            required = _mapping(node[required_key], doc, req_loc, required_key)
            terms_loc: Loc = (*req_loc, "nodeSelectorTerms")
            terms = _list(required.get("nodeSelectorTerms"), doc, terms_loc, "nodeSelectorTerms")
            if len(terms) > 1:
                raise self.error(
                    f"{len(terms)} nodeSelectorTerms (any of them may match) are not supported; "
                    "give one term (all its expressions must match)",
                    terms_loc,
                )
            if terms:
                found = self.expressions(terms[0], (*terms_loc, 0))
                out["required"] = [expr for expr, _ in found]
                for i, (_, expr_loc) in enumerate(found):
                    self.renames[f"placement.required[{i}]"] = expr_loc
                self.renames["placement.required"] = terms_loc
        preferred: list[dict[str, object]] = []
        pref_loc: Loc = (*node_loc, preferred_key)
        for i, item in enumerate(_list(node.get(preferred_key), doc, pref_loc, preferred_key)):
            term = _mapping(item, doc, (*pref_loc, i), "a preferred term")
            weight = term.get("weight")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise self.error("weight must be a whole number from 1 to 100", (*pref_loc, i))
            found = self.expressions(term.get("preference"), (*pref_loc, i, "preference"))
            for expr, expr_loc in found:
                self.renames[f"placement.preferred[{len(preferred)}]"] = expr_loc
                preferred.append({**expr, "weight": weight})
        if preferred:
            out["preferred"] = preferred
            self.renames["placement.preferred"] = pref_loc
        return out

    def expressions(self, value: object, loc: Loc) -> list[tuple[dict[str, object], Loc]]:
        """A term's match expressions, each with where it is written."""
        doc = self.doc
        term = _mapping(value, doc, loc, "a node selector term")
        if "matchFields" in term:
            raise self.error(
                "matchFields is not supported; use matchExpressions on node labels",
                (*loc, "matchFields"),
            )
        out: list[tuple[dict[str, object], Loc]] = []
        exprs_loc: Loc = (*loc, "matchExpressions")
        for i, item in enumerate(_list(term.get("matchExpressions"), doc, exprs_loc, "list")):
            expr = _mapping(item, doc, (*exprs_loc, i), "an expression")
            op = expr.get("operator")
            if op not in _OPS:
                raise self.error(
                    f"operator {op!r} is not supported (In, NotIn, Exists, DoesNotExist)",
                    (*exprs_loc, i),
                )
            values = _list(expr.get("values"), doc, (*exprs_loc, i, "values"), "values")
            entry = {"key": expr.get("key"), "op": op, "values": [str(v) for v in values]}
            out.append((entry, (*exprs_loc, i)))
        if not out:
            raise self.error("a node selector term needs matchExpressions", loc)
        return out
