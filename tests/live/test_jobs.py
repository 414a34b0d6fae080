"""End to end: real jobs as real processes on three real agents, through the REST API."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.examples import EXAMPLES
from fusesched.sdk import Client, ControllerError


def job(
    argv: list[str], *, cpu: str = "250m", memory: str = "64Mi", **extra: Any
) -> dict[str, Any]:
    group: dict[str, Any] = {"resources": {"cpu": cpu, "memory": memory}, "argv": argv}
    group.update(extra.pop("group", {}))
    return {"name": extra.pop("name", "test"), "walltime_s": 120, "groups": [group], **extra}


def wait_state(client: Client, job_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = client.show(job_id)
        if found["state"] == state:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} is {found['state']}, not {state}: {found}")
        time.sleep(0.05)


def test_a_job_runs_and_its_output_is_kept(client: Client) -> None:
    job_id = client.submit(job(["sh", "-c", "echo hello from $FUSESCHED_NODE; echo oops >&2"]))
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Completed"
    assert done["exit_code"] == 0
    assert done["nodes"] and done["nodes"][0].startswith("node-")
    assert done["tasks"][0]["state"] == "Completed"
    output = client.logs(job_id)
    assert f"hello from {done['nodes'][0]}" in output
    assert "oops" in output  # stderr goes to the same log


def test_a_failing_job_reports_its_exit_code(client: Client) -> None:
    job_id = client.submit(job(["sh", "-c", "exit 3"]))
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Failed"
    assert done["exit_code"] == 3


def test_a_missing_program_fails_with_a_reason(client: Client) -> None:
    job_id = client.submit(job(["/no/such/program"]))
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Failed"
    assert done["exit_code"] != 0


def test_a_service_runs_until_cancelled(client: Client, scratch: Path) -> None:
    pidfile = scratch / "service.pid"
    job_id = client.submit(
        job(
            ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"],
            type="service",
        )
    )
    wait_state(client, job_id, "Running")
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    time.sleep(0.5)
    assert client.show(job_id)["state"] == "Running"
    os.kill(pid, 0)  # alive
    assert client.cancel(job_id) == [job_id]
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Cancelled"
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.05)


def test_a_pending_job_can_be_cancelled_before_it_runs(client: Client) -> None:
    hog = client.submit(job(["sleep", "600"], cpu="4", group={"resources": {"cpu": "4"}}))
    wait_state(client, hog, "Running")
    waiting = client.submit(job(["true"], cpu="4", group={"resources": {"cpu": "4"}}))
    assert client.show(waiting)["state"] == "Pending"
    client.cancel(waiting)
    assert client.wait(waiting, timeout=10)["state"] == "Cancelled"
    assert client.show(waiting)["start_time"] is None
    client.cancel(hog)
    assert client.wait(hog, timeout=30)["state"] == "Cancelled"


def test_impossible_requests_are_refused_at_submit(client: Client) -> None:
    with pytest.raises(ControllerError) as caught:
        client.submit(job(["true"], group={"resources": {"cpu": "1", "nvidia.com/gpu": "16"}}))
    assert caught.value.status == 400
    assert "nvidia.com/gpu" in str(caught.value)
    with pytest.raises(ControllerError) as unknown:
        client.submit(job(["true"], group={"resources": {"cpu": "1", "gpux": "1"}}))
    assert unknown.value.status in (400, 422)
    assert "gpux" in str(unknown.value)
    assert client.jobs(limit=10) == []  # nothing half-stored


def test_gpu_jobs_see_only_their_devices(client: Client) -> None:
    job_id = client.submit(
        job(
            ["sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES"],
            group={"resources": {"cpu": "1", "nvidia.com/gpu": "2"}},
        )
    )
    done = client.wait(job_id, timeout=30)
    assert done["state"] == "Completed", done
    assert done["nodes"] == ["node-c"]
    assert "devices=0,1" in client.logs(job_id)
    assert sorted(done["tasks"][0]["gpu_indices"]) == [0, 1]


def test_concurrent_one_gpu_jobs_get_different_devices(client: Client, scratch: Path) -> None:
    gate = scratch / "gate"
    argv = [
        "sh",
        "-c",
        f"echo devices=$CUDA_VISIBLE_DEVICES; while [ ! -e {gate} ]; do sleep 0.05; done",
    ]
    spec = job(argv, group={"resources": {"cpu": "1", "nvidia.com/gpu": "1"}})
    first, second = client.submit(spec), client.submit(spec)
    try:
        running = [wait_state(client, j, "Running") for j in (first, second)]
    finally:
        gate.touch()
    done = [client.wait(j, timeout=30) for j in (first, second)]
    assert [d["state"] for d in done] == ["Completed", "Completed"], done
    assert all(r["nodes"] == ["node-c"] for r in running)
    seen = [d["tasks"][0]["gpu_indices"] for d in done]
    assert sorted(seen) == [[0], [1]], seen
    logs = sorted(client.logs(j).strip() for j in (first, second))
    assert logs == ["devices=0", "devices=1"], logs


def test_tasks_are_pinned_to_their_cpus(client: Client) -> None:
    job_id = client.submit(job(["grep", "Cpus_allowed_list", "/proc/self/status"], cpu="1"))
    assert client.wait(job_id, timeout=30)["state"] == "Completed"
    allowed = client.logs(job_id).split(":", 1)[1].strip()
    assert allowed.isdigit(), allowed  # exactly one CPU


def test_an_array_runs_every_member(client: Client) -> None:
    spec = job(["sh", "-c", "echo member $FUSESCHED_ARRAY_INDEX"], array={"start": 1, "stop": 3})
    parent = client.submit(spec)
    members = [f"{parent}_{i}" for i in (1, 2, 3)]
    for i, member in enumerate(members, start=1):
        assert client.wait(member, timeout=30)["state"] == "Completed"
        assert f"member {i}" in client.logs(member)


def test_dependencies_wait_for_success(client: Client, scratch: Path) -> None:
    order = scratch / "order"
    first = client.submit(job(["sh", "-c", f"sleep 0.5; echo first > {order}"]))
    second = client.submit(
        job(
            ["sh", "-c", f"echo second >> {order}"],
            dependencies=[{"kind": "afterok", "job_id": first}],
        )
    )
    assert client.wait(second, timeout=30)["state"] == "Completed"
    assert order.read_text().split() == ["first", "second"]


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="PyTorch is not installed"
)
def test_pytorch_ddp_across_two_nodes(client: Client) -> None:
    job_id = client.submit(
        {
            "name": "ddp",
            "walltime_s": 300,
            "placement": {"max_tasks_per_node": 1, "node_selector": {"fusesched.io/pool": "cpu"}},
            "groups": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "resources": {"cpu": "1", "memory": "1Gi"},
                    "argv": [sys.executable, str(EXAMPLES / "ddp_train.py"), "10"],
                }
            ],
        }
    )
    done = client.wait(job_id, timeout=180)
    rank1 = client.logs(job_id, task=f"{job_id}.worker.1")
    assert done["state"] == "Completed", (done, client.logs(job_id), rank1)
    assert sorted(done["nodes"]) == ["node-a", "node-b"]
    assert done["type"] == "ai-train" or done["type"] == "batch"
    lines = [
        client.logs(job_id, task=f"{job_id}.worker.{rank}").strip().splitlines()[-1]
        for rank in (0, 1)
    ]
    assert lines[0].startswith("rank 0/2") and lines[1].startswith("rank 1/2")
    assert {line.split(" on ")[1].split(":")[0] for line in lines} == {"node-a", "node-b"}
    assert all("allreduce 3" in line for line in lines)
    checksums = {line.rsplit("checksum ", 1)[1] for line in lines}
    assert len(checksums) == 1  # DDP kept the replicas identical


MPI_PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *node = getenv("FUSESCHED_NODE");
    printf("rank %d of %d on %s sum %d\n", rank, size, node ? node : "?", sum);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="OpenMPI (mpicc) is not installed")
@pytest.mark.parametrize("slurm_env", [False, True], ids=["plain", "slurm-variables"])
def test_mpi_across_two_agents_without_ssh(client: Client, scratch: Path, slurm_env: bool) -> None:
    """mpirun spans the allocation through fusesched's launcher; also with Slurm's variables
    set (an sbatch job's), from which OpenMPI would otherwise pick srun and Slurm's
    allocation (there is no srun here)."""
    source = scratch / "allreduce.c"
    source.write_text(MPI_PROGRAM)
    binary = scratch / "allreduce"
    os.system(f"mpicc -o {binary} {source}")
    assert binary.exists()
    script = (
        "#!/bin/bash\n"
        "#SBATCH --nodes=2\n"
        f"mpirun -np 2 --map-by node --mca btl tcp,self --mca btl_tcp_if_include lo {binary}\n"
    )
    job_id = client.submit(
        {
            "name": "mpi",
            "walltime_s": 120,
            "slurm_env": slurm_env,
            "placement": {"max_tasks_per_node": 1, "node_selector": {"fusesched.io/pool": "cpu"}},
            "groups": [
                {
                    "replicas": 2,
                    "resources": {"cpu": "1", "memory": "256Mi"},
                    "script": script,
                    "launcher": "mpi",
                    "env": {"PATH": os.environ["PATH"]},
                }
            ],
        }
    )
    done = client.wait(job_id, timeout=120)
    output = client.logs(job_id)
    if done["state"] != "Completed":  # what the remote daemons said, to tell why
        for task in done["tasks"]:
            if ".remote." in task["task_id"]:
                remote_log = client.logs(job_id, task=task["task_id"])
                output += f"\n--- {task['task_id']} on {task['node']}: {task}\n{remote_log}"
    assert done["state"] == "Completed", output
    lines = sorted(line for line in output.splitlines() if line.startswith("rank "))
    assert len(lines) == 2, output
    assert {line.split(" on ")[1].split()[0] for line in lines} == {"node-a", "node-b"}
    assert all(line.endswith("sum 3") for line in lines)
    # mpirun reached the other node through fusesched's launcher (no ssh): its daemon ran as
    # a task of the job there (mpirun treats every agent name as remote, node-a included)
    remote = {t["node"] for t in done["tasks"] if ".remote." in t["task_id"]}
    assert "node-b" in remote


def _busybox_image(root: Path) -> Path:
    busybox = shutil.which("busybox")
    assert busybox is not None
    rootfs = root / "image"
    (rootfs / "bin").mkdir(parents=True)
    for folder in ("proc", "dev", "tmp", "etc"):
        (rootfs / folder).mkdir()
    shutil.copy(busybox, rootfs / "bin" / "busybox")
    for tool in ("sh", "ls", "cat", "echo", "test"):
        (rootfs / "bin" / tool).symlink_to("busybox")
    (rootfs / "IMAGE_MARKER").write_text("inside the image\n")
    return rootfs


@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("busybox") is None,
    reason="bubblewrap and busybox are needed (scripts/system_deps.sh installs them)",
)
def test_a_container_job_sees_only_its_image(client: Client, scratch: Path) -> None:
    rootfs = _busybox_image(scratch)
    host_marker = scratch / "HOST_MARKER"
    host_marker.write_text("on the host\n")
    command = (
        "cat /IMAGE_MARKER; "
        f"if test -e {host_marker}; then echo host visible; else echo host hidden; fi; "
        "ls /; echo pid $$"
    )
    job_id = client.submit(job(["/bin/sh", "-c", command], group={"image": str(rootfs)}))
    done = client.wait(job_id, timeout=60)
    output = client.logs(job_id)
    assert done["state"] == "Completed", output
    assert "inside the image" in output
    assert "host hidden" in output
    assert "usr" not in output.split()  # the host's /usr is not there
    pid = int(output.rsplit("pid ", 1)[1].split()[0])
    assert pid <= 3  # its own PID namespace


def test_jobs_survive_in_postgresql(pg_cluster: LocalCluster) -> None:
    client = Client(pg_cluster.url)
    job_id = client.submit(job(["echo", "stored in postgres"]))
    assert client.wait(job_id, timeout=30)["state"] == "Completed"
    assert "stored in postgres" in client.logs(job_id)
    listed = client.jobs(states=["Completed"])
    assert [j["id"] for j in listed] == [job_id]


@pytest.mark.skipif(os.geteuid() != 0, reason="only an agent running as root switches users")
def test_tasks_run_under_the_users_unprivileged_uid(client: Client) -> None:
    from fusesched.agent.users import derived_uid

    mine = client.submit(job(["id", "-u"]))
    alice = client.submit(job(["id", "-u"], user="alice"))
    assert client.wait(mine, timeout=30)["state"] == "Completed"
    assert client.wait(alice, timeout=30)["state"] == "Completed"
    assert client.logs(mine).strip() == str(derived_uid("root"))  # never uid 0
    assert client.logs(alice).strip() == str(derived_uid("alice"))


def test_shell_metacharacters_in_a_command_are_literal(client: Client, scratch: Path) -> None:
    victim = scratch / "victim"
    victim.write_text("still here")
    text = f"hi; rm -f {victim} && echo $(whoami) `id` | cat > {victim}"
    job_id = client.submit(job(["echo", text]))
    assert client.wait(job_id, timeout=30)["state"] == "Completed"
    assert client.logs(job_id).strip() == text
    assert victim.read_text() == "still here"
