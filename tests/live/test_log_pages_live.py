"""Every reader of a log reads on past the log route's cap (4 MiB a read, ``X-Log-More``) to
the end, byte for byte: ``fusesched run``, ``fusesched logs`` (with and without ``-f``, of the
job and of a task), the SDK, and an ``srun`` step inside a batch job. Real subprocesses
against a live cluster of real agents."""

from __future__ import annotations

from pathlib import Path

from tests.live.test_cli import PYTHON, fusesched
from tests.live.test_cli_run_wait import run_in

from fusesched.api.log_routes import DEFAULT_BYTES
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

LINE = "é€😀 line"
LINES = 300_000
#: what the tasks write: past the cap, with characters of 2, 3 and 4 bytes across its cuts
WRITE = f"yes '{LINE}' | head -n {LINES}"
EXPECTED = f"{LINE}\n" * LINES


def test_every_reader_reads_past_the_cap(cluster: LocalCluster, scratch: Path) -> None:
    assert len(EXPECTED.encode()) > DEFAULT_BYTES
    ran = run_in(scratch, cluster, PYTHON, "run", "-Q", "sh", "-c", WRITE)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == EXPECTED
    client = Client(cluster.url)
    job = client.show(client.jobs()[0]["id"])
    (task,) = (t["task_id"] for t in job["tasks"])
    assert client.logs(job["id"]) == EXPECTED
    assert client.logs(job["id"], task) == EXPECTED
    assert client.logs_from(job["id"], task, 2) == (EXPECTED[1:], len(EXPECTED.encode()))
    page = client.log_page(job["id"], task)
    assert page.more and not page.complete and len(page.text.encode()) <= DEFAULT_BYTES
    for args in ([], ["-f"], ["--task", task], ["--task", task, "-f"]):
        shown = fusesched(cluster, "logs", job["id"], *args)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == EXPECTED, (args, len(shown.stdout))
        assert shown.stderr == ""


STEP = f"""#!/bin/bash
#SBATCH -n 1
#SBATCH --mem=256M
#SBATCH -t 2
srun sh -c "{WRITE}"
echo step done
"""


def test_an_srun_step_prints_its_tasks_output_past_the_cap(client: Client) -> None:
    (job_id,) = client.submit_files([{"name": "step.sh", "text": STEP}])["ids"]
    done = client.wait(job_id, timeout=90)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output[-2000:]
    assert output == EXPECTED + "step done\n"
