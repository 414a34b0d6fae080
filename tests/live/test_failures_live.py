"""Failures end to end: a real controller, real agents and real processes.

* a GPU fault on one node of a 2-node job drains the node, requeues the gang elsewhere and the
  job resumes from its checkpoints;
* a hung job (no I/O, no log, no CPU) is found within its window; with no restarts left it
  fails naming the hang;
* a busy job that prints nothing, and idle inference and service jobs, are left alone;
* a node that stops heartbeating loses its job to another node; when it comes back, its stale
  task is fenced (killed) and the node is UP again; an agent restarted with the same work dir
  kills what its predecessor left running.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fusesched.controller.hang import HangPolicy
from fusesched.model.job import JobType

from .failure_cluster import LONG_POLL_S, FailureCluster, failure_cluster, process_gone, until

# A training step loop that checkpoints every step and resumes from its checkpoint.
TRAIN = """
import os, sys, time
rank = os.environ["RANK"]
total, pause = int(sys.argv[1]), float(sys.argv[2])
path = os.path.join(os.environ["FUSESCHED_CHECKPOINT_DIR"], f"rank{rank}.step")
step = int(open(path).read()) if os.path.exists(path) else 0
print(f"rank {rank} on {os.environ['FUSESCHED_NODE']}: start step {step} "
      f"restart {os.environ['FUSESCHED_RESTART_COUNT']}", flush=True)
while step < total:
    time.sleep(pause)
    step += 1
    with open(path + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(path + ".tmp", path)
print(f"rank {rank}: done at step {step}", flush=True)
"""

# Prints once, then waits forever: no I/O, no output, no CPU.
HANG = ["sh", "-c", "echo started once; exec sleep 600"]


def job(argv: list[str], *, cpu: str = "250m", **extra: Any) -> dict[str, Any]:
    group: dict[str, Any] = {"resources": {"cpu": cpu, "memory": "64Mi"}, "argv": argv}
    group.update(extra.pop("group", {}))
    return {"name": extra.pop("name", "failure"), "walltime_s": 120, "groups": [group], **extra}


def wait_state(cluster: FailureCluster, job_id: str, state: str, timeout: float) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def reached() -> bool:
        last.update(cluster.client.show(job_id))
        return bool(last["state"] == state)

    until(reached, timeout, lambda: f"job {job_id} not {state}: {last}")
    return last


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Any]:
    stack: list[Any] = []

    def make(**kwargs: Any) -> FailureCluster:
        manager = failure_cluster(tmp_path, **kwargs)
        stack.append(manager)
        return manager.__enter__()

    yield make
    for manager in reversed(stack):
        manager.__exit__(None, None, None)


# ---------------------------------------------------------------------------- GPU fault


def test_gpu_fault_requeues_the_gang_on_healthy_nodes_and_it_resumes(
    make_cluster: Any, scratch: Path
) -> None:
    cluster: FailureCluster = make_cluster()
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        cluster.add_agent(name, cpu=2, gpus=1)
    checkpoints = scratch / "checkpoints"
    total = 30
    job_id = cluster.client.submit(
        {
            "name": "train",
            "type": "ai-train",
            "walltime_s": 120,
            "checkpoint_dir": str(checkpoints),
            "restart": {"mode": "requeue-excluding-node", "max_restarts": 2, "backoff_s": 1},
            "placement": {"max_tasks_per_node": 1},
            "groups": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "resources": {"cpu": "500m", "memory": "128Mi", "nvidia.com/gpu": "1"},
                    "argv": [sys.executable, "-c", TRAIN, str(total), "0.2"],
                }
            ],
        }
    )
    first = wait_state(cluster, job_id, "Running", 30)
    assert len(set(first["nodes"])) == 2, first
    # both ranks made progress and checkpointed it
    ranks = [checkpoints / "rank0.step", checkpoints / "rank1.step"]

    def progressed() -> bool:
        return all(p.exists() and p.read_text() and int(p.read_text()) >= 4 for p in ranks)

    until(progressed, 30, lambda: f"no checkpoints: {list(checkpoints.glob('*'))}")
    faulty = first["nodes"][0]
    healthy = [n for n in ("gpu-1", "gpu-2", "gpu-3") if n != faulty]
    gpus = cluster.agents[faulty].gpus
    assert gpus is not None
    fault_at = time.monotonic()
    gpus.lose_gpu(0)

    drained = ("draining", "drained")  # drained: nothing runs there any more
    until(lambda: cluster.node_state(faulty) in drained, 15, "the faulty node is not drained")
    until(
        lambda: "JobRequeued" in cluster.event_kinds(job_id),
        20,
        lambda: str(cluster.events(job_id)),
    )
    requeued_after = time.monotonic() - fault_at
    done = cluster.client.wait(job_id, timeout=60)
    logs = {t["task_id"]: cluster.client.logs(job_id, task=t["task_id"]) for t in done["tasks"]}
    assert done["state"] == "Completed", (done, logs, cluster.events(job_id))

    kinds = cluster.event_kinds(job_id)
    assert "JobGpu" in kinds, kinds
    gpu_reason = dict(cluster.events(job_id))["JobGpu"]["reason"]
    assert "GPU 0" in gpu_reason and "requeued" in gpu_reason, gpu_reason
    assert kinds.count("JobRequeued") == 1, kinds
    # the second run: both tasks elsewhere, resumed from their checkpoints
    second = [t for t in done["tasks"] if "-r1." in t["task_id"]]
    assert len(second) == 2, done["tasks"]
    assert sorted(t["node"] for t in second) == healthy, second
    assert all(t["state"] == "Completed" for t in second), second
    assert sorted(done["nodes"]) == healthy, done
    for task in second:
        text = logs[task["task_id"]]
        assert "restart 1" in text, text
        resumed_from = int(text.split("start step ", 1)[1].split()[0])
        assert resumed_from >= 4, text
        assert f"done at step {total}" in text, text
    assert cluster.node_state(faulty) == "drained"  # stays drained: the GPU is still lost
    assert requeued_after < 10, requeued_after


def test_a_requeue_without_backoff_is_settled(make_cluster: Any) -> None:
    cluster: FailureCluster = make_cluster()
    cluster.add_agent("gpu-1", cpu=2, gpus=1)
    cluster.add_agent("gpu-2", cpu=2, gpus=1)
    job_id = cluster.client.submit(
        job(
            ["sh", "-c", "sleep 6"],  # long enough to be sampled on a busy machine
            restart={"backoff_s": 0},
            group={"resources": {"cpu": "250m", "memory": "64Mi", "nvidia.com/gpu": "1"}},
        )
    )
    node = wait_state(cluster, job_id, "Running", 30)["nodes"][0]
    gpus = cluster.agents[node].gpus
    assert gpus is not None
    # the controller has a sample of the task (GPU faults are matched to sampled tasks)
    until(lambda: cluster.controller.monitor._tasks, 20, "no sample")
    gpus.lose_gpu(0)
    done = cluster.client.wait(job_id, timeout=40)
    assert done["state"] == "Completed", (done, cluster.events(job_id))
    assert "JobRequeued" in cluster.event_kinds(job_id)


# ---------------------------------------------------------------------------- hangs


# Samples every 0.2 s: detect_hang needs a sample within the oldest 10 % of the window (its
# coverage check), which a 4 s window sampled every 0.5 s never has (a src bug, reported).
FAST = {"sample_interval_s": 0.2, "long_poll_s": 0.25}


def test_a_hung_job_is_found_within_its_window(make_cluster: Any) -> None:
    cluster: FailureCluster = make_cluster(**FAST)
    cluster.add_agent("cpu-1", cpu=2)
    cluster.add_agent("cpu-2", cpu=2)
    hang = {"window_s": 4, "startup_s": 1}
    notify = cluster.client.submit(job(HANG, name="notify", hang=hang, restart={"mode": "notify"}))
    fail = cluster.client.submit(
        job(
            HANG,
            name="fail",
            hang=hang,
            restart={"mode": "requeue-excluding-node", "max_restarts": 0},
        )
    )
    started = {j: wait_state(cluster, j, "Running", 30)["start_time"] for j in (notify, fail)}

    until(lambda: "JobHang" in cluster.event_kinds(notify), 20, lambda: str(cluster.events(notify)))
    found_at = time.time()
    reason = dict(cluster.events(notify))["JobHang"]["reason"]
    assert "restart policy is notify" in reason, reason
    assert "log quiet" in reason and "cpu quiet" in reason, reason
    # notify: reported, left running
    time.sleep(1.0)
    assert cluster.client.show(notify)["state"] == "Running"
    assert cluster.event_kinds(notify).count("JobHang") == 1

    failed = cluster.client.wait(fail, timeout=20)
    assert failed["state"] == "Failed", failed
    assert "JobHang" in cluster.event_kinds(fail)
    assert "JobRequeued" not in cluster.event_kinds(fail)
    assert "retry budget of 0 restarts exhausted" in failed["reason"], failed
    assert failed["reason"].startswith("hung: no progress for 4 s"), failed
    # found within window + start-up + a few seconds of sampling and checking
    assert found_at - started[notify] < 4 + 1 + 6, found_at - started[notify]
    assert failed["end_time"] - started[fail] < 4 + 1 + 8, failed
    cluster.client.cancel(notify)
    assert cluster.client.wait(notify, timeout=20)["state"] == "Cancelled"


def test_busy_and_idle_on_purpose_jobs_are_not_taken_for_hung(make_cluster: Any) -> None:
    cluster: FailureCluster = make_cluster(**FAST)
    cluster.add_agent("cpu-1", cpu=2)
    cluster.add_agent("cpu-2", cpu=2)
    # every type's default window is short here; inference and services keep detection off
    short = HangPolicy(window_s=4, startup_s=1)
    cluster.controller.monitor.policies = {
        JobType.BATCH: short,
        JobType.AI_INFER: HangPolicy(enabled=False, window_s=4, startup_s=1),
        JobType.SERVICE: HangPolicy(enabled=False, window_s=4, startup_s=1),
    }
    strict = {"mode": "requeue-excluding-node", "max_restarts": 0}
    busy_loop = "import time\nt = time.time()\nwhile time.time() - t < 14: pass\n"
    busy = cluster.client.submit(
        job(
            [sys.executable, "-c", busy_loop],
            cpu="1",
            name="busy",
            hang={"window_s": 4, "startup_s": 1},
            restart=strict,
        )
    )
    infer = cluster.client.submit(
        job(
            ["sh", "-c", "echo ready; exec sleep 14"], name="infer", type="ai-infer", restart=strict
        )
    )
    service = cluster.client.submit(
        job(["sh", "-c", "echo up; exec sleep 600"], name="service", type="service", restart=strict)
    )
    # control: an idle batch job under the same short default window is found hung
    control = cluster.client.submit(job(HANG, name="control", restart={"mode": "notify"}))
    for j in (busy, infer, service, control):
        wait_state(cluster, j, "Running", 30)
    until(
        lambda: "JobHang" in cluster.event_kinds(control), 20, lambda: str(cluster.events(control))
    )

    for j in (busy, infer):
        done = cluster.client.wait(j, timeout=40)
        assert done["state"] == "Completed", (done, cluster.events(j))
        assert done["end_time"] - done["start_time"] >= 13, done  # ran its course: > 3 windows
    assert cluster.client.show(service)["state"] == "Running"
    for j in (busy, infer, service):
        kinds = cluster.event_kinds(j)
        assert not {"JobHang", "JobRequeued"} & set(kinds), (j, kinds)
    for j in (service, control):
        cluster.client.cancel(j)
        assert cluster.client.wait(j, timeout=20)["state"] == "Cancelled"


# ---------------------------------------------------------------------------- node loss


def _pid(path: Path, timeout: float = 20) -> int:
    until(lambda: path.exists() and path.read_text().strip(), timeout, f"no {path}")
    return int(path.read_text())


def node_loss_job(scratch: Path) -> dict[str, Any]:
    # the first run waits forever, deaf to SIGTERM (only a SIGKILL, as fencing sends, ends it
    # at once); the requeued one waits for the test's go
    script = (
        f"echo $$ > {scratch}/pid.$FUSESCHED_RESTART_COUNT; "
        'echo "run $FUSESCHED_RESTART_COUNT on $FUSESCHED_NODE"; '
        f'if [ "$FUSESCHED_RESTART_COUNT" = 0 ]; then trap "" TERM; exec sleep 600; fi; '
        f"while [ ! -e {scratch}/go ]; do sleep 0.1; done"
    )
    return job(
        ["sh", "-c", script],
        name="survivor",
        restart={"mode": "requeue-excluding-node", "max_restarts": 1, "backoff_s": 1},
    )


def start_node_loss(make_cluster: Any, scratch: Path) -> tuple[FailureCluster, str, str, str, int]:
    """Two 2-CPU nodes (3 s node timeout) and a running ``node_loss_job``: the cluster, the
    job, the node it runs on, the other node and the pid of its task."""
    cluster: FailureCluster = make_cluster(node_timeout_s=3.0)
    cluster.add_agent("cpu-1", cpu=2)
    cluster.add_agent("cpu-2", cpu=2)
    job_id = cluster.client.submit(node_loss_job(scratch))
    lost_node = wait_state(cluster, job_id, "Running", 30)["nodes"][0]
    (other,) = {"cpu-1", "cpu-2"} - {lost_node}
    return cluster, job_id, lost_node, other, _pid(scratch / "pid.0")


def test_a_silent_node_loses_its_job_and_its_stale_task_is_fenced_on_return(
    make_cluster: Any, scratch: Path
) -> None:
    cluster, job_id, lost_node, other, stale_pid = start_node_loss(make_cluster, scratch)

    agent = cluster.agents[lost_node]
    cut_at = time.monotonic()
    agent.partitioned.set()  # the agent and its task live on; the controller hears nothing
    until(lambda: cluster.node_state(lost_node) == "down", 15, "the silent node is not DOWN")
    down_after = time.monotonic() - cut_at
    new_pid = _pid(scratch / "pid.1")  # the job runs again, elsewhere
    running = wait_state(cluster, job_id, "Running", 10)
    assert running["nodes"] == [other], running
    kinds = cluster.event_kinds(job_id)
    assert "JobNode" in kinds and "JobRequeued" in kinds, kinds
    assert not process_gone(stale_pid)  # still running behind the partition: a stale task

    healed_at = time.monotonic()
    agent.partitioned.clear()  # it speaks again, listing its stale task
    until(lambda: process_gone(stale_pid), 10, "the stale task was not fenced")
    fenced_after = time.monotonic() - healed_at
    until(lambda: cluster.node_state(lost_node) == "up", 10, "the node did not come back UP")
    assert agent.runtime.running() == []
    assert not process_gone(new_pid)  # the new run is untouched
    (scratch / "go").touch()
    done = cluster.client.wait(job_id, timeout=20)
    assert done["state"] == "Completed", (done, cluster.events(job_id))
    assert [t["node"] for t in done["tasks"] if "-r1." in t["task_id"]] == [other]
    assert "run 1 on " + other in cluster.client.logs(job_id, task=f"{job_id}-r1.main.0")
    # the 3 s timeout counts from the last heartbeat the controller heard, which can have
    # arrived up to one long poll before the cut
    assert 3.0 - LONG_POLL_S - 0.1 <= down_after < 8, down_after
    # SIGKILLed without the 5 s grace of an ordinary stop (the task ignores SIGTERM)
    assert fenced_after < 4.0, fenced_after


def test_a_restarted_agent_kills_what_it_left_running_and_its_node_is_up(
    make_cluster: Any, scratch: Path
) -> None:
    cluster, job_id, lost_node, other, stale_pid = start_node_loss(make_cluster, scratch)

    cluster.agents[lost_node].stop(kill_tasks=False)  # the agent dies, its task lives on
    until(lambda: cluster.node_state(lost_node) == "down", 15, "the stopped node is not DOWN")
    _pid(scratch / "pid.1")
    assert cluster.client.show(job_id)["nodes"] == [other]
    assert not process_gone(stale_pid)

    cluster.add_agent(lost_node, cpu=2)  # same name, same work dir, a new runtime
    until(lambda: process_gone(stale_pid), 10, "the restarted agent left the stale task running")
    until(lambda: cluster.node_state(lost_node) == "up", 10, "the node did not come back UP")
    (scratch / "go").touch()
    done = cluster.client.wait(job_id, timeout=20)
    assert done["state"] == "Completed", (done, cluster.events(job_id))


# hangs on its first run only; the restart finds FUSESCHED_RESTART_COUNT=1 and finishes
HANG_ONCE = [
    "sh",
    "-c",
    'echo "run $FUSESCHED_RESTART_COUNT on $FUSESCHED_NODE"; '
    '[ "$FUSESCHED_RESTART_COUNT" = 0 ] && exec sleep 600; echo finished',
]


def test_a_hung_job_restarts_in_place(make_cluster: Any) -> None:
    cluster: FailureCluster = make_cluster(**FAST)
    cluster.add_agent("cpu-1", cpu=2)
    cluster.add_agent("cpu-2", cpu=2)
    job_id = cluster.client.submit(
        job(
            HANG_ONCE,
            hang={"window_s": 4, "startup_s": 1},
            restart={"mode": "restart-in-place", "backoff_s": 1},
        )
    )
    first = wait_state(cluster, job_id, "Running", 30)
    done = cluster.client.wait(job_id, timeout=40)
    assert done["state"] == "Completed", (done, cluster.events(job_id))
    kinds = cluster.event_kinds(job_id)
    assert "JobHang" in kinds and "JobRestartedInPlace" in kinds, kinds
    assert "JobRequeued" not in kinds  # it kept its place: never went back to the queue
    log = cluster.client.logs(job_id)
    node = first["nodes"][0]
    assert f"run 0 on {node}" in log and f"run 1 on {node}" in log and "finished" in log, log
    assert done["nodes"] == first["nodes"]
    assert [t["task_id"] for t in done["tasks"]] == [f"{job_id}.main.0", f"{job_id}-r1.main.0"]


def test_an_application_failure_is_retried_when_the_job_asks(make_cluster: Any) -> None:
    cluster: FailureCluster = make_cluster()
    cluster.add_agent("cpu-1", cpu=2)
    crash_once = [
        "sh",
        "-c",
        'echo "run $FUSESCHED_RESTART_COUNT"; [ "$FUSESCHED_RESTART_COUNT" = 0 ] && exit 3; '
        "echo recovered",
    ]
    retried = cluster.client.submit(
        job(crash_once, restart={"retry_application_failures": True, "backoff_s": 0})
    )
    plain = cluster.client.submit(job(["sh", "-c", "exit 3"]))
    done = cluster.client.wait(retried, timeout=40)
    assert done["state"] == "Completed", (done, cluster.events(retried))
    assert "run 0" in cluster.client.logs(retried) and "recovered" in cluster.client.logs(retried)
    failed = cluster.client.wait(plain, timeout=40)
    assert failed["state"] == "Failed" and failed["exit_code"] == 3  # not retried by default
