"""Kubeflow and Volcano kinds end to end: ``fusesched submit`` of a PyTorchJob (Master + one
Worker) on a real controller with two real agents; each task gets the training operator's
rendezvous variables (Master rank 0 at MASTER_ADDR, the Worker rank 1, one MASTER_PORT,
WORLD_SIZE 2), a real torch.distributed gloo all-reduce runs across the two tasks, and a bare
``torchrun`` in each takes torchrun's ``PET_*`` variables; an MPIJob's mpirun spans the
Worker's slots, ``slotsPerWorker`` to a node, through fusesched's launcher; a Volcano Job
completes when its launcher task does (``TaskCompleted → CompleteJob``)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusesched.cli.local import LocalCluster
from fusesched.client_base import ControllerError
from fusesched.controller.launchenv import MASTER_PORT_BASE, MASTER_PORT_SPAN
from fusesched.examples import EXAMPLES
from fusesched.sdk import Client

from .conftest import local_cluster

PRINT_ENV = (
    "import os; print(*(os.environ[k] for k in "
    "('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'PYTHONUNBUFFERED')))"
)


def pytorch_job(argv: list[str], cpu: str = "500m", memory: str = "128Mi") -> str:
    def replica(kind: str) -> str:
        return f"""\
    {kind}:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          schedulerName: fused-scheduler
          containers:
            - name: pytorch
              command: {json.dumps(argv)}
              resources: {{requests: {{cpu: {cpu}, memory: {memory}}}}}
"""

    return (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pt}\nspec:\n"
        "  runPolicy: {activeDeadlineSeconds: 240}\n  pytorchReplicaSpecs:\n"
        + replica("Master")
        + replica("Worker")
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "data", lambda agents: agents[:2]) as made:
        yield made


def submit(cluster: LocalCluster, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusesched", "submit", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"FUSESCHED_CONTROLLER": cluster.url, "PATH": "/usr/bin:/bin"},
    )


def run(cluster: LocalCluster, path: Path, text: str, timeout: float) -> tuple[str, dict]:  # type: ignore[type-arg]
    path.write_text(text, encoding="utf-8")
    submitted = submit(cluster, path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(json.loads(submitted.stdout)["id"])
    return job_id, Client(cluster.url).wait(job_id, timeout=timeout)


def test_pytorchjob_tasks_get_the_operators_variables(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    job_id, done = run(
        cluster, tmp_path / "pt.yaml", pytorch_job([sys.executable, "-c", PRINT_ENV]), 60
    )
    client = Client(cluster.url)
    said = {
        group: client.logs(job_id, task=f"{job_id}.{group}.0").split()
        for group in ("master", "worker")
    }
    assert done["state"] == "Completed", (done, said)
    assert done["type"] == "ai-train"
    master, worker = said["master"], said["worker"]
    assert master[:3] == ["0", "2", "127.0.0.1"] and worker[:3] == ["1", "2", "127.0.0.1"]
    assert master[3] == worker[3]  # one rendezvous port, fusesched's for the job
    assert MASTER_PORT_BASE <= int(master[3]) < MASTER_PORT_BASE + MASTER_PORT_SPAN
    assert master[4] == worker[4] == "1"  # PYTHONUNBUFFERED, as the operator sets it


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_pytorchjob_gloo_all_reduce_across_its_tasks(cluster: LocalCluster, tmp_path: Path) -> None:
    argv = [sys.executable, str(EXAMPLES / "ddp_train.py"), "3"]
    job_id, done = run(cluster, tmp_path / "ddp.yaml", pytorch_job(argv, "1", "1Gi"), 180)
    client = Client(cluster.url)
    lines = [
        client.logs(job_id, task=f"{job_id}.{group}.0").strip().splitlines()
        for group in ("master", "worker")
    ]
    assert done["state"] == "Completed", (done, lines)
    master, worker = lines[0][-1], lines[1][-1]
    assert master.startswith("rank 0/2") and worker.startswith("rank 1/2")
    assert "allreduce 3" in master and "allreduce 3" in worker  # 1 + 2, summed over both
    assert master.rsplit("checksum ", 1)[1] == worker.rsplit("checksum ", 1)[1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_pytorchjob_bare_torchrun_takes_the_pet_variables(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """``torchrun train.py`` with no other argument in each replica: torchrun reads the
    ``PET_*`` variables (2 nodes, this one's rank, the Master's address and fusesched's port,
    ``nprocPerNode`` 2 processes each) and the four ranks all-reduce across both tasks."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    text = pytorch_job([torchrun, str(EXAMPLES / "ddp_train.py"), "2"], "1", "1Gi").replace(
        "  runPolicy:", "  nprocPerNode: '2'\n  runPolicy:"
    )
    job_id, done = run(cluster, tmp_path / "torchrun.yaml", text, 180)
    client = Client(cluster.url)
    said = {
        group: client.logs(job_id, task=f"{job_id}.{group}.0") for group in ("master", "worker")
    }
    assert done["state"] == "Completed", (done, said)
    ranks = {
        group: sorted(line.split()[1] for line in text.splitlines() if line.startswith("rank "))
        for group, text in said.items()
    }
    # node rank 0 (the Master) runs ranks 0 and 1, the Worker 2 and 3, of one world of 4
    assert ranks == {"master": ["0/4", "1/4"], "worker": ["2/4", "3/4"]}, said
    assert all(text.count("allreduce 10 ") == 2 for text in said.values()), said


TRAINERS_BESIDE_A_SERVER = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: ps-and-trainers}
spec:
  schedulerName: fused-scheduler
  tasks:
    - name: ps
      template:
        spec:
          containers:
            - {name: ps, command: [sleep, "300"], resources: {requests: {cpu: 100m, memory: 64Mi}}}
    - name: trainer
      replicas: 2
      policies: [{event: TaskCompleted, action: CompleteJob}]
      template:
        spec:
          containers:
            - name: t
              command: COMMAND
              resources: {requests: {cpu: "1", memory: 1Gi}}
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_volcano_torchrun_world_leaves_out_the_other_tasks(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A parameter server placed first, then two tasks running a bare ``torchrun``: only the
    trainers are torchrun's nodes (``PET_NNODES`` 2, ranks 0 and 1; counted with the server
    they would wait for a rank that never joins); they all-reduce, and their completion
    completes the job, the server stopped."""
    torchrun = str(Path(sys.executable).parent / "torchrun")
    command = json.dumps([torchrun, str(EXAMPLES / "ddp_train.py"), "2"])
    text = TRAINERS_BESIDE_A_SERVER.replace("COMMAND", command)
    job_id, done = run(cluster, tmp_path / "vc-torchrun.yaml", text, 120)
    client = Client(cluster.url)
    said = [client.logs(job_id, task=f"{job_id}.trainer.{i}") for i in range(2)]
    assert (done["state"], done["reason"]) == ("Completed", "task group trainer completed"), (
        done,
        said,
    )
    ranks = [line.split()[1] for text in said for line in text.splitlines() if "allreduce" in line]
    assert ranks == ["0/2", "1/2"], said
    assert all("allreduce 3 " in text for text in said), said


MPI_JOB = """\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: hello-mpi}
spec:
  slotsPerWorker: 2
  runPolicy: {activeDeadlineSeconds: 120}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          schedulerName: fused-scheduler
          containers:
            - name: launcher
              command: [mpirun, -np, "4", --mca, btl, "tcp,self", --mca, btl_tcp_if_include, lo,
                        sh, -c, 'echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE,
                        $OMPI_COMM_WORLD_LOCAL_SIZE here"']
              env: [{name: PATH, value: "PATH_HERE"}]
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: fused-scheduler
          containers:
            - name: worker
              resources: {requests: {cpu: 200m, memory: 256Mi}}
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI is not installed")
def test_mpijob_runs_mpirun_over_the_worker_slots(cluster: LocalCluster, tmp_path: Path) -> None:
    text = MPI_JOB.replace(
        "PATH_HERE", str(Path(shutil.which("mpirun") or "").parent) + ":/usr/bin:/bin"
    )
    job_id, done = run(cluster, tmp_path / "mpi.yaml", text, 120)
    output = Client(cluster.url).logs(job_id)
    assert done["state"] == "Completed", (done, output)
    assert done["type"] == "hpc"
    ranks = sorted(line for line in output.splitlines() if line.startswith("rank "))
    assert ranks == [f"rank {r} of 4, 2 here" for r in range(4)], output
    # slotsPerWorker (2) slots to a node, though one node has room for all four: mpirun
    # reached the other one through fusesched's launcher
    assert sorted(done["nodes"]) == ["node-a", "node-b"]
    assert any(".remote." in task["task_id"] for task in done["tasks"])


VOLCANO_LAUNCHER = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: launched}
spec:
  schedulerName: fused-scheduler
  tasks:
    - name: launcher
      policies: [{event: TaskCompleted, action: CompleteJob}]
      template:
        spec:
          containers:
            - name: l
              command: [sh, -c, "sleep 1; echo launched"]
              resources: {requests: {cpu: 100m}}
    - name: server
      replicas: 2
      template:
        spec:
          containers:
            - {name: s, command: [sleep, "300"], resources: {requests: {cpu: 100m}}}
"""


def test_volcano_task_completed_completes_the_job(cluster: LocalCluster, tmp_path: Path) -> None:
    """``TaskCompleted → CompleteJob`` on the launcher: once it exits 0 the servers, which
    never exit, are stopped and the job completes (exit 0), well before its servers' 300 s."""
    job_id, done = run(cluster, tmp_path / "vc.yaml", VOLCANO_LAUNCHER, 60)
    assert (done["state"], done["exit_code"]) == ("Completed", 0), done
    assert done["reason"] == "task group launcher completed"
    ends = {task["task_id"]: task["exit_code"] for task in done["tasks"]}
    assert ends[f"{job_id}.launcher.0"] == 0
    assert all(ends[f"{job_id}.server.{i}"] != 0 for i in range(2))  # stopped
    assert done["end_time"] - done["start_time"] < 30


GOOD_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      schedulerName: fused-scheduler
      containers: [{name: web, command: [sleep, "60"], resources: {requests: {cpu: 100m}}}]
"""

MALFORMED = [
    (
        "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n"
        "      schedulerName: fused-scheduler\n      affinity: {nodeAffinity: "
        "{requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: "
        "[{matchExpressions: [{key: a, operator: [In]}]}]}}}\n"
        "      containers: [{name: c, command: [x], resources: {requests: {cpu: 1}}}]\n",
        "k.yaml:7: spec.template.spec.affinity.nodeAffinity.requiredDuringScheduling"
        "IgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]: operator ['In'] is "
        "not supported",
    ),
    (
        # a good Deployment, then a bad Volcano Job: neither is stored
        GOOD_DEPLOYMENT + "---\napiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nspec:\n"
        "  tasks: 3\n",
        "k.yaml:13: spec.tasks: must be a list, not a number",
    ),
    (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec:\n  pytorchReplicaSpecs:\n"
        "    Worker: {replicas: '2', template: {}}\n",
        "k.yaml:5: spec.pytorchReplicaSpecs.Worker.replicas: must be a whole number ≥ 1",
    ),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_kinds_are_refused_by_the_api_with_the_field(
    cluster: LocalCluster, text: str, message: str
) -> None:
    """``POST /v1/submissions`` (what ``fusesched submit`` sends) parses Kubernetes YAML on the
    controller: a malformed document is a 400 naming the file, line and field — not a 500 —
    and no job of the file is stored."""
    client = Client(cluster.url)
    with pytest.raises(ControllerError) as refused:
        client.submit_files([{"name": "k.yaml", "text": text}])
    assert refused.value.status == 400
    assert message in str(refused.value)
    assert client.jobs() == []
