"""Kubernetes YAML for ``schedulerName: fused-scheduler``: which kinds are accepted
(:data:`READERS`), and the ``v1`` Pod and ``batch/v1`` Job.

Kinds (docs/SUBMIT.md has a table for each): a ``v1`` Pod and a ``batch/v1`` Job (here),
Kubeflow's ``kubeflow.org/v1`` PyTorchJob and ``kubeflow.org/v2beta1`` MPIJob
(:mod:`fusesched.submit.kube_training`), Volcano's ``batch.volcano.sh/v1alpha1`` Job and an
``apps/v1`` Deployment (:mod:`fusesched.submit.kube_workloads`). The pod spec, its containers
and the object's metadata are read the same way for all (:mod:`fusesched.submit.kube_pod`).

Pod and Job:

* the pod spec → one task group (:class:`~fusesched.submit.kube_pod.PodReader`);
* Job ``parallelism``/``completions`` → replicas (a gang); completions above parallelism →
  an array of single-task jobs, ``parallelism`` at a time; ``activeDeadlineSeconds`` →
  walltime; ``suspend: true`` → submitted held (``fusesched release`` resumes it);
  annotations of the Job and its template both count (the Job's win).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from fusesched.submit._kube_fields import JOB_QUIET, JOB_USED, JOB_WARN
from fusesched.submit._yamldoc import Document, load_documents
from fusesched.submit.errors import SubmitError, read_source
from fusesched.submit.kube_pod import (
    ANNOTATED_FIELDS,
    ANNOTATION_PREFIX,
    DEFAULT_CONTAINER,
    KUEUE_QUEUE_LABEL,
    SCHEDULER_NAME,
    PodReader,
    as_mapping,
)
from fusesched.submit.kube_training import mpi_job, pytorch_job
from fusesched.submit.kube_workloads import deployment, volcano_job
from fusesched.submit.request import ParsedJob

__all__ = [
    "ANNOTATED_FIELDS",
    "ANNOTATION_PREFIX",
    "DEFAULT_CONTAINER",
    "KUEUE_QUEUE_LABEL",
    "READERS",
    "SCHEDULER_NAME",
    "job_from_kube",
    "load_kube_yaml",
    "looks_like_kube",
    "parse_kube_yaml",
]


def looks_like_kube(data: object) -> bool:
    """True for a mapping with an ``apiVersion`` other than fusesched's own."""
    if not isinstance(data, Mapping) or data.get("apiVersion") is None:
        return False
    return not str(data["apiVersion"]).startswith("fusesched.io/")


def parse_kube_yaml(text: str, source: str = "<string>") -> list[ParsedJob]:
    """One job per Kubernetes object (document) of a YAML text."""
    docs = load_documents(text, source)
    if not docs:
        raise SubmitError("no Pod or Job in the file (it is empty)", source=source)
    return [job_from_kube(doc) for doc in docs]


def load_kube_yaml(path: str | Path) -> list[ParsedJob]:
    """:func:`parse_kube_yaml` on a file."""
    text, name = read_source(path, "the file")
    return parse_kube_yaml(text, source=name)


def _pod_or_job(doc: Document) -> ParsedJob:
    return _PodJobReader(doc).job()


#: The kinds accepted, by (apiVersion, kind): each reads one document into one job.
READERS: Final[Mapping[tuple[str, str], Callable[[Document], ParsedJob]]] = {
    ("v1", "Pod"): _pod_or_job,
    ("batch/v1", "Job"): _pod_or_job,
    ("apps/v1", "Deployment"): deployment,
    ("kubeflow.org/v1", "PyTorchJob"): pytorch_job,
    ("kubeflow.org/v2beta1", "MPIJob"): mpi_job,
    ("batch.volcano.sh/v1alpha1", "Job"): volcano_job,
}


def job_from_kube(doc: Document) -> ParsedJob:
    """One job from one Kubernetes document of a kind in :data:`READERS`."""
    obj = as_mapping(doc.data, doc, (), "a Kubernetes object")
    kind, version = obj.get("kind"), obj.get("apiVersion")
    reader = READERS.get((str(version), str(kind)))
    if reader is not None:
        return reader(doc)
    versions = [v for v, k in READERS if k == kind]
    if not versions:
        hint = (
            f" (a fusesched job file has apiVersion fusesched.io/v1, not {version!r})"
            if "fusesched" in str(version)
            else ""
        )
        known = [f"{'Volcano ' if 'volcano' in v else ''}{k} ({v})" for v, k in READERS]
        listed = f"{', '.join(known[:-1])} or {known[-1]}"
        message = f"{kind!r} is not supported; submit a {listed}{hint}"
        raise doc.error(message, ("kind",), "kind")
    wanted = " or ".join(repr(v) for v in versions)
    raise doc.error(
        f"a {kind} needs apiVersion {wanted}, not {version!r}", ("apiVersion",), "apiVersion"
    )


class _PodJobReader(PodReader):
    """A ``v1`` Pod or a ``batch/v1`` Job."""

    def job(self) -> ParsedJob:
        doc = self.doc
        obj = as_mapping(doc.data, doc, (), "a Kubernetes object")
        self.check_top(obj)
        meta = self.mapping(obj.get("metadata"), ("metadata",), "metadata")
        spec = self.mapping(obj.get("spec"), ("spec",), "spec")
        data: dict[str, object] = {}
        pod_loc: tuple[str, ...] = ("spec",)
        replicas = 1
        if obj.get("kind") == "Job":
            self.check_fields(spec, ("spec",), JOB_USED, JOB_QUIET, JOB_WARN)
            replicas = self.job_counts(spec, data)
            if "activeDeadlineSeconds" in spec:
                data["walltime_s"] = self.seconds(spec, ("spec", "activeDeadlineSeconds"))
            if "suspend" in spec:  # a suspended Job waits for its release, as Kueue's do
                data["hold"] = self.flag(spec, ("spec", "suspend"))
            template = self.mapping(spec.get("template"), ("spec", "template"), "template")
            if not template:
                raise self.error("a Job needs spec.template", ("spec",))
            pod_loc = ("spec", "template", "spec")
            spec = self.mapping(template.get("spec"), pod_loc, "spec.template.spec")
            template_meta = self.mapping(
                template.get("metadata"), ("spec", "template", "metadata"), "metadata"
            )
            meta = {**meta, "annotations": self.merged_annotations(meta, template_meta)}
        notes = meta.get("annotations")
        chosen = str(notes.get(DEFAULT_CONTAINER, "")) if isinstance(notes, Mapping) else ""
        part = self.pod(spec, pod_loc, default_container=chosen)
        part.group["replicas"] = replicas
        self.combine([part], data)
        self.metadata(meta, data)
        return self.request(data)

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
