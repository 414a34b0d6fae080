"""Job submission: fusesched YAML, ``#SBATCH`` scripts, Kubernetes YAML (Pod, Job, Deployment,
Kubeflow PyTorchJob and MPIJob, Volcano Job) and the Python objects the REST API and SDK use,
all validated into :class:`JobRequest`.

See docs/SUBMIT.md.
"""

from fusesched.submit.errors import SubmitError
from fusesched.submit.feasibility import check_feasible
from fusesched.submit.identify import Identification, identify, identify_type, infer_launcher
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
    "identify",
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
