"""Job efficiency (``GET /v1/jobs/{id}/efficiency``, ``fusesched eff``) end to end: a real
controller, a real agent sampling its tasks every 0.2 s, real processes.

* a CPU-bound task shows a high CPU efficiency, a sleeping one a low one, both while they
  run (values so far, from the controller's memory) and once ended (from the store);
* a task that fills ~100 MiB shows a peak resident memory at least that large;
* what ended survives a controller restart (it is read from the store);
* an unknown job is a 404, a waiting job says it used nothing yet, and the CLI prints it;
* a job shorter than the sampling interval is counted to its exit (the final sample).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fusesched.controller.server import ControllerServer
from fusesched.sdk import Client, ControllerError

from .failure_cluster import FailureCluster, failure_cluster, until

FAST = {"sample_interval_s": 0.2, "long_poll_s": 0.25}
MiB = 1024 * 1024

BUSY = (
    "import time\nt = time.time()\nwhile time.time() - t < 3:\n    pass\n"
    "print('cpu', time.process_time())\n"
)
SLEEP = "import time\ntime.sleep(3)\n"
FILL = "import time\nx = b'x' * (100 * 1024 * 1024)\ntime.sleep(2.5)\nprint(len(x))\n"


def job(
    name: str, code: str, *, cpu: str = "1", memory: str = "512Mi", gpu: int = 0, **extra: Any
) -> Any:
    resources: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpu:
        resources["nvidia.com/gpu"] = gpu
    group = {"resources": resources, "argv": [sys.executable, "-c", code]}
    return {"name": name, "walltime_s": 120, "groups": [group], **extra}


def ended(client: Client, job_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        shown = client.show(job_id)
        return shown if shown["state"] in ("Completed", "Failed", "Cancelled") else None

    return dict(until(done, 60, f"job {job_id} did not end"))


def test_efficiency_of_busy_idle_and_memory_hungry_jobs(tmp_path: Path) -> None:
    with failure_cluster(tmp_path, **FAST) as cluster:
        ids = _run_jobs(cluster)
        stored = {name: cluster.client.efficiency(job_id) for name, job_id in ids.items()}
    # a new controller on the same database reads what the first one wrote
    server = ControllerServer(tmp_path / "data", port=0)
    server.start()
    try:
        again = Client(server.url)
        for name, job_id in ids.items():
            after = again.efficiency(job_id)
            assert after["state"] == "Completed", after
            for key in ("cpu_seconds", "max_rss_bytes", "cpu_efficiency_pct", "elapsed_s"):
                assert after[key] == stored[name][key], (name, key, after, stored[name])
        assert again.efficiency(ids["busy"])["cpu_efficiency_pct"] >= 30
    finally:
        server.stop()


#: a reaped child holding HOLD bytes and busy 0.5 s, then the task itself busy until 2 s of
#: its own CPU time; prints its CPU time and its reaped children's
SHORT_BUSY = (
    "import os, subprocess, sys, time\n"
    "spin = ('import time\\nx = bytes(range(256)) * (HOLD // 256)\\n'\n"
    "        'while time.process_time() < 0.5:\\n    pass\\n')\n"
    "subprocess.run([sys.executable, '-c', spin], check=True)\n"
    "while time.process_time() < 2.0:\n    pass\n"
    "t = os.times()\n"
    "print('cpu', time.process_time() + t.children_user + t.children_system, flush=True)\n"
)


def test_a_short_job_is_counted_to_its_exit(tmp_path: Path) -> None:
    """No periodic sample falls in the task's life (one every 30 s): the final sample, taken as
    its main process exits and sent with its exit, counts all its CPU time, children too."""
    with failure_cluster(tmp_path, sample_interval_s=30.0, long_poll_s=0.25) as cluster:
        cluster.add_agent("cpu-1", cpu=2)
        client = cluster.client
        # more than the agent (this process) ever held: the kernel's peak of a task includes
        # the peak of the process that forked it, so only a higher one is the task's own
        hold = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + 80 * MiB
        # (its memory request above that: the agent's peak is the test process's, which is
        # larger late in a full run, and a request below it made the task's cgroup kill it)
        memory = f"{hold // MiB + 256}Mi"
        job_id = client.submit(job("short", SHORT_BUSY.replace("HOLD", str(hold)), memory=memory))
        assert ended(client, job_id)["state"] == "Completed"
        eff = client.efficiency(job_id)
        own = float(client.logs(job_id).split("cpu ")[1].split()[0])
    assert eff["sampled"] is True and eff["tasks"][0]["live"] is False, eff
    assert own >= 2.4, own
    assert abs(eff["cpu_seconds"] - own) <= 0.5, (own, eff)
    # the child's memory was never sampled (it came and went between samples): the kernel's
    # count, read as the task is reaped, gives the peak
    assert eff["max_rss_bytes"] >= hold, eff


def _run_jobs(cluster: FailureCluster) -> dict[str, str]:
    cluster.add_agent("cpu-1", cpu=4)
    gpus = cluster.add_agent("gpu-1", cpu=2, gpus=1).gpus
    assert gpus is not None
    gpus.gpu(0, util=80.0, memory=10 * 1024 * MiB)  # scripted GPU readings
    client = cluster.client
    ids = {
        "busy": client.submit(job("busy", BUSY)),
        "sleep": client.submit(job("sleep", SLEEP)),
        "fill": client.submit(job("fill", FILL, cpu="500m")),
        "gpu": client.submit(job("gpu", SLEEP, cpu="500m", gpu=1)),
    }
    # while it runs: its CPU time so far, from the controller's memory
    live = until(
        lambda: (e := client.efficiency(ids["busy"]))["cpu_seconds"] and e,
        30,
        lambda: f"no live sample of the busy job: {client.efficiency(ids['busy'])}",
    )
    assert live["state"] == "Running", live
    assert live["tasks"][0]["live"] is True
    assert any("so far" in note for note in live["notes"]), live
    for job_id in ids.values():
        assert ended(client, job_id)["state"] == "Completed"

    busy = client.efficiency(ids["busy"])
    assert busy["cpus"] == 1 and busy["tasks_count"] == 1
    assert busy["sampled"] is True and busy["tasks"][0]["live"] is False
    assert busy["elapsed_s"] >= 3
    # the task's own count of its CPU time, against the agent's samples: the final one, taken
    # as it exits, counts it to the end (and the interpreter's last moments after the print)
    own = float(client.logs(ids["busy"]).split("cpu ")[1].split()[0])
    assert own - 0.1 <= busy["cpu_seconds"] <= own + 0.5, (own, busy)
    # a shared machine may give it less than a whole core, but it is busy
    assert busy["cpu_efficiency_pct"] >= 30, busy
    assert busy["gpus"] == 0 and busy["gpu_util_mean"] is None

    sleep = client.efficiency(ids["sleep"])
    assert sleep["sampled"] is True
    assert sleep["cpu_efficiency_pct"] < 10, sleep
    assert sleep["cpu_efficiency_pct"] < busy["cpu_efficiency_pct"] / 3

    fill = client.efficiency(ids["fill"])
    assert fill["max_rss_bytes"] >= 100 * MiB, fill
    assert fill["memory_bytes"] == 512 * MiB
    assert fill["memory_efficiency_pct"] >= 100 / 512 * 100 - 0.01, fill
    assert fill["tasks"][0]["max_rss_bytes"] == fill["max_rss_bytes"]

    gpu = client.efficiency(ids["gpu"])
    assert gpu["gpus"] == 1 and gpu["nodes"] == ["gpu-1"], gpu
    assert gpu["gpu_util_mean"] == 80.0, gpu
    assert gpu["max_gpu_memory_bytes"] == 10 * 1024 * MiB, gpu

    _waiting_and_unknown(cluster)
    _cli(cluster, ids["busy"])
    return ids


def _waiting_and_unknown(cluster: FailureCluster) -> None:
    client = cluster.client
    held = client.submit(job("held", SLEEP, hold=True))
    waiting = client.efficiency(held)
    assert waiting["state"] == "Pending"
    assert waiting["elapsed_s"] is None and waiting["cpu_seconds"] is None
    assert waiting["cpu_efficiency_pct"] is None and waiting["sampled"] is False
    assert waiting["cpus"] == 1 and waiting["memory_bytes"] == 512 * MiB
    assert any("not started" in note for note in waiting["notes"]), waiting
    with pytest.raises(ControllerError) as unknown:
        client.efficiency("999999")
    assert unknown.value.status == 404
    assert "no job '999999'" in str(unknown.value)


def _cli(cluster: FailureCluster, job_id: str) -> None:
    def eff(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fusesched", "eff", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={"FUSESCHED_CONTROLLER": cluster.server.url, "PATH": "/usr/bin:/bin"},
        )

    shown = eff(job_id)
    assert shown.returncode == 0, shown.stderr
    assert f"Job ID: {job_id}" in shown.stdout
    assert "State: Completed (exit code 0)" in shown.stdout
    assert "CPU efficiency: " in shown.stdout and "core-walltime" in shown.stdout
    assert "Memory efficiency: " in shown.stdout and "of 512.00 MiB" in shown.stdout
    data = json.loads(eff(job_id, "--json").stdout)
    assert data["id"] == job_id and data["cpu_seconds"] > 0
    shown = subprocess.run(
        [sys.executable, "-m", "fusesched", "show", job_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": cluster.server.url, "PATH": "/usr/bin:/bin"},
    )
    assert "efficiency: CPU " in shown.stdout and "of 1 core, memory " in shown.stdout
    missing = eff("999999")
    assert missing.returncode == 2
    assert "no job '999999'" in missing.stderr and "Traceback" not in missing.stderr
