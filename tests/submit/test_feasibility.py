"""Submit-time feasibility reasons."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.model.job import JobSpec
from fusesched.model.node import LABEL_SWITCH, NodeSpec
from fusesched.model.resources import Resources
from fusesched.submit import check_feasible, parse_request


def node(name: str, labels: dict[str, str] | None = None, **capacity: Any) -> NodeSpec:
    spec = {k.replace("_", "/").replace("nvidia/", "nvidia.com/"): v for k, v in capacity.items()}
    return NodeSpec(name, Resources.parse(spec), labels or {})


CLUSTER = [
    node("g1", {"fusesched.io/gpu-model": "H200", "pool": "ai"}, cpu=64, memory="512Gi", gpu=8),
    node("g2", {"fusesched.io/gpu-model": "A100", "pool": "ai"}, cpu=64, memory="512Gi", gpu=8),
    node("c1", {"pool": "hpc"}, cpu=128, memory="256Gi"),
    node("c2", {"pool": "hpc"}, cpu=128, memory="256Gi"),
]


def job(resources: dict[str, Any], replicas: int = 1, **fields: Any) -> JobSpec:
    data = {"groups": [{"resources": resources, "replicas": replicas, "argv": ["x"]}], **fields}
    return parse_request(data).to_job_spec("j", 0)


FINE: list[JobSpec] = [
    job({"cpu": 1}),
    job({"gpu": 8}, replicas=2),
    job({"cpu": 128}, replicas=2, placement={"node_selector": {"pool": "hpc"}}),
    job({"cpu": 16}, replicas=16, placement={"max_tasks_per_node": 4}),
    job({"gpu": 1}, replicas=20, min_member=4),
]


@pytest.mark.parametrize("spec", FINE)
def test_feasible_jobs_pass(spec: JobSpec) -> None:
    assert check_feasible(spec, CLUSTER) is None


def test_an_odd_node_size_is_said_at_a_glance() -> None:
    """An agent reports what the kernel says (``24683772Ki``): the reason reads ``23.5Gi``."""
    small = [node("n1", cpu=2, memory="24683772Ki")]
    assert check_feasible(job({"memory": "10Ti"}), small) == (
        "group 'main' asks for 10Ti memory per task but the largest node has 23.5Gi"
    )


REASONS: list[tuple[str, JobSpec, str]] = [
    (
        "too many gpus",
        job({"gpu": 16}),
        "group 'main' asks for 16 nvidia.com/gpu per task but the largest node has 8",
    ),
    (
        "too many gpus on matching nodes",
        job({"cpu": 96, "gpu": 1}, placement={"node_selector": {"pool": "ai"}}),
        "group 'main' asks for 96 cpu per task but the largest matching node has 64",
    ),
    (
        "memory",
        job({"memory": "1Ti"}),
        "group 'main' asks for 1Ti memory per task but the largest node has 512Gi",
    ),
    (
        "absent resource",
        job({"amd.com/gpu": 1}),
        "asks for 1 amd.com/gpu per task but no node has any",
    ),
    (
        "not together",
        job({"cpu": 100, "gpu": 1}),
        "group 'main' asks for cpu=100, nvidia.com/gpu=1 per task, which no single node has "
        "together",
    ),
    (
        "selector value",
        job({"cpu": 1}, placement={"node_selector": {"fusesched.io/gpu-model": "B200"}}),
        "no node has label fusesched.io/gpu-model=B200 (nodes have A100, H200)",
    ),
    (
        "selector key",
        job({"cpu": 1}, placement={"node_selector": {"zone": "a"}}),
        "no node has label zone=a (no node has that label)",
    ),
    (
        "required",
        job({"cpu": 1}, placement={"required": [{"key": "pool", "op": "In", "values": ["x"]}]}),
        "no node meets pool In [x]",
    ),
    (
        "nodelist",
        job(
            {"cpu": 1},
            placement={
                "required": [{"key": "kubernetes.io/hostname", "op": "In", "values": ["n9"]}]
            },
        ),
        "no node is named n9 (-w/--nodelist; the nodes: c1, c2, g1, g2)",
    ),
    (
        "anti-affinity",
        job({"cpu": 1}, placement={"anti_affinity": [{"key": "pool", "op": "Exists"}]}),
        "every node meets the anti-affinity pool Exists",
    ),
    (
        "together",
        job(
            {"cpu": 1},
            placement={
                "node_selector": {"pool": "hpc"},
                "required": [{"key": "fusesched.io/gpu-model", "op": "Exists"}],
            },
        ),
        "no node meets the node selector, required and anti-affinity terms together",
    ),
    (
        "spread",
        job({"cpu": 1}, replicas=10, placement={"max_tasks_per_node": 2}),
        "the job's 10 tasks must run at once with at most 2 per node, so they need 5 nodes, but "
        "only 4 nodes exist",
    ),
    (
        "spread over matching",
        job(
            {"gpu": 1},
            replicas=3,
            placement={"max_tasks_per_node": 1, "node_selector": {"pool": "ai"}},
        ),
        "they need 3 nodes, but only 2 matching nodes exist",
    ),
    (
        "count",
        job({"gpu": 4}, replicas=5),
        "group 'main' needs 5 tasks at once but at most 4 fit on the 4 nodes",
    ),
    (
        "count with spread",
        job({"cpu": 32}, replicas=12, placement={"max_tasks_per_node": 3}),
        "group 'main' needs 12 tasks at once but at most 10 fit on the 4 nodes",
    ),
]


@pytest.mark.parametrize(
    ("spec", "reason"), [(s, r) for _, s, r in REASONS], ids=[c for c, *_ in REASONS]
)
def test_reasons(spec: JobSpec, reason: str) -> None:
    found = check_feasible(spec, CLUSTER)
    assert found is not None and reason in found


def test_no_nodes() -> None:
    assert check_feasible(job({"cpu": 1}), []) == "the cluster has no nodes"


def test_total_over_several_groups() -> None:
    spec = parse_request(
        {
            "groups": [
                {"name": "a", "replicas": 2, "resources": {"gpu": 8}, "argv": ["x"]},
                {"name": "b", "replicas": 1, "resources": {"gpu": 8}, "argv": ["x"]},
            ]
        }
    ).to_job_spec("j", 0)
    assert check_feasible(spec, CLUSTER) == (
        "the job asks for 24 nvidia.com/gpu in all but the 4 nodes have 16"
    )


def test_a_gang_that_must_share_one_node_none_can_hold_is_refused() -> None:
    """``sbatch -N 1 -n 3`` on 2-CPU nodes was accepted, then cancelled by the scheduler
    ("no kubernetes.io/hostname domain can hold 3 tasks"); Slurm refuses it at submission."""
    small = [node("a", cpu=2), node("b", cpu=2), node("r", {"rack": "r1"}, cpu=2)]
    one_host = {"topology": {"key": "kubernetes.io/hostname", "mode": "required"}}
    assert check_feasible(job({"cpu": 1}, replicas=3, placement=one_host), small) == (
        "the job's 3 tasks must share one node (-N 1) but at most 2 fit on any one node"
    )
    assert check_feasible(job({"cpu": 1}, replicas=2, placement=one_host), small) is None
    racked = {"topology": {"key": "rack", "mode": "required"}}
    assert check_feasible(job({"cpu": 1}, replicas=3, placement=racked), small) == (
        "the job's 3 tasks must share one rack domain but at most 2 fit in any one"
    )
    preferred = {"topology": {"key": "rack", "mode": "preferred"}}
    assert check_feasible(job({"cpu": 1}, replicas=3, placement=preferred), small) is None
    elastic = job({"cpu": 1}, replicas=3, min_member=1, placement=one_host)
    assert check_feasible(elastic, small) is None  # (its gang is not fixed: the core decides)


def test_a_node_without_the_domain_label_is_a_domain_of_its_own() -> None:
    """As the core's (core/topology.py): a required rack on a cluster whose nodes carry no
    rack label runs on one node; it was refused ("at most 0 fit in any one")."""
    small = [node("a", cpu=2), node("b", cpu=2), node("r", {"rack": "r1"}, cpu=1)]
    racked = {"topology": {"key": "rack", "mode": "required"}}
    assert check_feasible(job({"cpu": 1}, replicas=2, placement=racked), small) is None
    assert check_feasible(job({"cpu": 1}, replicas=3, placement=racked), small) == (
        "the job's 3 tasks must share one rack domain but at most 2 fit in any one"
    )
    switch = {"topology": {"key": LABEL_SWITCH, "mode": "required"}}  # (no node has one)
    assert check_feasible(job({"cpu": 1}, replicas=2, placement=switch), small[:2]) is None
