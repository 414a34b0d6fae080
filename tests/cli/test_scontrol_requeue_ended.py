"""``scontrol requeue`` of a finished batch job (as Slurm's): it runs again under its id,
counted one more restart; ``requeuehold`` leaves it held; a ``--no-requeue`` job is refused
with Slurm's exit status 1. Against a real controller with an agent whose tasks only pretend
to run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.conftest import pretend_cluster
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.sdk import Client


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with pretend_cluster(tmp_path, cpus=2) as found:
        yield found


def ended(client: Client, exit_code: int, requeue: bool = True) -> str:
    request = {
        "name": "again",
        "requeue": requeue,
        "groups": [
            {
                "resources": {"cpu": 1},
                "argv": ["true"],
                "env": {
                    "FUSESCHED_FAKE_DURATION": "0.1",
                    "FUSESCHED_FAKE_EXIT_CODE": str(exit_code),
                },
            }
        ],
    }
    [job_id] = client.submit(request)
    client.wait(str(job_id), timeout=20)
    return str(job_id)


def scontrol(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["scontrol", *args], env={"FUSESCHED_CONTROLLER": url})
    return result.exit_code, result.output


def test_a_failed_job_runs_again_under_its_id(url: str) -> None:
    client = Client(url)
    job_id = ended(client, 3)
    assert client.show(job_id)["state"] == "Failed"
    assert scontrol(url, "requeue", job_id) == (0, "")
    again = client.wait(job_id, timeout=20)
    assert again["id"] == job_id and again["state"] == "Failed"
    code, shown = scontrol(url, "show", "job", job_id)
    assert code == 0 and "Restarts=1" in shown, shown


def test_requeuehold_leaves_a_completed_job_held(url: str) -> None:
    client = Client(url)
    job_id = ended(client, 0)
    assert scontrol(url, "requeuehold", job_id) == (0, "")
    time.sleep(0.5)
    code, shown = scontrol(url, "show", "job", job_id)
    assert code == 0 and "JobState=PENDING Reason=JobHeld" in shown, shown


def test_a_no_requeue_job_is_refused(url: str) -> None:
    client = Client(url)
    job_id = ended(client, 0, requeue=False)
    code, said = scontrol(url, "requeue", job_id)
    assert code == 1 and "not to be requeued" in said, said
    assert client.show(job_id)["state"] == "Completed"
