"""Power saving, live: an idle node is suspended through the configured command template and
resumed when a job arrives that needs it; the job then runs there.

The "machine" is a real agent process; the site's suspend/resume commands are a script that
freezes it (SIGSTOP, as a suspended machine: silent, its state kept) and thaws it (SIGCONT).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from fusesched.agent.config import AgentConfig
from fusesched.cli.local import LocalCluster
from fusesched.controller.power import PowerConfig
from fusesched.power.saving import SavingConfig
from fusesched.sdk import Client

FUSESCHED = str(Path(sys.executable).with_name("fusesched"))

HOOK = """#!/bin/sh
# the site's power command: $1 = suspend | resume, $2 = node
pid=$(cat "{dir}/$2.pid")
case "$1" in
  suspend) kill -STOP "$pid" ;;
  resume) kill -CONT "$pid" ;;
esac
echo "$1 $2" >> "{dir}/calls"
"""


def node_state(client: Client, name: str) -> str:
    return next((n["state"] for n in client.nodes() if n["name"] == name), "")


def until(what: object, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.2)


@pytest.mark.parametrize(
    "policy", ["idle-timeout", "forecast", "predictive", "surge", "surge-room"]
)
def test_idle_node_is_suspended_and_resumed_for_a_job(tmp_path: Path, policy: str) -> None:
    shared = Path(tempfile.mkdtemp(prefix="fusesched-power-"))
    shared.chmod(0o755)
    hook = shared / "power.sh"
    hook.write_text(HOOK.format(dir=shared))
    calls = shared / "calls"
    power = PowerConfig(
        suspend=("/bin/sh", str(hook), "suspend", "{node}"),
        resume=("/bin/sh", str(hook), "resume", "{node}"),
        policy=policy,
        interval_s=0.5,
        saving=SavingConfig(
            idle_threshold_s=2.0,
            forecast_min_idle_s=2.0,
            predictive_min_idle_s=2.0,
            surge_min_idle_s=2.0,
            resume_timeout_s=60.0,
            exclude_nodes=frozenset({"node-a"}),
        ),
        wake_latency_s=1.0,
        forecast_bin_s=1.0,  # the forecaster's bins close within the test
        surge_warm_s=0.0,  # surge, surge-room: suspend from the start (no history to wait for)
        surge_memory_days=1,  # a day of 1-second bins
    )
    awake = AgentConfig(
        name="node-a",
        address="127.0.0.1",
        cpu=2,
        memory="2Gi",
        labels={"fusesched.io/pool": "cpu"},
        work_dir=shared / "a",
        image_cache_dir=shared / "images",
        nvml=False,
    )
    cluster = LocalCluster(tmp_path / "data", port=0, agents=[awake], power=power, long_poll_s=0.5)
    sleepy_config = shared / "node-b.yaml"
    sleepy_config.write_text(
        yaml.safe_dump(
            {
                "name": "node-b",
                "address": "127.0.0.1",
                "cpu": 2,
                "memory": "2Gi",
                "labels": {"fusesched.io/pool": "sleepy"},
                "work_dir": str(shared / "b"),
                "image_cache_dir": str(shared / "images"),
                "nvml": False,
            }
        )
    )
    agent: subprocess.Popen[bytes] | None = None
    try:
        with cluster:
            client = Client(cluster.url)
            agent = subprocess.Popen(
                [FUSESCHED, "agent", "--controller", cluster.url, "--config", str(sleepy_config)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            (shared / "node-b.pid").write_text(str(agent.pid))
            until(lambda: node_state(client, "node-b") == "up", 30, "node-b never registered")
            until(
                lambda: node_state(client, "node-b") == "suspended" and calls.exists(),
                30,
                "the idle node was not suspended",
            )
            assert calls.read_text().split("\n")[0] == "suspend node-b"
            assert node_state(client, "node-a") == "up"  # excluded: never suspended
            job = client.submit(
                {
                    "name": "wakes-b",
                    "placement": {"node_selector": {"fusesched.io/pool": "sleepy"}},
                    "groups": [{"resources": {"cpu": 1}, "argv": ["sh", "-c", "echo ran"]}],
                }
            )
            view = client.wait(job, timeout=60)
            assert view["state"] == "Completed" and view["nodes"] == ["node-b"], view
            assert "resume node-b" in calls.read_text()
            assert "ran" in client.logs(job)
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGCONT)
            agent.terminate()
            agent.wait(timeout=10)
        shutil.rmtree(shared, ignore_errors=True)
