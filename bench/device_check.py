"""Check the agent on a GPU machine: what it discovers, and that tasks see exactly their GPUs.

    .venv/bin/python bench/device_check.py [--out result.json]

1. Prints the inventory ``fusesched.agent.discovery.discover`` reports (NVML through
   nvidia-ml-py: GPUs, MIG instances, model label, memory).
2. For each of a few device selections (the last GPU alone; the first two GPUs; one MIG
   instance, if any), starts a task through ``ProcessRuntime`` with those devices and has it
   report what CUDA shows it (``torch.cuda`` device count and UUIDs), then compares.

On a machine without GPUs (or without NVML) it says so and exits 0; without torch, the tasks
report ``CUDA_VISIBLE_DEVICES`` only. Exit status 1 when a task saw other devices than given.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fusesched.agent.cgroups import MemoryCgroups
from fusesched.agent.config import AgentConfig
from fusesched.agent.discovery import describe, discover
from fusesched.agent.runtime import ProcessRuntime, chunk_end
from fusesched.api.wire import DeviceInfo, TaskLaunch, TaskState

PROBE = """
import json, os
out = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
try:
    import torch
except ImportError:
    out["torch"] = None
else:
    out["torch"] = torch.__version__
    out["count"] = torch.cuda.device_count()
    out["uuids"] = []
    for i in range(out["count"]):
        uuid = str(getattr(torch.cuda.get_device_properties(i), "uuid", ""))
        out["uuids"].append(uuid)
print("PROBE " + json.dumps(out))
"""


def _norm(uuid: str) -> str:
    return uuid.lower().removeprefix("gpu-").removeprefix("mig-")


def selections(devices: list[DeviceInfo]) -> list[tuple[str, list[DeviceInfo]]]:
    gpus = [d for d in devices if d.mig_profile is None]
    migs = [d for d in devices if d.mig_profile is not None]
    chosen: list[tuple[str, list[DeviceInfo]]] = []
    if gpus:
        chosen.append(("last GPU", [gpus[-1]]))
    if len(gpus) >= 2:
        chosen.append(("first two GPUs", gpus[:2]))
    if migs:
        chosen.append(("one MIG instance", [migs[0]]))
    return chosen


def run_probe(runtime: ProcessRuntime, name: str, picked: list[DeviceInfo]) -> dict[str, Any]:
    task_id = "check." + "".join(c if c.isalnum() else "-" for c in name)
    mig = any(d.mig_profile for d in picked)
    launch = TaskLaunch(
        task_id=task_id,
        job_id="check",
        argv=[sys.executable, "-c", PROBE],
        gpu_indices=[d.index for d in picked],
        gpu_uuids=[d.uuid for d in picked] if mig else [],
        walltime_s=120,
    )
    runtime.start(launch)
    end: Any = None
    deadline = time.monotonic() + 150
    while end is None and time.monotonic() < deadline:
        for report in runtime.poll():
            if report.state is not TaskState.RUNNING:
                end = report
        time.sleep(0.05)
    text, offset = "", 0
    while (chunk := runtime.read_log(task_id, offset)) is not None:
        text, offset = text + chunk.data, chunk_end(chunk)
    probe: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("PROBE "):
            probe = json.loads(line.removeprefix("PROBE "))
    result: dict[str, Any] = {
        "selection": name,
        "given": [{"index": d.index, "uuid": d.uuid, "kind": d.kind} for d in picked],
        "exit": None if end is None else end.model_dump(mode="json"),
        "probe": probe,
        "log_tail": text[-2000:],
    }
    expected = ",".join(launch.gpu_uuids) or ",".join(str(i) for i in launch.gpu_indices)
    ok = probe.get("CUDA_VISIBLE_DEVICES") == expected
    if probe.get("torch"):
        seen = sorted(_norm(u) for u in probe.get("uuids", []))
        want = sorted(_norm(d.uuid) for d in picked)
        ok = ok and probe.get("count") == len(picked)
        if all(seen) and not mig:  # MIG UUIDs are spelled differently by CUDA; count only
            ok = ok and seen == want
    result["ok"] = ok
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()

    inventory = discover(AgentConfig())
    print(describe(inventory))
    result: dict[str, Any] = {"inventory": inventory.model_dump(mode="json"), "checks": []}
    picks = selections(inventory.devices)
    if not picks:
        print("no NVIDIA GPU found through NVML: nothing to check on this machine")
        result["note"] = "no GPU"
    else:
        with tempfile.TemporaryDirectory(prefix="fusesched-device-check-") as work:
            runtime = ProcessRuntime(work, None, memory_cgroups=MemoryCgroups.disabled("check"))
            for name, picked in picks:
                check = run_probe(runtime, name, picked)
                result["checks"].append(check)
                verdict = "ok" if check["ok"] else "MISMATCH"
                print(f"{name}: {verdict}: given {check['given']}, task saw {check['probe']}")
                if not check["probe"]:
                    print(check["log_tail"])
            runtime.shutdown()
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0 if all(c["ok"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
