"""JobSpec validation, arrays, label requirements and placement filters."""

from __future__ import annotations

import math

import pytest

from builders import job
from fusesched.model.job import (
    ArraySpec,
    JobSpec,
    LabelOp,
    LabelRequirement,
    Placement,
    PreferredTerm,
    QoS,
    TaskGroup,
)
from fusesched.model.node import LABEL_HOSTNAME, NodeSpec
from fusesched.model.resources import CPU, GPU, Resources

CPU1 = Resources({CPU: 1000})


def group(name: str = "main", replicas: int = 1, resources: Resources = CPU1) -> TaskGroup:
    return TaskGroup(name, replicas, resources)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": ""}, "needs an id"),
        ({"task_groups": ()}, "at least one task group"),
        ({"task_groups": (group("a"), group("a", 2))}, "unique"),
        ({"walltime_s": 0}, "walltime must be positive"),
        ({"walltime_s": -5.0}, "walltime must be positive"),
        ({"min_member": 0}, "min_member must be between 1 and 3"),
        ({"min_member": 4}, "min_member must be between 1 and 3"),
        ({"min_member": -1}, "min_member"),
    ],
)
def test_jobspec_validation(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"id": "j", "task_groups": (group("a", 2), group("b", 1))}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        JobSpec(**fields)  # type: ignore[arg-type]


def test_nan_walltime_is_rejected() -> None:
    # NaN passes "walltime <= 0"; as a runtime estimate it would poison the core's ordering
    # and reservation arithmetic (comparisons with NaN are always False).
    with pytest.raises(ValueError, match="walltime"):
        JobSpec("j", (group(),), walltime_s=math.nan)


@pytest.mark.parametrize("min_member", [1, 2, 3])
def test_min_member_in_range_is_accepted(min_member: int) -> None:
    spec = JobSpec("j", (group("a", 2), group("b", 1)), min_member=min_member)
    assert spec.gang_size == min_member
    assert spec.task_count == 3


def test_defaults_and_totals() -> None:
    spec = job("j").tasks(2, "ps", cpu=1).tasks(4, "worker", cpu=2, gpu=1).build()
    assert spec.task_count == 6
    assert spec.gang_size == 6  # all tasks by default
    assert spec.total == Resources({CPU: 10_000, GPU: 4})
    assert spec.qos is QoS.SILVER
    assert spec.walltime_s is None
    assert spec.placement == Placement()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TaskGroup("g", 0, CPU1), "replicas must be at least 1"),
        (lambda: TaskGroup("g", -2, CPU1), "replicas must be at least 1"),
        (lambda: TaskGroup("g", 1, Resources()), "must request some resource"),
        (lambda: ArraySpec(3, 2), "invalid array range"),
        (lambda: ArraySpec(-1, 2), "invalid array range"),
        (lambda: ArraySpec(0, 2, step=0), "invalid array range"),
        (lambda: ArraySpec(0, 2, max_parallel=0), "max_parallel"),
        (lambda: Placement(max_tasks_per_node=0), "max_tasks_per_node"),
        (lambda: LabelRequirement("k", LabelOp.IN), "needs values"),
        (lambda: LabelRequirement("k", LabelOp.NOT_IN), "needs values"),
        (lambda: LabelRequirement("k", LabelOp.EXISTS, ("x",)), "takes no values"),
        (lambda: LabelRequirement("k", LabelOp.DOES_NOT_EXIST, ("x",)), "takes no values"),
        (lambda: NodeSpec("", CPU1), "needs a name"),
    ],
)
def test_building_blocks_validate(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


# ----------------------------------------------------------------------------- arrays


def test_array_expands_into_indexed_jobs() -> None:
    spec = job("sweep").tasks(1, cpu=1).walltime(60).array(0, 3).build()
    children = spec.expand_array()
    assert [c.id for c in children] == ["sweep_0", "sweep_1", "sweep_2", "sweep_3"]
    assert [c.array_index for c in children] == [0, 1, 2, 3]
    assert {c.array_parent for c in children} == {"sweep"}
    assert all(c.task_groups == spec.task_groups and c.walltime_s == 60 for c in children)
    # a child is already expanded
    assert children[2].expand_array() == (children[2],)


@pytest.mark.parametrize(
    ("start", "stop", "step", "ids"),
    [
        (1, 7, 3, ["a_1", "a_4", "a_7"]),
        (1, 8, 3, ["a_1", "a_4", "a_7"]),
        (5, 5, 1, ["a_5"]),
        (0, 4, 2, ["a_0", "a_2", "a_4"]),
    ],
)
def test_array_steps(start: int, stop: int, step: int, ids: list[str]) -> None:
    spec = job("a").array(start, stop, step).build()
    assert [c.id for c in spec.expand_array()] == ids


def test_plain_job_expands_to_itself() -> None:
    spec = job("plain").build()
    assert spec.expand_array() == (spec,)


# ----------------------------------------------------------------------------- labels

LABELS = {"zone": "a", "gpu": "h100", "empty": ""}


@pytest.mark.parametrize(
    ("key", "op", "values", "matches"),
    [
        ("zone", LabelOp.IN, ("a", "b"), True),
        ("zone", LabelOp.IN, ("b",), False),
        ("missing", LabelOp.IN, ("a",), False),
        ("zone", LabelOp.NOT_IN, ("b",), True),
        ("zone", LabelOp.NOT_IN, ("a", "b"), False),
        ("missing", LabelOp.NOT_IN, ("a",), True),  # Kubernetes: absent key satisfies NotIn
        ("zone", LabelOp.EXISTS, (), True),
        ("empty", LabelOp.EXISTS, (), True),  # an empty value still exists
        ("missing", LabelOp.EXISTS, (), False),
        ("zone", LabelOp.DOES_NOT_EXIST, (), False),
        ("missing", LabelOp.DOES_NOT_EXIST, (), True),
        ("empty", LabelOp.IN, ("",), True),
    ],
)
def test_label_requirement(key: str, op: LabelOp, values: tuple[str, ...], matches: bool) -> None:
    assert LabelRequirement(key, op, values).matches(LABELS) is matches


def test_label_ops_accept_kubernetes_spelling() -> None:
    assert [LabelOp(s) for s in ("In", "NotIn", "Exists", "DoesNotExist")] == list(LabelOp)


def req(key: str, op: str, *values: str) -> LabelRequirement:
    return LabelRequirement(key, LabelOp(op), values)


@pytest.mark.parametrize(
    ("placement", "allowed"),
    [
        (Placement(), True),
        (Placement(node_selector={"zone": "a"}), True),
        (Placement(node_selector={"zone": "b"}), False),
        (Placement(node_selector={"zone": "a", "gpu": "h100"}), True),
        (Placement(node_selector={"zone": "a", "gpu": "a100"}), False),
        (Placement(node_selector={"missing": "x"}), False),
        (Placement(required=(req("gpu", "In", "h100", "a100"),)), True),
        (Placement(required=(req("gpu", "In", "h100"), req("zone", "In", "b"))), False),
        (Placement(anti_affinity=(req("zone", "In", "a"),)), False),
        (Placement(anti_affinity=(req("zone", "In", "b"),)), True),
        (Placement(anti_affinity=(req("missing", "Exists"),)), True),
        (Placement(anti_affinity=(req("zone", "Exists"), req("x", "Exists"))), False),
        (
            Placement(
                node_selector={"zone": "a"},
                required=(req("gpu", "Exists"),),
                anti_affinity=(req("gpu", "In", "a100"),),
            ),
            True,
        ),
        # soft preferences never filter
        (Placement(preferred=(PreferredTerm(req("zone", "In", "b"), 10),)), True),
        (Placement(preferred=(PreferredTerm(req("zone", "In", "a"), -10),)), True),
    ],
)
def test_placement_allows(placement: Placement, allowed: bool) -> None:
    assert placement.allows(LABELS) is allowed


def test_constrained() -> None:
    assert not Placement().constrained
    assert not Placement(max_tasks_per_node=1).constrained
    assert not Placement(preferred=(PreferredTerm(req("zone", "Exists"), 1),)).constrained
    assert Placement(node_selector={"a": "b"}).constrained
    assert Placement(required=(req("a", "Exists"),)).constrained
    assert Placement(anti_affinity=(req("a", "Exists"),)).constrained


def test_node_selector_is_frozen_copy() -> None:
    selector = {"zone": "a"}
    placement = Placement(node_selector=selector)
    selector["zone"] = "b"
    assert placement.node_selector["zone"] == "a"
    with pytest.raises(TypeError):
        placement.node_selector["zone"] = "c"  # type: ignore[index]


def test_node_gets_its_hostname_label() -> None:
    spec = NodeSpec("n7", CPU1, {"zone": "a"})
    assert spec.labels == {"zone": "a", LABEL_HOSTNAME: "n7"}
    assert Placement(node_selector={LABEL_HOSTNAME: "n7"}).allows(spec.labels)
    explicit = NodeSpec("n8", CPU1, {LABEL_HOSTNAME: "other"})
    assert explicit.labels[LABEL_HOSTNAME] == "other"


def test_qos_rank() -> None:
    assert QoS.GOLD.rank > QoS.SILVER.rank > QoS.BRONZE.rank
