"""A job step's variables reach its tasks through their launch's environment: a secret the
batch script exports is seen by every task, and is in no process's command line on the
nodes, in nothing that shows the job (``fusesched show``, ``GET /v1/jobs/{id}``, its events
in the portal), and in no file the controller or the agents keep."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

SCRIPT = """#!/bin/bash
#SBATCH -N 2 --ntasks-per-node=1
#SBATCH --nodelist=node-a,node-b
#SBATCH --mem-per-cpu=128M
#SBATCH -t 2
export SECRET="$(cat {scratch}/secret)"
srun sh -c 'if [ "$SECRET" = "$(cat {scratch}/secret)" ]; then echo "$SLURM_PROCID sees it"; fi
            echo $$ > {scratch}/pid.$SLURM_PROCID
            until [ -e {scratch}/go ]; do sleep 0.1; done'
echo "step: $?"
"""


def _wait_for(paths: list[Path], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() and p.read_text().strip() for p in paths):
        assert time.monotonic() < deadline, f"the step's tasks did not start: {paths}"
        time.sleep(0.1)


def _command_lines() -> dict[int, bytes]:
    """Every process's command line on this machine (what ``ps`` shows)."""
    found: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:  # (it ended meanwhile)
                continue
    return found


def _files_holding(root: Path, text: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text in p.read_bytes()]


def test_a_steps_secret_is_in_no_command_line_and_nothing_shown(
    cluster: LocalCluster, client: Client, scratch: Path
) -> None:
    secret = f"hunter2-{uuid.uuid4().hex[:12]}"
    (scratch / "secret").write_text(secret)
    (scratch / "secret").chmod(0o644)
    script = SCRIPT.format(scratch=scratch)
    (job_id,) = client.submit_files([{"name": "secret.sh", "text": script}])["ids"]
    pids = [scratch / "pid.0", scratch / "pid.1"]
    _wait_for(pids)
    try:
        # the tasks run: their process environment holds it, no command line does
        for pid_file in pids:
            pid = int(pid_file.read_text())
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert f"SECRET={secret}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        shown_by_ps = [pid for pid, line in _command_lines().items() if secret.encode() in line]
        assert shown_by_ps == []
        # the controller holds the step's tasks with their variables in the launch's
        # environment (memory only), not in their command
        ctl = cluster.server.controller
        remote = [t for t in ctl.jobs[job_id].tasks.values() if t.remote]
        assert len(remote) == 2
        for task in remote:
            assert not any(secret in arg for arg in task.launch.argv), task.launch.argv
            assert task.launch.env["SECRET"] == secret
        # nothing that shows the job has it
        assert secret not in str(client.show(job_id))
        portal = httpx.get(f"{cluster.url}/v1/portal/jobs/{job_id}", timeout=30)
        assert portal.status_code == 200 and portal.json()["events"], portal.text
        assert secret not in portal.text
        cli = [sys.executable, "-m", "fusesched", "show", job_id, "--controller", cluster.url]
        for extra in ([], ["--json"]):
            shown = subprocess.run([*cli, *extra], capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0 and ".remote." in shown.stdout, shown.stderr
            assert secret not in shown.stdout
    finally:
        (scratch / "go").touch()
    done = client.wait(job_id, timeout=60)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    assert {"0 sees it", "1 sees it", "step: 0"} <= set(output.splitlines()), output
    # nor is it in what the controller stores (its database, the logs) or the agents keep
    assert _files_holding(cluster.data_dir, secret.encode()) == []
    for agent in cluster.agent_configs:
        assert _files_holding(Path(agent.work_dir), secret.encode()) == []
