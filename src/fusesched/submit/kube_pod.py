"""Reading Kubernetes pod templates and object metadata: the part every Kubernetes kind that
fusesched accepts shares (Pod and Job in :mod:`fusesched.submit.kube`, Kubeflow's PyTorchJob
and MPIJob in :mod:`fusesched.submit.kube_training`, Volcano's Job and Deployment in
:mod:`fusesched.submit.kube_workloads`).

A pod spec becomes one task group (:class:`PodPart`):

* each container's requests, with its limits filling requests it lacks (as Kubernetes does),
  summed over containers, and at least the largest init container → one task's resources;
* the main container (annotation ``kubectl.kubernetes.io/default-container``, else the one a
  kind names, else the first) gives argv (``command`` + ``args``), env (plain ``value`` only),
  ``image``, ``workingDir`` and ports, and its ``livenessProbe``/``readinessProbe`` become the
  group's ``liveness``/``readiness`` (:mod:`fusesched.submit.kube_probes`); other containers
  are not started (a warning says so); containers are read by
  :mod:`fusesched.submit.kube_container`;
* ``nodeSelector``, ``nodeName`` and ``affinity.nodeAffinity`` → placement
  (:mod:`fusesched.submit.kube_placement`); ``activeDeadlineSeconds`` → a time limit;
  ``priority`` → priority. Of several pods of one job (:meth:`PodReader.combine`), what
  they select alike is the job's placement, the rest each one's task group's own.

Object metadata: ``metadata.name`` → name, ``namespace`` → tenant, label
``kueue.x-k8s.io/queue-name`` → queue, annotations ``fusesched.io/queue``, ``/qos``, ``/type``,
``/priority``, ``/min-member``, ``/notify``, ``/licenses`` → the fields of the same name.

Fields that would change where or how the pod runs but are not supported are warnings;
unknown fields are errors (with a "did you mean").
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from fusesched.model.resources import Resources
from fusesched.submit._kube_fields import (
    POD_QUIET,
    POD_USED,
    POD_WARN,
)
from fusesched.submit._yamldoc import Document
from fusesched.submit.errors import SubmitError
from fusesched.submit.kube_container import container_group, read_container
from fusesched.submit.kube_placement import node_selection, split_selection
from fusesched.submit.problems import Loc, format_loc
from fusesched.submit.request import ParsedJob, parse_request

SCHEDULER_NAME: Final = "fused-scheduler"
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


def as_mapping(value: object, doc: Document, loc: Loc, what: str) -> Mapping[str, object]:
    """``value`` as a mapping with text keys (None: empty); an error naming the field else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _not_a("a mapping", value, doc, loc, what)
    return {str(k): v for k, v in value.items()}


def as_list(value: object, doc: Document, loc: Loc, what: str) -> list[object]:
    """``value`` as a list (None: empty); an error naming the field else."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _not_a("a list", value, doc, loc, what)
    return value


_KINDS: Final = {bool: "true/false", int: "a number", float: "a number", str: "a string"}


def _not_a(wanted: str, value: object, doc: Document, loc: Loc, what: str) -> SubmitError:
    """``<what> must be <wanted>, not <what the value is>``, at the field ``loc`` (which says
    ``what`` itself when it is the field's name)."""
    kind = "a list" if isinstance(value, list) else _KINDS.get(type(value), "a mapping")
    subject = "" if loc and what == str(loc[-1]) else f"{what} "
    return doc.error(f"{subject}must be {wanted}, not {kind}", loc, format_loc(loc) or None)


@dataclass(slots=True)
class PodPart:
    """What one pod spec says: its task group (no ``replicas`` yet), its node selection, its
    time limit and priority, each with where it is written."""

    group: dict[str, object]
    loc: Loc  # the pod spec
    resources: Resources
    placement: dict[str, object]
    placement_renames: dict[str, Loc] = field(default_factory=dict)
    deadline_s: float | None = None
    priority: object = None
    priority_loc: Loc = ()


class PodReader:
    """Reads pod templates and metadata of one document, collecting warnings and where each
    request field was written (so that the request's errors name the Kubernetes field)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.warnings: list[str] = []
        self.renames: dict[str, Loc] = {}

    def error(self, message: str, loc: Loc) -> SubmitError:
        return self.doc.error(message, loc, field=format_loc(loc) or None)

    def warn(self, message: str, loc: Loc) -> None:
        self.warnings.append(f"{self.doc.source}:{self.doc.line_of(loc)}: {message}")

    def ignored(self, loc: Loc, why: str = "") -> None:
        """Warn that the field at ``loc`` is not supported (``why``: what happens instead)."""
        self.warn(f"{format_loc(loc)} is not supported; ignored{why}", loc)

    def mapping(self, value: object, loc: Loc, what: str) -> Mapping[str, object]:
        return as_mapping(value, self.doc, loc, what)

    def sequence(self, value: object, loc: Loc, what: str) -> list[object]:
        return as_list(value, self.doc, loc, what)

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
                self.ignored((*loc, key))
            elif key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(f"unknown field {key!r}{hint}", (*loc, key))

    def check_top(self, obj: Mapping[str, object]) -> None:
        """The object has only ``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``."""
        for key in obj:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                raise self.error(f"unknown field {key!r}", (key,))

    def read_object(self) -> tuple[Mapping[str, object], Mapping[str, object]]:
        """The document's ``metadata`` and its ``spec``, which must not be empty."""
        obj = self.mapping(self.doc.data, (), "a Kubernetes object")
        self.check_top(obj)
        meta = self.mapping(obj.get("metadata"), ("metadata",), "metadata")
        spec = self.mapping(obj.get("spec"), ("spec",), "spec")
        if not spec:
            raise self.error(f"a {obj.get('kind')} needs a spec", ("spec",))
        return meta, spec

    def rename(self, loc: Loc) -> Loc:
        for end in range(len(loc), 0, -1):
            found = self.renames.get(format_loc(loc[:end]))
            if found is not None:
                return found
        return loc

    def request(self, data: Mapping[str, object]) -> ParsedJob:
        """``data`` validated as the job's request; its errors name the Kubernetes fields."""
        doc = self.doc
        groups = data.get("groups")
        tasks = sum(
            g.get("replicas", 1) if isinstance(g.get("replicas", 1), int) else 0
            for g in (groups if isinstance(groups, list) else [])
            if isinstance(g, dict)
        )
        least = data.get("min_member")
        if isinstance(least, int) and not isinstance(least, bool) and least > tasks > 0:
            where = self.renames.get("min_member", ())
            raise self.error(f"{least} is more than the job's {tasks} tasks", where)
        request = parse_request(data, source=doc.source, locate=doc.line_of, rename=self.rename)
        return ParsedJob(request, tuple(self.warnings))

    def seconds(self, obj: Mapping[str, object], loc: Loc) -> float:
        value = obj.get(str(loc[-1]))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error("must be a whole number of seconds ≥ 1", loc)
        return float(value)

    def count(self, obj: Mapping[str, object], loc: Loc, default: int, least: int = 1) -> int:
        """The whole number at ``loc`` (``default`` when absent), at least ``least``."""
        value = obj.get(str(loc[-1]), default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise self.error(f"must be a whole number ≥ {least}", loc)
        return value

    def one_of(self, value: object, loc: Loc, allowed: Sequence[str]) -> str:
        """``value`` (written at ``loc``), which must be one of ``allowed``."""
        if not isinstance(value, str) or value not in allowed:
            raise self.error(f"must be one of {', '.join(allowed)}, not {value!r}", loc)
        return value

    def flag(self, obj: Mapping[str, object], loc: Loc) -> bool:
        value = obj.get(str(loc[-1]), False)
        if not isinstance(value, bool):
            raise self.error("must be true or false", loc)
        return value

    def set_field(self, data: dict[str, object], name: str, value: object, loc: Loc) -> None:
        """``data[name] = value``, written at ``loc`` (errors about it name that field)."""
        data[name] = value
        self.renames[name] = loc

    # -- metadata ---------------------------------------------------------------------------

    def merged_annotations(
        self, meta: Mapping[str, object], template_meta: Mapping[str, object]
    ) -> dict[str, object]:
        out: dict[str, object] = {}
        for source in (template_meta, meta):
            value = source.get("annotations")
            if isinstance(value, Mapping):
                out.update({str(k): v for k, v in value.items()})
        return out

    def metadata(self, meta: Mapping[str, object], data: dict[str, object]) -> None:
        for key in ("name", "generateName"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                raise self.error("must be a string", ("metadata", key))
        name = meta.get("name") or meta.get("generateName") or ""
        self.set_field(data, "name", name, ("metadata", "name"))
        namespace = meta.get("namespace")
        if namespace is not None:
            self.set_field(data, "tenant", namespace, ("metadata", "namespace"))
        labels = self.mapping(meta.get("labels"), ("metadata", "labels"), "labels")
        if KUEUE_QUEUE_LABEL in labels:
            loc: Loc = ("metadata", "labels", KUEUE_QUEUE_LABEL)
            self.set_field(data, "queue", labels[KUEUE_QUEUE_LABEL], loc)
        notes = self.mapping(meta.get("annotations"), ("metadata", "annotations"), "annotations")
        for key, value in notes.items():
            if not key.startswith(ANNOTATION_PREFIX):
                continue
            short = key.removeprefix(ANNOTATION_PREFIX)
            name = ANNOTATED_FIELDS.get(short)
            loc = ("metadata", "annotations", key)
            if name is None:
                raise self.error(
                    f"unknown annotation {key!r} (known: "
                    + ", ".join(ANNOTATION_PREFIX + k for k in ANNOTATED_FIELDS)
                    + ")",
                    loc,
                )
            if name in ("priority", "min_member"):
                try:
                    value = int(str(value))
                except ValueError:
                    raise self.error(f"{key} must be a whole number", loc) from None
            self.set_field(data, name, value, loc)

    # -- pod templates ----------------------------------------------------------------------

    def template(
        self,
        value: object,
        loc: Loc,
        index: int,
        *,
        main: str = "",
        command: bool = True,
        resources: bool = True,
        scheduler_set: bool = False,
    ) -> PodPart:
        """The pod template (``{metadata, spec}``) at ``loc`` as group number ``index``; its
        own default-container annotation, else a container named ``main``, is the main one."""
        template = self.mapping(value, loc, "template")
        if not template:
            raise self.error("a pod template is required", loc)
        for key in template:
            if key not in ("metadata", "spec"):
                raise self.error(f"unknown field {key!r} (a template has metadata and spec)", loc)
        meta = self.mapping(template.get("metadata"), (*loc, "metadata"), "metadata")
        notes = meta.get("annotations")
        chosen = str(notes.get(DEFAULT_CONTAINER, "")) if isinstance(notes, Mapping) else ""
        spec_loc: Loc = (*loc, "spec")
        spec = self.mapping(template.get("spec"), spec_loc, "spec")
        return self.pod(
            spec,
            spec_loc,
            index,
            default_container=chosen,
            main=main,
            command=command,
            resources=resources,
            scheduler_set=scheduler_set,
        )

    def pod(
        self,
        spec: Mapping[str, object],
        loc: Loc,
        index: int = 0,
        *,
        default_container: str = "",
        main: str = "",
        command: bool = True,
        resources: bool = True,
        scheduler_set: bool = False,
    ) -> PodPart:
        """The pod spec at ``loc`` as group number ``index`` (``command``, ``resources``: its
        main container must have a command, its containers must request something;
        ``scheduler_set``: the object already names fusesched's scheduler)."""
        if not spec:
            raise self.error("the pod spec is empty", loc)
        scheduler = spec.get("schedulerName")
        if scheduler != SCHEDULER_NAME and not (scheduler is None and scheduler_set):
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
        deadline = None
        if "activeDeadlineSeconds" in spec:
            deadline = self.seconds(spec, (*loc, "activeDeadlineSeconds"))
        containers = self.sequence(spec.get("containers"), (*loc, "containers"), "containers")
        if not containers:
            raise self.error("a pod needs at least one container", (*loc, "containers"))
        parsed = [
            read_container(self, c, (*loc, "containers", i)) for i, c in enumerate(containers)
        ]
        total = Resources()
        for _, amount in parsed:
            total = total + amount
        inits_loc: Loc = (*loc, "initContainers")
        inits = self.sequence(spec.get("initContainers"), inits_loc, "initContainers")
        for i, init in enumerate(inits):
            init_container, amount = read_container(self, init, (*inits_loc, i))
            self.warn(
                f"init container {str(init_container.get('name', ''))!r} is not run: fusesched "
                "runs one program per task (its resources are counted)",
                (*inits_loc, i),
            )
            total = Resources({k: max(total.get(k), amount.get(k)) for k in {*total, *amount}})
        if not total and resources:
            raise self.error(
                "no container requests any resource: give resources.requests (cpu, memory, "
                "nvidia.com/gpu, …)",
                (*loc, "containers"),
            )
        names = [str(c.get("name", "")) for c, _ in parsed]
        chosen = self.main_container(names, loc, default_container, main)
        for i, name in enumerate(names):
            if i != chosen:
                self.warn(
                    f"container {name!r} is not started: fusesched runs one program per task "
                    "(its resources are counted)",
                    (*loc, "containers", i),
                )
        prefix = f"groups[{index}]"
        group = container_group(
            self, parsed[chosen][0], (*loc, "containers", chosen), prefix, command
        )
        group["resources"] = total.to_spec()
        self.renames[f"{prefix}.resources"] = (*loc, "containers")
        placement, placement_renames = node_selection(self, spec, loc)
        part = PodPart(group, loc, total, placement, placement_renames, deadline)
        if "priority" in spec:
            part.priority, part.priority_loc = spec["priority"], (*loc, "priority")
        return part

    def main_container(self, names: list[str], loc: Loc, chosen: str, main: str) -> int:
        if chosen:
            if chosen not in names:
                raise self.error(
                    f"annotation {DEFAULT_CONTAINER} names {chosen!r}, which is "
                    "not a container of the pod",
                    (*loc, "containers"),
                )
            return names.index(chosen)
        return names.index(main) if main and main in names else 0

    # -- several pods, one job --------------------------------------------------------------

    def combine(self, parts: Sequence[PodPart], data: dict[str, object]) -> None:
        """Put the parts' groups (in order), their node selection, the smallest time limit
        and the priority into ``data``. What the pods select alike is the job's placement,
        the rest each group's own (:func:`split_selection`)."""
        data["groups"] = [part.group for part in parts]
        placement, owns = split_selection(self, parts)
        data["placement"] = placement
        self.renames.update(parts[0].placement_renames)
        for index, (part, own) in enumerate(zip(parts, owns, strict=True)):
            if own:
                part.group["placement"] = own
                renames = part.placement_renames.items()
                self.renames.update({f"groups[{index}].{key}": loc for key, loc in renames})
        deadlines = [p.deadline_s for p in parts if p.deadline_s is not None]
        current = data.get("walltime_s")
        if isinstance(current, float):
            deadlines.append(current)
        if deadlines:
            data["walltime_s"] = min(deadlines)
        for part in parts:
            if part.priority is not None:
                self.set_field(data, "priority", part.priority, part.priority_loc)
                break
