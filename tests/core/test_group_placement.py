"""Task groups with label filters of their own (``TaskGroup.placement``): each group's tasks
go only to nodes that meet the job's placement and the group's, in every planning path of
the core (the cycle, the exhaustive search, topology domains, backfilling and its
reservations, the slot bounds, the never-fits check and the pending reasons)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from builders import exited, job, make_core, node, node_state, run_script, submit
from fusesched.core.forecast import forecast
from fusesched.core.pending_reasons import waiting_reasons
from fusesched.core.placement import GroupShape
from fusesched.core.placement_search import search_placement
from fusesched.core.topology import TopologyMode, TopologyRequest
from fusesched.model.job import JobSpec, LabelOp, LabelRequirement, Placement
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.phases import JobPhase
from fusesched.model.resources import CPU, Resources


def own(spec: JobSpec, **placements: Placement) -> JobSpec:
    """``spec`` with the named groups' own placements."""
    groups = tuple(
        replace(g, placement=placements[g.name]) if g.name in placements else g
        for g in spec.task_groups
    )
    return replace(spec, task_groups=groups)


def pool(name: str) -> Placement:
    return Placement(node_selector={"pool": name})


def placed(run_or_starts: object, job_id: str) -> dict[str, set[str]]:
    start = run_or_starts.starts()[job_id]  # type: ignore[attr-defined]
    return {g.group: set(g.nodes) for g in start.groups}


# the GPU-labelled node first, so that first fit would put anything there
HYBRID = [
    node("g1").cpu(8).gpu(2).label("pool", "gpu").build(),
    node("c1").cpu(4).label("pool", "cpu").build(),
    node("c2").cpu(4).label("pool", "cpu").build(),
]


def test_each_group_lands_on_its_own_pool() -> None:
    spec = job("het").tasks(6, "cpu", cpu=1).tasks(1, "gpu", cpu=1, gpu=1).build()
    spec = own(spec, cpu=pool("cpu"), gpu=pool("gpu"))
    run = run_script(HYBRID, [(0, submit(spec))])
    assert placed(run, "het") == {"cpu": {"c1", "c2"}, "gpu": {"g1"}}


def test_one_group_job_with_its_own_filter_leaves_the_fast_path() -> None:
    # one group of one resource: first fit by the column's sum would take g1 first
    spec = own(job("one").tasks(2, cpu=2).build(), main=pool("cpu"))
    run = run_script(HYBRID, [(0, submit(spec))])
    assert placed(run, "one") == {"main": {"c1"}}


def test_group_filters_join_the_jobs() -> None:
    # the job keeps off c1; group 'cpu' keeps to the cpu pool: only c2 is left for it
    spec = job("j").tasks(2, "cpu", cpu=1).tasks(1, "gpu", gpu=1).build()
    spec = replace(
        own(spec, cpu=pool("cpu"), gpu=pool("gpu")),
        placement=Placement(anti_affinity=(LabelRequirement(LABEL_HOSTNAME, LabelOp.IN, ("c1",)),)),
    )
    run = run_script(HYBRID, [(0, submit(spec))])
    assert placed(run, "j") == {"cpu": {"c2"}, "gpu": {"g1"}}


def test_anti_affinity_of_one_group() -> None:
    cluster = [node(f"n{k}").cpu(4).build() for k in range(3)]
    avoid = Placement(anti_affinity=(LabelRequirement(LABEL_HOSTNAME, LabelOp.IN, ("n0",)),))
    spec = own(job("j").tasks(2, "b", cpu=2).tasks(2, "a", cpu=2).build(), b=avoid)
    run = run_script(cluster, [(0, submit(spec))])
    where = placed(run, "j")
    assert "n0" not in where["b"]
    assert where == {"a": {"n0"}, "b": {"n1"}}


def test_a_group_no_node_meets_is_rejected_with_the_reason() -> None:
    spec = own(job("j").tasks(1, "a", cpu=1).tasks(1, "b", cpu=1).build(), b=pool("tpu"))
    run = run_script(HYBRID, [(0, submit(spec))])
    assert run.rejected() == {"j": "task group 'b': no node meets its node constraints (pool=tpu)"}


def test_a_group_that_fits_nowhere_with_the_job_says_both() -> None:
    spec = replace(own(job("j").tasks(1, "a", cpu=1).build(), a=pool("gpu")), placement=pool("cpu"))
    run = run_script(HYBRID, [(0, submit(spec))])
    assert run.rejected()["j"] == (
        "task group 'a': no node meets its node constraints (pool=gpu) together with the "
        "job's (pool=cpu)"
    )


def test_a_group_waits_for_its_own_nodes() -> None:
    # the gpu pool is busy: the job waits though the cpu pool has room for every task
    busy = own(job("busy").tasks(1, cpu=8).walltime(100).build(), main=pool("gpu"))
    spec = own(job("j").tasks(1, "a", cpu=1).tasks(1, "b", cpu=2).build(), b=pool("gpu"))
    run = run_script(HYBRID, [(0, submit(busy)), (1, submit(spec))], backfill="none")
    assert run.phase("j") is JobPhase.QUEUED
    run.step(100, exited("busy"))
    assert placed(run, "j")["b"] == {"g1"}


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_the_heads_reservation_waits_for_its_groups_nodes(backfill: str) -> None:
    cluster = [
        node("c1").cpu(4).label("pool", "cpu").build(),
        node("g1").cpu(4).label("pool", "gpu").build(),
    ]
    script = [
        (0, submit(job("rc").tasks(1, cpu=4).walltime(50).build())),  # c1 until 50
        (0, submit(job("rg").tasks(1, cpu=4).walltime(100).build())),  # g1 until 100
        # the head: its 'b' task fits any empty node, but may use g1 only
        (1, submit(own(job("h").tasks(1, "b", cpu=4).walltime(10).build(), b=pool("gpu")))),
    ]
    run = run_script(cluster, script, backfill=backfill)
    assert run.reservations() == [("h", 100.0)]
    # c1 freed at 50 does not start it, and a job for c1 ending after 100 backfills there
    run.step(50, exited("rc"))
    run.step(51, submit(job("long").tasks(1, cpu=4).walltime(500).build()))
    assert placed(run, "long") == {"main": {"c1"}}
    assert run.phase("h") is JobPhase.QUEUED
    run.step(100, exited("rg"))
    assert placed(run, "h") == {"b": {"g1"}}


def test_backfill_tells_apart_one_group_jobs_of_different_groups_filters() -> None:
    # equal jobs but for their group's own filters are neither one family nor one slot
    # bound: the gpu-pool one failing says nothing of the cpu-pool one behind it
    cluster = [
        node("c1").cpu(4).label("pool", "cpu").build(),
        node("g1").cpu(4).label("pool", "gpu").build(),
    ]
    script = [
        (0, submit(job("rc").tasks(1, cpu=4).walltime(100).build())),  # c1
        (0, submit(own(job("rg").tasks(1, cpu=4).walltime(100).build(), main=pool("gpu")))),
        (1, submit(job("head").tasks(2, cpu=4).walltime(10).build())),  # both nodes
        (
            2,
            submit(
                own(job("x").tasks(1, cpu=2).walltime(10).build(), main=pool("gpu")),
                own(job("y").tasks(1, cpu=2).walltime(10).build(), main=pool("cpu")),
            ),
        ),
        (3, exited("rc")),  # c1 is free; g1 is not: the head and x wait
    ]
    run = run_script(cluster, script)
    assert run.phase("head") is JobPhase.QUEUED and run.phase("x") is JobPhase.QUEUED
    assert placed(run, "y") == {"main": {"c1"}}
    assert run.starts()["y"].backfilled


def test_search_keeps_each_group_on_its_nodes() -> None:
    core = make_core(HYBRID)
    cluster = core.cluster
    a = GroupShape("a", 1, cluster.vector(Resources({CPU: 1000})), Resources({CPU: 1000}))  # type: ignore[arg-type]
    b = GroupShape(
        "b",
        2,
        cluster.vector(Resources({CPU: 4000})),  # type: ignore[arg-type]
        Resources({CPU: 4000}),
        placement=pool("cpu"),
    )
    plan = search_placement(
        [a, b], cluster.capacity.copy(), np.ones(3, np.bool_), None, 1000, cluster=cluster
    )
    assert plan is not None
    rows = {g.name: {cluster.names[int(r)] for r in nodes} for g, nodes, _ in plan}
    assert rows == {"a": {"g1"}, "b": {"c1", "c2"}}


def test_topology_domain_counts_only_a_groups_own_nodes() -> None:
    # three small racks of cpu nodes would be chosen first (fewest free slots), and tried in
    # vain: the rack with the gpu node is the one that holds group 'b'
    cluster = [node(f"r{k}a").cpu(2).labels(rack=f"r{k}", pool="cpu").build() for k in (1, 2, 3)]
    cluster += [
        node("r4a").cpu(8).labels(rack="r4", pool="cpu").build(),
        node("r4b").cpu(8).labels(rack="r4", pool="gpu").build(),
    ]
    spec = own(job("j").tasks(1, "a", cpu=1).tasks(1, "b", cpu=1).build(), b=pool("gpu"))
    topology = TopologyRequest("rack", TopologyMode.REQUIRED)
    spec = replace(spec, placement=Placement(topology=topology))
    run = run_script(cluster, [(0, submit(spec))])
    assert placed(run, "j") == {"a": {"r4a"}, "b": {"r4b"}}


def test_a_node_a_group_names_is_the_pending_reason() -> None:
    cluster = [node("n0").cpu(4).build(), node("n1").cpu(4).build()]
    named = Placement(required=(LabelRequirement(LABEL_HOSTNAME, LabelOp.IN, ("n1",)),))
    spec = own(job("j").tasks(1, "a", cpu=1).tasks(1, "b", cpu=1).build(), b=named)
    run = run_script(cluster, [(0, node_state("n1", "drained")), (1, submit(spec))])
    assert run.phase("j") is JobPhase.QUEUED
    assert waiting_reasons(run.core)["j"] == "ReqNodeNotAvail: n1 drained"


def test_jobs_without_group_filters_compile_as_before() -> None:
    core = make_core(HYBRID)
    spec = job("j").tasks(2, cpu=1).build()
    shape = core.shapes.shape_of(spec)
    assert shape.single_column >= 0
    assert shape.groups is not None and shape.groups[0].placement is None
    constrained = core.shapes.shape_of(own(spec, main=pool("cpu")))
    assert constrained.single_column == -1
    assert constrained.number != shape.number


def test_jobs_for_other_groups_nodes_do_not_wait_behind_each_other() -> None:
    # 'a' waits for the busy gpu pool; 'b', for the cpu pool, is the first waiting for it
    cluster = [
        node("c1").cpu(4).label("pool", "cpu").build(),
        node("g1").cpu(4).label("pool", "gpu").build(),
    ]
    script = [
        (0, submit(job("full").tasks(2, cpu=4).walltime(100).build())),
        (1, submit(own(job("a").tasks(1, cpu=1).build(), main=pool("gpu")))),
        (1, submit(own(job("b").tasks(1, cpu=1).build(), main=pool("cpu")))),
    ]
    run = run_script(cluster, script)
    reasons = waiting_reasons(run.core)
    assert reasons == {"a": "Resources", "b": "Resources"}


def test_the_forecast_starts_a_group_on_its_own_nodes() -> None:
    cluster = [
        node("c1").cpu(4).label("pool", "cpu").build(),
        node("g1").cpu(4).label("pool", "gpu").build(),
    ]
    core = make_core(cluster)
    core.step(0.0, submit(job("rg").tasks(1, cpu=4).walltime(100).build()))  # c1 (first fit)
    core.step(0.0, submit(job("rc").tasks(1, cpu=4).walltime(50).build()))  # g1 until 50
    spec = own(job("h").tasks(1, cpu=4).walltime(10).build(), main=pool("cpu"))
    core.step(1.0, submit(spec))
    (start,) = [s for s in forecast(core, 1.0).starts if s.job_id == "h"]
    assert (start.start, start.nodes) == (100.0, ("c1",))


def test_a_groups_gpu_model_joins_the_jobs_for_its_devices() -> None:
    job_wide = Placement(node_selector={"fusesched.io/gpu-model": "A100", "zone": "a"})
    group = Placement(
        node_selector={"fusesched.io/gpu-model": "H200"},
        anti_affinity=(LabelRequirement("rack", LabelOp.IN, ("r9",)),),
    )
    both = job_wide.joined(group)
    assert dict(both.node_selector) == {"fusesched.io/gpu-model": "A100", "zone": "a"}
    assert both.required == (LabelRequirement("fusesched.io/gpu-model", LabelOp.IN, ("H200",)),)
    assert not both.allows({"fusesched.io/gpu-model": "A100", "zone": "a"})  # (none: both)
    assert both.describe() == (
        "fusesched.io/gpu-model=A100, zone=a, fusesched.io/gpu-model In [H200], not rack In [r9]"
    )
    cluster = [
        node("a").cpu(8).gpu(2).labels(**{"fusesched.io/gpu-model": "A100"}).build(),
        node("h").cpu(8).gpu(2).labels(**{"fusesched.io/gpu-model": "H200"}).build(),
    ]
    spec = job("j").tasks(1, "x", cpu=1, gpu=1).tasks(1, "y", cpu=1, gpu=1).build()
    spec = own(
        spec,
        x=Placement(node_selector={"fusesched.io/gpu-model": "H200"}),
        y=Placement(node_selector={"fusesched.io/gpu-model": "A100"}),
    )
    run = run_script(cluster, [(0, submit(spec))])
    start = run.starts()["j"]
    assert {g.group: set(g.nodes) for g in start.groups} == {"x": {"h"}, "y": {"a"}}
    assert all(g.devices is not None and len(g.devices) == 1 for g in start.groups)
