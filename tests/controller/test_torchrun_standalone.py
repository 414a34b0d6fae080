"""torchrun's ``PET_*`` defaults on a native job's tasks (controller/torchrun_env.py): a bare
``torchrun`` in each task gets them (one rendezvous across the gang); one run
``--standalone`` (a rendezvous of its own on each machine) gets none, since ``PET_NNODES``
would have each wait for tasks that never join it. The agent is played by hand."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.controller.test_running_limit import beat, submit

from fusesched.controller.service import Controller


def launched_env(ctl: Controller, client: TestClient, argv: list[str]) -> list[dict[str, str]]:
    submit(client, {"resources": {"cpu": "1"}, "replicas": 2, "argv": argv})
    ctl.run_cycle()
    return [dict(t.env) for t in beat(ctl, []).launch]


def test_a_bare_torchrun_gets_the_rendezvous(ctl: Controller, client: TestClient) -> None:
    envs = launched_env(ctl, client, ["torchrun", "train.py"])
    assert [(e["PET_NNODES"], e["PET_NODE_RANK"]) for e in envs] == [("2", "0"), ("2", "1")]


def test_a_standalone_torchrun_gets_none(ctl: Controller, client: TestClient) -> None:
    envs = launched_env(ctl, client, ["torchrun", "--standalone", "--nproc-per-node=2", "t.py"])
    assert len(envs) == 2
    assert not [k for e in envs for k in e if k.startswith("PET_")]
