"""A QoS tier's power cap reaches the node: the agent runs its hook before the job's task
starts (for each of the task's GPUs) and the reset hook after it ends."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.builders import one_queue_tenancy

from fusesched.agent.config import AgentConfig, PowerHookConfig
from fusesched.api.wire import DeviceInfo
from fusesched.cli.local import LocalCluster
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sdk import Client

RECORD = "import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + '\\n')"

TENANCY = one_queue_tenancy(
    {"cpu": 8, "nvidia.com/gpu": 4},
    qos={"gold": {"priority": 100}, "bronze": {"priority": 10, "power_cap": {"gpu_watts": 200}}},
    default_qos="gold",
)


def test_bronze_jobs_run_capped(tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="fusesched-power-"))
    shared.chmod(0o755)
    calls = shared / "calls"
    hooks = {
        "gpu_watts": PowerHookConfig(
            apply=[sys.executable, "-c", RECORD, str(calls), "cap", "{gpu}", "{value}", "{task}"],
            reset=[sys.executable, "-c", RECORD, str(calls), "reset", "{gpu}"],
        )
    }
    agent = AgentConfig(
        name="gpu-node",
        address="127.0.0.1",
        cpu=4,
        memory="4Gi",
        work_dir=shared / "work",
        image_cache_dir=shared / "images",
        nvml=False,
        fake_devices=[DeviceInfo(index=i, uuid=f"GPU-fake-{i}", model="H200") for i in (0, 1)],
        power_hooks=hooks,
    )
    core = CoreConfig(placement="best-fit", tenancy=TenancyPolicy(TenancyConfig.from_dict(TENANCY)))
    cluster = LocalCluster(tmp_path / "data", port=0, agents=[agent], core=core, long_poll_s=0.5)
    try:
        with cluster:
            client = Client(cluster.url)
            job = {
                "tenant": "ml",
                "queue": "train",
                "groups": [
                    {"resources": {"cpu": 1, "nvidia.com/gpu": 2}, "argv": ["sleep", "0.5"]}
                ],
            }
            bronze = client.submit(job | {"qos": "bronze", "name": "eco"})
            done = client.wait(bronze, timeout=60)
            assert done["state"] == "Completed"
            # its energy is kept: estimated (fake GPUs report no power)
            assert done["energy_kwh"] > 0 and done["energy_measured_kwh"] == 0
            gold = client.submit(job | {"qos": "gold", "name": "fast"})
            assert client.wait(gold, timeout=60)["state"] == "Completed"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and calls.read_text().count("reset") < 2:
                time.sleep(0.1)
            lines = calls.read_text().splitlines()
            task = f"{bronze}.main.0"
            # caps first (one per GPU, run together), resets after the task
            assert sorted(lines[:2]) == [f"cap 0 200 {task}", f"cap 1 200 {task}"]
            assert sorted(lines[2:]) == ["reset 0", "reset 1"]
    finally:
        shutil.rmtree(shared, ignore_errors=True)
