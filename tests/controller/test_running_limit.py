"""A running job's time limit changed (``fusesched update JOB --time``, POST
/v1/jobs/{id}/update; controller/updates.py), as Slurm's ``scontrol update TimeLimit``.

With the agents' side played by hand: the new limit reaches every task in its node's next
heartbeat reply (a launch not sent yet carries it), the core's estimated end moves, the stored
request changes (a restarted controller keeps it), a limit already passed stops the job as
timed out, a user may only shorten it. With a real agent running real processes: a job ends
as timed out near its new, shorter limit; a job given more time outlives its old limit."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.agent.config import AgentConfig
from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat, HeartbeatReply, TaskLimit, TaskReport, TaskState
from fusesched.cli.local import LocalCluster
from fusesched.controller import updates
from fusesched.controller.service import Controller
from fusesched.model.phases import JobPhase
from fusesched.sdk import Client

WHOLE = {"resources": {"cpu": "4"}, "argv": ["sleep", "1000"]}  # the whole node
HALF = {"resources": {"cpu": "2"}, "argv": ["sleep", "1000"]}


def submit(client: TestClient, group: dict[str, Any] = WHOLE, **extra: Any) -> dict[str, Any]:
    answer = client.post("/v1/jobs", json={"groups": [group], **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def beat(ctl: Controller, running: list[str], **extra: Any) -> HeartbeatReply:
    return ctl.heartbeat(Heartbeat(node="n0", running=running, **extra), wait_s=0)


def started(ctl: Controller) -> dict[str, str]:
    """Run a cycle, take the launches (job id → task id) and say they run."""
    ctl.run_cycle()
    launches = beat(ctl, []).launch
    reports = [TaskReport(task_id=t.task_id, state=TaskState.RUNNING, pid=1) for t in launches]
    beat(ctl, [t.task_id for t in launches], reports=reports)
    return {t.job_id: t.task_id for t in launches}


def update(client: TestClient, job: str, **body: Any) -> Any:
    return client.post(f"/v1/jobs/{job}/update", json=body)


def test_a_running_jobs_new_limit_reaches_its_agent_and_the_core(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = submit(client, walltime_s=3600)["id"]
    task = started(ctl)[job]
    start = clock.now
    clock.now += 60
    answer = update(client, job, walltime_s=600)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"updated": [job]}
    rec = ctl.core.jobs[job]
    assert rec.phase is JobPhase.RUNNING
    assert (rec.spec.walltime_s, rec.est_end) == (600, start + 600)
    reply = beat(ctl, [task])
    assert [(limit.task_id, limit.walltime_s) for limit in reply.limit] == [(task, 600)]
    assert reply.kill == []
    # each full beat's reply carries it again while the task runs: a reply lost on the way
    # (the agent would keep the old limit) is made good by the next one
    again = beat(ctl, [task]).limit
    assert [(limit.task_id, limit.walltime_s) for limit in again] == [(task, 600)]
    quick = ctl.heartbeat(Heartbeat(node="n0", running=None), wait_s=0, launch=True)
    assert quick.limit == []  # (a quick report lists no tasks)
    assert beat(ctl, []).limit == []  # no longer running there: forgotten
    assert beat(ctl, [task]).limit == []
    stored = ctl.persist.store.get_job(job)
    assert stored is not None and stored.job.request["walltime_s"] == 600
    events = ctl.persist.store.events_for_job(job)
    assert any(e.event.kind == "JobUpdated" for e in events)


def test_a_user_may_only_shorten_a_running_jobs_limit(ctl: Controller, client: TestClient) -> None:
    job = submit(client, walltime_s=600)["id"]
    task = started(ctl)[job]
    with pytest.raises(updates.UpdateForbidden, match="only an admin may lengthen"):
        updates.update(ctl, job, walltime_s=1200, only_lower=True)
    assert ctl.core.jobs[job].spec.walltime_s == 600 and beat(ctl, [task]).limit == []
    assert updates.update(ctl, job, walltime_s=300, only_lower=True) == [job]
    assert updates.update(ctl, job, walltime_s=1200) == [job]  # an admin may lengthen it
    assert [limit.walltime_s for limit in beat(ctl, [task]).limit] == [300, 1200]
    assert [limit.walltime_s for limit in beat(ctl, [task]).limit] == [1200]  # (again)
    assert ctl.core.jobs[job].spec.walltime_s == 1200


def test_a_limit_already_passed_stops_the_job_as_timed_out(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    job = submit(client, walltime_s=3600)["id"]
    task = started(ctl)[job]
    clock.now += 120
    assert update(client, job, walltime_s=60).status_code == 200
    (kill,) = beat(ctl, [task]).kill
    assert kill.task_id == task and "walltime" in kill.reason
    exit_report = TaskReport(
        task_id=task, state=TaskState.EXITED, exit_code=-15, reason=kill.reason
    )
    beat(ctl, [], reports=[exit_report])
    ctl.run_cycle()
    shown = client.get(f"/v1/jobs/{job}").json()
    assert (shown["state"], shown["phase"]) == ("Failed", "timeout")
    assert "time limit changed to 60 s" in shown["reason"]


def test_only_a_running_jobs_time_limit_may_change(ctl: Controller, client: TestClient) -> None:
    job = submit(client, walltime_s=600)["id"]
    task = started(ctl)[job]
    for body in ({"priority": 3}, {"qos": "bronze", "walltime_s": 60}):
        answer = update(client, job, **body)
        assert answer.status_code == 409
        assert "only a waiting job can be changed in priority, QoS" in answer.text
    assert ctl.core.jobs[job].spec.walltime_s == 600
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    answer = update(client, job, walltime_s=60)  # being stopped: no new limit
    assert (answer.status_code, "being stopped" in answer.text) == (409, True)
    assert [k.task_id for k in beat(ctl, [task]).kill] == [task]


def test_a_launch_not_sent_yet_carries_the_new_limit(ctl: Controller, client: TestClient) -> None:
    job = submit(client, walltime_s=3600)["id"]
    ctl.run_cycle()  # started by the core, its launch still in the node's outbox
    assert updates.update(ctl, job, walltime_s=90) == [job]
    reply = beat(ctl, [])
    assert [(t.job_id, t.walltime_s) for t in reply.launch] == [(job, 90)]
    assert reply.limit == []


def test_an_arrays_running_and_waiting_members_get_the_new_limit(
    ctl: Controller, client: TestClient
) -> None:
    made = submit(client, HALF, walltime_s=3600, array={"start": 0, "stop": 2})
    tasks = started(ctl)  # two members run (2 CPUs each), the third waits
    members = made["ids"]
    assert sorted(tasks) == members[:2]
    assert client.post(f"/v1/jobs/{made['id']}/update", json={"walltime_s": 100}).json() == {
        "updated": members
    }
    assert [ctl.core.jobs[m].spec.walltime_s for m in members] == [100, 100, 100]
    assert sorted(limit.task_id for limit in beat(ctl, list(tasks.values())).limit) == sorted(
        tasks.values()
    )
    # a priority changes only the waiting member (as before)
    answer = client.post(f"/v1/jobs/{made['id']}/update", json={"priority": 4})
    assert answer.json() == {"updated": members[2:]}


def test_an_array_whose_members_all_ended_is_a_conflict(
    ctl: Controller, client: TestClient
) -> None:
    made = submit(client, HALF, walltime_s=60, array={"start": 0, "stop": 1})
    tasks = started(ctl)
    reports = [TaskReport(task_id=t, state=TaskState.EXITED, exit_code=0) for t in tasks.values()]
    beat(ctl, [], reports=reports)
    ctl.run_cycle()
    assert made["id"] not in ctl.jobs and not ctl.jobs
    answer = client.post(f"/v1/jobs/{made['id']}/update", json={"walltime_s": 30})
    assert answer.status_code == 409, answer.text
    assert update(client, "4242", walltime_s=30).status_code == 404  # no such job


def test_a_restarted_controller_keeps_the_new_limit(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    job = submit(client, walltime_s=3600)["id"]
    task = started(ctl)[job]
    start = clock.now
    assert update(client, job, walltime_s=900).status_code == 200
    assert ctl.tasks[task][1].launch.walltime_s == 900
    ctl.persist.close()
    again = one_node_controller(tmp_path, clock)
    try:
        assert again.jobs[job].spec.walltime_s == 900
        again.run_cycle()  # adopted (its node is back): the core's end is the new limit's
        rec = again.core.jobs[job]
        assert rec.phase is JobPhase.RUNNING and rec.est_end == start + 900
    finally:
        again.persist.close()


# ----------------------------------------------------------------------------- a real agent


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A controller with one real agent (2 CPUs) running real processes, on loopback."""
    shared = Path(tempfile.mkdtemp(prefix="fusesched-limit-"))
    shared.chmod(0o755)
    agent = AgentConfig(
        name="node-a",
        address="127.0.0.1",
        cpu=2,
        memory="2Gi",
        work_dir=shared / "work",
        image_cache_dir=shared / "images",
        nvml=False,
        run_as_users=False,
        memory_cgroup=False,
    )
    local = LocalCluster(tmp_path / "data", port=0, agents=[agent], long_poll_s=0.5)
    try:
        with local:
            yield local
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def running(client: Client, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        shown = client.show(job_id)
        if shown["state"] == "Running" and shown["tasks"]:
            return shown
        assert shown["state"] == "Pending", shown
        assert time.monotonic() < deadline, f"job {job_id} did not start: {shown}"
        time.sleep(0.02)


def sleeper(seconds: float, walltime_s: float) -> dict[str, Any]:
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "argv": ["sleep", str(seconds)]}
    return {"name": "sleeper", "walltime_s": walltime_s, "groups": [group]}


def fusesched(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``fusesched`` command, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "fusesched", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"},
        cwd=cluster.data_dir,  # (sbatch's jobs run there)
        check=False,
    )


def test_a_real_job_ends_as_timed_out_at_its_new_shorter_limit(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    job = client.submit(sleeper(600, walltime_s=3600))
    shown = running(client, job)
    lifted = fusesched(cluster, "update", job, "--time", "0")
    assert lifted.returncode != 0 and "a time limit cannot be lifted" in lifted.stderr
    changed = fusesched(cluster, "update", job, "--time", "0:02")  # MM:SS: 2 s from its start
    assert changed.returncode == 0, changed.stderr
    done = client.wait(job, timeout=30)
    assert (done["state"], done["phase"]) == ("Failed", "timeout")
    # the agent's own kill at its deadline ("walltime exceeded"), or, when the update came
    # after it (a loaded machine: 2 s pass before the CLI's second call), the controller's
    assert done["reason"] in ("walltime exceeded", "walltime exceeded (time limit changed to 2 s)")
    ran = done["end_time"] - shown["start_time"]
    assert 2.0 <= ran < 8.0, ran  # near the new limit, not the old one (3600 s)


def test_a_real_job_given_more_time_outlives_its_old_limit(cluster: LocalCluster) -> None:
    client = Client(cluster.url)
    job = client.submit(sleeper(4, walltime_s=2.5))
    shown = running(client, job)
    assert client.update(job, walltime_s=60) == [job]  # no authentication: an admin
    done = client.wait(job, timeout=30)
    assert (done["state"], done["exit_code"]) == ("Completed", 0)
    assert done["end_time"] - shown["start_time"] >= 3.5  # past the old limit of 2.5 s


def test_a_reply_without_limits_leaves_the_field_out(ctl: Controller) -> None:
    """Agents older than ``limit`` refuse fields they do not know: they keep working until
    a limit is actually sent."""
    client = TestClient(create_app(ctl))
    answer = client.post("/v1/agents/heartbeat", json={"node": "n0", "running": []})
    assert answer.status_code == 200 and "limit" not in answer.json()
    sent = HeartbeatReply(limit=[TaskLimit(task_id="1.main.0", walltime_s=5)])
    assert HeartbeatReply.model_validate_json(sent.model_dump_json()) == sent
