"""``sbatch -N 2 -n 4``: an exact node count (``placement.nodes``), not only a cap of tasks per
node; how requests check it, how it is stored and read back, and submit-time feasibility."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fusesched.model.job import Placement
from fusesched.model.node import NodeSpec
from fusesched.model.resources import Resources
from fusesched.submit import SubmitError, check_feasible, parse_request, parse_sbatch
from fusesched.submit.request import JobRequest


def placement(options: str, args: list[str] | None = None) -> tuple[int, Any, tuple[str, ...]]:
    parsed = parse_sbatch(f"#!/bin/sh\n#SBATCH {options}\n./a\n", source="s.sh", args=args or [])
    return parsed.request.groups[0].replicas, parsed.request.placement, parsed.warnings


@pytest.mark.parametrize(
    ("options", "replicas", "nodes", "cap"),
    [
        ("-N 2 -n 4", 4, 2, 2),
        ("-N 2 --ntasks-per-node=4", 8, 2, 4),
        ("-N 3 -n 4", 4, 3, 2),
        ("--nodes=2 -n 3", 3, 2, 2),
        # a range: the cap of its minimum (with a warning), no exact count: Slurm may give
        # more nodes of the range where that starts the job sooner
        ("-N 2-3 -n 6", 6, None, 3),
        ("-N 2-4 -n 4", 4, None, 2),
        ("-N 4", 4, None, 1),  # as many tasks as nodes: the cap of one does it
        ("-N 2 -n 2", 2, None, 1),
        ("-n 4", 4, None, None),
    ],
)
def test_node_count_from_sbatch(options: str, replicas: int, nodes: int | None, cap: int) -> None:
    got_replicas, got, _ = placement(options)
    assert (got_replicas, got.nodes, got.max_tasks_per_node) == (replicas, nodes, cap)
    assert got.topology is None


def test_one_node_keeps_its_host_rule() -> None:
    _, got, _ = placement("-N 1 -n 4")
    assert got.nodes is None and got.topology is not None


def test_command_line_overrides_the_script() -> None:
    _, got, _ = placement("-N 2 -n 4", args=["-N", "3"])
    assert (got.nodes, got.max_tasks_per_node) == (3, 2)


def test_a_hetjob_component_keeps_only_the_cap_and_says_so() -> None:
    script = "#!/bin/sh\n#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -N 2 -n 4\n./a\n"
    parsed = parse_sbatch(script, source="h.sh")
    assert parsed.request.placement.nodes is None
    assert any("not held to exactly 2 nodes" in w for w in parsed.warnings)


def request(nodes: object, replicas: int = 4, **fields: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "1"}, "replicas": replicas, "argv": ["x"]}
    return {"groups": [group], "placement": {"nodes": nodes, **fields.pop("more", {})}, **fields}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (request(0), "greater than or equal to 1"),
        (request(5), "placement nodes (5) exceeds the number of tasks (4)"),
        (request(2, more={"max_tasks_per_node": 1}), "need 4 nodes, but placement nodes is 2"),
        (request(2, min_member=2), "cannot be given with min_member"),
        (request("two"), "valid integer"),
    ],
)
def test_bad_node_counts_are_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SubmitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_request(data).to_job_spec("j", 0)


def test_a_group_cannot_have_a_node_count() -> None:
    data = request(2)
    data["groups"][0]["placement"] = {"nodes": 2}
    with pytest.raises(SubmitError, match="nodes is the whole job's"):
        parse_request(data)


def test_the_model_checks_it_too() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Placement(nodes=0)
    assert not Placement(nodes=2).labels_only()
    spec = parse_request(request(2)).to_job_spec("j", 0)
    assert spec.placement.nodes == 2


def test_stored_form_round_trips_and_old_rows_still_load() -> None:
    req = parse_request(request(2))
    text = req.to_json()
    assert json.loads(text)["placement"]["nodes"] == 2
    assert JobRequest.from_json(text).to_job_spec("j", 0).placement.nodes == 2
    old = parse_request({"groups": [{"resources": {"cpu": "1"}, "argv": ["x"]}]})
    stored = old.to_json()
    assert "nodes" not in json.loads(stored)["placement"]  # (a job without it: as before)
    assert JobRequest.from_json(stored).to_job_spec("j", 0).placement.nodes is None


def node(name: str, cpu: int) -> NodeSpec:
    return NodeSpec(name, Resources.parse({"cpu": cpu}), {})


def test_too_few_nodes_is_refused_at_submission() -> None:
    small = [node("a", 4), node("b", 4), node("tiny", 1)]
    spec = parse_request(request(3, more={}, replicas=4)).to_job_spec("j", 0)
    assert check_feasible(spec, small) is None
    big = {"groups": [{"resources": {"cpu": "2"}, "replicas": 4, "argv": ["x"]}]}
    big["placement"] = {"nodes": 3}
    spec = parse_request(big).to_job_spec("j", 0)
    assert check_feasible(spec, small) == (
        "the job must run on 3 nodes (-N 3) but only 2 nodes could hold one of its tasks"
    )
