"""Whom a signal on demand reaches (POST /v1/jobs/{id}/signal, controller/signals.py), as
Slurm 22.05's ``scancel --signal``: without ``-b``/``-f`` (``steps_only``) a batch script's
job steps alone, not its shell, which an untrapped signal would kill (and the job with it);
``-b`` (``main_only``) the shell alone, not the steps; ``-f`` every task. A job with no step
running is sent nothing, and no error, as Slurm's. The agents are played by hand."""

from __future__ import annotations

from fastapi.testclient import TestClient
from tests.controller.test_oom_exit_zero import sbatch, start
from tests.controller.test_running_limit import beat, started, submit
from tests.controller.test_step_warning import _signals, _step

from fusesched.controller.service import Controller


def signal(client: TestClient, job: str, **body: object) -> object:
    answer = client.post(f"/v1/jobs/{job}/signal", json=body)
    assert answer.status_code == 202, answer.text
    return answer.json()


def test_steps_only_reaches_the_steps_and_not_the_shell(
    ctl: Controller, client: TestClient
) -> None:
    job = sbatch(ctl, "-t", "10")
    (batch,) = start(ctl)
    step = _step(client, job)
    start(ctl, [batch.task_id])
    running = [batch.task_id, step]
    assert signal(client, job, signal="TERM", steps_only=True) == {
        "signalled": [job],
        "signal": "TERM",
    }
    assert _signals(ctl, running) == [(step, "TERM", False)]
    signal(client, job, signal="USR1", main_only=True)  # (scancel -b: the shell alone)
    assert _signals(ctl, running) == [(batch.task_id, "USR1", True)]
    signal(client, job, signal="USR2")  # (scancel -f, and fusesched cancel's default)
    assert _signals(ctl, running) == sorted([(batch.task_id, "USR2", False), (step, "USR2", False)])
    assert ctl.core.jobs[job].phase.value == "running"


def test_a_script_with_no_step_running_is_sent_nothing_and_no_error(
    ctl: Controller, client: TestClient
) -> None:
    job = sbatch(ctl, "-t", "10")
    ctl.run_cycle()  # (started: its shell's launch not yet taken by its agent)
    assert signal(client, job, signal="TERM", steps_only=True)["signalled"] == [job]
    (batch,) = start(ctl)
    assert signal(client, job, signal="TERM", steps_only=True)["signalled"] == [job]
    assert _signals(ctl, [batch.task_id]) == []
    # without steps_only a job whose tasks have not started is still refused
    waiting = sbatch(ctl, "-t", "10")
    ctl.run_cycle()
    answer = client.post(f"/v1/jobs/{waiting}/signal", json={"signal": "TERM"})
    assert answer.status_code == 409 and "is starting" in answer.text


def test_a_job_without_a_script_is_its_own_step(ctl: Controller, client: TestClient) -> None:
    """A YAML job's or ``fusesched run``'s tasks are its program (Slurm's step 0): steps_only
    signals them all, as without it."""
    job = submit(client, {"resources": {"cpu": "1"}, "argv": ["sleep", "600"], "replicas": 2})["id"]
    tasks = started(ctl)
    assert list(tasks) == [job]
    task_ids = sorted(ctl.jobs[job].tasks)
    signal(client, job, signal="USR1", steps_only=True)
    reply = beat(ctl, task_ids)
    assert sorted((s.task_id, s.signal) for s in reply.signal) == [(t, "USR1") for t in task_ids]


def test_main_only_and_steps_only_exclude_each_other(ctl: Controller, client: TestClient) -> None:
    job = sbatch(ctl, "-t", "10")
    start(ctl)
    answer = client.post(
        f"/v1/jobs/{job}/signal", json={"signal": "TERM", "main_only": True, "steps_only": True}
    )
    assert answer.status_code == 422 and "exclude each other" in answer.text


def test_scancel_reads_each_refusal_as_slurms_error(ctl: Controller, client: TestClient) -> None:
    """``fusesched scancel`` turns the route's 409s into Slurm's words (cli/scancel_said.py):
    a waiting job's into ``Job can not be altered now`` (exit 228), that of a job being
    stopped or ended into its check's ``Invalid job id specified``: read from the
    controller's own messages, so that a change of their words is caught here."""
    from fusesched.cli.scancel_said import TRANSITION, signal_refusal

    held = submit(client, {"resources": {"cpu": "1"}, "argv": ["sleep", "600"]}, hold=True)["id"]
    answer = client.post(f"/v1/jobs/{held}/signal", json={"signal": "USR1"})
    assert answer.status_code == 409 and signal_refusal(answer.json()["detail"]) == TRANSITION
    job = sbatch(ctl, "-t", "10")
    start(ctl)
    assert client.post(f"/v1/jobs/{job}/cancel").status_code in (200, 202)
    ctl.run_cycle()  # (the cancel carried out: its tasks are being stopped)
    answer = client.post(f"/v1/jobs/{job}/signal", json={"signal": "USR1", "steps_only": True})
    assert answer.status_code == 409, answer.text
    assert signal_refusal(answer.json()["detail"]) is None  # (being stopped: ended, to Slurm)
