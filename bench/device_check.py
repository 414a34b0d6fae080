"""Check the agent on a GPU machine: discovery, isolation, NVML sensing, kill and resume.

    .venv/bin/python bench/device_check.py [--out result.json] [--cpu]

1. Prints the inventory ``fusesched.agent.discovery.discover`` reports (NVML through
   nvidia-ml-py: GPUs, MIG instances, model label, memory).
2. For each of a few device selections (the last GPU alone; the first two GPUs; one MIG
   instance, if any), starts a task through ``ProcessRuntime`` with those devices and has it
   report what CUDA shows it (``torch.cuda`` device count and UUIDs), then compares.
3. NVML sensing: samples ``NvmlGpuSensor`` (real pynvml) while idle and a few times while a
   CUDA matrix-product loop runs as a task on the first GPU; reports utilisation, memory,
   power, temperature, ECC and XID support, and checks that utilisation rose above idle.
4. Kill and resume: an embedded cluster (``LocalCluster``, one agent with NVML sampling every
   second) runs a 1-GPU PyTorch training job submitted through ``fusesched.sdk.Client`` with
   a checkpoint folder and ``restart: {retry_application_failures: true, max_restarts: 2,
   backoff_s: 1}``. Once it has written a few checkpoints its process is SIGKILLed; the check
   waits for completion and verifies that the second run started from its checkpoint (step >
   0) with ``FUSESCHED_RESTART_COUNT=1``, on CUDA with one visible device. ``--cpu`` runs this
   flow on the CPU (no GPU requested) so it can be verified on a machine without one.

On the lent device machine (its ``python3`` has torch, nvidia-ml-py, psutil, httpx and pyyaml
but not fusesched's other dependencies): carry them as Python 3.12 wheels in ``.whl``
(fastapi, starlette, uvicorn, pydantic, pydantic-core, sqlalchemy, alembic, mako, typer, rich,
psycopg, psycopg-binary, cryptography and what they need), then run with ``timeout_s`` 420::

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit
    export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1; set -o pipefail
    python3 bench/device_check.py --out $OUT/device_check.json 2>&1 | tee $OUT/device_check.log

Not run on a GPU yet (no device was lent to the sessions that wrote it).

On a machine without GPUs (or without NVML, or without CUDA in torch) the GPU checks say why
they were skipped and the script exits 0. Exit status 1 when a check that ran failed (a task
saw other devices than given, utilisation did not rise, the job did not resume).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from fusesched.agent.cgroups import MemoryCgroups
from fusesched.agent.config import AgentConfig
from fusesched.agent.discovery import describe, discover
from fusesched.agent.gpus import load_nvml
from fusesched.agent.logtext import chunk_end
from fusesched.agent.nvml_sensor import NvmlGpuSensor
from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.sensors import GpuSample
from fusesched.api.wire import DeviceInfo, TaskLaunch, TaskState
from fusesched.cli.local import LocalCluster
from fusesched.sdk import Client

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


def say(text: str) -> None:
    print(text, flush=True)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _task_log(runtime: ProcessRuntime, task_id: str) -> str:
    text, offset = "", 0
    while (chunk := runtime.read_log(task_id, offset)) is not None:
        text, offset = text + chunk.data, chunk_end(chunk)
    return text


def _wait_end(runtime: ProcessRuntime, timeout_s: float) -> Any:
    """The first report of a task that is no longer running (one task at a time here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for report in runtime.poll():
            if report.state is not TaskState.RUNNING:
                return report
        time.sleep(0.05)
    return None


def torch_info() -> dict[str, Any]:
    """What this Python's torch says about CUDA, asked in a child process (the checks' tasks
    run this same interpreter); ``{"torch": None}`` without torch."""
    import subprocess

    code = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, "
        "'cuda': torch.cuda.is_available(), 'count': torch.cuda.device_count()}))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=180
        )
    except subprocess.TimeoutExpired:
        return {"torch": None, "error": "importing torch took over 180 s"}
    if done.returncode != 0:
        return {"torch": None, "error": done.stderr.strip()[-500:]}
    info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return info


# --- 3. NVML sensing ---------------------------------------------------------------------

MATMUL = """
import sys, time
import torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
print("READY", torch.cuda.get_device_name(0), flush=True)
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print(f"MATMULS {n}", flush=True)
"""


def _gpu_reading(samples: list[GpuSample], index: int, t0: float) -> dict[str, Any]:
    for g in samples:
        if g.index == index:
            return {
                "t_s": round(time.monotonic() - t0, 2),
                "util_pct": _finite(g.utilization_pct),
                "memory_used_mib": g.memory_used_bytes // 2**20
                if g.memory_used_bytes >= 0
                else None,
                "power_w": _finite(g.power_w),
                "temperature_c": _finite(g.temperature_c),
                "ecc_uncorrected": g.ecc_uncorrected,
                "xids": list(g.xid_errors),
                "lost": g.lost,
            }
    return {"t_s": round(time.monotonic() - t0, 2), "missing": True}


def _show_reading(label: str, r: dict[str, Any]) -> None:
    say(
        f"  {label:>7} t={r['t_s']:5.1f}s util={r.get('util_pct')}% "
        f"mem={r.get('memory_used_mib')} MiB power={r.get('power_w')} W "
        f"temp={r.get('temperature_c')} C ecc={r.get('ecc_uncorrected')} "
        f"xids={r.get('xids')} lost={r.get('lost')}"
    )


def check_sensing(runtime: ProcessRuntime, gpu: DeviceInfo, samples: int = 6) -> dict[str, Any]:
    """Sample the GPU through NvmlGpuSensor idle, then while a matmul loop runs on it."""
    t0 = time.monotonic()
    sensor = NvmlGpuSensor(load_nvml())
    result: dict[str, Any] = {"gpu": {"index": gpu.index, "uuid": gpu.uuid}, "ok": False}
    try:
        idle = _gpu_reading(sensor.sample_gpus(time.time()), gpu.index, t0)
        result |= {"nvml_available": sensor.available, "xid_supported": sensor.xid_supported}
        result["idle"] = idle
        say(f"  NVML available={sensor.available} xid_supported={sensor.xid_supported}")
        _show_reading("idle", idle)
        if not sensor.available or idle.get("missing"):
            result["error"] = "NVML gave no sample of this GPU"
            return result
        launch = TaskLaunch(
            task_id="check.sensing",
            job_id="check",
            argv=[sys.executable, "-c", MATMUL, str(samples + 6)],
            gpu_indices=[gpu.index],
            walltime_s=180,
        )
        runtime.start(launch)
        deadline, log, end = time.monotonic() + 120, "", None
        while "READY" not in log and end is None and time.monotonic() < deadline:
            time.sleep(0.2)
            log = _task_log(runtime, launch.task_id)
            for report in runtime.poll():
                if report.state is not TaskState.RUNNING:
                    end = report
        result["ready_after_s"] = round(time.monotonic() - t0, 2)
        if "READY" not in log:
            result["error"] = f"the matmul task never got going: {end}"
            result["log_tail"] = log[-2000:]
            if end is None:
                runtime.kill(launch.task_id, grace_s=1)
                _wait_end(runtime, 15)
            return result
        say(f"  matmul task ready after {result['ready_after_s']} s; sampling")
        busy = []
        for _ in range(samples):
            time.sleep(1.0)
            reading = _gpu_reading(sensor.sample_gpus(time.time()), gpu.index, t0)
            busy.append(reading)
            _show_reading("busy", reading)
        result["busy"] = busy
        end = _wait_end(runtime, 60)
        if end is None:
            runtime.kill(launch.task_id, grace_s=1)
            end = _wait_end(runtime, 15)
        result["exit"] = None if end is None else end.model_dump(mode="json")
        log = _task_log(runtime, launch.task_id)
        result["log_tail"] = log[-1000:]
        after = _gpu_reading(sensor.sample_gpus(time.time()), gpu.index, t0)
        result["after"] = after
        _show_reading("after", after)
    finally:
        sensor.close()
    utils = [r["util_pct"] for r in busy if r.get("util_pct") is not None]
    idle_util = idle.get("util_pct")
    peak = max(utils) if utils else None
    result["peak_util_pct"] = peak
    if peak is None:
        result["error"] = "NVML gave no utilisation reading while busy"
    elif peak < max(20.0, (idle_util or 0.0) + 10.0):
        result["error"] = f"utilisation did not rise: idle {idle_util}%, busy peak {peak}%"
    else:
        result["ok"] = True
    mems = [r["memory_used_mib"] for r in busy if r.get("memory_used_mib") is not None]
    result["memory_rose"] = bool(mems) and max(mems) > (idle.get("memory_used_mib") or 0)
    result["seconds"] = round(time.monotonic() - t0, 2)
    return result


# --- 4. a training job killed and resumed from its checkpoint ----------------------------

# A tiny model trained on a fixed batch; checkpoints model, optimizer and step every few steps
# into $FUSESCHED_CHECKPOINT_DIR (atomically) and resumes from there on start.
TRAIN = """
import json, os, sys, time
import torch
total, every, pause, device = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
restart = os.environ.get("FUSESCHED_RESTART_COUNT")
path = os.path.join(os.environ["FUSESCHED_CHECKPOINT_DIR"], "train.pt")
torch.manual_seed(0)
x = torch.randn(1024, 256)
y = torch.sin(x.sum(dim=1, keepdim=True))
x, y = x.to(device), y.to(device)
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)
).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
step = 0
if os.path.exists(path):
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    step = int(state["step"])
info = {
    "device": str(next(model.parameters()).device),
    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "cuda_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    "name": torch.cuda.get_device_name(0) if device == "cuda" else None,
    "task": os.environ.get("FUSESCHED_TASK_ID"),
    "uid": os.getuid(),
}
print("INFO " + json.dumps(info), flush=True)
print(f"start step {step} restart {restart} pid {os.getpid()}", flush=True)
loss = torch.zeros(())
while step < total:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % every == 0:
        tmp = f"{path}.{os.getpid()}.tmp"
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
        torch.save(state, tmp)
        os.replace(tmp, path)
        print(f"checkpoint step {step} loss {loss.item():.5f}", flush=True)
    time.sleep(pause)
print(f"done at step {step} loss {loss.item():.5f}", flush=True)
"""


def _job_logs(client: Client, job_id: str) -> str:
    """Every task's log of the job, one after another (runs in the order the job lists)."""
    try:
        tasks = client.show(job_id).get("tasks", [])
        parts = [client.logs(job_id, task=t["task_id"]) for t in tasks]
    except Exception:  # a log read that fails is retried on the next poll
        return ""
    return "".join(p if p.endswith("\n") or not p else p + "\n" for p in parts)


def _starts(log: str) -> list[dict[str, Any]]:
    """The ``start step N restart R pid P`` lines, with the ``INFO`` line before each."""
    out: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    for line in log.splitlines():
        if line.startswith("INFO "):
            info = json.loads(line.removeprefix("INFO "))
        elif line.startswith("start step "):
            words = line.split()
            out.append(
                {"step": int(words[2]), "restart": words[4], "pid": int(words[6]), "info": info}
            )
            info = {}
    return out


def _checkpoints(log: str) -> list[int]:
    return [int(line.split()[2]) for line in log.splitlines() if line.startswith("checkpoint step")]


def _find_pid(job_id: str, logged: int | None, script: Path) -> tuple[int | None, str]:
    """The training process: the pid its log gave (checked with psutil), else the process
    whose environment names the job."""
    if logged is not None:
        try:
            proc = psutil.Process(logged)
            try:
                env_job = proc.environ().get("FUSESCHED_JOB_ID")
            except (psutil.AccessDenied, OSError):
                env_job = None
            if env_job == job_id or (env_job is None and str(script) in proc.cmdline()):
                return logged, "log" + (" + environ" if env_job else " + cmdline")
        except psutil.Error:
            pass
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("FUSESCHED_JOB_ID") == job_id and str(script) in proc.cmdline():
                return proc.pid, "psutil environ scan"
        except (psutil.Error, OSError):
            continue
    return None, "not found"


def check_resume(
    gpu: bool, timeout_s: float, total: int = 200, every: int = 10, pause: float = 0.05
) -> dict[str, Any]:
    """Submit a training job, SIGKILL it after a few checkpoints, check it resumed."""
    t0 = time.monotonic()
    result: dict[str, Any] = {"device": "cuda" if gpu else "cpu", "ok": False, "problems": []}
    problems: list[str] = result["problems"]
    timings: dict[str, float] = {}
    result["timings_s"] = timings

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - t0, 2)

    root = Path(tempfile.mkdtemp(prefix="fusesched-device-check-"))
    root.chmod(0o755)  # tasks run under unprivileged uids: the agent's folders must be reachable
    scratch = root / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    script = scratch / "train.py"
    script.write_text(TRAIN)
    script.chmod(0o644)
    checkpoints = scratch / "checkpoints"
    agent = AgentConfig(
        name="device-check",
        address="127.0.0.1",
        work_dir=root / "agents" / "device-check",
        image_cache_dir=root / "images",
        nvml=gpu,
        sample_interval_s=1,
        memory_cgroup=False,  # memory limits are not what is checked here
    )
    resources: dict[str, str] = {"cpu": "1", "memory": "4Gi" if gpu else "1Gi"}
    if gpu:
        resources["nvidia.com/gpu"] = "1"
    request = {
        "name": "device-check-resume",
        "type": "ai-train",
        "walltime_s": 600,
        "checkpoint_dir": str(checkpoints),
        "restart": {"retry_application_failures": True, "max_restarts": 2, "backoff_s": 1},
        "groups": [
            {
                "name": "train",
                "resources": resources,
                "argv": [
                    sys.executable,
                    str(script),
                    str(total),
                    str(every),
                    str(pause),
                    "cuda" if gpu else "cpu",
                ],
            }
        ],
    }
    deadline = t0 + timeout_s
    cluster = LocalCluster(root / "data", port=0, agents=[agent], long_poll_s=0.5)
    job_id: str | None = None
    client: Client | None = None
    try:
        cluster.start()
        mark("cluster_started")
        client = Client(cluster.url)
        nodes = client.nodes()
        result["node"] = nodes[0] if nodes else None
        job_id = client.submit(request)
        mark("submitted")
        say(f"  cluster up at {cluster.url}; submitted {job_id} ({result['device']})")

        def until(what: str, check: Callable[[], bool]) -> bool:
            while not check():
                if time.monotonic() > deadline:
                    problems.append(f"timed out waiting for {what}")
                    return False
                time.sleep(0.2)
            return True

        log = ""

        def first_run_checkpointed() -> bool:
            nonlocal log
            log = _job_logs(client, job_id) if client and job_id else ""
            if client and job_id and client.show(job_id)["state"] in ("Completed", "Failed"):
                return True  # ended before the kill: judged below
            return len(_starts(log)) >= 1 and len(_checkpoints(log)) >= 3

        if not until("3 checkpoints of the first run", first_run_checkpointed):
            return result
        first = _starts(log)[0]
        mark("three_checkpoints_seen")
        result["first_run"] = first
        seen = _checkpoints(log)
        say(f"  first run: {first} ; checkpoints so far {seen}")
        pid, how = _find_pid(job_id, first["pid"], script)
        result["killed_pid"], result["pid_found_by"] = pid, how
        if pid is None:
            problems.append("could not find the training process to kill")
            return result
        os.kill(pid, signal.SIGKILL)
        mark("killed")
        last_before_kill = max(seen)
        result["last_checkpoint_logged_before_kill"] = last_before_kill
        say(f"  SIGKILLed pid {pid} (found by {how}) after checkpoint step {last_before_kill}")

        def restarted() -> bool:
            nonlocal log
            log = _job_logs(client, job_id) if client and job_id else ""
            return len(_starts(log)) >= 2 or client.show(job_id)["state"] in (
                "Completed",
                "Failed",
                "Cancelled",
            )

        if until("the second run to start", restarted) and len(_starts(log)) >= 2:
            mark("second_run_started_seen")
            say(f"  second run: {_starts(log)[1]}")
        remaining = max(1.0, deadline - time.monotonic())
        try:
            final = client.wait(job_id, timeout=remaining, poll_s=0.25)
        except TimeoutError as exc:
            problems.append(str(exc))
            final = client.show(job_id)
        mark("finished")
        log = _job_logs(client, job_id)
        result["final"] = {
            k: final.get(k) for k in ("state", "phase", "reason", "exit_code", "tasks")
        }
        result["log"] = log[-6000:]
        starts = _starts(log)
        result["runs"] = starts
        say(f"  job {final['state']} ({final.get('reason') or 'no reason'}) ; runs {starts}")
        if final["state"] != "Completed":
            problems.append(f"job ended {final['state']}: {final.get('reason')}")
        if len(starts) != 2:
            problems.append(f"expected exactly 2 runs, saw {len(starts)}")
        if starts and (starts[0]["step"], starts[0]["restart"]) != (0, "0"):
            problems.append(f"the first run did not start at step 0, restart 0: {starts[0]}")
        if len(starts) >= 2:
            second = starts[1]
            result["resumed_from_step"] = second["step"]
            if second["restart"] != "1":
                problems.append(f"FUSESCHED_RESTART_COUNT of the second run: {second['restart']}")
            if not second["step"] >= last_before_kill > 0:
                problems.append(
                    f"the second run started at step {second['step']}, not from the checkpoint "
                    f"(step {last_before_kill} was logged before the kill)"
                )
            info = second["info"]
            if gpu:
                visible = info.get("CUDA_VISIBLE_DEVICES") or ""
                if not str(info.get("device", "")).startswith("cuda"):
                    problems.append(f"the second run was not on CUDA: {info}")
                if info.get("cuda_count") != 1 or not visible or "," in visible:
                    problems.append(f"the second run did not see exactly one GPU: {info}")
            elif info.get("device") != "cpu":
                problems.append(f"the second run was not on the CPU: {info}")
        if f"done at step {total}" not in log:
            problems.append(f"no 'done at step {total}' in the log")
        if "killed" in timings and "second_run_started_seen" in timings:
            timings["kill_to_second_run"] = round(
                timings["second_run_started_seen"] - timings["killed"], 2
            )
        result["ok"] = not problems
        return result
    except Exception as exc:  # reported in the result, the script goes on
        problems.append(f"{type(exc).__name__}: {exc}")
        return result
    finally:
        if client is not None and job_id is not None and not result["ok"]:
            try:
                if client.show(job_id)["state"] not in ("Completed", "Failed", "Cancelled"):
                    client.cancel(job_id)
            except Exception:  # best effort before the cluster stops
                pass
        cluster.stop()
        mark("cluster_stopped")
        shutil.rmtree(root, ignore_errors=True)


# --- main --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run the kill-and-resume check on the CPU (no GPU requested), e.g. without a GPU",
    )
    parser.add_argument(
        "--resume-timeout", type=float, default=240.0, help="seconds for the kill-resume check"
    )
    args = parser.parse_args()
    started = time.monotonic()

    result: dict[str, Any] = {"checks": [], "skipped": [], "ok": True}

    def save() -> None:
        result["seconds"] = round(time.monotonic() - started, 2)
        if args.out:
            args.out.write_text(json.dumps(result, indent=2, default=str))

    def skip(name: str, why: str) -> None:
        say(f"[{name}] SKIPPED: {why}")
        result["skipped"].append({"check": name, "why": why})

    say("[1 discovery] NVML inventory")
    inventory = discover(AgentConfig())
    say(describe(inventory))
    result["inventory"] = inventory.model_dump(mode="json")
    picks = selections(inventory.devices)
    gpus = [d for d in inventory.devices if d.mig_profile is None]
    torch: dict[str, Any] = {"torch": None, "error": "not asked (no GPU and no --cpu)"}
    if picks or args.cpu:
        say("asking torch about CUDA (a child process) ...")
        torch = torch_info()
        say(f"torch: {torch}")
    result["torch"] = torch
    cuda = bool(torch.get("torch")) and bool(torch.get("cuda"))
    save()

    if not picks:
        result["note"] = "no GPU"
        skip("2 isolation", "no NVIDIA GPU found through NVML")
    else:
        say("[2 isolation] CUDA_VISIBLE_DEVICES of tasks started through ProcessRuntime")
        with tempfile.TemporaryDirectory(prefix="fusesched-device-check-") as work:
            runtime = ProcessRuntime(work, None, memory_cgroups=MemoryCgroups.disabled("check"))
            for name, picked in picks:
                check = run_probe(runtime, name, picked)
                result["checks"].append(check)
                verdict = "ok" if check["ok"] else "MISMATCH"
                say(f"{name}: {verdict}: given {check['given']}, task saw {check['probe']}")
                if not check["probe"]:
                    say(check["log_tail"])
            runtime.shutdown()
        save()

    if not gpus:
        skip("3 sensing", "no NVIDIA GPU (outside MIG) found through NVML")
    elif not cuda:
        skip("3 sensing", f"torch in {sys.executable} has no CUDA: {torch}")
    else:
        say(f"[3 sensing] NvmlGpuSensor while a matmul loop runs on GPU {gpus[0].index}")
        root = Path(tempfile.mkdtemp(prefix="fusesched-device-check-"))
        root.chmod(0o755)
        runtime = ProcessRuntime(str(root), None, memory_cgroups=MemoryCgroups.disabled("check"))
        try:
            sensing = check_sensing(runtime, gpus[0])
        except Exception as exc:  # reported, the script goes on
            sensing = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            runtime.shutdown()
            shutil.rmtree(root, ignore_errors=True)
        result["sensing"] = sensing
        say(f"[3 sensing] {'ok' if sensing['ok'] else 'FAILED'}: {sensing.get('error', '')}")
        save()

    if args.cpu:
        if not torch.get("torch"):
            skip("4 resume (cpu)", f"no torch in {sys.executable}: {torch.get('error')}")
        else:
            say("[4 resume] a CPU training job (--cpu) killed and resumed from its checkpoint")
            result["resume"] = check_resume(False, args.resume_timeout)
    elif not gpus:
        skip("4 resume", "no NVIDIA GPU found through NVML (--cpu runs this check on the CPU)")
    elif not cuda:
        skip("4 resume", f"torch in {sys.executable} has no CUDA: {torch}")
    else:
        say("[4 resume] a 1-GPU training job killed and resumed from its checkpoint")
        result["resume"] = check_resume(True, args.resume_timeout)
    if "resume" in result:
        resume = result["resume"]
        verdict = "ok" if resume["ok"] else f"FAILED: {resume['problems']}"
        say(f"[4 resume] {verdict}; timings {resume['timings_s']}")

    ran = [*result["checks"], result.get("sensing"), result.get("resume")]
    result["ok"] = all(c["ok"] for c in ran if c is not None)
    save()
    gpu_skipped = [s["check"] for s in result["skipped"]]
    if gpu_skipped:
        say(f"skipped: {', '.join(gpu_skipped)}")
    say(f"device check {'passed' if result['ok'] else 'FAILED'} in {result['seconds']} s")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
