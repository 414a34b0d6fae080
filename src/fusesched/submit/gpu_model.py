"""GPU model names as users write them, resolved against the models the nodes report.

Agents label a node with its GPU's NVML name (``fusesched.io/gpu-model: H100-80GB-HBM3``,
``A100-SXM4-80GB``, ``H200``), while Slurm users write short, lower-case gres types
(``--gres=gpu:h100:4``) and Kubernetes users whatever their cluster used. A job whose
``fusesched.io/gpu-model`` selector names no node's model exactly is resolved at submission:
the models whose name is the same up to case, or whose first word (before ``-``) is, become an
``In`` requirement (``h100`` → ``In [H100-80GB-HBM3, H100-PCIe]``). An exact match is kept as
written; a name that resolves to nothing is left for the feasibility check to refuse.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from fusesched.model.job import LabelOp
from fusesched.model.node import LABEL_GPU_MODEL, NodeSpec
from fusesched.submit.label_terms import GroupPlacementRequest, LabelRequirementRequest
from fusesched.submit.placement_request import PlacementRequest
from fusesched.submit.request import JobRequest


def matching_models(written: str, models: Iterable[str]) -> list[str]:
    """The models ``written`` names: itself if present, else those equal up to case or whose
    first word is (``h100`` → ``H100-80GB-HBM3``); sorted."""
    known = set(models)
    if written in known:
        return [written]
    want = written.casefold()
    return sorted(m for m in known if want in (m.casefold(), m.split("-", 1)[0].casefold()))


def resolve_gpu_model(request: JobRequest, nodes: Iterable[NodeSpec]) -> JobRequest:
    """``request`` with its GPU-model selectors (the job's and each task group's own)
    resolved against ``nodes`` (module docstring); each unchanged when it has none, names a
    model exactly, or names none at all."""
    models = {n.labels[LABEL_GPU_MODEL] for n in nodes if LABEL_GPU_MODEL in n.labels}
    update: dict[str, object] = {}
    placement = _resolved(request.placement, models)
    if placement is not request.placement:
        update["placement"] = placement
    groups = [
        g
        if g.placement is None
        else g.model_copy(update={"placement": _resolved(g.placement, models)})
        for g in request.groups
    ]
    if any(g is not old for g, old in zip(groups, request.groups, strict=True)):
        update["groups"] = groups
    return request.model_copy(update=update) if update else request


_Placement = TypeVar("_Placement", PlacementRequest, GroupPlacementRequest)


def _resolved(placement: _Placement, models: set[str]) -> _Placement:
    """``placement`` with its GPU-model selector resolved against ``models`` (itself when
    there is nothing to resolve)."""
    written = placement.node_selector.get(LABEL_GPU_MODEL)
    if written is None:
        return placement
    found = matching_models(written, models)
    if not found or found == [written]:
        return placement
    selector = {k: v for k, v in placement.node_selector.items() if k != LABEL_GPU_MODEL}
    term = LabelRequirementRequest(key=LABEL_GPU_MODEL, op=LabelOp.IN, values=found)
    return placement.model_copy(
        update={"node_selector": selector, "required": [*placement.required, term]}
    )
