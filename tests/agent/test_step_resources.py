"""What ``srun -c``, ``--mem`` and ``--mem-per-cpu`` ask the controller for
(agent/step_resources.py), and what a controller older than those fields gets."""

from __future__ import annotations

import pytest

from fusesched.agent.step_args import parse_args
from fusesched.agent.step_resources import cpu_mem_fields, without_refused

SLOTS = {"a": 2, "b": 1}


def fields(*args: str, **env: str) -> dict[str, object]:
    return cpu_mem_fields(parse_args([*args, "app"]), env, SLOTS)


def test_cpus_per_task_only_with_c() -> None:
    """(without it the controller gives each task the job's CPUs per task)"""
    assert fields(SLURM_CPUS_PER_TASK="2") == {}
    assert fields("-c", "3", SLURM_CPUS_PER_TASK="2") == {"cpus_per_task": 3}


def test_memory_per_node() -> None:
    assert fields("--mem=2G") == {"memory": {"a": 2 << 30, "b": 2 << 30}}
    assert fields("--mem=0") == {"memory": {"a": 0, "b": 0}}  # all of the job's
    assert fields("-c", "2", "--mem-per-cpu=100M") == {
        "cpus_per_task": 2,
        "memory": {"a": 400 << 20, "b": 200 << 20},
    }
    per_cpu = {"memory": {"a": 200 << 20, "b": 100 << 20}}
    assert fields("--mem-per-cpu=100M") == per_cpu
    assert fields("--mem-per-cpu=50M", SLURM_CPUS_PER_TASK="2") == per_cpu  # the job's -c
    assert fields("--mem-per-cpu=100M", SLURM_CPUS_PER_TASK="x") == per_cpu


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mem=1G", "--mem-per-cpu=1G"], "not with --mem and --mem-per-cpu"),
        (["--mem=lots"], "--mem: cannot read memory size 'lots'"),
        (["--mem-per-cpu=0"], "--mem-per-cpu must be more than 0"),
    ],
)
def test_bad_memory_options(args: list[str], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        fields(*args)


def test_an_older_controller_runs_the_step_unpinned_but_cannot_limit_memory() -> None:
    asked: dict[str, object] = {"cpus_per_task": 2}
    said = without_refused(asked, lambda name: name == "cpus_per_task")
    assert asked == {} and "get no CPUs of their own" in said
    assert without_refused({"cpus_per_task": 2}, lambda name: False) == ""
    with pytest.raises(ValueError, match="cannot limit a step's memory"):
        without_refused({"memory": {"a": 1}}, lambda name: name == "memory")
