"""Datasets in the controller: cache reports reach the core, launches carry the datasets, and
a reserved job's data is staged onto its reserved nodes (scripted heartbeats, no agents)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.builders import Clock

from fusesched.api.wire import Heartbeat, NodeInventory
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.service import Controller
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest

DATA = {"name": "imagenet", "source": "/shared/imagenet", "size": "2Gi"}


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Controller]:
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), clock=Clock())
    for name in ("n0", "n1", "n2"):
        controller.register(NodeInventory(name=name, resources={"cpu": "2", "memory": "4Gi"}))
    controller.run_cycle()
    yield controller
    persist.close()


def request(name: str, cpu: str = "1", walltime: float = 600.0, data: bool = True) -> JobRequest:
    return JobRequest.model_validate(
        {
            "name": name,
            "walltime_s": walltime,
            "datasets": [DATA] if data else [],
            "groups": [{"resources": {"cpu": cpu}, "argv": ["sleep", "60"]}],
        }
    )


def full_beat(ctl: Controller, node: str, datasets: list[str] | None) -> list[str]:
    running = [t for t, (_, task) in ctl.tasks.items() if task.node == node]
    reply = ctl.heartbeat(Heartbeat(node=node, running=running, datasets=datasets), wait_s=0)
    return [d.name for d in reply.stage]


def test_a_cache_report_steers_placement_and_the_launch_carries_the_data(
    ctl: Controller,
) -> None:
    full_beat(ctl, "n2", ["imagenet"])
    (job_id,) = ctl.submit([request("train")])
    ctl.run_cycle()
    (task,) = ctl.jobs[job_id].tasks.values()
    assert task.node == "n2"
    (wire,) = task.launch.datasets
    assert (wire.name, wire.source, wire.size_bytes) == ("imagenet", "/shared/imagenet", 2**31)


def test_a_reserved_job_has_its_data_staged_on_its_nodes_once(ctl: Controller) -> None:
    for node in ("n0", "n1", "n2"):
        full_beat(ctl, node, [])  # caches, all empty
    ctl.submit([request(f"fill{i}", cpu="2", data=False) for i in range(3)])
    ctl.run_cycle()
    (job_id,) = ctl.submit([request("big", cpu="2")])
    ctl.run_cycle()
    assert not ctl.jobs[job_id].tasks  # waits, with a reservation on one node
    staged = {node: full_beat(ctl, node, []) for node in ("n0", "n1", "n2")}
    assert sorted(staged.values()) == [[], [], ["imagenet"]]
    target = next(n for n, names in staged.items() if names)
    ctl.run_cycle()
    assert full_beat(ctl, target, []) == []  # asked once, not at every cycle
    full_beat(ctl, target, ["imagenet"])  # the agent staged it
    assert ctl.nodes[target].datasets == frozenset({"imagenet"})


def test_nodes_without_a_cache_are_not_asked_to_stage(ctl: Controller) -> None:
    ctl.submit([request(f"fill{i}", cpu="2", data=False) for i in range(3)])
    ctl.run_cycle()
    ctl.submit([request("big", cpu="2")])
    ctl.run_cycle()
    assert all(full_beat(ctl, node, None) == [] for node in ("n0", "n1", "n2"))


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ({"name": "in-valid", "source": "/x"}, "String should match pattern"),
        ({"name": "x", "source": "relative/path"}, "must be an absolute path"),
        ({"name": "x", "source": "s3://bucket/x"}, "no stager for s3://"),
        ({"name": "x", "source": "/x", "size": "lots"}, "dataset size"),
    ],
)
def test_bad_datasets_are_refused_with_a_reason(dataset: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JobRequest.model_validate(
            {"datasets": [dataset], "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]}
        )


def test_dataset_names_are_unique_in_a_request() -> None:
    with pytest.raises((ValueError, SubmitError), match="unique"):
        JobRequest.model_validate(
            {
                "datasets": [DATA, {**DATA, "name": "ImageNet"}],
                "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}],
            }
        )
