"""Exact node counts (``placement.nodes``, Slurm's ``-N``): the gang runs on exactly that many
distinct nodes, each with a task, spread as Slurm's block distribution does; it waits (and
backfill reserves) until that many nodes hold it, and is refused when the cluster could never
give it that many."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from builders import Run, exited, job, nodes, run_script, submit
from fusesched.core.node_count import block_shares
from fusesched.core.pending_reasons import waiting_reasons
from fusesched.core.topology import TopologyMode, TopologyRequest
from fusesched.model.events import NodeDatasets, StartJob
from fusesched.model.job import Dataset, JobSpec
from fusesched.model.phases import JobPhase

POLICIES = ["first-fit", "best-fit", "worst-fit"]


def on_nodes(spec: JobSpec, count: int) -> JobSpec:
    return replace(spec, placement=replace(spec.placement, nodes=count))


def spread(start: StartJob) -> dict[str, int]:
    """Tasks per node of a start, all groups together."""
    out: dict[str, int] = {}
    for group in start.groups:
        for name, count in zip(group.nodes, group.counts, strict=True):
            out[name] = out.get(name, 0) + int(count)
    return out


def busy(*free: int, cpu: int = 4) -> list[tuple[float, list[object]]]:
    """Jobs leaving ``free[k]`` CPUs free on node k (of ``cpu`` each), one job per node."""
    return [
        (0, submit(job(f"b{k}").tasks(1, cpu=cpu - left).require("host", "In", f"n{k}").build()))
        for k, left in enumerate(free)
        if left < cpu
    ]


def hosts(count: int, cpu: int = 4) -> list[object]:
    return [replace(n, labels={"host": n.name}) for n in nodes(count, cpu=cpu)]


def test_block_shares_fill_the_first_nodes_and_leave_none_empty() -> None:
    assert block_shares(np.array([2, 2, 2]), 5, 2).tolist() == [2, 2, 1]
    assert block_shares(np.array([4, 4]), 4, 2).tolist() == [2, 2]
    assert block_shares(np.array([4, 1, 4]), 4, 2).tolist() == [2, 1, 1]
    # a node holding less than its share: another takes more
    assert block_shares(np.array([1, 3]), 4, 2).tolist() == [1, 3]


@pytest.mark.parametrize("policy", POLICIES)
def test_busy_cluster_gets_exactly_two_nodes(policy: str) -> None:
    # n0, n1 have 1 CPU free, n2, n3 have 2: the cap alone (2 per node) would take 3 nodes
    cap_only = job("w").tasks(4, cpu=1).max_per_node(2).build()
    run = run_script(
        hosts(4), [*busy(1, 1, 2, 2), (1, submit(on_nodes(cap_only, 2)))], placement=policy
    )
    assert sorted(spread(run.starts()["w"]).items()) == [("n2", 2), ("n3", 2)]


def test_without_a_node_count_the_cap_alone_spreads_wider() -> None:
    cap_only = job("w").tasks(4, cpu=1).max_per_node(2).build()
    run = run_script(hosts(4), [*busy(1, 1, 2, 2), (1, submit(cap_only))])
    assert len(spread(run.starts()["w"])) == 3  # (what -N 2 used to give)


def test_block_distribution_without_a_cap() -> None:
    run = run_script(hosts(3), [(0, submit(on_nodes(job("w").tasks(5, cpu=1).build(), 3)))])
    assert sorted(spread(run.starts()["w"]).values()) == [1, 2, 2]


def test_one_node_holds_the_whole_gang() -> None:
    run = run_script(
        hosts(3), [*busy(2, 4, 4), (1, submit(on_nodes(job("w").tasks(4, cpu=1).build(), 1)))]
    )
    assert spread(run.starts()["w"]) == {"n1": 4}


def test_waits_for_two_nodes_then_starts_when_they_free_up() -> None:
    # n0 and n1 have 1 CPU free, n2 has 4: 6 CPUs free, but no 2 nodes hold 2 + 2
    w = on_nodes(job("w").tasks(4, cpu=1).max_per_node(2).build(), 2)
    run = run_script(hosts(3), [*busy(1, 1, 4), (1, submit(w))])
    assert "w" not in run.starts()
    assert run.phase("w") is JobPhase.QUEUED
    assert waiting_reasons(run.core)["w"] == "Resources"
    run.step(10, exited("b1"))
    assert spread(run.starts()["w"]) == {"n1": 2, "n2": 2}


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_reservation_is_for_the_time_the_node_count_holds(backfill: str) -> None:
    # 4 nodes of 2 CPUs: n0 free at 100, n1 and n2 half free until 200, n3 busy until 300.
    # At 100 the cap alone would fit 2 + 1 + 1 on three nodes; two nodes hold 2 + 2 at 200
    script: list[tuple[float, list[object]]] = [
        (0, submit(job("r1").tasks(1, cpu=2).walltime(100).build())),
        (0, submit(job("r2").tasks(2, cpu=1).max_per_node(1).walltime(200).build())),
        (0, submit(job("r4").tasks(1, cpu=2).walltime(300).build())),
        (1, submit(on_nodes(job("w").tasks(4, cpu=1).max_per_node(2).walltime(50).build(), 2))),
    ]
    run = run_script(nodes(4, cpu=2), script, backfill=backfill)
    assert {k: len(spread(s)) for k, s in run.starts().items()} == {"r1": 1, "r2": 2, "r4": 1}
    assert run.reservations() == [("w", 200.0)]
    run.step(100, exited("r1"))
    assert "w" not in run.starts()
    run.step(200, exited("r2"))
    assert run.start_times()["w"] == 200
    assert sorted(spread(run.starts()["w"]).values()) == [2, 2]


def test_a_short_job_backfills_where_the_reservation_leaves_room() -> None:
    # the head waits for two whole nodes (at 100); a short job may use the rest now
    script: list[tuple[float, list[object]]] = [
        (0, submit(job("r").tasks(1, cpu=3).walltime(100).build())),
        (1, submit(on_nodes(job("w").tasks(8, cpu=1).walltime(50).build(), 2))),
        (2, submit(job("s").tasks(1, cpu=1).walltime(10).build())),
    ]
    run = run_script(nodes(2, cpu=4), script)
    assert run.reservations() == [("w", 100.0)]
    assert run.start_times()["s"] == 2
    run.step(12, exited("s"))
    run.step(100, exited("r"))
    assert spread(run.starts()["w"]) == {"n0": 4, "n1": 4}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_of_two_groups_uses_exactly_its_node_count(policy: str) -> None:
    spec = on_nodes(job("w").tasks(2, "a", cpu=1).tasks(2, "b", cpu=1).max_per_node(2).build(), 2)
    run = run_script(hosts(4), [*busy(1, 1, 2, 2), (1, submit(spec))], placement=policy)
    placed = spread(run.starts()["w"])
    assert sorted(placed.items()) == [("n2", 2), ("n3", 2)]


def test_a_job_of_two_groups_fills_every_node() -> None:
    # 3 tasks on 3 nodes: one each, whatever the groups
    spec = on_nodes(job("w").tasks(1, "a", cpu=2).tasks(2, "b", cpu=1).build(), 3)
    run = run_script(hosts(3), [(0, submit(spec))])
    assert sorted(spread(run.starts()["w"]).values()) == [1, 1, 1]


def test_refused_when_the_cluster_has_too_few_nodes() -> None:
    run = run_script(hosts(2), [(0, submit(on_nodes(job("w").tasks(4, cpu=1).build(), 3)))])
    assert "needs 3 nodes" in run.rejected()["w"]
    assert "only 2 nodes" in run.rejected()["w"]


def test_refused_when_no_nodes_of_that_count_hold_it() -> None:
    # 2 nodes of 4 CPUs: 3 tasks of 3 CPUs on 2 nodes cannot be
    spec = on_nodes(job("w").tasks(3, cpu=3).build(), 2)
    run = run_script(hosts(2), [(0, submit(spec))])
    assert "w" in run.rejected()


def test_only_eligible_nodes_count() -> None:
    spec = on_nodes(job("w").tasks(2, cpu=1).require("host", "In", "n0", "n1").build(), 2)
    run = run_script(hosts(4), [*busy(4, 0, 4, 4), (1, submit(spec))])
    assert "w" not in run.starts()
    run.step(5, exited("b1"))
    assert spread(run.starts()["w"]) == {"n0": 1, "n1": 1}


def _run(*specs: JobSpec) -> Run:
    return run_script(hosts(2), [(0, submit(*specs))])


def test_exclusive_job_with_a_node_count() -> None:
    spec = on_nodes(job("w").tasks(2, cpu=1).build(), 2)
    spec = replace(spec, placement=replace(spec.placement, exclusive=True))
    run = _run(spec)
    assert spread(run.starts()["w"]) == {"n0": 1, "n1": 1}


def test_within_a_required_domain() -> None:
    # rack r1 (n0, n1) is half busy; rack r2 (n2, n3) holds 2 + 2
    racked = [
        replace(n, labels={"host": n.name, "rack": "r1" if i < 2 else "r2"})
        for i, n in enumerate(hosts(4))
    ]
    spec = on_nodes(job("w").tasks(4, cpu=1).build(), 2)
    spec = replace(
        spec,
        placement=replace(spec.placement, topology=TopologyRequest("rack", TopologyMode.REQUIRED)),
    )
    run = run_script(racked, [*busy(1, 1, 4, 4), (1, submit(spec))])
    assert spread(run.starts()["w"]) == {"n2": 2, "n3": 2}


def test_two_groups_whose_big_task_leaves_room_for_the_others_on_the_second_node() -> None:
    # 2 nodes of 4 CPUs: a 4-CPU task on one, 3 one-CPU tasks on the other; counting each
    # group on what the earlier one could take on every node found no room for the second
    spec = on_nodes(job("w").tasks(1, "a", cpu=4).tasks(3, "b", cpu=1).build(), 2)
    run = run_script(hosts(2), [(0, submit(spec))])
    assert "w" not in run.rejected()
    assert sorted(spread(run.starts()["w"]).values()) == [1, 3]


def racked(racks: list[str], cpu: int = 4) -> list[object]:
    return [
        replace(n, labels={"host": n.name, "rack": rack})
        for n, rack in zip(hosts(len(racks), cpu=cpu), racks, strict=True)
    ]


def in_rack(spec: JobSpec, mode: TopologyMode = TopologyMode.REQUIRED) -> JobSpec:
    return replace(spec, placement=replace(spec.placement, topology=TopologyRequest("rack", mode)))


@pytest.mark.parametrize("mode", list(TopologyMode))
def test_domains_of_too_few_nodes_are_passed_over(mode: TopologyMode) -> None:
    # racks r1..r3 are one node each (each holds the 4 tasks alone: the best fit by room);
    # r4's two nodes are the only domain with two nodes
    cluster = racked(["r1", "r2", "r3", "r4", "r4"])
    spec = in_rack(on_nodes(job("w").tasks(4, cpu=1).build(), 2), mode)
    run = run_script(cluster, [(0, submit(spec))])
    assert sorted(spread(run.starts()["w"]).items()) == [("n3", 2), ("n4", 2)]


def test_refused_when_no_required_domain_has_that_many_nodes() -> None:
    spec = in_rack(on_nodes(job("w").tasks(3, cpu=1).build(), 3))
    run = run_script(racked(["r1", "r1", "r2", "r2"]), [(0, submit(spec))])
    assert "3 nodes in one rack domain" in run.rejected()["w"]


def test_no_wait_for_data_cached_on_fewer_nodes_than_the_count() -> None:
    # the data is on n0 alone: delay scheduling there could never start a job on 2 nodes
    data = Dataset("imagenet", "/shared/imagenet", 2**30)
    spec = replace(on_nodes(job("w").tasks(2, cpu=1).at(1).build(), 2), datasets=(data,))
    run = run_script(
        hosts(3),
        [(0, [NodeDatasets("n0", frozenset({"imagenet"}))]), (1, submit(spec))],
        data_locality_wait_s=60,
    )
    assert run.start_times()["w"] == 1
    assert "n0" in spread(run.starts()["w"])
