"""srun's input environment variables inside a job (agent/step_defaults.py): each the default
of its option, the command line beating it, a bad value an error that names it — the rules
checked against Slurm 22.05's srun (docs/LIVE.md, "Job steps", *defaults*)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fusesched.agent.step_args import MPI_LIST, mpi_listing, parse_args
from fusesched.agent.step_gpus import GpuAsk, gpu_ask
from fusesched.agent.step_plan import (
    StepError,
    StepOptions,
    option_env,
    place,
    step_exports,
    step_shape,
)
from fusesched.agent.step_resources import cpu_mem_fields


def opts(*args: str, **env: str) -> StepOptions:
    return parse_args([*args, "app"], env)


def test_each_variable_is_its_options_default() -> None:
    o = opts(
        SLURM_NTASKS_PER_NODE="2",
        SRUN_CPUS_PER_TASK="3",
        SLURM_GPUS_PER_TASK="h100:1",
        SLURM_LABELIO="1",
        SLURM_UNBUFFEREDIO="yes",
        SLURM_OVERLAP="1",
        SLURM_KILL_BAD_EXIT="1",
    )
    assert (o.ntasks_per_node, o.cpus_per_task, o.gpus_per_task) == (2, 3, 1)
    assert o.label and o.unbuffered and o.overlap and o.kill_on_bad_exit
    assert o.inherited == {
        "ntasks_per_node",
        "cpus_per_task",
        "gpus_per_task",
        "label",
        "unbuffered",
        "overlap",
        "kill_on_bad_exit",
    }
    # not the job's -G or --gpus-per-node: booked as an even share per task, they need not
    # hold on every node of a job whose tasks are spread unevenly (found in review)
    assert opts(SLURM_GPUS_PER_NODE="2").gpus_per_node is None
    assert opts(SLURM_GPUS="a100:4").gpus is None
    assert opts(SLURM_GPUS="x", SLURM_GPUS_PER_NODE="y").inherited == frozenset()
    plain = opts()
    assert plain.inherited == frozenset() and not plain.label and plain.ntasks_per_node is None


def test_the_command_line_beats_the_variable() -> None:
    o = opts(
        "--ntasks-per-node=1",
        "-c",
        "2",
        "--gpus-per-task=2",
        "--kill-on-bad-exit=0",
        SLURM_NTASKS_PER_NODE="4",
        SRUN_CPUS_PER_TASK="8",
        SLURM_GPUS_PER_TASK="1",
        SLURM_KILL_BAD_EXIT="1",
    )
    assert (o.ntasks_per_node, o.cpus_per_task, o.gpus_per_task) == (1, 2, 2)
    assert not o.kill_on_bad_exit  # (--kill-on-bad-exit=0 beats SLURM_KILL_BAD_EXIT=1)
    assert o.inherited == frozenset()
    # the step's GPUs are one ask: the command line's, whichever option
    o = opts("--gres=gpu:1", SLURM_GPUS_PER_TASK="1")
    assert (o.gres, o.gpus_per_task, o.gpus_per_node) == (1, None, None)
    o = opts("--gpus-per-node=2", SLURM_GPUS_PER_TASK="1")
    assert (o.gpus_per_node, o.gpus_per_task) == (2, None)


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("1", True),
        ("", True),
        ("yes", True),
        ("YES", True),
        ("2", True),
        ("-1", True),
        (" 1", True),
        ("0", False),
        ("no", False),
        ("true", False),
        ("foo", False),
        ("1x", False),
    ],
)
def test_a_flags_variable_as_slurms_srun_reads_it(value: str, on: bool) -> None:
    """(SLURM_LABELIO, each value tried with Slurm 22.05's srun)"""
    assert opts(SLURM_LABELIO=value).label is on
    assert opts(SLURM_UNBUFFEREDIO=value).unbuffered is on


def test_overlap_whatever_its_value_and_kill_on_bad_exit_unless_0() -> None:
    for value in ("1", "0", "", "yes", "foo"):
        assert opts(SLURM_OVERLAP=value).overlap
    assert opts(SLURM_KILL_BAD_EXIT="2").kill_on_bad_exit
    assert not opts(SLURM_KILL_BAD_EXIT="0").kill_on_bad_exit
    assert not opts(SLURM_KILL_BAD_EXIT="").kill_on_bad_exit


@pytest.mark.parametrize(
    ("env", "args", "said"),
    [
        ({"SLURM_NTASKS_PER_NODE": "abc"}, [], "--ntasks-per-node takes a positive whole"),
        ({"SLURM_NTASKS_PER_NODE": "0"}, [], "not '0'"),
        ({"SLURM_NTASKS_PER_NODE": ""}, [], "not ''"),
        ({"SLURM_NTASKS_PER_NODE": "1x"}, [], "not '1x'"),
        ({"SLURM_NTASKS_PER_NODE": "9" * 5000}, [], "--ntasks-per-node"),  # (no traceback)
        ({"SRUN_CPUS_PER_TASK": "abc"}, [], "--cpus-per-task takes"),
        ({"SLURM_GPUS_PER_TASK": "x"}, [], "--gpus-per-task takes [type:]count"),
        ({"SLURM_GPUS_PER_TASK": "gpu:x"}, [], "--gpus-per-task takes"),
        ({"SLURM_KILL_BAD_EXIT": "x"}, [], "--kill-on-bad-exit takes 0 or 1"),
        ({"SLURM_NTASKS": "abc"}, [], "--ntasks takes a positive whole number"),
        ({"SLURM_NPROCS": "0"}, [], "--ntasks takes"),
        # bad even where the command line gives the option (as Slurm's)
        ({"SLURM_NTASKS_PER_NODE": "abc"}, ["--ntasks-per-node=1"], "--ntasks-per-node"),
        ({"SRUN_CPUS_PER_TASK": "abc"}, ["-c", "1"], "--cpus-per-task"),
        ({"SLURM_GPUS_PER_TASK": "x"}, ["--gpus-per-task=1"], "--gpus-per-task"),
        ({"SLURM_NTASKS": "abc"}, ["-n", "1"], "--ntasks"),
    ],
)
def test_a_bad_value_names_its_variable(env: dict[str, str], args: list[str], said: str) -> None:
    (name,) = env
    with pytest.raises(StepError) as caught:
        opts(*args, **env)
    assert str(caught.value).startswith(f"{name} (in the environment): ")
    assert said in str(caught.value)


def test_numbers_are_ascii_digits_as_strtol_reads_them() -> None:
    """As Slurm 22.05's srun (each tried with it): leading zeros are taken, and a flag's long
    number is on; a digit or blank of another script is no number (``٢``: the count an
    error, the flag off)."""
    assert opts(SLURM_NTASKS_PER_NODE="0000000002").ntasks_per_node == 2
    assert opts(SRUN_CPUS_PER_TASK="+0000000001").cpus_per_task == 1
    parse_args(["app"], {"SLURM_NTASKS": "0000000002", "SLURM_NPROCS": "02"})  # (no error)
    for value in ("0000000001", "99999999999", "9" * 5000):
        assert opts(SLURM_LABELIO=value).label
        assert opts(SLURM_KILL_BAD_EXIT=value).kill_on_bad_exit
    assert not opts(SLURM_LABELIO="0000000000").label
    assert not opts(SLURM_KILL_BAD_EXIT="-0").kill_on_bad_exit
    for other in ("\u0662", "\u00a02", "\uff12"):  # (Arabic-Indic 2, no-break space, fullwidth 2)
        assert not opts(SLURM_LABELIO=other).label
        assert not opts(SLURM_UNBUFFEREDIO=other).unbuffered
        for name in ("SLURM_NTASKS_PER_NODE", "SRUN_CPUS_PER_TASK", "SLURM_KILL_BAD_EXIT"):
            with pytest.raises(StepError, match=f"^{name} \\(in the environment\\)"):
                opts(**{name: other})
    with pytest.raises(StepError, match="--ntasks-per-node takes a positive whole number"):
        opts(SLURM_NTASKS_PER_NODE="0" * 20 + "1" * 10)  # (10 digits: no count of tasks)


def test_an_empty_gpu_variable_is_not_taken() -> None:
    """Slurm's srun ignores ``SLURM_GPUS_PER_TASK=`` (``SLURM_GPUS_PER_TASK= srun …`` in a
    ``--gpus-per-task`` job: a step that names no GPUs), where it refuses ``" "``."""
    for name in ("SLURM_GPUS_PER_TASK",):
        o = opts(**{name: ""})
        assert (o.gpus, o.gpus_per_node, o.gpus_per_task, o.inherited) == (
            None,
            None,
            None,
            frozenset(),
        )
        with pytest.raises(StepError, match=f"^{name} \\(in the environment\\)"):
            opts(**{name: " "})


def test_a_count_too_long_to_be_one_is_an_error_not_a_traceback() -> None:
    with pytest.raises(StepError, match="--ntasks takes a positive whole number"):
        parse_args(["-n", "9" * 5000, "app"], {})


def test_variables_srun_does_not_read() -> None:
    """22.05's srun does not take SLURM_CPUS_PER_TASK (SRUN_CPUS_PER_TASK is its variable),
    nor, inside a job, SLURM_JOB_NAME or SLURM_IMMEDIATE; a step here that names no memory
    holds none (SLURM_MEM_PER_CPU, SLURM_MEM_PER_NODE); SLURM_NNODES, read for the step's
    shape, is not checked (as Slurm's)."""
    o = opts(
        SLURM_CPUS_PER_TASK="abc",
        SLURM_MEM_PER_CPU="64",
        SLURM_MEM_PER_NODE="abc",
        SLURM_JOB_NAME="batch",
        SLURM_IMMEDIATE="1",
        SLURM_NNODES="x",
        SLURM_DISTRIBUTION="cyclic",
    )
    assert (o.cpus_per_task, o.mem, o.mem_per_cpu, o.job_name, o.immediate, o.inherited) == (
        None,
        None,
        None,
        None,
        None,
        frozenset(),
    )


def test_a_heterogeneous_jobs_told_resources_are_not_taken() -> None:
    """Its components differ in them; the flags still are."""
    het = {"SLURM_HET_SIZE": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_GPUS_PER_TASK": "1"}
    o = opts(SLURM_GPUS_PER_NODE="1", SLURM_LABELIO="1", SRUN_CPUS_PER_TASK="2", **het)
    assert (o.ntasks_per_node, o.gpus_per_task, o.gpus_per_node) == (None, None, None)
    assert o.label and o.cpus_per_task == 2


def test_the_process_environment_unless_one_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_LABELIO", "1")
    assert parse_args(["app"]).label
    assert not parse_args(["app"], {}).label
    # srun --mpi=list lists whatever the variables say
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "abc")
    assert mpi_listing(["--mpi=list"]) == MPI_LIST


HOSTS = [("node-a", 2), ("node-b", 1)]  # a job of -n 3 --ntasks-per-node=2
JOB = {"SLURM_NTASKS": "3", "SLURM_NPROCS": "3", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "2"}


def nodes_of(argv: list[str], environ: dict[str, str] = JOB) -> tuple[list[str], list[str]]:
    options = parse_args([*argv, "app"], environ)
    ntasks, nodes = step_shape(options, environ, len(HOSTS))
    tasks, warnings = place(HOSTS, ntasks, nodes, options.ntasks_per_node)
    return [t.node for t in tasks], warnings


def test_the_jobs_tasks_per_node_caps_a_steps_nodes() -> None:
    """A plain srun still runs the job's tasks (its --ntasks-per-node taken from the variable
    does not set the count where $SLURM_NTASKS does, nor refuses a node with fewer slots)."""
    assert nodes_of([]) == (["node-a", "node-a", "node-b"], [])
    assert nodes_of(["-n", "2"]) == (["node-a", "node-b"], [])
    assert nodes_of(["-N", "1"]) == (["node-a"], [])  # -N alone: one task per node
    # the script's own $SLURM_NTASKS_PER_NODE=1 caps each node
    assert nodes_of(["-n", "2"], {"SLURM_NTASKS_PER_NODE": "1"}) == (["node-a", "node-b"], [])
    # without a task count, that many on each node (as Slurm's)
    assert nodes_of([], {"SLURM_NTASKS_PER_NODE": "1"}) == (["node-a", "node-b"], [])
    # a count that cannot fit in it on the nodes asked for: ignored, as Slurm's srun does
    placed, warnings = nodes_of([], {**JOB, "SLURM_NTASKS_PER_NODE": "1"})
    assert placed == ["node-a", "node-a", "node-b"]
    assert warnings == [
        "can't honor --ntasks-per-node set to 1 which doesn't match the requested tasks 3 "
        "with the number of requested nodes 2. Ignoring --ntasks-per-node."
    ]
    # (and given on the command line, as Slurm's); with -n, it caps, a node of fewer slots too
    assert nodes_of(["-n", "3", "-N", "2", "--ntasks-per-node=1"])[0] == placed
    assert nodes_of(["-n", "3", "--ntasks-per-node=2"], {}) == (placed, [])
    # $SLURM_NPROCS where $SLURM_NTASKS is not set; $SLURM_NTASKS first
    assert nodes_of([], {"SLURM_NPROCS": "2"})[0] == ["node-a", "node-a"]
    assert nodes_of([], {"SLURM_NTASKS": "1", "SLURM_NPROCS": "2"})[0] == ["node-a"]


def test_what_the_tasks_are_told_is_the_command_lines() -> None:
    """A variable's value reaches the tasks as the script has it (``a100:1``), not as a count."""
    inherited = opts(SLURM_NTASKS_PER_NODE="2", SLURM_GPUS_PER_TASK="a100:1")
    assert option_env(inherited) == {}
    job = {"SLURM_GPUS_PER_TASK": "a100:1", "SLURM_NTASKS_PER_NODE": "2"}
    assert step_exports(inherited, job) == job
    given = opts("--gpus-per-task=2", SLURM_GPUS_PER_TASK="a100:1")
    assert option_env(given) == {"SLURM_GPUS_PER_TASK": "2"}


def test_the_steps_resources_from_the_variables() -> None:
    slots = {"a": 2, "b": 1}
    o = opts(SRUN_CPUS_PER_TASK="2", SLURM_MEM_PER_CPU="100")
    assert cpu_mem_fields(o, {"SLURM_MEM_PER_CPU": "100"}, slots) == {"cpus_per_task": 2}
    o = opts("--mem-per-cpu=100M", SRUN_CPUS_PER_TASK="2")
    assert cpu_mem_fields(o, {}, slots) == {
        "cpus_per_task": 2,
        "memory": {"a": 400 << 20, "b": 200 << 20},
    }
    assert gpu_ask(opts(SLURM_GPUS_PER_TASK="1"), slots) == GpuAsk({"a": 2, "b": 1}, 1)
    assert gpu_ask(opts("--gres=gpu:1", SLURM_GPUS_PER_TASK="1"), slots) == GpuAsk({"a": 1, "b": 1})


def test_srun_says_which_variable_is_bad() -> None:
    """An error on stderr (exit 2), not a traceback, before anything else is looked at."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "FUSESCHED_"))}
    done = subprocess.run(
        [sys.executable, "-m", "fusesched.agent.step", "-n", "1", "true"],
        capture_output=True,
        text=True,
        env=env | {"SLURM_GPUS_PER_TASK": "lots"},
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        "srun: error: SLURM_GPUS_PER_TASK (in the environment): --gpus-per-task takes"
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_the_jobs_task_count_reads_as_slurms() -> None:
    """``SLURM_NTASKS=+2`` or ``0000000002`` is 2 for Slurm's srun (found in review: such a
    count was ignored and the step ran one task a node); ``0`` is no count."""
    from fusesched.agent.step_plan import _positive

    assert [_positive(t) for t in ("2", "+2", "0000000002", " 3 ", "0", "-1", "x", None)] == [
        2,
        2,
        2,
        3,
        None,
        None,
        None,
        None,
    ]
    assert _positive("١٢") is None  # (ASCII digits only)
