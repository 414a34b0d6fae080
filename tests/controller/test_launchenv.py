"""Ranks, rendezvous variables and hostfiles computed from a StartJob decision."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusesched.api.wire import DeviceInfo, NodeInventory
from fusesched.controller.launchenv import (
    SlurmJob,
    TaskSlot,
    hostfile,
    master_port,
    node_held_env,
    shared_host_env,
    slurm_env,
    task_env,
    task_slots,
    tasks_per_node,
)
from fusesched.controller.pools import NodePool
from fusesched.model.events import GroupPlacement, StartJob
from fusesched.model.resources import MEMORY, Resources


def decision() -> StartJob:
    names = np.array(["n0", "n1", "n2"], dtype=object)
    worker = GroupPlacement(
        "worker",
        Resources.parse({"cpu": "1"}),
        np.array([2, 0]),
        np.array([2, 1]),
        names,
    )
    ps = GroupPlacement("ps", Resources.parse({"cpu": "1"}), np.array([0]), np.array([1]), names)
    return StartJob("7", (worker, ps))


def test_ranks_follow_groups_then_placement_order() -> None:
    slots = task_slots(decision())
    assert [(s.task_id, s.node, s.rank) for s in slots] == [
        ("7.worker.0", "n2", 0),
        ("7.worker.1", "n2", 1),
        ("7.worker.2", "n0", 2),
        ("7.ps.0", "n0", 3),
    ]
    assert [(s.node_rank, s.local_rank, s.local_size) for s in slots] == [
        (0, 0, 2),
        (0, 1, 2),
        (1, 0, 2),
        (1, 1, 2),
    ]
    assert hostfile(slots) == "n2 slots=2\nn0 slots=2\n"


def test_every_task_gets_the_rendezvous_of_the_first_node() -> None:
    slots = task_slots(decision())
    addresses = {"n0": "10.0.0.1", "n2": "10.0.0.3"}
    env = [
        task_env(
            job_id="7",
            job_name="train",
            slot=s,
            slots=slots,
            addresses=addresses,
            seq=7,
            controller_url="http://c",
            array_index=None,
            batch=False,
        )
        for s in slots
    ]
    assert {e["MASTER_ADDR"] for e in env} == {"10.0.0.3"}
    assert {e["MASTER_PORT"] for e in env} == {str(master_port(7))}
    assert [e["RANK"] for e in env] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in env} == {"4"}
    assert [e["NODE_RANK"] for e in env] == ["0", "0", "1", "1"]
    assert env[0]["FUSESCHED_NODELIST"] == "n2,n0"
    assert "OMPI_MCA_plm_rsh_agent" not in env[0]
    assert "SLURM_ARRAY_TASK_ID" not in env[0]


def test_batch_jobs_send_mpirun_through_the_fusesched_launcher() -> None:
    slots = task_slots(decision())
    env = task_env(
        job_id="7",
        job_name="mpi",
        slot=slots[0],
        slots=slots,
        addresses={},
        seq=7,
        controller_url="http://c",
        array_index=3,
        batch=True,
    )
    assert env["OMPI_MCA_plm_rsh_agent"].endswith("-m fusesched.agent.remote")
    assert env["OMPI_MCA_orte_default_hostfile"] == "{task_dir}/fusesched.hostfile"
    assert env["SLURM_ARRAY_TASK_ID"] == "3"


def test_node_pools_hand_out_distinct_cpus_and_devices_and_take_them_back() -> None:
    inventory = NodeInventory(
        name="g",
        resources={"cpu": "4", "nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "1"},
        cpu_ids=[0, 1, 2, 3],
        devices=[
            DeviceInfo(index=0, uuid="GPU-0"),
            DeviceInfo(index=1, uuid="GPU-1"),
            DeviceInfo(kind="nvidia.com/mig-1g.10gb", index=2, uuid="MIG-x", mig_profile="1g.10gb"),
        ],
    )
    pool = NodePool.of(inventory)
    a = pool.take(Resources.parse({"cpu": "1500m", "nvidia.com/gpu": "1"}))
    b = pool.take(Resources.parse({"cpu": "1", "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": 1}))
    assert a.cpu_ids == (0, 1) and a.gpu_indices == (0,)
    assert b.cpu_ids == (2,) and b.gpu_indices == (1,) and b.gpu_uuids == ("MIG-x",)
    unpinned = pool.take(Resources.parse({"cpu": "2"}))  # only one id left: not pinned
    assert unpinned.cpu_ids == ()
    pool.give(a, inventory)
    again = pool.take(Resources.parse({"cpu": "2", "nvidia.com/gpu": "1"}))
    assert again.cpu_ids == (0, 1) and again.gpu_indices == (0,)


SLURM_JOB = SlurmJob(
    job_id="7_3",
    name="sweep",
    user="alice",
    queue="gpu",
    account="physics",
    qos="silver",
    cpus_per_task=4,
    restarts=1,
    array_parent="7",
    array=(1, 9, 2, 5),
    array_index=3,
)


def test_slurm_jobs_tasks_get_slurms_variables() -> None:
    """Per-task jobs (fusesched run): each task its own ranks, as srun's tasks."""
    slots = task_slots(decision())
    env = [slurm_env(SLURM_JOB, s, slots, batch=False) for s in slots]
    assert [e["SLURM_PROCID"] for e in env] == ["0", "1", "2", "3"]
    assert [e["SLURM_LOCALID"] for e in env] == ["0", "1", "0", "1"]
    assert [e["SLURM_NODEID"] for e in env] == ["0", "0", "1", "1"]
    assert [e["SLURMD_NODENAME"] for e in env] == ["n2", "n2", "n0", "n0"]
    first = env[0]
    assert (first["SLURM_JOB_ID"], first["SLURM_JOBID"], first["SLURM_JOB_NAME"]) == (
        "7_3",
        "7_3",
        "sweep",
    )
    assert (first["SLURM_NTASKS"], first["SLURM_JOB_NUM_NODES"]) == ("4", "2")
    assert (first["SLURM_JOB_NODELIST"], first["SLURM_TASKS_PER_NODE"]) == (
        "n[2,0]",
        "2(x2)",
    )  # (its order: rank 0 first)
    assert (first["SLURM_CPUS_PER_TASK"], first["SLURM_RESTART_COUNT"]) == ("4", "1")
    assert (first["SLURM_JOB_PARTITION"], first["SLURM_JOB_ACCOUNT"]) == ("gpu", "physics")
    assert (first["SLURM_ARRAY_JOB_ID"], first["SLURM_ARRAY_TASK_ID"]) == ("7", "3")
    assert (first["SLURM_ARRAY_TASK_MIN"], first["SLURM_ARRAY_TASK_MAX"]) == ("1", "9")
    assert (first["SLURM_ARRAY_TASK_STEP"], first["SLURM_ARRAY_TASK_COUNT"]) == ("2", "5")
    # mpirun would take srun as its launcher and Slurm's allocation from these: kept off
    assert (first["OMPI_MCA_plm"], first["OMPI_MCA_ras"]) == ("rsh", "^slurm")


def test_a_slurm_batch_script_gets_the_batch_steps_ranks() -> None:
    slots = task_slots(decision())
    plain = SlurmJob("8", "job", "bob", "default", "default", "silver", None, 0)
    env = slurm_env(plain, slots[0], slots, batch=True)
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"]) == ("0", "0", "0")
    assert "SLURM_CPUS_PER_TASK" not in env and "SLURM_ARRAY_JOB_ID" not in env


def test_slurm_variables_say_what_the_job_holds_on_each_node() -> None:
    """SLURM_CPUS_ON_NODE & co. sum the tasks of every group on the node (fractions of a
    CPU rounded up); the start and end times come from the start and the time limit."""
    slots = task_slots(decision())  # n2: 2 workers; n0: 1 worker + the ps
    worker = Resources.parse({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"})
    ps = Resources.parse({"cpu": "500m", "memory": "1Gi"})
    job = SlurmJob(
        "9", "j", "bob", "default", "default", "silver", None, 0,
        per_task={"worker": worker, "ps": ps},
        start_time=1_700_000_000.7,
        walltime_s=3600,
    )  # fmt: skip
    env = [slurm_env(job, s, slots, batch=False) for s in slots]
    assert [e["SLURM_CPUS_ON_NODE"] for e in env] == ["8", "8", "5", "5"]
    assert {e["SLURM_JOB_CPUS_PER_NODE"] for e in env} == {"8,5"}
    assert [e["SLURM_MEM_PER_NODE"] for e in env] == ["16384", "16384", "9216", "9216"]
    assert [e["SLURM_GPUS_ON_NODE"] for e in env] == ["2", "2", "1", "1"]
    assert (env[0]["SLURM_JOB_START_TIME"], env[0]["SLURM_JOB_END_TIME"]) == (
        "1700000000",
        "1700003600",
    )
    batch = slurm_env(job, slots[0], slots, batch=True)  # the script: the first node's
    assert (batch["SLURM_CPUS_ON_NODE"], batch["SLURM_GPUS_ON_NODE"]) == ("8", "2")
    bare = SlurmJob("8", "job", "bob", "default", "default", "silver", None, 0)
    plain = slurm_env(bare, slots[0], slots, batch=True)  # nothing known: nothing said
    assert not {"SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE", "SLURM_JOB_END_TIME"} & set(plain)


def test_slurm_variables_say_how_the_job_was_submitted() -> None:
    """``SLURM_SUBMIT_HOST``, ``SLURM_JOB_RESERVATION``, the options' variables and each
    node's ``SLURM_JOB_GPUS`` (a batch script: the first node's); given ``--mem-per-cpu``
    (``SLURM_MEM_PER_CPU`` told), no ``SLURM_MEM_PER_NODE``, as Slurm's."""
    slots = task_slots(decision())  # n2: 2 workers; n0: 1 worker + the ps
    memory = Resources.parse({"cpu": "1", "memory": "1Gi"})
    told = {"SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_DEPENDENCY": "afterok:3"}
    job = SlurmJob(
        "9", "j", "bob", "default", "default", "silver", 1, 0,
        per_task={"worker": memory, "ps": memory},
        submit_host="login-1", reservation="maint", told=told,
        gpus={"n2": (0, 3), "n0": (1,)},
    )  # fmt: skip
    env = [slurm_env(job, s, slots, batch=False) for s in slots]
    assert [e["SLURM_JOB_GPUS"] for e in env] == ["0,3", "0,3", "1", "1"]
    for e in env:
        assert (e["SLURM_SUBMIT_HOST"], e["SLURM_JOB_RESERVATION"]) == ("login-1", "maint")
        assert {k: e[k] for k in told} == told and e["SLURM_MEM_PER_NODE"] == "2048"
    per_cpu = replace(job, told={"SLURM_MEM_PER_CPU": "1024"}, gpus={})
    batch = slurm_env(per_cpu, slots[0], slots, batch=True)
    assert batch["SLURM_MEM_PER_CPU"] == "1024" and "SLURM_MEM_PER_NODE" not in batch
    assert "SLURM_JOB_GPUS" not in batch
    bare = SlurmJob("8", "job", "bob", "default", "default", "silver", None, 0)
    plain = slurm_env(bare, slots[0], slots, batch=True)  # nothing given: nothing told
    assert not {"SLURM_SUBMIT_HOST", "SLURM_JOB_RESERVATION", "SLURM_JOB_GPUS"} & set(plain)


def test_tasks_per_node_is_written_as_slurm_writes_it() -> None:
    assert tasks_per_node([2, 2, 1]) == "2(x2),1"
    assert tasks_per_node([1, 3, 3, 3]) == "1,3(x3)"
    assert tasks_per_node([4]) == "4"


def test_nodes_of_one_machine_do_without_openmpis_shared_memory() -> None:
    def slot(k: int, node: str) -> TaskSlot:
        return TaskSlot(f"1.main.{k}", "main", k, k, node, 0, 0, 1)

    two = [slot(0, "local-1"), slot(1, "local-1"), slot(2, "local-2")]
    same = {"local-1": "127.0.0.1", "local-2": "127.0.0.1"}
    apart = {"local-1": "10.0.0.1", "local-2": "10.0.0.2"}
    assert shared_host_env(two, same) == {"OMPI_MCA_btl": "^vader"}
    assert shared_host_env(two, apart) == {}  # (separate machines: as OpenMPI chooses)
    assert shared_host_env(two[:2], same) == {}  # (one node: its ranks share memory well)
    assert shared_host_env(two, {}) == {}


@pytest.mark.parametrize(
    ("held", "told"),
    [(1500 * 1024, "2"), (2**20, "1"), (1, "1"), (16 * 2**30, "16384")],
)
def test_memory_per_node_is_rounded_up_to_whole_mib(held: int, told: str) -> None:
    """``--mem=1500K``: Slurm says ``SLURM_MEM_PER_NODE=2`` (its sizes round up), not 1."""
    assert node_held_env({MEMORY: held})["SLURM_MEM_PER_NODE"] == told
