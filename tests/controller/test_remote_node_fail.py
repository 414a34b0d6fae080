"""A job an external Slurm pool ran that Slurm ended ``NODE_FAIL`` (a node of it failed) is
handled as a job whose local node is lost: its restart policy requeues it (within its budget,
counted once), and one it ends (``--no-requeue``, ``notify``, its budget spent) ends with its
reason marked ``NodeDown: ``, sacct ``NODE_FAIL`` (exit ``0:1``), squeue ``NF``. It was failed
whatever its policy. The pool's worker is played by hand: the updates it would send, with
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


NOT_REQUEUED = "not requeued (--no-requeue)"


def ended_by_slurm(ctl: Controller, record: dict[str, object], **extra: object) -> str:
    """A job (its request's ``extra`` fields) handed to the pool, accepted as ``record``'s
    job and ended as ``record`` says."""
    group = {"resources": {"cpu": 1}, "argv": ["true"]}
    request = JobRequest.model_validate({"groups": [group], **extra})
    (job,) = ctl.submit([request])
    ctl.run_cycle()
    return run_ended_by_slurm(ctl, job, record)


def run_ended_by_slurm(ctl: Controller, job: str, record: dict[str, object]) -> str:
    """``job``'s run in the pool accepted as ``record``'s job and ended as ``record`` says."""
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
    lost = ended_by_slurm(ctl, NODE_FAIL_22_05, requeue=False)
    failed = ended_by_slurm(ctl, SQUEUE["jobs"][3])  # (FAILED, exit status 3: its own)
    ended = show(ctl, lost)
    said = f"NodeDown: slurm node_fail (NodeDown); {NOT_REQUEUED}"
    assert (ended["phase"], ended["reason"]) == ("failed", said)
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


def events(ctl: Controller, job: str) -> list[tuple[str, str]]:
    return [
        (row.event.kind, str(row.event.data.get("reason")))
        for row in ctl.persist.store.events_for_job(job)
    ]


def test_a_job_slurm_ended_node_fail_is_requeued_as_its_policy_says(
    ctl: Controller, clock: Clock
) -> None:
    """As a job whose local node is lost: requeued after its back-off (the same event and
    reason), handed to the pool again as its next run, its restart counted once; the next
    node failure, its budget of one spent, ends it NODE_FAIL."""
    job = ended_by_slurm(ctl, NODE_FAIL_22_05, restart={"max_restarts": 1, "backoff_s": 5})
    again = show(ctl, job)
    assert (again["state"], again["phase"]) == ("Pending", "queued"), again
    assert again["reason"].startswith("requeued (slurm node_fail (NodeDown): requeued)"), again
    assert again["restarts"] == 1
    assert ("JobNode", "slurm node_fail (NodeDown): requeued") in events(ctl, job)
    clock.now += 6
    ctl.run_cycle()
    (task,) = ctl.jobs[job].tasks
    assert task.startswith(f"{job}-r1."), task  # its second run, in the pool
    run_ended_by_slurm(ctl, job, dict(NODE_FAIL_22_05, job_id=41))
    ended = show(ctl, job)
    said = "NodeDown: slurm node_fail (NodeDown): retry budget of 1 restarts exhausted"
    assert (ended["phase"], ended["reason"], ended["restarts"]) == ("failed", said, 1), ended


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"requeue": False}, f"; {NOT_REQUEUED}"),
        ({"restart": {"mode": "notify"}}, ": restart policy is notify"),
        ({"restart": {"max_restarts": 0}}, ": retry budget of 0 restarts exhausted"),
    ],
)
def test_a_job_its_policy_does_not_requeue_ends_node_fail(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch, extra: dict[str, object], why: str
) -> None:
    job = ended_by_slurm(ctl, NODE_FAIL_22_05, **extra)
    ended = show(ctl, job)
    said = f"NodeDown: slurm node_fail (NodeDown){why}"
    assert (ended["phase"], ended["reason"], ended["restarts"]) == ("failed", said, 0), ended
    assert job not in ctl.jobs
    assert sacct(ctl, monkeypatch, "-o", "JobID,State,ExitCode") == [f"{job}|NODE_FAIL|0:1"]
