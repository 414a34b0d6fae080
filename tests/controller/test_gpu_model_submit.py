"""A Slurm script's lower-case gres type reaches the node whose agent reports the NVML name
(``--gres=gpu:h100:1`` on an ``H100-80GB-HBM3`` node); an unknown type is still refused."""

from __future__ import annotations

from fastapi.testclient import TestClient

from fusesched.api.wire import DeviceInfo, Heartbeat, NodeInventory
from fusesched.controller.service import Controller

SCRIPT = "#!/bin/sh\n#SBATCH --gres=gpu:{model}:1\n#SBATCH -t 5\nnvidia-smi\n"


def test_a_lower_case_gres_type_runs_on_the_nvml_model(ctl: Controller, client: TestClient) -> None:
    devices = [DeviceInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB-HBM3") for i in range(2)]
    resources = {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "2"}
    labels = {"fusesched.io/gpu-model": "H100-80GB-HBM3"}  # as the agent's discovery labels it
    gpu = NodeInventory(name="g0", resources=resources, devices=devices, labels=labels)
    ctl.register(gpu)
    files = {"files": [{"name": "job.sh", "text": SCRIPT.format(model="h100")}]}
    answer = client.post("/v1/submissions", json=files)
    assert answer.status_code == 201, answer.text
    (job,) = answer.json()["ids"]
    ctl.run_cycle()
    reply = ctl.heartbeat(Heartbeat(node="g0", running=[]), wait_s=0)
    assert [launch.job_id for launch in reply.launch] == [job]
    files = {"files": [{"name": "job.sh", "text": SCRIPT.format(model="v100")}]}
    refused = client.post("/v1/submissions", json=files)
    assert refused.status_code in (400, 422), refused.text
    assert "fusesched.io/gpu-model" in refused.text
