"""Scenario files: what they may say, and clear errors (file and field) when they are wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.twin.builders import snapshot

from fusesched.twin.build import build
from fusesched.twin.scenario import ScenarioError, load_scenario, parse_scenario

FULL = """
name: everything
description: every section at once
nodes:
  add:
    - {like: gpu-1, count: 2}
    - {match: {fusesched.io/pool: cpu}, count: 1}
    - {name: big, count: 1, capacity: {cpu: 64, memory: 512Gi, nvidia.com/gpu: 8},
       labels: {fusesched.io/gpu-model: B200}}
  remove:
    - {nodes: [cpu-2]}
policy: {queue_order: sjf, backfill: conservative, placement: best-fit}
quotas:
  - {queue: train, flavor: any-gpu, resource: nvidia.com/gpu, nominal: 4}
arrival: {rate: 1.5, jitter_s: 10}
failures:
  - {at_s: 60, duration_s: 120, node: gpu-1}
  - {at_s: 100, rack: r1}
  - {at_s: 10, duration_s: 30, gpu_model: H200}
power: {policy: idle-timeout, idle_threshold_s: 300, default_min_warm: 1}
seeds: [0, 1]
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_section_is_read_and_applied(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, FULL))
    assert scenario.name == "everything"
    assert scenario.seeds == [0, 1]
    snap = snapshot(20, tenancy=True).model_copy(
        update={
            "tenancy": {
                **snapshot(1, tenancy=True).tenancy,  # type: ignore[dict-item]
                "flavors": [{"name": "any-gpu", "resources": ["nvidia.com/gpu"]}],
            }
        }
    )
    inputs = build(snap, scenario, 0)
    names = [n.name for n in inputs.nodes]
    assert names == ["cpu-1", "gpu-1", "gpu-2", "gpu-1-1", "gpu-1-2", "cpu-1-1", "big-1"]
    assert inputs.config.queue_order == "sjf" and inputs.config.backfill == "conservative"
    assert inputs.config.tenancy is not None
    train = inputs.config.tenancy.config.queue("train")
    assert train.quotas[0].resources["nvidia.com/gpu"].nominal == 4
    assert inputs.power is not None and inputs.power.policy == "idle-timeout"
    assert inputs.power.config.idle_threshold_s == 300
    assert [(o.time, o.nodes) for o in inputs.outages] == [
        (60, ("gpu-1",)),
        (100, ("cpu-1", "cpu-1-1")),
        (10, ("gpu-1", "gpu-2", "gpu-1-1", "gpu-1-2")),
    ]
    assert inputs.nodes[-1].labels["fusesched.io/gpu-model"] == "B200"
    last = max(j.spec.submit_time for j in inputs.jobs)
    plain = build(snap, parse_scenario({}), 0)
    assert last < max(j.spec.submit_time for j in plain.jobs)  # arrivals compressed


def test_an_empty_file_is_the_snapshot_as_it_is(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, "", "as-is.yaml"))
    assert scenario.name == "as-is"  # named after the file
    assert scenario.seeds == [0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("polcy: {}", "s.yaml: polcy: unknown field"),
        ("failures: [{at_s: -1, node: a}]", "s.yaml: failures.0.at_s: Input should be greater"),
        ("failures: [{at_s: 5}]", "failures.0: give exactly one of node, rack or gpu_model"),
        ("failures: [{at_s: 5, node: a, rack: b}]", "give exactly one of node, rack"),
        ("nodes: {add: [{count: 2}]}", "s.yaml: nodes.add.0: give exactly one of like"),
        ("nodes: {add: [{like: x, count: -1}]}", "nodes.add.0.count"),
        ("nodes: {add: [{name: n, capacity: {cpu: lots}}]}", "nodes.add.0.capacity"),
        ("nodes: {remove: [{match: {a: b}}]}", "nodes.remove.0: match needs a count"),
        ("arrival: {rate: 0}", "s.yaml: arrival.rate: Input should be greater than 0"),
        ("arrival: {rate: .inf}", "arrival.rate: must be a finite number"),
        ("power: {policy: sometimes}", "power.policy: unknown policy 'sometimes'"),
        ("seeds: []", "s.yaml: seeds"),
        ("- a\n- b", "s.yaml: a scenario is a mapping"),
        ("name: [unclosed", "s.yaml:1: not valid YAML"),
    ],
)
def test_bad_files_say_which_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, text))
    assert expected in str(info.value)


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"cannot read the scenario .*missing\.yaml"):
        load_scenario(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"nodes": {"add": [{"like": "nope"}]}}, "nodes.add.0.like: no node 'nope'"),
        ({"nodes": {"remove": [{"nodes": ["nope"]}]}}, "nodes.remove.0.nodes: no node 'nope'"),
        (
            {"nodes": {"remove": [{"match": {"fusesched.io/pool": "cpu"}, "count": 3}]}},
            "3 to remove but 2 node(s) match",
        ),
        ({"failures": [{"at_s": 1, "rack": "r9"}]}, "failures.0: no node of rack 'r9'"),
        ({"policy": {"queue_order": "random"}}, "policy: unknown queue-order policy 'random'"),
        (
            {"quotas": [{"queue": "nope", "flavor": "f", "resource": "cpu", "nominal": 1}]},
            "quotas: the snapshot has no tenancy",
        ),
    ],
)
def test_scenarios_that_do_not_fit_the_snapshot_are_clear_errors(
    data: dict[str, object], expected: str
) -> None:
    scenario = parse_scenario(data, "x.yaml")
    with pytest.raises(ScenarioError) as info:
        build(snapshot(5), scenario, 0, "x.yaml")
    assert expected in str(info.value)
    assert str(info.value).startswith("x.yaml")


def test_an_unknown_queue_in_a_quota_change_lists_the_known_ones() -> None:
    scenario = parse_scenario(
        {"quotas": [{"queue": "nope", "flavor": "f", "resource": "cpu", "nominal": 1}]}, "q.yaml"
    )
    with pytest.raises(ScenarioError, match="no queue 'nope'; known: batch, train"):
        build(snapshot(5, tenancy=True), scenario, 0, "q.yaml")
