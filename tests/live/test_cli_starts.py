"""``fusesched jobs --start`` against a live cluster (real agents, real processes)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.live.test_cli import PYTHON, as_json, fusesched

from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

BUSY = """name: busy
walltime: {limit}
resources: {{cpu: "{cpu}", memory: 64Mi}}
placement: {{node_selector: {{kubernetes.io/hostname: {node}}}}}
command: [sleep, "600"]
"""


def test_jobs_start_shows_when_and_where_waiting_jobs_start(
    cluster: LocalCluster, tmp_path: Path, native_front: Path
) -> None:
    client = Client(cluster.url)
    ids = []
    for node, cpu, limit in (("node-a", 2, "10m"), ("node-b", 2, "20m"), ("node-c", 4, "30m")):
        path = tmp_path / f"{node}.yaml"
        path.write_text(BUSY.format(node=node, cpu=cpu, limit=limit))
        ids.append(as_json(fusesched(cluster, "submit", str(path), "--json"))["id"])
    until = time.monotonic() + 30
    while any(client.show(j)["state"] != "Running" for j in ids) and time.monotonic() < until:
        time.sleep(0.1)
    waiting = tmp_path / "waiting.yaml"
    waiting.write_text("name: waits\nwalltime: 5m\nresources: {cpu: 2}\ncommand: ['true']\n")
    job = as_json(fusesched(cluster, "submit", str(waiting), "--json"))["id"]
    started = client.show(ids[0])["start_time"]
    answer = as_json(fusesched(cluster, "jobs", "--start", "--json"))
    (row,) = answer["jobs"]
    assert row["id"] == job and row["nodes"] == ["node-a"] and row["phase"] == "queued"
    assert abs(row["expected_start"] - (started + 600)) < 5  # when the 10-minute job ends
    table = fusesched(cluster, "jobs", "--start")
    assert table.returncode == 0, table.stderr
    assert job in table.stdout and "node-a" in table.stdout
    assert "in 9 min" in table.stdout or "in 10 min" in table.stdout, table.stdout
    assert "time limit" in table.stdout  # what the projection assumes
    # submit --test-only: the same question for a job not submitted (Python and C fronts)
    for front in ([str(native_front)], PYTHON):
        tried = fusesched(cluster, "submit", "--test-only", str(waiting), command=front)
        assert tried.returncode == 0, tried.stderr
        assert "Job 1 (waits) would start at " in tried.stdout, tried.stdout
        assert "on node-a" in tried.stdout and "Nothing was submitted." in tried.stdout
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -c 2 --time=5\ntrue\n")
    for front in ([str(native_front)], PYTHON):
        tried = fusesched(cluster, "sbatch", "--test-only", "-J", "s", str(script), command=front)
        assert tried.returncode == 0, tried.stderr
        assert tried.stdout == "" and " using 2 processors on nodes node-a " in tried.stderr
        assert tried.stderr.startswith("sbatch: Job 0 to start at "), tried.stderr
    assert [j["id"] for j in client.starts()["jobs"]] == [job]  # nothing new
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\nresources: {cpu: 64}\ncommand: ['true']\n")
    refused = fusesched(cluster, "submit", "--test-only", str(huge))
    assert refused.returncode == 2 and "64" in refused.stderr, refused.stderr
    refused = fusesched(cluster, "jobs", "--start", "--state", "Running")
    assert refused.returncode == 2 and "leave out --state" in refused.stderr
    assert not refused.stderr.startswith("Traceback")
    for j in (*ids, job):
        client.cancel(j)
