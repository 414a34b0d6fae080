"""Begin times through the controller (``sbatch --begin``, YAML ``begin``, ``begin_time``): a
relative time is read on the controller's clock, the job does not start before it, says so in
its reason, and a restarted controller still makes it wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from tests.builders import Clock
from tests.controller.conftest import one_node_controller

from fusesched.api.app import create_app
from fusesched.api.wire import Heartbeat
from fusesched.controller.service import Controller
from fusesched.submit.begin import begin_reason

SCRIPT = "#!/bin/sh\n#SBATCH -c 4\ntrue\n"


def submit_files(client: TestClient, *files: dict[str, Any]) -> list[str]:
    answer = client.post("/v1/submissions", json={"files": list(files)})
    assert answer.status_code == 201, answer.text
    return list(answer.json()["ids"])


def launched(ctl: Controller) -> list[str]:
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="n0", running=[]), wait_s=0)
    return [launch.job_id for launch in reply.launch]


def test_relative_begin_times_are_the_controllers(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = 5000.0
    (job,) = submit_files(client, {"name": "job.sh", "text": SCRIPT, "args": ["--begin=now+100"]})
    shown = client.get(f"/v1/jobs/{job}").json()
    assert shown["state"] == "Pending"
    assert shown["reason"] == begin_reason(5100.0)
    assert ctl.jobs[job].request.begin_time == 5100.0
    assert launched(ctl) == []
    clock.now = 5099.0
    assert launched(ctl) == []
    clock.now = 5100.0
    assert launched(ctl) == [job]


def test_yaml_begin_and_a_json_begin_time(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    yaml_text = 'name: y\nbegin: now+2minutes\nresources: {cpu: 4}\ncommand: ["true"]\n'
    (from_yaml,) = submit_files(client, {"name": "job.yaml", "text": yaml_text})
    answer = client.post(
        "/v1/jobs",
        json={"begin_time": 1060.0, "groups": [{"resources": {"cpu": "4"}, "argv": ["true"]}]},
    )
    assert answer.status_code == 201, answer.text
    from_json = answer.json()["id"]
    assert ctl.jobs[from_yaml].request.begin_time == 1120.0  # (the clock starts at 1000)
    assert launched(ctl) == []
    clock.now = 1060.0
    assert launched(ctl) == [from_json]


def test_a_bad_begin_time_is_refused_with_the_reason(client: TestClient) -> None:
    answer = client.post(
        "/v1/submissions",
        json={"files": [{"name": "job.sh", "text": SCRIPT, "args": ["--begin=someday"]}]},
    )
    assert answer.status_code == 400
    assert "cannot read the begin time 'someday'" in answer.text
    negative = client.post(
        "/v1/jobs",
        json={"begin_time": -5, "groups": [{"resources": {"cpu": "1"}, "argv": ["true"]}]},
    )
    assert negative.status_code in (400, 422)
    assert client.get("/v1/jobs").json() == []


def test_the_begin_time_outlives_a_restart(tmp_path: Path, clock: Clock) -> None:
    ctl = one_node_controller(tmp_path, clock)
    client = TestClient(create_app(ctl), raise_server_exceptions=False)
    (job,) = submit_files(client, {"name": "job.sh", "text": SCRIPT, "args": ["--begin=now+300"]})
    assert launched(ctl) == []
    ctl.persist.close()
    clock.now = 1200.0  # later, but before the begin time: relative to the submission
    again = one_node_controller(tmp_path, clock)
    try:
        assert again.jobs[job].request.begin_time == 1300.0
        assert launched(again) == []
        clock.now = 1300.0
        assert launched(again) == [job]
    finally:
        again.persist.close()


def test_a_released_job_still_says_it_waits_for_its_begin_time(
    ctl: Controller, client: TestClient, clock: Clock
) -> None:
    clock.now = 5000.0
    args = ["--begin=now+100", "--hold"]
    (job,) = submit_files(client, {"name": "job.sh", "text": SCRIPT, "args": args})
    ctl.run_cycle()
    assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]
    assert client.get(f"/v1/jobs/{job}").json()["reason"] == begin_reason(5100.0)
    assert launched(ctl) == []
    clock.now = 5100.0
    assert client.post(f"/v1/jobs/{job}/hold", json={"reason": "x"}).status_code == 200
    assert client.post(f"/v1/jobs/{job}/release").json()["released"] == [job]
    assert client.get(f"/v1/jobs/{job}").json()["reason"] == "released"  # its time has come
    assert launched(ctl) == [job]
