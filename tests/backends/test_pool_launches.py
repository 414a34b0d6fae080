"""What external pools do with a job's torchrun world and its ``completes_job`` groups:
honoured where the cluster can (a Slurm pool's ``srun`` tasks get torchrun's ``PET_*``; a
Kubernetes pool's Volcano Job gets ``TaskCompleted → CompleteJob``), and where it cannot, the
router drops the pool with the reason (backends/routing.py), so the job runs elsewhere or is
refused at submission rather than run with the setting silently lost."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.backends.test_kubernetes import IMAGE, build, remote_job
from tests.backends.test_slurm import job as slurm_job

from fusesched.backends import kube_objects as ko
from fusesched.backends.federation_config import parse_federation
from fusesched.backends.routing import RouteError, route
from fusesched.backends.slurm_script import task_wrapper
from fusesched.submit import JobRequest

POOLS: dict[str, Any] = {
    "pools": [
        {"name": "hpc", "kind": "slurm"},
        {"name": "k8s", "kind": "kubernetes", "options": {"default_image": IMAGE}},
        {
            "name": "k8s-pg",
            "kind": "kubernetes",
            "options": {"default_image": IMAGE, "gang_mode": "podgroup"},
        },
    ],
    "default": ["hpc", "k8s", "k8s-pg", "local"],
}
TRAINER = {"name": "trainer", "resources": {"cpu": 1}, "argv": ["torchrun", "t.py"]}
SERVER = {"name": "ps", "resources": {"cpu": 1}, "argv": ["python", "ps.py"]}


def pools(*groups: dict[str, Any], **fields: Any) -> tuple[tuple[str, ...], dict[str, str]]:
    """The pools the default route keeps for a job of ``groups``, and why the others went."""
    request = JobRequest.model_validate({"groups": list(groups), **fields}).identified()
    config = parse_federation(POOLS, "fed.yaml")
    try:
        chosen = route(config, request, {})
    except RouteError as exc:
        return (), dict(exc.reasons)
    dropped = [line.split(" dropped: ") for line in chosen.explanation if " dropped: " in line]
    return chosen.pools, {name.removeprefix("pool "): why for name, why in dropped}


def test_a_torchrun_world_of_several_tasks_stays_off_kubernetes() -> None:
    kept, why = pools({**TRAINER, "replicas": 2})
    assert kept == ("hpc", "local")
    assert (
        why["k8s"]
        == why["k8s-pg"]
        == (
            "torchrun's rendezvous across 2 tasks (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, "
            "PET_MASTER_PORT) is set only in local and slurm pools"
        )
    )
    # one task (torchrun's own defaults suffice), or --standalone: any pool
    assert pools(TRAINER)[0] == ("hpc", "k8s", "k8s-pg", "local")
    standalone = {**TRAINER, "replicas": 2, "argv": ["torchrun", "--standalone", "t.py"]}
    assert pools(standalone)[0] == ("hpc", "k8s", "k8s-pg", "local")


def test_several_groups_stay_off_slurm() -> None:
    kept, why = pools(SERVER, {**SERVER, "name": "client"})
    assert kept == ("k8s", "k8s-pg", "local")
    assert why["hpc"] == (
        "jobs with several task groups (2) run only in local or kubernetes pools (they are "
        "not mapped onto Slurm's heterogeneous jobs)"
    )


def test_completes_job_needs_a_volcano_job() -> None:
    launcher = {**SERVER, "name": "launcher", "completes_job": True}
    kept, why = pools(launcher, SERVER)
    assert kept == ("k8s", "local")
    assert why["k8s-pg"] == (
        "group launcher completes the job (completes_job), which needs a Volcano Job's "
        "TaskCompleted → CompleteJob, and this pool's gang_mode is podgroup"
    )
    # (one group: its completion is the job's anyway)
    assert pools({**SERVER, "completes_job": True})[0] == ("hpc", "k8s", "k8s-pg", "local")


def test_a_job_no_pool_can_run_is_refused_with_the_reasons() -> None:
    kept, why = pools({**TRAINER, "replicas": 2}, pool="k8s")
    assert kept == () and "torchrun's rendezvous across 2 tasks" in why["k8s"]


def test_the_volcano_job_completes_by_its_completing_group() -> None:
    groups = [
        {"name": "launcher", "argv": ["run"], "image": IMAGE, "completes_job": True},
        {"name": "server", "replicas": 2, "argv": ["serve"], "image": IMAGE},
    ]
    manifest = build(remote_job(groups, type="batch"))
    assert manifest.kind is ko.Kind.VCJOB and manifest.custom is not None
    ko.check_custom(manifest.custom)
    launcher, server = manifest.custom["spec"]["tasks"]
    assert launcher["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in server
    broken = {**launcher, "policies": [{"event": "TaskCompleted", "action": "Explode"}]}
    spec = {**manifest.custom["spec"], "tasks": [broken, server]}
    with pytest.raises(ko.BackendRejected, match=r"policies\[\]\.action is invalid"):
        ko.check_custom({**manifest.custom, "spec": spec})


SLURM_TASK = {
    "SLURM_NTASKS": "3",
    "SLURM_PROCID": "2",
    "SLURM_LOCALID": "0",
    "MASTER_ADDR": "h0",
    "MASTER_PORT": "29555",
    "PATH": os.environ["PATH"],
}


def wrapped_env(tmp_path: Path, script: str, **env: str) -> dict[str, str]:
    """What a task started through the wrapper ``script`` sees (as srun starts it)."""
    path = tmp_path / "task.sh"
    path.write_text(script)
    done = subprocess.run(
        ["bash", str(path), "env"],
        capture_output=True,
        text=True,
        check=True,
        env={**SLURM_TASK, **env},
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_slurm_tasks_of_a_torchrun_group_get_pet(tmp_path: Path) -> None:
    """The wrapper gives each srun task torchrun's defaults from Slurm's variables, keeps what
    the job's env gives, and counts processes in WORLD_SIZE for a whole nprocPerNode."""
    script = task_wrapper(slurm_job(tasks={"n1": 3}, group={"argv": ["torchrun", "t.py"]}))
    seen = wrapped_env(tmp_path, script, PET_NPROC_PER_NODE="2")
    pet = {k: v for k, v in seen.items() if k.startswith("PET_")}
    assert pet == {
        "PET_NNODES": "3",
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": "h0",
        "PET_MASTER_PORT": "29555",
        "PET_NPROC_PER_NODE": "2",
    }
    assert (seen["RANK"], seen["WORLD_SIZE"]) == ("2", "6")
    own = wrapped_env(tmp_path, script, PET_MASTER_PORT="1234", PET_NPROC_PER_NODE="auto")
    assert (own["PET_MASTER_PORT"], own["WORLD_SIZE"]) == ("1234", "3")
    plain = task_wrapper(slurm_job(tasks={"n1": 3}))  # (echo hi: no torchrun)
    assert not [k for k in wrapped_env(tmp_path, plain) if k.startswith("PET_")]
