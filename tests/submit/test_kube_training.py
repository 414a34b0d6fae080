"""Kubeflow PyTorchJob and MPIJob YAML (submit/kube_training.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusesched.controller.launchenv import task_env, task_slots
from fusesched.model.events import GroupPlacement, StartJob
from fusesched.model.job import JobType
from fusesched.submit import SubmitError, parse_kube_yaml, parse_request, parse_submission
from fusesched.submit.request import JobRequest
from fusesched.submit.task_group import Launcher, RetryExits

PYTORCH = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: mnist
  namespace: team-a
spec:
  runPolicy:
    activeDeadlineSeconds: 600
    backoffLimit: 2
    cleanPodPolicy: None
    schedulingPolicy: {queue: gpu, minAvailable: 3}
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          schedulerName: fused-scheduler
          containers:
            - name: pytorch
              image: /images/pytorch.tar
              command: [python, train.py]
              args: [--epochs, 3]
              resources: {limits: {cpu: "4", memory: 8Gi, nvidia.com/gpu: 1}}
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          schedulerName: fused-scheduler
          nodeSelector: {fusesched.io/gpu-model: H200}
          containers:
            - name: pytorch
              image: /images/pytorch.tar
              command: [python, train.py]
              env: [{name: NCCL_DEBUG, value: INFO}]
              resources: {limits: {cpu: "4", memory: 8Gi, nvidia.com/gpu: 1}}
"""

#: A preferred node affinity term on label ``{key}`` (indented for a pod spec).
PREFER = """\
          affinity:
            nodeAffinity:
              preferredDuringSchedulingIgnoredDuringExecution:
                - weight: 5
                  preference:
                    matchExpressions: [{{key: {key}, operator: Exists}}]
"""

MPI = """\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi}
spec:
  slotsPerWorker: 2
  runPolicy: {cleanPodPolicy: Running, suspend: true}
  sshAuthMountPath: /home/mpiuser/.ssh
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          schedulerName: fused-scheduler
          containers:
            - name: launcher
              command: [mpirun, -np, "4", /home/pi]
              env: [{name: A, value: launcher}]
              resources: {limits: {cpu: 100m, memory: 64Mi}}
    Worker:
      replicas: 2
      template:
        spec:
          schedulerName: fused-scheduler
          nodeSelector: {fusesched.io/pool: cpu}
          containers:
            - name: worker
              command: [/usr/sbin/sshd, -De]
              env: [{name: A, value: worker}, {name: OMP_NUM_THREADS, value: "1"}]
              resources: {limits: {cpu: "3", memory: 1Gi, fpga: 2}}
"""


def test_pytorchjob_is_one_gang_master_first() -> None:
    (parsed,) = parse_kube_yaml(PYTORCH, "pt.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    assert (req.name, req.tenant, req.queue, req.type) == ("mnist", "team-a", "gpu", "ai-train")
    assert (req.walltime_s, req.min_member) == (600, 3)
    assert req.restart.max_restarts == 2 and req.restart.retry_application_failures
    master, worker = req.groups
    assert (master.name, master.replicas, worker.name, worker.replicas) == (
        "master",
        1,
        "worker",
        2,
    )
    assert worker.argv == ["python", "train.py", "--epochs", "3"]
    assert master.env == {
        "NCCL_DEBUG": "INFO",
        "PYTHONUNBUFFERED": "1",
        "PET_NPROC_PER_NODE": "auto",  # the training operator's default
    }
    assert master.launcher is worker.launcher is Launcher.TORCHRUN
    assert worker.resources == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    # the Master's node selection is its own group's; the Worker's pods go anywhere
    assert req.placement.node_selector == {}
    assert master.placement is not None and worker.placement is None
    assert master.placement.node_selector == {"fusesched.io/gpu-model": "H200"}
    assert req.identified().type is JobType.AI_TRAIN


def test_pytorchjob_ranks_master_addr_and_world_size() -> None:
    """The Master's task is rank 0 and MASTER_ADDR is its node; workers are 1..n."""
    (parsed,) = parse_kube_yaml(PYTORCH)
    spec = parsed.request.to_job_spec("9", 0.0)
    names = np.array(["n0", "n1"], dtype=object)
    groups = tuple(
        GroupPlacement(g.name, g.resources, rows, counts, names)
        for g, rows, counts in zip(
            spec.task_groups,
            (np.array([1]), np.array([0, 1])),
            (np.array([1]), np.array([1, 1])),
            strict=True,
        )
    )
    slots = task_slots(StartJob("9", groups))
    env = [
        task_env(
            job_id="9",
            job_name="mnist",
            slot=s,
            slots=slots,
            addresses={"n0": "10.0.0.1", "n1": "10.0.0.2"},
            seq=9,
            controller_url="http://c",
            array_index=None,
            batch=False,
        )
        for s in slots
    ]
    assert [(s.group, e["RANK"]) for s, e in zip(slots, env, strict=True)] == [
        ("master", "0"),
        ("worker", "1"),
        ("worker", "2"),
    ]
    assert {e["MASTER_ADDR"] for e in env} == {"10.0.0.2"}  # the Master's node
    assert {e["WORLD_SIZE"] for e in env} == {"3"}


@pytest.mark.parametrize(
    ("given", "nproc", "extra"),
    [
        ("  nprocPerNode: '4'\n", "4", {}),
        ("  nprocPerNode: 4\n", "4", {}),
        ("  nprocPerNode: gpu\n", "gpu", {}),
        (
            "  elasticPolicy: {nProcPerNode: 2, minReplicas: 2, maxReplicas: 2, maxRestarts: 1}\n",
            "2",
            {"PET_MAX_RESTARTS": "1"},
        ),
    ],
)
def test_pytorchjob_nproc_per_node(given: str, nproc: str, extra: dict[str, str]) -> None:
    """``nprocPerNode`` (or a fixed-size ``elasticPolicy``'s ``nProcPerNode``) is every task's
    ``PET_NPROC_PER_NODE``, as the training operator sets it."""
    (parsed,) = parse_kube_yaml(PYTORCH.replace("  runPolicy:\n", given + "  runPolicy:\n"))
    for group in parsed.request.groups:
        assert group.env["PET_NPROC_PER_NODE"] == nproc
        assert {k: v for k, v in group.env.items() if k == "PET_MAX_RESTARTS"} == extra


def test_worker_only_pytorchjob_and_the_pytorch_container() -> None:
    text = (
        PYTORCH.split("    Master:")[0]
        .replace(", minAvailable: 3", "")
        .replace(
            "            - name: pytorch\n",
            "            - name: sidecar\n              command: [sleep, inf]\n"
            "              resources: {requests: {cpu: 100m}}\n            - name: pytorch\n",
        )
    )
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    (group,) = parsed.request.groups
    assert group.name == "worker" and group.argv[0] == "python"
    assert group.resources["cpu"] == "4100m"
    assert parsed.warnings == (
        "pt.yaml:20: container 'sidecar' is not started: fusesched runs one program per task "
        "(its resources are counted)",
    )


def test_pytorchjob_port_warns_that_master_port_is_fusescheds() -> None:
    text = PYTORCH.replace(
        "              env: [{name: NCCL_DEBUG, value: INFO}]\n",
        "              ports: [{name: pytorchjob-port, containerPort: 23456}]\n",
    )
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    warning = parsed.warnings[0]
    assert warning.startswith(
        "pt.yaml:36: spec.pytorchReplicaSpecs.Master.template.spec.containers[0].ports[0]: "
        "pytorchjob-port is not the job's MASTER_PORT"
    )
    assert parsed.request.type is JobType.AI_TRAIN  # (ports would otherwise say a server)


def test_annotation_type_and_restart_never() -> None:
    text = PYTORCH.replace("restartPolicy: OnFailure", "restartPolicy: Never").replace(
        "  namespace: team-a\n", "  namespace: team-a\n  annotations: {fusesched.io/type: batch}\n"
    )
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.type is JobType.BATCH
    assert not parsed.request.restart.retry_application_failures


ALWAYS = "restartPolicy: Always"
RESTART_ALWAYS: list[tuple[str, str, bool]] = [
    # on the Master: its exit 0 restarts the job, as the operator's pod is restarted
    (
        "master",
        PYTORCH.replace("restartPolicy: OnFailure", ALWAYS).replace(
            ALWAYS, "restartPolicy: OnFailure", 1
        ),
        True,
    ),
    # on the Workers only: the Master's success still ends the job
    ("workers", PYTORCH.replace("restartPolicy: OnFailure", ALWAYS, 1), False),
    # no Master: the Workers' success ends the job
    (
        "worker-only",
        PYTORCH.split("    Master:")[0]
        .replace("restartPolicy: OnFailure", ALWAYS)
        .replace(", minAvailable: 3", ""),
        True,
    ),
    # an MPIJob's Launcher (mpirun) ends it
    (
        "mpi-launcher",
        MPI.replace("    Launcher:\n", f"    Launcher:\n      {ALWAYS}\n"),
        True,
    ),
]


@pytest.mark.parametrize(
    ("text", "always"), [(t, a) for _, t, a in RESTART_ALWAYS], ids=[c for c, *_ in RESTART_ALWAYS]
)
def test_restart_policy_always_restarts_after_every_exit(text: str, always: bool) -> None:
    (parsed,) = parse_kube_yaml(text, "job.yaml")
    restart = parsed.request.restart
    assert restart.always is always and restart.retry_application_failures
    said = [w for w in parsed.warnings if "Always restarts the whole job" in w]
    assert len(said) == always


def test_mpijob_slots_are_the_workers_and_mpirun_starts_them() -> None:
    (parsed,) = parse_submission(MPI, source="mpi.yaml")
    req = parsed.request
    assert parsed.warnings == ()
    (group,) = req.groups
    assert (group.name, group.replicas, group.launcher) == ("worker", 4, Launcher.MPI)
    # a worker's 3 cpu, 1Gi and 2 fpga shared by its 2 slots (cpu rounded up)
    assert group.resources == {"cpu": "1500m", "memory": "512Mi", "fpga": "1"}
    assert group.argv == ["mpirun", "-np", "4", "/home/pi"]
    assert group.env == {"A": "launcher", "OMP_NUM_THREADS": "1"}  # the launcher's win
    assert req.placement.node_selector == {"fusesched.io/pool": "cpu"}
    assert req.placement.max_tasks_per_node == 2  # a worker's slots: a host of the hostfile
    assert req.hold
    assert req.identified().type is JobType.HPC


def test_mpijob_launcher_needs_no_resources() -> None:
    text = MPI.replace("              resources: {limits: {cpu: 100m, memory: 64Mi}}\n", "")
    (parsed,) = parse_kube_yaml(text)
    assert parsed.request.groups[0].resources == {"cpu": "1500m", "memory": "512Mi", "fpga": "1"}


def test_mpijob_default_slot_and_launcher_image() -> None:
    text = MPI.replace("  slotsPerWorker: 2\n", "").replace(
        "            - name: worker\n",
        "            - name: worker\n              image: /img.tar\n",
    )
    (parsed,) = parse_kube_yaml(text.replace('"4"', '"2"'))
    (group,) = parsed.request.groups
    assert group.replicas == 2 and group.image == "/img.tar"
    assert group.resources == {"cpu": "3", "memory": "1Gi", "fpga": "2"}


BAD: list[tuple[str, str, str]] = [
    (
        "elastic",
        PYTORCH.replace("  runPolicy:\n", "  elasticPolicy: {minReplicas: 1}\n  runPolicy:\n"),
        "pt.yaml:7: spec.elasticPolicy.minReplicas: elastic training (a changing number of "
        "replicas) is not supported: fusesched starts a fixed gang; give minReplicas equal to "
        "the Worker's replicas (2)",
    ),
    (
        "elastic rendezvous",
        PYTORCH.replace("  runPolicy:\n", "  elasticPolicy: {rdzvBackend: etcd}\n  runPolicy:\n"),
        "pt.yaml:7: spec.elasticPolicy.rdzvBackend: elasticPolicy.rdzvBackend is not supported: "
        "fusesched starts a fixed gang with torchrun's static rendezvous",
    ),
    (
        "nprocPerNode",
        PYTORCH.replace("  runPolicy:\n", "  nprocPerNode: many\n  runPolicy:\n"),
        "pt.yaml:7: spec.nprocPerNode: must be a whole number ≥ 1 or one of auto, cpu, gpu, xpu, "
        "not 'many'",
    ),
    (
        "nprocPerNode twice",
        PYTORCH.replace(
            "  runPolicy:\n",
            "  nprocPerNode: '2'\n  elasticPolicy: {nProcPerNode: 2}\n  runPolicy:\n",
        ),
        "pt.yaml:8: spec.elasticPolicy.nProcPerNode: give nprocPerNode or "
        "elasticPolicy.nProcPerNode, not both",
    ),
    (
        "replica type",
        PYTORCH.replace("    Master:", "    Chief:"),
        "pt.yaml:25: spec.pytorchReplicaSpecs.Chief: unknown replica type 'Chief' (known: "
        "Master, Worker)",
    ),
    (
        "replica type typo",
        PYTORCH.replace("    Master:", "    Mastr:"),
        "did you mean 'Master'?",
    ),
    (
        "two masters",
        PYTORCH.replace("replicas: 1", "replicas: 2"),
        "pt.yaml:26: spec.pytorchReplicaSpecs.Master.replicas: a Master has exactly 1 replica",
    ),
    (
        "no replica specs",
        PYTORCH.split("  pytorchReplicaSpecs:")[0],
        "pt.yaml:6: spec: pytorchReplicaSpecs is required",
    ),
    (
        "replica field typo",
        PYTORCH.replace("      restartPolicy: OnFailure\n", "      restartPolcy: OnFailure\n", 1),
        "spec.pytorchReplicaSpecs.Worker.restartPolcy: unknown field 'restartPolcy'; did you mean "
        "'restartPolicy'?",
    ),
    (
        "restart policy",
        PYTORCH.replace("restartPolicy: OnFailure", "restartPolicy: Sometimes", 1),
        "spec.pytorchReplicaSpecs.Worker.restartPolicy: must be one of Always, OnFailure, Never, "
        "ExitCode, not 'Sometimes'",
    ),
    (
        "run policy typo",
        PYTORCH.replace("backoffLimit: 2", "backofLimit: 2"),
        "spec.runPolicy.backofLimit: unknown field 'backofLimit'; did you mean 'backoffLimit'?",
    ),
    (
        "backoff limit",
        PYTORCH.replace("backoffLimit: 2", "backoffLimit: -1"),
        "pt.yaml:9: spec.runPolicy.backoffLimit: must be a whole number ≥ 0",
    ),
    (
        "min available",
        PYTORCH.replace("minAvailable: 3", "minAvailable: 4"),
        "pt.yaml:11: spec.runPolicy.schedulingPolicy.minAvailable: 4 is more than the job's 3 "
        "tasks",
    ),
    (
        "different preferences",
        PYTORCH.replace(
            "          schedulerName: fused-scheduler\n          containers:",
            "          schedulerName: fused-scheduler\n"
            + PREFER.format(key="a")
            + "          containers:",
            1,
        ).replace(
            "          nodeSelector: {fusesched.io/gpu-model: H200}\n",
            PREFER.format(key="b"),
        ),
        "spec.pytorchReplicaSpecs.Worker.template.spec: its preferred node affinity differs "
        "from that of spec.pytorchReplicaSpecs.Master.template.spec",
    ),
    (
        "scheduler",
        PYTORCH.replace("fused-scheduler", "volcano", 1),
        "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName: must be 'fused-scheduler'",
    ),
    (
        "no template",
        PYTORCH.split("      template:")[0],
        "spec.pytorchReplicaSpecs.Worker: a replica spec needs template",
    ),
    (
        "worker command",
        PYTORCH.replace("              command: [python, train.py]\n", "", 1),
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].args: command is required",
    ),
    ("no spec", "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n", "a PyTorchJob needs a spec"),
    (
        "mpi version",
        MPI.replace("kubeflow.org/v2beta1", "kubeflow.org/v1"),
        "a MPIJob needs apiVersion 'kubeflow.org/v2beta1', not 'kubeflow.org/v1'",
    ),
    (
        "mpi implementation",
        MPI.replace("  slotsPerWorker: 2\n", "  slotsPerWorker: 2\n  mpiImplementation: Intel\n"),
        "spec.mpiImplementation: 'Intel' is not supported: fusesched runs MPI jobs with OpenMPI",
    ),
    (
        "no launcher",
        MPI.replace("    Launcher:", "    Launchr:"),
        "unknown replica type 'Launchr' (known: Launcher, Worker); did you mean 'Launcher'?",
    ),
    (
        "no worker",
        MPI.split("    Worker:")[0],
        "mpi.yaml:8: spec.mpiReplicaSpecs: a Worker replica spec is required",
    ),
    (
        "uneven share",
        MPI.replace("fpga: 2", "fpga: 1"),
        "spec.mpiReplicaSpecs.Worker.template.spec.containers: fpga: a worker's 1 cannot be "
        "shared evenly by slotsPerWorker (2) slots",
    ),
    (
        "too many processes",
        MPI.replace('"4"', '"5"'),
        "mpi.yaml:16: spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].command: "
        "mpirun -np 5 asks for more processes than the job's 4 slots",
    ),
    (
        "kubeflow hostfile",
        MPI.replace("-np,", "--hostfile, /etc/mpi/hostfile,"),
        "/etc/mpi/hostfile does not exist under fusesched: leave --hostfile out",
    ),
    (
        "two images",
        MPI.replace("name: launcher\n", "name: launcher\n              image: /a.tar\n").replace(
            "name: worker\n", "name: worker\n              image: /b.tar\n"
        ),
        "the Launcher's image '/a.tar' differs from the Worker's '/b.tar'",
    ),
    (
        "two launchers",
        MPI.replace("      replicas: 1\n", "      replicas: 2\n"),
        "spec.mpiReplicaSpecs.Launcher.replicas: a Launcher has exactly 1 replica",
    ),
    (
        "slots",
        MPI.replace("slotsPerWorker: 2", "slotsPerWorker: 0"),
        "mpi.yaml:5: spec.slotsPerWorker: must be a whole number ≥ 1",
    ),
    ("launcher command", MPI.replace("command: [mpirun", "args: [mpirun"), "command is required"),
    (
        "mpi field typo",
        MPI.replace("slotsPerWorker", "slotPerWorker"),
        "did you mean 'slotsPerWorker'",
    ),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in BAD], ids=[c for c, *_ in BAD])
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    source = "mpi.yaml" if "MPIJob" in text else "pt.yaml"
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(text, source)
    assert message in str(caught.value)


def test_warnings_for_what_is_ignored() -> None:
    text = MPI.replace(
        "  slotsPerWorker: 2\n", "  slotsPerWorker: 2\n  runLauncherAsWorker: true\n"
    )
    text = text.replace(
        "          schedulerName: fused-scheduler\n          containers:\n"
        "            - name: launcher",
        "          schedulerName: fused-scheduler\n          nodeSelector: {x: y}\n"
        "          containers:\n            - name: launcher",
    )
    (parsed,) = parse_kube_yaml(text, "mpi.yaml")
    assert parsed.warnings == (
        "mpi.yaml:6: spec.runLauncherAsWorker is not supported; ignored",
        "mpi.yaml:13: the Launcher's node selection is ignored: mpirun runs on the first node of "
        "the Worker's slots",
    )
    text = PYTORCH.replace("restartPolicy: OnFailure", "restartPolicy: ExitCode", 1).replace(
        "    schedulingPolicy: {queue: gpu, minAvailable: 3}\n",
        "    schedulingPolicy: {queue: gpu, priorityClass: high}\n",
    )
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    assert parsed.warnings == (
        "pt.yaml:11: spec.runPolicy.schedulingPolicy.priorityClass is not supported; ignored",
    )


def test_pytorchjob_replica_types_in_any_case() -> None:
    """The training operator reads ``master``/``worker`` as Master/Worker: so does fusesched."""
    text = PYTORCH.replace("    Worker:", "    worker:").replace("    Master:", "    MASTER:")
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    master, worker = parsed.request.groups
    assert (master.name, master.replicas, worker.name, worker.replicas) == (
        "master",
        1,
        "worker",
        2,
    )
    twice = PYTORCH.replace("    Master:", "    worker:")
    with pytest.raises(SubmitError) as caught:
        parse_kube_yaml(twice, "pt.yaml")
    assert "pt.yaml:25: spec.pytorchReplicaSpecs.worker: 'Worker' and 'worker' are both the " in (
        str(caught.value)
    )
    with pytest.raises(SubmitError, match="unknown replica type 'launcher'"):
        parse_kube_yaml(MPI.replace("    Launcher:", "    launcher:"))  # (MPIJob's: exact)


def test_restart_policies_default_as_the_operators() -> None:
    """Without restartPolicy a PyTorchJob's replicas and an MPIJob's Launcher are OnFailure
    (the operators' defaults): a failing exit restarts the job; an MPIJob's Worker is Never."""
    (parsed,) = parse_kube_yaml(PYTORCH.replace("      restartPolicy: OnFailure\n", ""))
    assert parsed.request.restart.retry_application_failures
    (parsed,) = parse_kube_yaml(MPI)
    assert parsed.request.restart.retry_application_failures
    never = MPI.replace(
        "    Launcher:\n      replicas: 1\n",
        "    Launcher:\n      replicas: 1\n      restartPolicy: Never\n",
    )
    (parsed,) = parse_kube_yaml(never)
    assert not parsed.request.restart.retry_application_failures


def test_restart_policy_exit_code_retries_only_exits_by_a_signal() -> None:
    """``ExitCode`` (no warning now): that replica type's group retries only exits 128-255
    (killed by a signal), as the operator does; 1-127 fail the job. ``OnFailure`` beside it
    keeps retrying any failing exit; an MPIJob's one group follows its Launcher."""
    text = PYTORCH.replace("restartPolicy: OnFailure", "restartPolicy: ExitCode", 1)
    (parsed,) = parse_kube_yaml(text, "pt.yaml")
    assert not [w for w in parsed.warnings if "ExitCode" in w]
    master, worker = parsed.request.groups
    assert parsed.request.restart.retry_application_failures
    assert (master.retry_exits, worker.retry_exits) == (RetryExits.ALL, RetryExits.SIGNALS)
    stored = json.loads(parsed.request.to_json())
    assert [g.get("retry_exits") for g in stored["groups"]] == [None, "signals"]  # (all: left out)
    assert JobRequest.from_json(parsed.request.to_json()) == parsed.request
    mpi = MPI.replace(
        "    Launcher:\n      replicas: 1\n",
        "    Launcher:\n      replicas: 1\n      restartPolicy: ExitCode\n",
    )
    (parsed,) = parse_kube_yaml(mpi)
    assert parsed.request.groups[0].retry_exits is RetryExits.SIGNALS


def test_retry_exits_signals_tells_signal_exits_from_errors() -> None:
    codes = (1, 2, 126, 127, 128, 137, 143, 255, -9, -15)
    assert [c for c in codes if RetryExits.SIGNALS.retries(c)] == [128, 137, 143, 255, -9, -15]
    assert all(RetryExits.ALL.retries(code) for code in (1, 127, 137, -9))


def test_retry_exits_without_retried_failures_is_refused() -> None:
    group = {"resources": {"cpu": 1}, "argv": ["x"], "retry_exits": "signals"}
    with pytest.raises(SubmitError, match=r"retry_application_failures \(false\) restarts none"):
        parse_request({"groups": [group]})
    parse_request({"groups": [group], "restart": {"retry_application_failures": True}})


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("backoffLimit: 2", "backoffLimit: true", "spec.runPolicy.backoffLimit: must be a whole"),
        ("backoffLimit: 2", 'backoffLimit: "2"', "spec.runPolicy.backoffLimit: must be a whole"),
        (
            "minAvailable: 3",
            "minAvailable: true",
            "spec.runPolicy.schedulingPolicy.minAvailable: must be a whole number ≥ 1",
        ),
        (
            "minAvailable: 3",
            'minAvailable: "3"',
            "spec.runPolicy.schedulingPolicy.minAvailable: must be a whole number ≥ 1",
        ),
    ],
)
def test_run_policy_numbers_are_whole_numbers(old: str, new: str, message: str) -> None:
    """Kubernetes' int32 fields: true or "3" is refused, not read as 1 or 3."""
    with pytest.raises(SubmitError, match=message):
        parse_kube_yaml(PYTORCH.replace(old, new))
