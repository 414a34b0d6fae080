"""Job submission: fusesched YAML, ``#SBATCH`` scripts, Kubernetes YAML (Pod, Job, Deployment,
Kubeflow PyTorchJob and MPIJob, Volcano Job) and the Python objects the REST API and SDK use,
all validated into :class:`JobRequest`.

See docs/SUBMIT.md.

Importing one submodule (``fusesched.submit.begin``) does not import the others: the names
below load their module when first used, so a command that needs one small parser (``squeue``
reading a time) does not load the submission models and NumPy first. (The function
``identify`` is :mod:`fusesched.submit.identify`'s: here that name is the submodule's.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.feasibility import check_feasible
    from fusesched.submit.identify import Identification, identify_type, infer_launcher
    from fusesched.submit.kube import load_kube_yaml, parse_kube_yaml
    from fusesched.submit.label_terms import GroupPlacementRequest, LabelRequirementRequest
    from fusesched.submit.load import load_submission, parse_submission
    from fusesched.submit.placement_request import (
        PlacementRequest,
        PreferredTermRequest,
        TopologyMode,
        TopologyRequest,
    )
    from fusesched.submit.request import (
        ArrayRequest,
        DependencyRequest,
        JobRequest,
        ParsedJob,
        parse_request,
    )
    from fusesched.submit.sbatch import load_sbatch, parse_sbatch
    from fusesched.submit.task_group import Launcher, TaskGroupRequest
    from fusesched.submit.yaml_spec import load_job_yaml, parse_job_yaml

#: Where each name below lives.
_HOMES = {
    "ArrayRequest": "request",
    "DependencyRequest": "request",
    "GroupPlacementRequest": "label_terms",
    "Identification": "identify",
    "JobRequest": "request",
    "LabelRequirementRequest": "label_terms",
    "Launcher": "task_group",
    "ParsedJob": "request",
    "PlacementRequest": "placement_request",
    "PreferredTermRequest": "placement_request",
    "SubmitError": "errors",
    "TaskGroupRequest": "task_group",
    "TopologyMode": "placement_request",
    "TopologyRequest": "placement_request",
    "check_feasible": "feasibility",
    "identify_type": "identify",
    "infer_launcher": "identify",
    "load_job_yaml": "yaml_spec",
    "load_kube_yaml": "kube",
    "load_sbatch": "sbatch",
    "load_submission": "load",
    "parse_job_yaml": "yaml_spec",
    "parse_kube_yaml": "kube",
    "parse_request": "request",
    "parse_sbatch": "sbatch",
    "parse_submission": "load",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ArrayRequest",
    "DependencyRequest",
    "GroupPlacementRequest",
    "Identification",
    "JobRequest",
    "LabelRequirementRequest",
    "Launcher",
    "ParsedJob",
    "PlacementRequest",
    "PreferredTermRequest",
    "SubmitError",
    "TaskGroupRequest",
    "TopologyMode",
    "TopologyRequest",
    "check_feasible",
    "identify_type",
    "infer_launcher",
    "load_job_yaml",
    "load_kube_yaml",
    "load_sbatch",
    "load_submission",
    "parse_job_yaml",
    "parse_kube_yaml",
    "parse_request",
    "parse_sbatch",
    "parse_submission",
]
