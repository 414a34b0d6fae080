"""Quotas, borrowing and reclaim, QoS preemption and limits with real processes: a preempted
job gets its notice (SIGTERM), checkpoints, is requeued and resumes from its checkpoint."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.model.phases import JobPhase
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sdk import Client, ControllerError

from .conftest import local_cluster

# Counts steps; checkpoints every 5 steps and on SIGTERM (then exits 143, as after SIGTERM);
# resumes from the checkpoint on start.
STEPPER = """
import os, signal, sys, time
ckpt = os.path.join(os.environ["FUSESCHED_CHECKPOINT_DIR"], "step")
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
print(f"start step {step} restart {os.environ.get('FUSESCHED_RESTART_COUNT')}", flush=True)
def save():
    tmp = f"{ckpt}.{os.getpid()}.tmp"  # ranks of a gang share the folder
    with open(tmp, "w") as f:
        f.write(str(step))
    os.replace(tmp, ckpt)
def notice(signum, frame):
    save()
    print(f"notice at step {step}", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, notice)
while step < int(sys.argv[1]):
    time.sleep(0.1)
    step += 1
    if step % 5 == 0:
        save()
print(f"done at step {step}", flush=True)
"""

QUOTAS = {
    "flavors": [{"name": "cpu", "resources": ["cpu"]}],
    "cohorts": ["shared"],
    "organisations": [
        {
            "name": "lab",
            "tenants": [
                {
                    "name": "physics",
                    "queues": [
                        {
                            "name": "small",
                            "cohort": "shared",
                            "flavors": [{"name": "cpu", "resources": {"cpu": {"nominal": 2}}}],
                        }
                    ],
                },
                {
                    "name": "biology",
                    "queues": [
                        {
                            "name": "big",
                            "cohort": "shared",
                            "flavors": [{"name": "cpu", "resources": {"cpu": {"nominal": 6}}}],
                        }
                    ],
                },
            ],
        }
    ],
    "qos": {
        "gold": {"priority": 100, "preemptible": False, "grace_s": 5, "may_preempt": ["bronze"]},
        "silver": {"priority": 50, "grace_s": 5},
        "bronze": {"priority": 10, "grace_s": 5, "max_jobs_per_user": 1},
    },
}


@pytest.fixture
def tenant_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    policy = TenancyPolicy(TenancyConfig.from_dict(QUOTAS))
    core = CoreConfig(placement="best-fit", tenancy=policy)
    with local_cluster(tmp_path / "data", core=core) as cluster:
        yield cluster


def stepper(scratch: Path, name: str, steps: int, **extra: Any) -> dict[str, Any]:
    script = scratch / "stepper.py"
    script.write_text(STEPPER)
    ckpt = scratch / f"ckpt-{name}"
    group = {
        "argv": [sys.executable, str(script), str(steps)],
        "resources": {"cpu": extra.pop("cpu", "1"), "memory": "64Mi"},
        "replicas": extra.pop("replicas", 1),
    }
    return {
        "name": name,
        "walltime_s": 300,
        "checkpoint_dir": str(ckpt),
        "groups": [group],
        **extra,
    }


def wait_for(what: str, check: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def phases(cluster: LocalCluster, job_id: str) -> list[JobPhase]:
    with cluster.server.controller.lock:
        return [t.new for t in cluster.server.controller.core.jobs[job_id].history]


def test_borrowed_capacity_is_reclaimed_and_the_borrower_resumes(
    tenant_cluster: LocalCluster, scratch: Path
) -> None:
    client = Client(tenant_cluster.url)
    # "small" has a nominal quota of 2 CPUs; its 4-CPU job borrows 2 from idle "big"
    borrower = client.submit(stepper(scratch, "borrower", 150, cpu="4", queue="small"))
    wait_for("the borrower to start", lambda: client.show(borrower)["state"] == "Running")
    wait_for("a checkpoint", lambda: (scratch / "ckpt-borrower" / "step").exists())
    # "big" wants its 6 CPUs: the borrower is preempted, checkpoints on the notice, requeued
    owner = client.submit(stepper(scratch, "owner", 10, cpu="2", replicas=3, queue="big"))
    done = client.wait(owner, timeout=60)
    assert done["state"] == "Completed", (done, client.logs(owner))
    assert JobPhase.PREEMPTED in phases(tenant_cluster, borrower)
    final = client.wait(borrower, timeout=90)
    assert final["state"] == "Completed", (
        final["reason"],
        final["exit_code"],
        client.logs(borrower),
    )
    log = client.logs(borrower)
    assert "start step 0 restart 0" in log
    assert "notice at step" in log
    resumed = [line for line in log.splitlines() if line.startswith("start step")][-1]
    step, restart = int(resumed.split()[2]), resumed.split()[4]
    assert step > 0 and restart == "1", log  # resumed from its checkpoint, not from zero
    assert "done at step 150" in log
    # the owner started within the reclaim bound: grace (5 s) plus a few cycles
    owner_start = done["start_time"]
    assert owner_start - done["submit_time"] < 5 + 5


def test_gold_preempts_bronze_and_limits_hold(tenant_cluster: LocalCluster, scratch: Path) -> None:
    client = Client(tenant_cluster.url)
    bronze = client.submit(
        stepper(scratch, "bronze", 300, cpu="4", queue="big", qos="bronze", user="ann")
    )
    wait_for("bronze to start", lambda: client.show(bronze)["state"] == "Running")
    # bronze allows one job per user: ann's second bronze job waits
    second = client.submit(
        stepper(scratch, "second", 1, cpu="250m", queue="big", qos="bronze", user="ann")
    )
    time.sleep(1.0)
    assert client.show(second)["state"] == "Pending"
    gold = client.submit(stepper(scratch, "gold", 5, cpu="4", queue="big", qos="gold"))
    assert client.wait(gold, timeout=60)["state"] == "Completed"
    assert JobPhase.PREEMPTED in phases(tenant_cluster, bronze)
    assert "notice at step" in client.logs(bronze)
    client.cancel(bronze)
    assert client.wait(second, timeout=60)["state"] == "Completed"


def test_unknown_queue_is_refused_at_submission(
    tenant_cluster: LocalCluster, scratch: Path
) -> None:
    client = Client(tenant_cluster.url)
    with pytest.raises(ControllerError) as caught:
        client.submit(stepper(scratch, "lost", 1, queue="nowhere"))
    assert caught.value.status == 400
    assert "unknown queue 'nowhere'" in str(caught.value)


def test_priority_explains_a_waiting_job(tenant_cluster: LocalCluster, scratch: Path) -> None:
    client = Client(tenant_cluster.url)
    blocker = client.submit(stepper(scratch, "blocker", 100, cpu="4", queue="big"))
    waiting = client.submit(stepper(scratch, "waiting", 1, cpu="4", queue="small", qos="gold"))
    found = client.priority(waiting)
    names = [f["name"] for f in found["factors"]]
    assert names == ["age", "fairshare", "size", "qos", "user"]
    assert found["total"] == pytest.approx(sum(f["contribution"] for f in found["factors"]))
    assert next(f for f in found["factors"] if f["name"] == "qos")["value"] == 1.0  # gold
    with pytest.raises(ControllerError) as caught:
        client.priority("no-such-job")
    assert caught.value.status == 404
    client.cancel(blocker)
    client.cancel(waiting)


REPORTER = """
import sys, time
from fusesched.sdk import Client
client = Client()
for _ in range(600):
    time.sleep(0.2)
    if sys.argv[1] == "report":
        client.checkpoint()  # through the SDK, with the job's own id and credential
"""


def test_preemption_spares_the_job_that_would_lose_most(
    tenant_cluster: LocalCluster, scratch: Path
) -> None:
    client = Client(tenant_cluster.url)
    script = scratch / "reporter.py"
    script.write_text(REPORTER)

    def reporter(mode: str, user: str, qos: str) -> str:
        return client.submit(
            {
                "name": f"{mode}-{user}",
                "queue": "big",
                "qos": qos,
                "user": user,
                "walltime_s": 300,
                "placement": {"node_selector": {"fusesched.io/pool": "cpu"}},
                "groups": [
                    {
                        "argv": [sys.executable, str(script), mode],
                        "resources": {"cpu": "2", "memory": "64Mi"},
                    }
                ],
            }
        )

    # the two 2-CPU nodes of pool "cpu", one bronze job each
    quiet = reporter("quiet", "ann", "bronze")  # never checkpoints
    busy = reporter("report", "bob", "bronze")  # reports a checkpoint every 0.2 s
    for j in (quiet, busy):
        wait_for(f"{j} to run", lambda j=j: client.show(j)["state"] == "Running")
    time.sleep(1.5)  # the reporter's checkpoints arrive; the quiet one's work since start grows
    gold = stepper(scratch, "gold2", 3, cpu="2", queue="big", qos="gold")
    gold["placement"] = {"node_selector": {"fusesched.io/pool": "cpu"}}
    gold_id = client.submit(gold)
    assert client.wait(gold_id, timeout=60)["state"] == "Completed"
    assert JobPhase.PREEMPTED in phases(tenant_cluster, busy)  # it loses ~0.2 s of work
    with tenant_cluster.server.controller.lock:
        story = [
            (t.new, t.reason) for t in tenant_cluster.server.controller.core.jobs[quiet].history
        ]
    assert JobPhase.PREEMPTED not in phases(tenant_cluster, quiet), story  # it would lose all
    for j in (quiet, busy):
        client.cancel(j)
