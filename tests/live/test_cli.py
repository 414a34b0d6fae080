"""The client commands against a live cluster, as a user types them (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

PYTHON = [sys.executable, "-m", "fusesched"]


@pytest.fixture(params=["python", "native"])
def command(request: pytest.FixtureRequest) -> list[str]:
    """The ``fusesched`` command: the Python one, and the native front (``make``'s
    .venv/bin/fusesched; submit and sbatch answered in C, the rest handed to Python)."""
    if request.param == "python":
        return PYTHON
    return [str(request.getfixturevalue("native_front"))]


def fusesched(
    cluster: LocalCluster | None, *args: str, command: list[str] = PYTHON
) -> subprocess.CompletedProcess[str]:
    url = cluster.url if cluster is not None else "http://127.0.0.1:9"
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": url, "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        cwd=cluster.data_dir if cluster is not None else None,  # (sbatch's jobs run there)
    )


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


SCRIPT = """#!/bin/bash
#SBATCH --job-name=cli-test
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=100M
#SBATCH --time=2:00
echo "script ran as job $FUSESCHED_JOB_ID with $SLURM_ARRAY_TASK_ID"
"""

OWN_YAML = """
name: from-yaml
walltime: 1m
resources: {cpu: 500m, memory: 64Mi}
command: [sh, -c, "echo yaml job"]
"""

KUBE_YAML = """
apiVersion: batch/v1
kind: Job
metadata: {name: from-kube}
spec:
  template:
    spec:
      schedulerName: fused-scheduler
      restartPolicy: Never
      containers:
        - name: main
          image: /nonexistent-is-not-used
          command: [sh, -c, "echo kube job"]
          resources: {requests: {cpu: 250m, memory: 32Mi}}
"""


def test_sbatch_show_logs_and_listing(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    submitted = as_json(
        fusesched(cluster, "sbatch", "--time=1:00", "--json", str(script), command=command)
    )
    job_id = submitted["id"]
    Client(cluster.url).wait(job_id, timeout=30)
    shown = as_json(fusesched(cluster, "show", job_id, "--json"))
    assert shown["id"] == job_id
    assert shown["state"] == "Completed"
    assert shown["exit_code"] == 0
    assert shown["nodes"]
    assert shown["name"] == "cli-test"
    logs = fusesched(cluster, "logs", job_id)
    assert f"script ran as job {job_id}" in logs.stdout
    listed = as_json(fusesched(cluster, "jobs", "--json"))
    assert [j["id"] for j in listed] == [job_id]
    table = fusesched(cluster, "jobs")
    assert "cli-test" in table.stdout and "Completed" in table.stdout


def test_yaml_and_kubernetes_files(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    own = tmp_path / "job.yaml"
    own.write_text(OWN_YAML)
    kube = tmp_path / "kube.yaml"
    kube.write_text(KUBE_YAML.replace("image: /nonexistent-is-not-used\n          ", ""))
    ids = as_json(fusesched(cluster, "submit", str(own), str(kube), "--json", command=command))[
        "ids"
    ]
    assert len(ids) == 2
    client = Client(cluster.url)
    assert [client.wait(i, timeout=30)["state"] for i in ids] == ["Completed", "Completed"]
    assert "yaml job" in client.logs(ids[0])
    assert "kube job" in client.logs(ids[1])


def test_cancel_nodes_and_queues(cluster: LocalCluster, tmp_path: Path) -> None:
    own = tmp_path / "long.yaml"
    own.write_text(OWN_YAML.replace("echo yaml job", "sleep 600").replace("1m", "1h"))
    job_id = as_json(fusesched(cluster, "submit", str(own), "--json"))["id"]
    queues = as_json(fusesched(cluster, "queues", "--json"))
    assert queues[0]["name"] == "default"
    assert queues[0]["pending"] + queues[0]["running"] == 1
    assert as_json(fusesched(cluster, "cancel", job_id, "--json")) == {"cancelled": [job_id]}
    assert Client(cluster.url).wait(job_id, timeout=30)["state"] == "Cancelled"
    nodes = as_json(fusesched(cluster, "nodes", "--json"))
    assert sorted(n["name"] for n in nodes) == ["node-a", "node-b", "node-c"]
    assert {n["name"]: n["capacity"]["cpu"] for n in nodes}["node-c"] == "4"


def test_cancel_by_name_as_scancel_n(cluster: LocalCluster, tmp_path: Path) -> None:
    long = OWN_YAML.replace("echo yaml job", "sleep 600").replace("1m", "1h")
    (tmp_path / "sweep.yaml").write_text(long.replace("from-yaml", "sweep"))
    (tmp_path / "other.yaml").write_text(long)
    sweep = [
        as_json(fusesched(cluster, "submit", str(tmp_path / "sweep.yaml"), "--json"))["id"]
        for _ in range(3)
    ]
    other = as_json(fusesched(cluster, "submit", str(tmp_path / "other.yaml"), "--json"))["id"]
    done = fusesched(cluster, "cancel", "-n", "sweep", "-t", "PD,R")
    assert done.returncode == 0 and done.stdout.strip() == f"Cancelling {', '.join(sweep)} (3 jobs)"
    client = Client(cluster.url)
    assert {client.wait(j, timeout=30)["state"] for j in sweep} == {"Cancelled"}
    assert client.show(other)["state"] in ("Pending", "Running")
    again = fusesched(cluster, "cancel", "-n", "sweep", "--json")
    assert as_json(again) == {"cancelled": []}
    assert as_json(fusesched(cluster, "cancel", other, "-n", "from-yaml", "--json")) == {
        "cancelled": [other]
    }


def test_hold_and_release(cluster: LocalCluster, tmp_path: Path) -> None:
    long = tmp_path / "long.yaml"
    long.write_text(OWN_YAML.replace("echo yaml job", "sleep 600").replace("1m", "1h"))
    first = as_json(fusesched(cluster, "submit", str(long), "--json"))["id"]
    after = tmp_path / "after.yaml"
    after.write_text(OWN_YAML + f"dependencies: [{{kind: afterany, job_id: '{first}'}}]\n")
    second = as_json(fusesched(cluster, "submit", str(after), "--json"))["id"]
    held = fusesched(cluster, "hold", second, "--reason", "check the input", "--json")
    assert as_json(held) == {"held": [second]}
    listing = fusesched(cluster, "jobs")
    assert "Pending (held)" in listing.stdout, listing.stdout
    refused = fusesched(cluster, "hold", first, "999999")
    assert refused.returncode == 2
    assert "only a waiting job can be held" in refused.stderr or "Pending" in refused.stderr
    assert "no job '999999'" in refused.stderr
    assert "reason: held: check the input" in fusesched(cluster, "show", second).stdout
    assert fusesched(cluster, "release", second).stdout.strip() == f"Released {second}"
    client = Client(cluster.url)
    until = time.monotonic() + 30
    while client.show(first)["state"] != "Running" and time.monotonic() < until:
        time.sleep(0.1)
    requeued = fusesched(cluster, "requeue", first, "--hold", "--reason", "node check")
    assert requeued.stdout.strip() == f"Requeued {first}", requeued.stderr
    while client.show(first)["phase"] != "held" and time.monotonic() < until + 30:
        time.sleep(0.1)
    assert client.show(first)["reason"] == "held: node check"
    assert fusesched(cluster, "cancel", first).returncode == 0
    assert client.wait(second, timeout=60)["state"] == "Completed"


BYTES_YAML = r"""name: bytes
walltime: 1m
resources: {cpu: 500m, memory: 64Mi}
command: [sh, -c, "printf 'a\\377b\\n'; sleep 2; printf 'second line\\n'"]
"""


def test_logs_follow_past_bytes_that_are_not_utf8(cluster: LocalCluster, tmp_path: Path) -> None:
    """`logs -f` follows a task that writes a byte that is not UTF-8 (the agent sends it as
    one "?") and goes on writing: nothing skipped, nothing twice."""
    own = tmp_path / "bytes.yaml"
    own.write_text(BYTES_YAML)
    job_id = as_json(fusesched(cluster, "submit", str(own), "--json"))["id"]
    followed = fusesched(cluster, "logs", job_id, "-f")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "a?b\nsecond line\n", followed.stdout


def test_drain_and_undrain_nodes(cluster: LocalCluster, tmp_path: Path) -> None:
    drained = fusesched(cluster, "drain", "node-a", "node-b", "--reason", "kernel update")
    assert drained.returncode == 0, drained.stderr
    assert "node-a: drained (kernel update)" in drained.stdout
    listing = fusesched(cluster, "nodes")
    assert "drain reason" in listing.stdout and "kernel update" in listing.stdout
    own = tmp_path / "job.yaml"
    own.write_text(OWN_YAML)
    job_id = as_json(fusesched(cluster, "submit", str(own), "--json"))["id"]
    assert Client(cluster.url).wait(job_id, timeout=30)["nodes"] == ["node-c"]
    refused = fusesched(cluster, "drain", "node-z", "node-c", "--reason", "x")
    assert refused.returncode == 2 and "no node 'node-z'" in refused.stderr
    assert "node-c: draining" in refused.stdout or "node-c: drained" in refused.stdout
    missing = fusesched(cluster, "drain", "node-c")
    assert missing.returncode == 2 and "--reason" in missing.stderr
    back = as_json(fusesched(cluster, "undrain", "node-a", "node-b", "node-c", "--json"))
    assert [(n["node"], n["state"], n["drain_reason"]) for n in back] == [
        ("node-a", "up", None),
        ("node-b", "up", None),
        ("node-c", "up", None),
    ]
    assert "drain reason" not in fusesched(cluster, "nodes").stdout


def test_bad_input_is_refused_with_a_clear_message(
    cluster: LocalCluster, tmp_path: Path, command: list[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nresources: {cpu: 1\ncommand: [true]\n")
    result = fusesched(cluster, "submit", str(broken), command=command)
    assert result.returncode == 2
    assert "broken.yaml" in result.stderr and "Traceback" not in result.stderr
    greedy = tmp_path / "greedy.yaml"
    greedy.write_text('name: g\nresources: {cpu: 1, gpu: 64}\ncommand: ["true"]\n')
    result = fusesched(cluster, "submit", str(greedy), command=command)
    assert result.returncode == 2
    assert "nvidia.com/gpu" in result.stderr and "Traceback" not in result.stderr
    missing = fusesched(cluster, "show", "999999")
    assert missing.returncode == 2 and "no job" in missing.stderr
    assert Client(cluster.url).jobs() == []  # nothing was stored


def test_an_unreachable_controller_is_reported(tmp_path: Path) -> None:
    result = fusesched(None, "jobs")
    assert result.returncode == 1
    assert "cannot reach the controller" in result.stderr
    assert "Traceback" not in result.stderr
