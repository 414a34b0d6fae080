"""sbatch's --comment, --export, --nice and --no-requeue against a live cluster of real agents,
as a user types them: the Python command (which parses the script itself) and the native
front (which sends the script's text for the controller to parse)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from tests.live.test_cli import PYTHON
from tests.live.test_cli_sbatch_options import run_in, submitted

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

SCRIPT = """\
#!/bin/sh
#SBATCH --comment="nightly sweep, run 7"
#SBATCH --export=NONE,GREETING=hello,EMPTY=
#SBATCH --nice=50 --no-requeue --mem=64M
echo "greeting=$GREETING empty=[$EMPTY]"
sleep 60
"""


@pytest.fixture(params=["python", "native"])
def command(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "python":
        return PYTHON
    return [str(request.getfixturevalue("native_front"))]


def _until(check: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not callable(check) or not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_comment_export_nice_and_no_requeue(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "job.sh").write_text(SCRIPT)
    job_id = submitted(run_in(tmp_path, cluster, command, "sbatch", "--json", "job.sh"))
    client = Client(cluster.url)
    _until(lambda: client.show(job_id)["state"] == "Running", "the job to start")
    _until(lambda: "greeting=" in client.logs(job_id), "the job's output")
    assert "greeting=hello empty=[]" in client.logs(job_id)  # --export's variables

    shown = run_in(tmp_path, cluster, PYTHON, "show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "comment: nightly sweep, run 7" in shown.stdout
    assert "priority: -50" in shown.stdout  # --nice=50 lowers it by 50
    view = json.loads(run_in(tmp_path, cluster, PYTHON, "show", "--json", job_id).stdout)
    assert view["comment"] == "nightly sweep, run 7" and view["priority"] == -50

    # --no-requeue: fusesched requeue is refused, the job keeps running
    refused = run_in(tmp_path, cluster, PYTHON, "requeue", job_id)
    assert refused.returncode != 0
    assert f"job {job_id} is not to be requeued" in refused.stderr
    assert "sbatch --no-requeue" in refused.stderr and "Traceback" not in refused.stderr
    assert client.show(job_id)["state"] == "Running"
    client.cancel(job_id)
    assert client.wait(job_id, timeout=30)["state"] == "Cancelled"


def test_requeue_allowed_without_no_requeue_and_run_exports(
    cluster: LocalCluster, tmp_path: Path, scratch: Path
) -> None:
    """A job without --no-requeue is requeued as before; ``fusesched run`` takes --export and
    --comment too (it shares sbatch's parser); a bare --export name is refused."""
    client = Client(cluster.url)
    job_id = submitted(
        run_in(tmp_path, cluster, PYTHON, "sbatch", "--json", "--requeue", "--wrap=sleep 60")
    )
    _until(lambda: client.show(job_id)["state"] == "Running", "the job to start")
    assert client.requeue(job_id) == [job_id]
    client.cancel(job_id)

    ran = run_in(
        scratch,  # (run's tasks start where it runs: a folder their user can enter)
        cluster,
        PYTHON,
        "run",
        "-Q",
        "--export=A=1",
        "--comment=from run",
        "sh",
        "-c",
        "echo A=$A",
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "A=1\n" and "warning" not in ran.stderr
    (latest, *_) = client.jobs()
    assert latest["comment"] == "from run"

    bare = run_in(tmp_path, cluster, PYTHON, "sbatch", "--export=NONE,NOPE", "--wrap=true")
    assert bare.returncode == 0 and "NOPE is not set here" in bare.stderr  # (a bare name)


def test_the_job_inherits_the_submitting_shell(
    cluster: LocalCluster, scratch: Path, command: list[str]
) -> None:
    """Slurm's default ``--export=ALL``: a tool on the submitting shell's PATH only (an
    activated virtual environment, say) and its variables reach the batch script and srun's
    tasks, by both commands and ``run``; ``--export=NONE`` carries none of it."""
    tools = scratch / "venv" / "bin"
    tools.mkdir(parents=True)
    (tools / "mytool").write_text('#!/bin/sh\necho "mytool ran with $MODEL"\n')
    (tools / "mytool").chmod(0o755)
    (scratch / "venv").chmod(0o755)
    (scratch / "job.sh").write_text("#!/bin/sh\n#SBATCH -n 1\nmytool\nsrun mytool\n")
    env = {
        "FUSESCHED_CONTROLLER": cluster.url,
        "PATH": f"{tools}:/usr/bin:/bin",
        "MODEL": "llama",
        "COLUMNS": "200",
    }

    def shell(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args], capture_output=True, text=True, timeout=60, cwd=scratch, env=env
        )

    client = Client(cluster.url)
    job_id = submitted(shell(*command, "sbatch", "--json", "job.sh"))
    assert client.wait(job_id, timeout=30)["state"] == "Completed", client.logs(job_id)
    output = (scratch / f"slurm-{job_id}.out").read_text()
    assert output.count("mytool ran with llama") == 2, output  # (the script and its step)

    ran = shell(*PYTHON, "run", "-Q", "mytool")
    assert ran.returncode == 0 and ran.stdout == "mytool ran with llama\n", ran.stderr

    job_id = submitted(shell(*command, "sbatch", "--json", "--export=NONE", "job.sh"))
    assert client.wait(job_id, timeout=30)["state"] == "Failed"
    assert "mytool" in (scratch / f"slurm-{job_id}.out").read_text()  # (not found)
