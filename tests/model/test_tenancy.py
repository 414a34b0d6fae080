"""Tenancy configuration: loading, the documented example, and validation errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fusesched.model.job import LabelOp, LabelRequirement, Placement
from fusesched.model.node import LABEL_GPU_MODEL, LABEL_POOL
from fusesched.model.resources import GPU, MEMORY
from fusesched.model.tenancy import (
    DEFAULT_QOS,
    EXAMPLE_YAML,
    Flavor,
    QoSTier,
    ResourceQuota,
    TenancyConfig,
    TenancyError,
)


def base() -> dict[str, Any]:
    return {
        "flavors": [
            {"name": "a100", "resources": ["gpu"], "node_labels": {LABEL_GPU_MODEL: "A100"}}
        ],
        "cohorts": ["pool"],
        "organisations": [
            {
                "name": "org",
                "tenants": [
                    {
                        "name": "t1",
                        "queues": [
                            {
                                "name": "q1",
                                "cohort": "pool",
                                "flavors": [{"name": "a100", "resources": {"gpu": {"nominal": 4}}}],
                            }
                        ],
                    }
                ],
            }
        ],
    }


def test_example_config_loads() -> None:
    cfg = TenancyConfig.from_yaml(EXAMPLE_YAML)
    train = cfg.queue("ml-train")
    assert train.tenant == "research" and train.cohort == "gpu-pool"
    assert [q.flavor for q in train.quotas] == ["a100-x86", "h100-x86", "cpu-x86"]
    a100 = train.quotas[0].resources[GPU]
    assert (a100.nominal, a100.borrowing_limit, a100.lending_limit) == (16, 8, 8)
    assert a100.guaranteed == 8 and a100.lendable == 8
    assert train.quotas[2].resources[MEMORY].nominal == 2 * 2**40
    assert train.user_share("alice") == 2 and train.user_share("carol") == 1
    assert cfg.account_path("ml-train", "alice") == ("acme", "research", "ml-train", "alice")
    assert cfg.tier("silver").max_gpus_per_user == 32
    assert cfg.tier(None).name == "silver"
    assert [q.name for q in cfg.cohort_members("gpu-pool")] == ["ml-train", "inference"]


def test_defaults() -> None:
    cfg = TenancyConfig.from_dict(base())
    assert cfg.qos == DEFAULT_QOS
    assert set(DEFAULT_QOS) == {"gold", "silver", "bronze"}
    assert not DEFAULT_QOS["gold"].preemptible
    assert DEFAULT_QOS["gold"].may_preempt == {"silver", "bronze"}
    quota = cfg.queue("q1").quotas[0].resources[GPU]
    assert quota.borrowing_limit is None and quota.lending_limit is None
    assert quota.lendable == 4 and quota.guaranteed == 0


def test_shorthand_nominal() -> None:
    data = base()
    data["organisations"][0]["tenants"][0]["queues"][0]["flavors"][0]["resources"] = {"gpu": 3}
    assert TenancyConfig.from_dict(data).queue("q1").quotas[0].resources[GPU].nominal == 3


def _edit(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


Q = ["organisations", 0, "tenants", 0, "queues", 0]
QUOTA = [*Q, "flavors", 0, "resources", "gpu"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_edit([*Q, "cohort"], "nope"), "unknown cohort 'nope'"),
        (_edit([*Q, "flavors", 0, "name"], "h100"), "unknown flavor 'h100'"),
        (_edit([*QUOTA], {"nominal": 4, "lending_limit": 5}), "exceeds nominal"),
        (_edit([*QUOTA], {"nominal": -1}), "must not be negative"),
        (_edit([*QUOTA], {"nominal": "1.5"}), "not a whole number"),
        (_edit([*QUOTA], {"borrowing_limit": 1}), "nominal is required"),
        (_edit([*QUOTA], {"nominal": 1, "borrow": 1}), "unknown field(s) borrow"),
        (_edit([*Q, "shares"], 0), "shares must be positive"),
        (_edit([*Q, "name"], "a/b"), "without '/'"),
        (_edit([*Q, "flavors", 0, "resources"], {"cpu": 1}), "missing: nvidia.com/gpu"),
        (_edit(["default_qos"], "platinum"), "default_qos 'platinum'"),
        (_edit(["qos"], {"gold": {"priority": 1, "may_preempt": ["x"]}}), "unknown tier 'x'"),
        (_edit(["qos"], {"gold": {"preemptible": False}}), "priority is required"),
        (
            _edit(
                ["qos"],
                {
                    "gold": {"priority": 2, "may_preempt": ["silver"]},
                    "silver": {"priority": 1, "preemptible": False},
                },
            ),
            "which is not preemptible",
        ),
        (
            _edit(["qos"], {"platinum": {"priority": 3}}),
            "qos 'platinum': the tiers are gold, silver, bronze",
        ),
        (_edit(["extra"], 1), "unknown field(s) extra"),
    ],
)
def test_invalid_configs(data: dict[str, Any], message: str) -> None:
    with pytest.raises(TenancyError) as err:
        TenancyConfig.from_dict(data)
    assert message in str(err.value)


def test_limits_need_a_cohort() -> None:
    data = _edit([*QUOTA], {"nominal": 4, "borrowing_limit": 2})
    del data["organisations"][0]["tenants"][0]["queues"][0]["cohort"]
    with pytest.raises(TenancyError, match="need a cohort"):
        TenancyConfig.from_dict(data)


def test_duplicate_names() -> None:
    data = base()
    queues = data["organisations"][0]["tenants"][0]["queues"]
    queues.append(copy.deepcopy(queues[0]))
    with pytest.raises(TenancyError, match="queue names must be unique: q1"):
        TenancyConfig.from_dict(data)


def test_overlapping_flavor_groups_rejected() -> None:
    data = base()
    data["flavors"].append({"name": "mixed", "resources": ["gpu", "cpu"]})
    data["organisations"][0]["tenants"][0]["queues"][0]["flavors"].append(
        {"name": "mixed", "resources": {"gpu": 1, "cpu": 1}}
    )
    with pytest.raises(TenancyError, match="different resource sets"):
        TenancyConfig.from_dict(data)


def test_yaml_must_be_a_mapping() -> None:
    with pytest.raises(TenancyError, match="mapping"):
        TenancyConfig.from_yaml("- a\n- b\n")


def test_objects_validate_directly() -> None:
    with pytest.raises(TenancyError, match="at least one resource"):
        Flavor("f", frozenset())
    with pytest.raises(TenancyError, match="cannot preempt itself"):
        QoSTier("x", 1, may_preempt=frozenset({"x"}))
    with pytest.raises(TenancyError, match="grace_s"):
        QoSTier("x", 1, grace_s=-1)
    with pytest.raises(TenancyError, match="whole number"):
        ResourceQuota(GPU, 1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("placement", "compatible"),
    [
        (Placement(), True),
        (Placement(node_selector={LABEL_GPU_MODEL: "A100"}), True),
        (Placement(node_selector={LABEL_GPU_MODEL: "H100"}), False),
        (Placement(node_selector={"kubernetes.io/hostname": "n1"}), True),  # not a flavour key
        (Placement(required=(LabelRequirement(LABEL_POOL, LabelOp.IN, ("x86",)),)), True),
        (Placement(required=(LabelRequirement(LABEL_POOL, LabelOp.IN, ("arm",)),)), False),
        (Placement(anti_affinity=(LabelRequirement(LABEL_GPU_MODEL, LabelOp.EXISTS),)), False),
    ],
)
def test_flavor_compatibility(placement: Placement, compatible: bool) -> None:
    flavor = Flavor("a100", frozenset({"gpu"}), {LABEL_GPU_MODEL: "A100", LABEL_POOL: "x86"})
    assert flavor.resources == {GPU}
    assert flavor.compatible_with(placement) is compatible
    assert flavor.matches_node({LABEL_GPU_MODEL: "A100", LABEL_POOL: "x86", "other": "1"})
    assert not flavor.matches_node({LABEL_GPU_MODEL: "A100"})


def test_documented_example_is_the_tested_example() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "TENANCY.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == EXAMPLE_YAML
    assert TenancyConfig.from_yaml(block).queue("inference").cohort == "gpu-pool"
