"""Slurm's COMPLETING against a live controller and a real agent with two fake GPUs: a job
is cancelled while the task of its step ignores SIGTERM; the job ends at once, but the next
job, which asks for the same CPUs and GPUs, starts only once that task is gone (SIGKILLed
after the grace), not pinned beside a process that still runs on them
(controller/completing.py). Meanwhile the job is listed completing (squeue's ``CG``) and its
node too (sinfo's ``comp``; controller/completing_views.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from fusesched.agent.config import AgentConfig
from fusesched.sdk import Client

from .conftest import local_cluster

HEAD = "#!/bin/sh\n#SBATCH -n 1 -c 2 --gres=gpu:2 --nodelist=node-c --mem=64M -t 1\n"
STUBBORN = HEAD + "srun sh -c \"trap '' TERM; touch @S/trapped; sleep 30\"\n"
NEXT = HEAD + "echo next $CUDA_VISIBLE_DEVICES\n"


def node_c(configs: list[AgentConfig]) -> list[AgentConfig]:
    return [c.model_copy(update={"cpu": 2}) for c in configs if c.name == "node-c"]


def until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_job_waits_for_the_step_task_its_cancelled_predecessor_left(
    tmp_path: Path, scratch: Path
) -> None:
    with local_cluster(tmp_path / "data", node_c) as cluster:
        ctl = cluster.server.controller
        ctl.config = replace(ctl.config, grace_s=2.0)  # (SIGKILL 2 s after SIGTERM)
        client = Client(cluster.url)
        script = STUBBORN.replace("@S", str(scratch))
        (job,) = client.submit_files([{"name": "stubborn.sh", "text": script}])["ids"]

        def step_task() -> dict[str, object]:
            return next((t for t in client.show(job)["tasks"] if t["step_id"] == 0), {})

        until("the step ignores SIGTERM", (scratch / "trapped").exists)
        (nxt,) = client.submit_files([{"name": "next.sh", "text": NEXT}])["ids"]
        client.cancel(job)
        until("the job ends", lambda: client.show(job)["phase"] == "cancelled")
        listed = [j["id"] for j in client.jobs(completing=True)]  # (squeue -t CG)
        (node,) = client.nodes()
        done = client.wait(nxt, timeout=30)
        after = client.show(job)
        ended = step_task()
        output = client.logs(nxt)
    assert done["state"] == "Completed", output
    assert ended["state"] == "Failed" and ended["exit_code"] in (-9, 137), ended
    assert "next 0,1" in output, output  # (the GPUs the step's task had)
    assert done["start_time"] >= ended["end_time"], (done, ended)
    assert listed == [job] and node["completing"], (listed, node)
    assert after["state"] == "Cancelled" and not after["completing"], after
