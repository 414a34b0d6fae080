"""Signals for running jobs (controller/signals.py, POST /v1/jobs/{id}/signal, ``fusesched
cancel --signal``, ``sbatch --signal``), as Slurm's ``scancel --signal`` and ``sbatch
--signal``.

With the agent's side played by hand: a launch carries the job's warning (and leaves the
field out without one), a signal on demand reaches every running task in its node's next
reply (the job keeps running), and what cannot be signalled is refused with the reason.
With a real agent running real processes: a task trapping SIGUSR1 gets the warning about its
lead before its limit, a new limit moves it, and ``cancel --signal`` reaches it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.controller import test_running_limit
from tests.controller.test_actions_gaps import People
from tests.controller.test_running_limit import beat, fusesched, running, started, submit

from fusesched.api.app import create_app
from fusesched.api.wire import HeartbeatReply, TaskReport, TaskState
from fusesched.cli.local import LocalCluster
from fusesched.controller.auth import Authenticator
from fusesched.controller.service import Controller
from fusesched.sdk import Client
from fusesched.store import TokenKind

cluster = test_running_limit.cluster  # its fixture: a controller with one real agent

HALF = {"resources": {"cpu": "2"}, "argv": ["sleep", "1000"]}


def signal(client: TestClient, job: str, **body: Any) -> Any:
    return client.post(f"/v1/jobs/{job}/signal", json=body)


# ------------------------------------------------------------------ the agent played by hand


def test_a_launch_carries_the_jobs_warning(ctl: Controller, client: TestClient) -> None:
    warned = submit(client, HALF, walltime_s=600, signal={"name": "SIGUSR1", "before_s": 90})
    plain = submit(client, HALF, walltime_s=600)
    ctl.run_cycle()
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true", json={"node": "n0", "running": []}
    )
    launches = {t["job_id"]: t for t in answer.json()["launch"]}
    assert launches[warned["id"]]["signal"] == {"name": "USR1", "before_s": 90, "main_only": False}
    # without one the field is left out: agents older than it refuse fields they do not know
    assert "signal" not in launches[plain["id"]]
    assert "signal" not in answer.json()  # (nor the reply's list of signals, when empty)


def test_a_signal_reaches_every_running_task_and_the_job_goes_on(
    ctl: Controller, client: TestClient
) -> None:
    job = submit(client, {**HALF, "replicas": 2})["id"]
    tasks = started(ctl)
    task_ids = sorted(t for t in ctl.jobs[job].tasks)
    assert list(tasks) == [job]
    answer = signal(client, job, signal="usr1")
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"signalled": [job], "signal": "USR1"}
    reply = beat(ctl, task_ids)
    assert sorted((s.task_id, s.signal, s.main_only) for s in reply.signal) == [
        (t, "USR1", False) for t in task_ids
    ]
    assert reply.kill == [] and beat(ctl, task_ids).signal == []  # sent once
    assert signal(client, job, signal=12, main_only=True).status_code == 202
    answer = client.post(
        "/v1/agents/heartbeat?wait=0&signals=true", json={"node": "n0", "running": task_ids}
    )
    reply = HeartbeatReply.model_validate_json(answer.text)  # as an agent reads it
    assert {(s.signal, s.main_only) for s in reply.signal} == {("USR2", True)}
    assert ctl.core.jobs[job].phase.value == "running"
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "Running"


def test_what_cannot_be_signalled_is_refused_with_the_reason(
    ctl: Controller, client: TestClient
) -> None:
    job = submit(client, {"resources": {"cpu": "4"}, "argv": ["sleep", "1"]})["id"]
    task = started(ctl)[job]
    waiting = submit(client)["id"]  # the node is full: it waits
    ctl.run_cycle()
    answer = signal(client, waiting, signal="USR1")
    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        f"job {waiting} is waiting: only a running job can be signalled"
    )
    for bad, message in (
        ("FOO", "unknown signal 'FOO'"),
        ("KILL", "SIGKILL cannot be caught"),
        (99, "unknown signal number 99"),
    ):
        answer = signal(client, job, signal=bad)
        assert answer.status_code == 422 and message in answer.json()["detail"], answer.text
    assert signal(client, job).status_code == 422  # no signal at all
    assert signal(client, job, signal="USR1", at=5).status_code == 422  # an unknown field
    assert signal(client, "4242", signal="USR1").status_code == 404
    exited = TaskReport(task_id=task, state=TaskState.EXITED, exit_code=0)
    beat(ctl, [], reports=[exited])
    ctl.run_cycle()
    answer = signal(client, job, signal="USR1")
    assert (answer.status_code, answer.json()["detail"]) == (409, f"job {job} has ended")


def test_a_job_being_stopped_or_not_yet_sent_is_refused(
    ctl: Controller, client: TestClient
) -> None:
    job = submit(client, HALF)["id"]
    ctl.run_cycle()  # started by the core, its launch not sent to its agent yet
    answer = signal(client, job, signal="USR1")
    assert (answer.status_code, "not running yet" in answer.text) == (409, True)
    (task,) = beat(ctl, []).launch
    assert client.post(f"/v1/jobs/{job}/cancel").status_code == 202
    ctl.run_cycle()
    answer = signal(client, job, signal="USR1")
    assert (answer.status_code, "being stopped" in answer.text) == (409, True)
    assert [k.task_id for k in beat(ctl, [task.task_id]).kill] == [task.task_id]


def test_an_array_signals_its_running_members(ctl: Controller, client: TestClient) -> None:
    made = submit(client, HALF, array={"start": 0, "stop": 2})
    tasks = started(ctl)  # two members run, the third waits
    answer = signal(client, made["id"], signal="TERM")
    assert answer.status_code == 202 and answer.json()["signalled"] == made["ids"][:2]
    assert sorted(s.task_id for s in beat(ctl, list(tasks.values())).signal) == sorted(
        tasks.values()
    )


def test_the_owner_or_an_admin_may_signal(ctl: Controller) -> None:
    people = People(ctl)
    auth = Authenticator(ctl.persist.store, enabled=True, clock=ctl.clock)
    people.tokens["bob"], _ = auth.issue(TokenKind.USER, user="bob", tenant="t", role="user")
    job = people.submit("alice", groups=[HALF])["id"]
    started(ctl)
    answer = people.post("bob", f"/v1/jobs/{job}/signal", {"signal": "USR1"})
    assert answer.status_code == 403 and "only they or an admin may signal it" in answer.text
    for who in ("alice", "tina", "root"):
        answer = people.post(who, f"/v1/jobs/{job}/signal", {"signal": "USR1"})
        assert answer.status_code == 202, (who, answer.text)
    assert len(beat(ctl, list(ctl.jobs[job].tasks)).signal) == 1  # the same one: sent once


def test_the_openapi_documents_the_route(ctl: Controller) -> None:
    schema = TestClient(create_app(ctl)).get("/openapi.json").json()
    assert "post" in schema["paths"]["/v1/jobs/{job_id}/signal"]


# ------------------------------------------------------------------------------ a real agent

TRAP = """#!/bin/bash
trap 'date +%s.%N >> {out}/warned' USR1
touch {out}/ready
while :; do sleep 0.05; done
"""


def trapping(out: Path, walltime_s: float | None = None, **extra: Any) -> dict[str, Any]:
    group = {"resources": {"cpu": "1", "memory": "64Mi"}, "script": TRAP.format(out=out)}
    limit = {} if walltime_s is None else {"walltime_s": walltime_s}
    return {"name": "trapper", "groups": [group], **limit, **extra}


def wait_for(path: Path, timeout: float = 15.0) -> None:
    """Until ``path`` exists and, for ``warned``, holds a whole line: the trap's ``>>``
    creates the file before ``date`` writes to it (a read in between found it empty)."""
    deadline = time.monotonic() + timeout
    while not path.exists() or (path.name == "warned" and not path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def warned_at(out: Path) -> list[float]:
    path = out / "warned"
    return [float(t) for t in path.read_text().split()] if path.exists() else []


def test_a_real_task_is_warned_its_lead_before_its_limit(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    client = Client(cluster.url)
    job = client.submit(trapping(tmp_path, 4, signal="B:USR1@2"))  # (a script: B: is its shell)
    start = running(client, job)["start_time"]
    done = client.wait(job, timeout=30)
    assert (done["state"], done["phase"]) == ("Failed", "timeout")  # it trapped the warning
    (warned,) = warned_at(tmp_path)
    assert 1.0 <= warned - start < 3.5, warned - start  # about 4 - 2 s after its start


def test_a_new_limit_moves_the_warning(cluster: LocalCluster, tmp_path: Path) -> None:
    client = Client(cluster.url)
    job = client.submit(
        trapping(tmp_path, 60, signal={"name": "USR1", "before_s": 2, "main_only": True})
    )
    start = running(client, job)["start_time"]
    changed = fusesched(cluster, "update", job, "--time", "0:04")  # 4 s: warned at 2 s
    assert changed.returncode == 0, changed.stderr
    wait_for(tmp_path / "warned")
    (warned,) = warned_at(tmp_path)
    assert 1.0 <= warned - start < 3.5, warned - start  # not 58 s after it
    client.cancel(job)


def test_cancel_signal_reaches_a_trapping_task_which_goes_on(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    client = Client(cluster.url)
    job = client.submit(trapping(tmp_path))
    running(client, job)
    wait_for(tmp_path / "ready")  # its trap is set
    sent = fusesched(cluster, "cancel", "--signal", "SIGUSR1", job)
    assert sent.returncode == 0, sent.stderr
    assert f"Sent SIGUSR1 to {job}" in sent.stdout
    wait_for(tmp_path / "warned")
    assert client.show(job)["state"] == "Running"
    assert client.signal(job, "10", main_only=True) == [job]  # the SDK; the shell alone
    deadline = time.monotonic() + 15
    while len(warned_at(tmp_path)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.show(job)["state"] == "Running"
    # errors: a clear message and a non-zero status, never a traceback
    bad = fusesched(cluster, "cancel", "--signal", "FOO", job)
    assert bad.returncode == 2 and "unknown signal 'FOO'" in bad.stderr
    held = client.submit({**trapping(tmp_path), "hold": True})
    waiting = fusesched(cluster, "cancel", "-s", "USR1", held)
    assert waiting.returncode == 2
    assert f"job {held} is waiting: only a running job can be signalled" in waiting.stderr
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1:00\n#SBATCH --signal=R:USR1@30\ntrue\n")
    reservation = fusesched(cluster, "sbatch", str(script))
    assert reservation.returncode != 0
    assert "R: flag (signal when a reservation ends) is not supported" in reservation.stderr
    for answer in (bad, waiting, reservation):
        assert "Traceback" not in answer.stderr + answer.stdout
    assert client.show(job)["state"] == "Running"
    client.cancel(job)
    client.cancel(held)
