"""Per-device accounting through the scheduling core: StartJob names the exact devices."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusesched.core.device_specs import Device, DeviceError
from fusesched.core.devices import TaskDevices
from fusesched.core.scheduler import SchedulerCore
from fusesched.core.topology import TopologyMode, TopologyRequest
from fusesched.model.events import (
    Decision,
    GroupPlacement,
    JobExited,
    JobSubmitted,
    NodeAdded,
    RejectJob,
    StartJob,
)
from fusesched.model.job import JobSpec, LabelOp, LabelRequirement, Placement, TaskGroup
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_SWITCH, NodeSpec
from fusesched.model.resources import CPU, GPU, GPU_MILLI, Resources

MIG = "nvidia.com/mig-1g.10gb"
AMD = "amd.com/gpu"


def node(name: str, capacity: dict[str, int] | None = None) -> NodeSpec:
    return NodeSpec(name, Resources({CPU: 64_000, **(capacity or {})}))


def job(
    job_id: str, resources: dict[str, int], replicas: int = 1, placement: Placement | None = None
) -> JobSpec:
    res = Resources({CPU: 1000, **resources})
    return JobSpec(
        job_id,
        (TaskGroup("main", replicas, res),),
        walltime_s=100.0,
        placement=placement or Placement(),
    )


def started(decisions: list[Decision]) -> dict[str, StartJob]:
    return {d.job_id: d for d in decisions if isinstance(d, StartJob)}


def tasks(start: StartJob) -> list[TaskDevices]:
    out: list[TaskDevices] = []
    for group in start.groups:
        assert group.devices is not None
        assert len(group.devices) == sum(group.counts)
        out.extend(group.devices.tasks)
    return out


def check_rows_match(group: GroupPlacement) -> None:
    """Task order is rows × counts: each task's devices lie on its node."""
    assert group.devices is not None
    rows = np.repeat(group.rows, group.row_counts).tolist()
    assert [t.row for t in group.devices.tasks] == rows


def core_with(*nodes: NodeSpec) -> SchedulerCore:
    core = SchedulerCore()
    core.step(0.0, [NodeAdded(n) for n in nodes])
    return core


# ============================================================================ table cases


def test_whole_gpu_jobs_get_distinct_devices_and_free_them_on_exit() -> None:
    core = core_with(node("a", {GPU: 4}))
    out = started(core.step(1.0, [JobSubmitted(job(f"j{i}", {GPU: 1})) for i in range(5)]))
    assert sorted(out) == ["j0", "j1", "j2", "j3"]
    indices = [tasks(s)[0].indices for s in out.values()]
    assert sorted(indices) == [(0,), (1,), (2,), (3,)]
    assert tasks(out["j0"])[0].cuda_visible_devices == "0"
    later = started(core.step(2.0, [JobExited("j2")]))
    assert list(later) == ["j4"]
    assert tasks(later["j4"])[0].indices == tasks(out["j2"])[0].indices
    core.devices.check()


def test_fractional_shares_pack_best_fit_and_never_exceed_one_gpu() -> None:
    core = core_with(node("a", {GPU: 2}))
    out = started(core.step(1.0, [JobSubmitted(job(f"s{i}", {GPU_MILLI: 600})) for i in range(2)]))
    assert {tasks(s)[0].indices for s in out.values()} == {(0,), (1,)}
    small = started(core.step(2.0, [JobSubmitted(job("t", {GPU_MILLI: 400}))]))
    assert tasks(small["t"])[0].indices == (0,)  # best fit, ties to the lowest index
    assert started(core.step(3.0, [JobSubmitted(job("s2", {GPU_MILLI: 600}))])) == {}
    assert core.devices.free[0, :2].tolist() == [0, 400]  # a third 600 would over-commit
    core.devices.check()


def test_share_fills_a_shared_gpu_and_whole_gpu_waits() -> None:
    core = core_with(node("a", {GPU: 2}))
    out = started(core.step(1.0, [JobSubmitted(job("s0", {GPU_MILLI: 500}))]))
    first = tasks(out["s0"])[0]
    assert first.milli == (500,)
    out = started(core.step(2.0, [JobSubmitted(job("s1", {GPU_MILLI: 500}))]))
    assert tasks(out["s1"])[0].indices == first.indices  # packs onto the shared GPU
    out = started(core.step(3.0, [JobSubmitted(job("w", {GPU: 1}))]))
    assert tasks(out["w"])[0].indices != first.indices
    out = started(core.step(4.0, [JobSubmitted(job("w2", {GPU: 1}))]))
    assert out == {}  # both GPUs are taken (one shared, one whole)
    core.devices.check()


def test_multi_gpu_tasks_take_several_whole_devices_on_one_node() -> None:
    core = core_with(node("a", {GPU: 8}), node("b", {GPU: 8}))
    out = started(core.step(1.0, [JobSubmitted(job("m", {GPU: 4}, replicas=3))]))
    all_tasks = tasks(out["m"])
    assert [len(t.indices) for t in all_tasks] == [4, 4, 4]
    check_rows_match(out["m"].groups[0])
    per_node: dict[int, list[int]] = {}
    for t in all_tasks:
        per_node.setdefault(t.row, []).extend(t.indices)
    for indices in per_node.values():
        assert len(indices) == len(set(indices))
    core.devices.check()


def test_model_constraint_counts_only_the_allowed_devices() -> None:
    mixed = (Device(GPU, 0, "A100"), Device(GPU, 1, "V100"))
    spec = NodeSpec("mixed", Resources({CPU: 8000}), {LABEL_GPU_MODEL: "A100"}, devices=mixed)
    core = core_with(spec)
    a100 = Placement(node_selector={LABEL_GPU_MODEL: "A100"})
    out = started(core.step(1.0, [JobSubmitted(job("a", {GPU: 1}, placement=a100))]))
    assert tasks(out["a"])[0].indices == (0,)
    out = started(core.step(2.0, [JobSubmitted(job("any", {GPU: 1}))]))
    assert tasks(out["any"])[0].indices == (1,)  # no model asked: the V100 will do
    core.step(3.0, [JobExited("any")])
    out = started(core.step(4.0, [JobSubmitted(job("b", {GPU: 1}, placement=a100))]))
    assert out == {}  # the V100 is free but not acceptable
    core.devices.check()


def test_model_constraint_never_fits_is_rejected() -> None:
    mixed = (Device(GPU, 0, "A100"), Device(GPU, 1, "V100"))
    spec = NodeSpec("mixed", Resources({CPU: 8000}), devices=mixed)
    core = core_with(spec)
    want = Placement(required=(LabelRequirement(LABEL_GPU_MODEL, LabelOp.IN, ("A100",)),))
    # the node has no model label, so the label filter already excludes it
    out = core.step(1.0, [JobSubmitted(job("a", {GPU: 2}, placement=want))])
    assert any(isinstance(d, RejectJob) for d in out)
    labelled = NodeSpec("m2", Resources({CPU: 8000}), {LABEL_GPU_MODEL: "A100"}, devices=mixed)
    core = core_with(labelled)
    out = core.step(1.0, [JobSubmitted(job("b", {GPU: 2}, placement=want))])
    rejects = [d for d in out if isinstance(d, RejectJob)]
    assert rejects and "at most 0" in rejects[0].reason


def test_mig_instances_are_devices_of_their_own_kind() -> None:
    devices = (
        Device.mig(0, "1g.10gb", uuid="MIG-aaa"),
        Device.mig(0, "1g.10gb", uuid="MIG-bbb"),
        Device(GPU, 1, uuid="GPU-1"),
    )
    core = core_with(NodeSpec("a", Resources({CPU: 8000}), devices=devices))
    assert core.cluster.capacity[0, core.cluster.columns[MIG]] == 2
    assert core.cluster.capacity[0, core.cluster.columns[GPU]] == 1
    out = started(core.step(1.0, [JobSubmitted(job(f"m{i}", {MIG: 1})) for i in range(2)]))
    seen = {tasks(s)[0].cuda_visible_devices for s in out.values()}
    assert seen == {"MIG-aaa", "MIG-bbb"}
    out = started(core.step(2.0, [JobSubmitted(job("g", {GPU: 1}))]))
    assert tasks(out["g"])[0].cuda_visible_devices == "1"
    assert started(core.step(3.0, [JobSubmitted(job("m2", {MIG: 1}))])) == {}
    core.devices.check()


def test_other_vendors_accelerators_are_counted_under_their_own_name() -> None:
    core = core_with(node("a", {AMD: 2}))
    out = started(core.step(1.0, [JobSubmitted(job(f"r{i}", {AMD: 1})) for i in range(3)]))
    assert sorted(out) == ["r0", "r1"]
    found = sorted(tasks(s)[0].indices for s in out.values())
    assert found == [(0,), (1,)]
    assert all(tasks(s)[0].kinds == (AMD,) for s in out.values())
    assert all(tasks(s)[0].cuda_visible_devices == "" for s in out.values())


@pytest.mark.parametrize(
    "resources",
    [{GPU: 1, GPU_MILLI: 500}, {GPU_MILLI: 1500}],
    ids=["gpu-and-share", "share-over-one-gpu"],
)
def test_invalid_device_requests_are_rejected(resources: dict[str, int]) -> None:
    core = core_with(node("a", {GPU: 2}))
    out = core.step(1.0, [JobSubmitted(job("x", resources))])
    assert [type(d) for d in out] == [RejectJob]


def test_cpu_only_nodes_and_jobs_do_not_touch_the_ledger() -> None:
    core = core_with(node("a"), node("b"))
    out = started(core.step(1.0, [JobSubmitted(job("c", {}, replicas=3))]))
    assert out["c"].groups[0].devices is None
    assert core.devices.size == 0


def test_device_nodes_declared_with_counts_contradicting_devices_fail() -> None:
    core = SchedulerCore()
    bad = NodeSpec("a", Resources({CPU: 1000, GPU: 2}), devices=(Device(GPU, 0),))
    with pytest.raises(DeviceError):
        core.step(0.0, [NodeAdded(bad)])


# ============================================================================ property

NODE = st.tuples(
    st.integers(0, 4),  # whole GPUs
    st.integers(0, 3),  # MIG instances (on a parent GPU of their own)
    st.sampled_from(["", "A100", "H100"]),
)
JOB = st.tuples(
    st.sampled_from(["gpu", "milli", "mig"]),
    st.integers(1, 3),  # GPUs per task
    st.sampled_from([100, 250, 300, 500, 700, 1000]),
    st.integers(1, 3),  # replicas
    st.booleans(),  # exit a running job at this step
    st.sampled_from(["", "A100"]),  # GPU model asked for
)


def _node_spec(k: int, gpus: int, migs: int, model: str) -> NodeSpec:
    devices = [Device(GPU, i, uuid=f"GPU-{k}-{i}") for i in range(gpus)]
    devices += [Device.mig(gpus, "1g.10gb", uuid=f"MIG-{k}-{i}") for i in range(migs)]
    labels = {LABEL_GPU_MODEL: model} if model else {}
    return NodeSpec(f"n{k}", Resources({CPU: 8000}), labels, devices=tuple(devices))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NODE, min_size=1, max_size=4), st.lists(JOB, min_size=1, max_size=25))
def test_device_accounting_never_over_commits(
    nodes: list[tuple[int, int, str]], jobs: list[tuple[str, int, int, int, bool, str]]
) -> None:
    core = SchedulerCore()
    core.step(0.0, [NodeAdded(_node_spec(k, *n)) for k, n in enumerate(nodes)])
    running: dict[str, StartJob] = {}
    for step, (kind, gpus, milli, replicas, leave, model) in enumerate(jobs, start=1):
        events: list[JobSubmitted | JobExited] = []
        if leave and running:
            events.append(JobExited(sorted(running)[0]))
        if kind == "gpu":
            resources = {GPU: gpus}
        elif kind == "milli":
            resources = {GPU_MILLI: milli}
        else:
            resources = {MIG: 1}
        where = Placement(node_selector={LABEL_GPU_MODEL: model} if model else {})
        events.append(JobSubmitted(job(f"j{step}", resources, replicas, where)))
        for event in events:
            if isinstance(event, JobExited):
                running.pop(event.job_id)
        out = core.step(float(step), events)
        new = started(out)
        running.update(new)
        _check(core, running)


def _check(core: SchedulerCore, running: dict[str, StartJob]) -> None:
    core.devices.check()
    whole: Counter[tuple[int, int]] = Counter()
    shares: Counter[tuple[int, int]] = Counter()
    for start in running.values():
        for group in start.groups:
            check_rows_match(group)
        for task in tasks(start):
            for slot, milli in zip(task.slots, task.milli, strict=True):
                if milli == 1000:
                    whole[task.row, slot] += 1
                shares[task.row, slot] += milli
    assert all(v == 1 for v in whole.values()), "a device held whole twice"
    assert all(v <= 1000 for v in shares.values()), "shares over one device"
    for row_slot in whole:
        assert shares[row_slot] == 1000, "a device held whole is also shared"
    # the aggregate columns agree with the ledger
    cluster = core.cluster
    for row in range(cluster.size):
        agg = core.devices.aggregate_free(row) if row < core.devices.size else Resources()
        for name, col in cluster.columns.items():
            if name == CPU:
                continue
            assert cluster.free[row, col] == agg.get(name, 0), (row, name)


# ============================================================================ topology


def _switch_nodes(sizes: dict[str, int], gpus: int = 0) -> list[NodeSpec]:
    out: list[NodeSpec] = []
    for switch, count in sizes.items():
        for k in range(count):
            caps = {CPU: 4000, **({GPU: gpus} if gpus else {})}
            out.append(NodeSpec(f"{switch}-{k}", Resources(caps), {LABEL_SWITCH: switch}))
    return out


def _gang(job_id: str, tasks: int, mode: TopologyMode, per_task: dict[str, int]) -> JobSpec:
    where = Placement(max_tasks_per_node=1, topology=TopologyRequest(LABEL_SWITCH, mode))
    return job(job_id, per_task, replicas=tasks, placement=where)


def _switches(core: SchedulerCore, start: StartJob) -> set[str]:
    return {core.cluster.specs[core.cluster.index[n]].labels[LABEL_SWITCH] for n in start.nodes}


def test_required_same_switch_is_honoured_best_fit() -> None:
    core = core_with(*_switch_nodes({"s1": 4, "s2": 2}, gpus=2))
    out = started(core.step(1.0, [JobSubmitted(_gang("g", 2, TopologyMode.REQUIRED, {GPU: 2}))]))
    assert _switches(core, out["g"]) == {"s2"}  # the tightest switch that holds the gang
    out = started(core.step(2.0, [JobSubmitted(_gang("h", 3, TopologyMode.REQUIRED, {GPU: 1}))]))
    assert _switches(core, out["h"]) == {"s1"}
    assert len(tasks(out["h"])) == 3


def test_required_same_switch_waits_rather_than_spanning() -> None:
    core = core_with(*_switch_nodes({"s1": 2, "s2": 2}))
    first = started(core.step(1.0, [JobSubmitted(job("x", {CPU: 4000}))]))
    assert first  # one node of s1 is full
    out = core.step(2.0, [JobSubmitted(_gang("g", 3, TopologyMode.REQUIRED, {CPU: 1000}))])
    assert started(out) == {}  # three free nodes in all, but no switch has three
    out = started(core.step(3.0, [JobSubmitted(_gang("p", 3, TopologyMode.PREFERRED, {}))]))
    assert out == {}  # waits behind g (FCFS)


def test_required_same_switch_never_fits_is_rejected() -> None:
    core = core_with(*_switch_nodes({"s1": 2, "s2": 2}))
    out = core.step(1.0, [JobSubmitted(_gang("g", 3, TopologyMode.REQUIRED, {CPU: 1000}))])
    rejects = [d for d in out if isinstance(d, RejectJob)]
    assert rejects and "switch" in rejects[0].reason


def test_preferred_same_switch_spans_as_few_switches_as_possible() -> None:
    core = core_with(*_switch_nodes({"s1": 2, "s2": 3, "s3": 1}))
    out = started(
        core.step(1.0, [JobSubmitted(_gang("a", 3, TopologyMode.PREFERRED, {CPU: 4000}))])
    )
    assert _switches(core, out["a"]) == {"s2"}
    out = started(
        core.step(2.0, [JobSubmitted(_gang("b", 3, TopologyMode.PREFERRED, {CPU: 4000}))])
    )
    assert _switches(core, out["b"]) == {"s1", "s3"}


def test_job_request_topology_reaches_the_core_placement() -> None:
    from fusesched.submit.request import JobRequest

    req = JobRequest.model_validate(
        {
            "name": "t",
            "groups": [{"replicas": 2, "resources": {"cpu": "1"}, "argv": ["true"]}],
            "placement": {"topology": {"key": LABEL_SWITCH, "mode": "required"}},
        }
    )
    spec = req.to_job_spec("j1", 0.0)
    assert spec.placement.topology == TopologyRequest(LABEL_SWITCH, TopologyMode.REQUIRED)
    assert (
        JobRequest.model_validate(
            {"name": "u", "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
        )
        .to_job_spec("j2", 0.0)
        .placement.topology
        is None
    )
