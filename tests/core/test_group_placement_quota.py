"""Quota flavours and task groups with label filters of their own: the flavour a job is
charged to joins its whole placement (core/admission.py ``pin_flavours``), so it is chosen
among those every group's own filters allow (core/tenants.py ``quota_placement``)."""

from __future__ import annotations

from dataclasses import replace

from builders import job, node
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobSubmitted, NodeAdded, StartJob
from fusesched.model.job import JobSpec, Placement
from fusesched.model.node import LABEL_GPU_MODEL
from fusesched.model.phases import JobPhase
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy


def _flavour(name: str, model: str) -> dict[str, object]:
    return {"name": name, "resources": ["nvidia.com/gpu"], "node_labels": {LABEL_GPU_MODEL: model}}


def _core() -> SchedulerCore:
    """Queue ``q`` with A100 quota first, then H100 quota; an H100 node and an A100 node."""
    quota = {"nvidia.com/gpu": {"nominal": 4}}
    queue = {
        "name": "q",
        "flavors": [{"name": "a100", "resources": quota}, {"name": "h100", "resources": quota}],
    }
    config = TenancyConfig.from_dict(
        {
            "flavors": [_flavour("a100", "A100"), _flavour("h100", "H100")],
            "organisations": [{"name": "o", "tenants": [{"name": "t", "queues": [queue]}]}],
        }
    )
    core = SchedulerCore(CoreConfig(backfill="none", tenancy=TenancyPolicy(config)))
    core.handle(NodeAdded(node("h").cpu(8).gpu(4).label(LABEL_GPU_MODEL, "H100").build()), 0)
    core.handle(NodeAdded(node("a").cpu(8).gpu(4).label(LABEL_GPU_MODEL, "A100").build()), 0)
    return core


def _on_h100(spec: JobSpec, name: str) -> JobSpec:
    """``spec`` with group ``name`` kept to H100 nodes by its own node selector."""
    own = Placement(node_selector={LABEL_GPU_MODEL: "H100"})
    groups = tuple(replace(g, placement=own) if g.name == name else g for g in spec.task_groups)
    return replace(spec, task_groups=groups)


def test_a_groups_own_gpu_model_picks_the_flavour_it_may_use() -> None:
    # the A100 flavour comes first in the queue: charged to it, the job would be pinned to
    # A100 nodes, where its group may not go (it waited forever, as never fitting)
    core = _core()
    spec = _on_h100(job("j").tasks(1, "w", cpu=1, gpu=2).queue("q").build(), "w")
    out = core.step(0, [JobSubmitted(spec)])
    where = {d.job_id: d.nodes for d in out if isinstance(d, StartJob)}
    assert where == {"j": ("h",)}
    rec = core.jobs["j"]
    assert rec.phase is JobPhase.RUNNING and not rec.never_fits
    assert rec.admission is not None and rec.admission.assignment is not None
    assert set(rec.admission.assignment.flavors.values()) == {"h100"}


def test_a_group_without_filters_leaves_the_flavour_order_alone() -> None:
    core = _core()
    spec = job("j").tasks(1, "w", cpu=1, gpu=2).queue("q").build()
    out = core.step(0, [JobSubmitted(spec)])
    assert {d.job_id: d.nodes for d in out if isinstance(d, StartJob)} == {"j": ("a",)}
