"""``srun --het-group`` in a heterogeneous job's batch script, without I/O (agent/step_het.py):
the components named, each placed over its own hostfile with its own task count, ranked as one
step."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.agent.step_args import parse_args
from fusesched.agent.step_het import (
    NODE_SHARE_VARS,
    het_groups,
    het_node_env,
    het_rank_env,
    het_step_env,
    place_components,
)
from fusesched.agent.step_het_plan import plan_het_step
from fusesched.agent.step_plan import StepError

HET_ENV = {
    "SLURM_JOB_ID": "12",
    "SLURM_HET_SIZE": "2",
    "SLURM_NTASKS": "1",
    "SLURM_NNODES": "1",
    "SLURM_NTASKS_HET_GROUP_0": "1",
    "SLURM_NNODES_HET_GROUP_0": "1",
    "SLURM_NTASKS_HET_GROUP_1": "3",
    "SLURM_NNODES_HET_GROUP_1": "2",
}
HOSTS = {0: [("a", 1)], 1: [("b", 2), ("a", 1)]}


@pytest.mark.parametrize(
    ("args", "groups"),
    [
        (["--het-group=1", "true"], (1,)),
        (["--het-group", "0,1", "true"], (0, 1)),
        (["--pack-group=1,3-4,1", "true"], (1, 3, 4)),
        (["true"], None),
    ],
)
def test_het_group_lists(args: list[str], groups: tuple[int, ...] | None) -> None:
    assert parse_args(args).het_groups == groups


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("one", "--het-group takes component numbers such as 1, 0,2 or 1-3, not 'one'"),
        ("3-1", "--het-group: '3-1' is not a range of components 0-999"),
        ("1,", "--het-group takes component numbers"),
        ("-1", "--het-group takes component numbers"),
    ],
)
def test_bad_het_groups_are_refused(value: str, said: str) -> None:
    with pytest.raises(StepError) as caught:
        parse_args([f"--het-group={value}", "true"])
    assert str(caught.value).startswith(said)


def test_the_components_a_step_runs_on() -> None:
    assert het_groups(None, HET_ENV) == (0,)  # Slurm's default: the first component
    assert het_groups((1,), HET_ENV) == (1,)
    assert het_groups(None, {}) is None and het_groups((0,), {}) is None
    with pytest.raises(StepError, match=r"job 12 has no component 2 \(its components: 0-1\)"):
        het_groups((0, 2), HET_ENV)
    with pytest.raises(StepError, match="job 7 is not a heterogeneous job"):
        het_groups((1,), {"FUSESCHED_JOB_ID": "7"})


def test_each_component_is_placed_over_its_own_hostfile() -> None:
    options = parse_args(["--het-group=1", "true"])
    tasks, warnings, shares = place_components(options, HET_ENV, {1: HOSTS[1]})
    assert [(t.rank, t.node, t.node_index, t.local_rank) for t in tasks] == [
        (0, "b", 0, 0),
        (1, "b", 0, 1),
        (2, "a", 1, 0),
    ]
    assert shares == [(1, {"b": 2, "a": 1})] and warnings == []
    both = parse_args(["--het-group=0,1", "true"])  # one step: ranked in component order
    tasks, _, shares = place_components(both, HET_ENV, HOSTS)
    assert [(t.rank, t.node, t.node_index, t.local_rank, t.local_size) for t in tasks] == [
        (0, "a", 0, 0, 2),
        (1, "b", 1, 0, 2),
        (2, "b", 1, 1, 2),
        (3, "a", 0, 1, 2),  # (component 1's task on a: after component 0's there)
    ]
    assert shares == [(0, {"a": 1}), (1, {"b": 2, "a": 1})]
    one = parse_args(["-n", "1", "true"])  # -n for each component named
    tasks, _, shares = place_components(one, HET_ENV, HOSTS)
    assert [(t.rank, t.node) for t in tasks] == [(0, "a"), (1, "b")]
    assert shares == [(0, {"a": 1}), (1, {"b": 1})]
    with pytest.raises(StepError, match="component 0: cannot place 2 tasks"):
        place_components(parse_args(["-n", "2", "true"]), HET_ENV, HOSTS)


def test_a_het_steps_tasks_see_its_components_allocation() -> None:
    env = HET_ENV | {
        "SLURM_CPUS_PER_TASK": "4",  # (the batch script's: component 0's)
        "SLURM_CPUS_PER_TASK_HET_GROUP_0": "4",
        "SLURM_CPUS_PER_TASK_HET_GROUP_1": "2",
        "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0": "4",
        "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "4,2",
    }
    assert het_step_env({1: HOSTS[1]}, env) == {
        "SLURM_JOB_NODELIST": "b,a",
        "SLURM_NODELIST": "b,a",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_TASKS_PER_NODE": "2,1",
        "SLURM_JOB_CPUS_PER_NODE": "4,2",
        "SLURM_CPUS_PER_TASK": "2",  # component 1's, not the script's
    }
    both = het_step_env(HOSTS, env)  # (a's tasks and CPUs: both components')
    assert (both["SLURM_JOB_NODELIST"], both["SLURM_TASKS_PER_NODE"]) == ("a,b", "2(x2)")
    assert both["SLURM_JOB_CPUS_PER_NODE"] == "6,4" and "SLURM_CPUS_PER_TASK" not in both
    assert het_step_env({0: HOSTS[0]}, env)["SLURM_CPUS_PER_TASK"] == "4"
    # a component that does not say its CPUs (or says them in a form not read): not guessed
    vague = het_step_env(HOSTS, env | {"SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "4(x"})
    assert "SLURM_JOB_CPUS_PER_NODE" not in vague
    assert het_step_env({1: HOSTS[1]}, HET_ENV) == {
        "SLURM_JOB_NODELIST": "b,a",
        "SLURM_NODELIST": "b,a",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NNODES": "2",
        "SLURM_TASKS_PER_NODE": "2,1",
    }
    two = het_step_env({0: [("a", 2), ("b", 2)]}, {"SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0": "3(x2)"})
    assert two["SLURM_JOB_CPUS_PER_NODE"] == "3(x2)"


def test_each_task_of_a_het_step_gets_its_own_components_cpus() -> None:
    env = HET_ENV | {"SLURM_CPUS_PER_TASK_HET_GROUP_0": "4", "SLURM_CPUS_PER_TASK_HET_GROUP_1": "2"}
    shares = [(0, {"a": 1}), (1, {"b": 2, "a": 1})]
    assert (
        het_rank_env(shares, env)
        == [{"SLURM_CPUS_PER_TASK": "4"}] + [{"SLURM_CPUS_PER_TASK": "2"}] * 3
    )
    assert het_rank_env([(1, {"b": 1})], HET_ENV) == [{}]  # (a fraction of a CPU: none)


#: What the controller says of each component (controller/hetjob_env.py): component 0 one
#: task of 4 CPUs and 8 GiB on a; component 1 tasks of 2 CPUs, 1 GiB and a GPU, 2 on b, 1 on a.
NODE_ENV = HET_ENV | {
    "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_0": "4",
    "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "4,2",
    "SLURM_CPUS_PER_TASK_HET_GROUP_0": "4",
    "SLURM_CPUS_PER_TASK_HET_GROUP_1": "2",
    "FUSESCHED_MEM_PER_TASK_HET_GROUP_0": str(8 << 30),
    "FUSESCHED_GPUS_PER_TASK_HET_GROUP_0": "0",
    "FUSESCHED_MEM_PER_TASK_HET_GROUP_1": str(1 << 30),
    "FUSESCHED_GPUS_PER_TASK_HET_GROUP_1": "1",
}


def test_a_het_steps_tasks_see_their_components_on_their_node() -> None:
    assert het_node_env({1: HOSTS[1]}, NODE_ENV) == {
        "b": {"SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_NODE": "2048", "SLURM_GPUS_ON_NODE": "2"},
        "a": {"SLURM_CPUS_ON_NODE": "2", "SLURM_MEM_PER_NODE": "1024", "SLURM_GPUS_ON_NODE": "1"},
    }
    both = het_node_env(HOSTS, NODE_ENV)  # (on a: both components')
    assert both is not None and both["a"] == {
        "SLURM_CPUS_ON_NODE": "6",
        "SLURM_MEM_PER_NODE": str(9 * 1024),
        "SLURM_GPUS_ON_NODE": "1",
    }
    assert het_node_env({0: HOSTS[0]}, NODE_ENV) == {  # (no GPUs: none said)
        "a": {"SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_NODE": str(8 * 1024)}
    }
    # a component of no CPUs (the controller gives none of its CPUs per node): 0 there
    fewer = {k: v for k, v in NODE_ENV.items() if k != "SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1"}
    assert het_node_env({1: HOSTS[1]}, fewer) == {
        "b": {"SLURM_MEM_PER_NODE": "2048", "SLURM_GPUS_ON_NODE": "2"},
        "a": {"SLURM_MEM_PER_NODE": "1024", "SLURM_GPUS_ON_NODE": "1"},
    }
    # a controller older than the per-task variables, or CPUs not read: not guessed
    assert het_node_env({1: HOSTS[1]}, HET_ENV) is None
    assert het_node_env(HOSTS, NODE_ENV | {"SLURM_JOB_CPUS_PER_NODE_HET_GROUP_1": "4"}) is None


SCRIPT_SHARES = {  # (the batch script's: component 0's, on a)
    "SLURM_CPUS_ON_NODE": "4",
    "SLURM_MEM_PER_NODE": "8192",
    "SLURM_GPUS_ON_NODE": "3",
    "HOME_SET": "x",
}


def test_each_task_of_a_het_step_gets_its_nodes_shares_not_the_scripts(tmp_path: Path) -> None:
    for group, hosts in HOSTS.items():
        text = "".join(f"{node} slots={n}\n" for node, n in hosts)
        (tmp_path / f"fusesched.het{group}.hostfile").write_text(text)
    hostfile = str(tmp_path / "fusesched.hostfile")
    step = plan_het_step(parse_args(["--het-group=1", "true"]), NODE_ENV, hostfile, (1,))
    common, own = step.envs(SCRIPT_SHARES, NODE_ENV, mpi=False)
    assert common["HOME_SET"] == "x" and not NODE_SHARE_VARS & set(common)
    assert [
        (t.node, o["SLURM_CPUS_ON_NODE"], o["SLURM_GPUS_ON_NODE"])
        for t, o in zip(step.tasks, own, strict=True)
    ] == [("b", "4", "2"), ("b", "4", "2"), ("a", "2", "1")]
    assert own[0]["SLURM_CPUS_PER_TASK"] == "2"
    gpuless = plan_het_step(parse_args(["true"]), NODE_ENV, hostfile, (0,))
    common, own = gpuless.envs(SCRIPT_SHARES, NODE_ENV, mpi=False)
    assert "SLURM_GPUS_ON_NODE" not in common | own[0]  # (component 0 holds none: not said)
    # through mpirun (one task: its ranks keep the script's), or an older controller
    assert step.envs(SCRIPT_SHARES, NODE_ENV, mpi=True)[0]["SLURM_GPUS_ON_NODE"] == "3"
    older = plan_het_step(parse_args(["--het-group=1", "true"]), HET_ENV, hostfile, (1,))
    assert older.envs(SCRIPT_SHARES, HET_ENV, mpi=False)[0]["SLURM_CPUS_ON_NODE"] == "4"
    with pytest.raises(StepError, match="no hostfile of component 2 at"):
        plan_het_step(parse_args(["true"]), NODE_ENV, hostfile, (2,))
