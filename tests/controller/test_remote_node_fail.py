"""A job an external Slurm pool ran that Slurm ended ``NODE_FAIL`` (a node of it failed) ends
as a job whose local node is lost: its reason marked ``NodeDown: ``, sacct ``NODE_FAIL`` (exit
``0:1``), squeue ``NF``. The pool's worker is played by hand: the updates it would send, with
the status read from a real Slurm's ``squeue --json`` record (tests/backends/test_slurm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.backends.test_slurm import NODE_FAIL_22_05, OUT_OF_MEMORY, SQUEUE
from tests.builders import Clock
from tests.controller.test_array_deps_restart_window import CONFIG
from tests.controller.test_no_requeue import sacct, show

from fusesched.api.app import create_app
from fusesched.backends.base import RemoteNode
from fusesched.backends.federation_config import parse_federation
from fusesched.backends.slurm_json import parse_squeue
from fusesched.cli import squeue_format as sq
from fusesched.controller.logs import LogStore
from fusesched.controller.persist import Persistence
from fusesched.controller.remote import Update
from fusesched.controller.service import Controller
from fusesched.model.resources import CPU, Resources
from fusesched.submit.request import JobRequest


@pytest.fixture
def ctl(tmp_path: Path, clock: Clock) -> Iterator[Controller]:
    """A controller whose only nodes are pool ``p``'s (a Slurm cluster), listed."""
    fed = parse_federation({"pools": [{"name": "p", "kind": "slurm"}], "default": ["p"]})
    config = replace(CONFIG, federation=fed, pools_dir=tmp_path / "pools")
    persist = Persistence(f"sqlite:///{tmp_path / 'db.sqlite'}")
    controller = Controller(persist, LogStore(tmp_path / "logs"), config, clock=clock)
    nodes = (RemoteNode("c1", Resources({CPU: 4000})),)
    controller.remote_update([Update("nodes", "p", nodes=nodes)])
    yield controller
    persist.close()


def ended_by_slurm(ctl: Controller, record: dict[str, object]) -> str:
    """A job handed to the pool, accepted as ``record``'s job and ended as ``record`` says."""
    request = JobRequest.model_validate({"groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]})
    (job,) = ctl.submit([request])
    ctl.run_cycle()
    (task,) = ctl.jobs[job].tasks
    external = str(record["job_id"])
    (status,) = parse_squeue({"jobs": [record]}, [external])
    ctl.remote_update([Update("submitted", "p", task_id=task, external_id=external)])
    ctl.remote_update([Update("status", "p", task_id=task, status=status)])
    ctl.run_cycle()
    return job


def test_a_job_slurm_ended_node_fail_is_node_fail_here_too(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = ended_by_slurm(ctl, NODE_FAIL_22_05)
    failed = ended_by_slurm(ctl, SQUEUE["jobs"][3])  # (FAILED, exit status 3: its own)
    ended = show(ctl, lost)
    assert (ended["phase"], ended["reason"]) == ("failed", "NodeDown: slurm node_fail (NodeDown)")
    assert ended["exit_code"] == -1  # (no exit status of its own, as a lost local node's)
    fields = ("-o", "JobID,State,ExitCode")
    assert sacct(ctl, monkeypatch, *fields) == [f"{lost}|NODE_FAIL|0:1", f"{failed}|FAILED|3:0"]
    shown = TestClient(create_app(ctl)).get("/v1/jobs").json()
    assert {job["id"]: sq.state_code(job) for job in shown} == {lost: "NF", failed: "F"}


def test_a_job_slurm_ended_out_of_memory_is_out_of_memory_here_too(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was FAILED in sacct and squeue; its mail said FAILED too."""
    oom = ended_by_slurm(ctl, OUT_OF_MEMORY)
    ended = show(ctl, oom)
    assert ended["phase"] == "failed" and "OOM killer" in ended["reason"], ended
    assert sacct(ctl, monkeypatch, "-o", "JobID,State,ExitCode") == [f"{oom}|OUT_OF_MEMORY|0:125"]
    shown = TestClient(create_app(ctl)).get("/v1/jobs").json()
    assert [sq.state_code(job) for job in shown] == ["OOM"]
