"""fusesched's srun (agent/step.py): option parsing, task placement, per-task variables."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fusesched.agent.step import main
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_plan import (
    StepError,
    StepTask,
    exit_status,
    export_vars,
    option_env,
    place,
    read_hostfile,
    step_exports,
    step_shape,
    task_argv,
    task_env,
)
from fusesched.agent.step_wrapper import install_wrapper

HOSTS = [("node-a", 2), ("node-b", 2)]


def test_options_as_scripts_write_them() -> None:
    o = parse_args(
        ["-l", "-n4", "--ntasks-per-node", "2", "--mpi=pmix", "-c", "2", "./app", "-n", "9"]
    )
    assert (o.label, o.ntasks, o.ntasks_per_node, o.cpus_per_task, o.mpi) == (True, 4, 2, 2, "pmix")
    assert o.command == ("./app", "-n", "9")  # options after the command are the command's
    assert not o.warnings
    o = parse_args(
        ["-lu", "-N", "1", "--kill-on-bad-exit=1", "-J", "s", "--export=ALL,A=1", "--", "-x"]
    )
    assert (o.label, o.unbuffered, o.nodes, o.kill_on_bad_exit, o.job_name) == (
        True,
        True,
        1,
        True,
        "s",
    )
    assert o.command == ("-x",)
    assert parse_args(["-K", "true"]).kill_on_bad_exit
    assert parse_args(["--mpi=openmpi", "true"]).warnings
    for mpi in ("pmix", "pmix_v4", "pmi2", "none"):
        assert not parse_args([f"--mpi={mpi}", "true"]).warnings
    o = parse_args(["--overlap", "--exact", "--exclusive", "-I", "true"])
    assert (o.overlap, o.immediate) == (True, 0)
    assert parse_args(["--immediate=5", "true"]).immediate == 5
    assert parse_args(["-I3", "true"]).immediate == 3
    assert parse_args(["true"]).immediate is None  # waits as long as it takes


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mem-bind=nowhere", "x"], "unrecognized type 'nowhere'"),
        (["--frobnicate", "x"], "unknown option --frobnicate"),
        (["--gres=nic:1", "x"], "GPUs only"),
        (["--gpus=lots", "x"], "type:]count"),
        (["-y", "x"], "unknown option -y"),
        (["-n", "0", "x"], "positive whole number"),
        (["-n", "x"], "positive whole number"),
        (["-n"], "needs a value"),
        (["-l"], "no command"),
        (["--label=1", "x"], "takes no value"),
        (["--kill-on-bad-exit=2", "x"], "0 or 1"),
        (["--immediate=soon", "x"], "whole seconds"),
        (["--overlap=1", "x"], "takes no value"),
        (["--export=NONE,A=1", "x"], "NONE takes no"),
        (["--export=1A=2", "x"], "not a variable name"),
    ],
)
def test_bad_options_say_why(argv: list[str], message: str) -> None:
    with pytest.raises(StepError, match=message):
        parse_args(argv)


def nodes_of(tasks: list[StepTask]) -> list[str]:
    return [t.node for t in tasks]


def test_block_placement_fills_a_node_before_the_next() -> None:
    tasks, _ = place(HOSTS, 4, None, None)
    assert nodes_of(tasks) == ["node-a", "node-a", "node-b", "node-b"]
    assert [(t.rank, t.node_index, t.local_rank, t.local_size) for t in tasks] == [
        (0, 0, 0, 2),
        (1, 0, 1, 2),
        (2, 1, 0, 2),
        (3, 1, 1, 2),
    ]
    assert nodes_of(place(HOSTS, 1, None, None)[0]) == ["node-a"]
    assert nodes_of(place(HOSTS, 3, None, None)[0]) == ["node-a", "node-a", "node-b"]
    # -N: exactly that many nodes, each with a task
    assert nodes_of(place(HOSTS, 2, 2, None)[0]) == ["node-a", "node-b"]
    assert nodes_of(place(HOSTS, 3, 2, None)[0]) == ["node-a", "node-a", "node-b"]
    # --ntasks-per-node caps each node; without -n it sets the count
    assert nodes_of(place(HOSTS, 2, None, 1)[0]) == ["node-a", "node-b"]
    assert nodes_of(place(HOSTS, None, None, 1)[0]) == ["node-a", "node-b"]
    assert nodes_of(place(HOSTS, None, 1, 2)[0]) == ["node-a", "node-a"]
    tasks, warnings = place(HOSTS, 1, 2, None)
    assert nodes_of(tasks) == ["node-a"] and warnings


@pytest.mark.parametrize(
    ("ntasks", "nodes", "per_node", "message"),
    [
        (5, None, None, "cannot place 5 tasks"),
        (3, 1, None, "cannot place 3 tasks"),
        (2, 3, None, "only 2 node"),
        (None, None, 3, "has only 2 slot"),
        (None, None, None, "give -n"),
    ],
)
def test_impossible_placements_say_why(
    ntasks: int | None, nodes: int | None, per_node: int | None, message: str
) -> None:
    with pytest.raises(StepError, match=message):
        place(HOSTS, ntasks, nodes, per_node)


def test_hostfile() -> None:
    assert read_hostfile("node-a slots=2\n\nnode-b slots=3\n") == [("node-a", 2), ("node-b", 3)]


def test_each_task_gets_its_ranks_and_the_steps() -> None:
    tasks, _ = place(HOSTS, 3, None, None)
    env = task_env(tasks[2], tasks, 2)
    assert env["SLURM_PROCID"] == env["RANK"] == "2"
    assert env["SLURM_LOCALID"] == env["LOCAL_RANK"] == "0"
    assert env["SLURM_NODEID"] == env["NODE_RANK"] == "1"
    assert env["SLURMD_NODENAME"] == "node-b"
    assert env["SLURM_NTASKS"] == env["SLURM_NPROCS"] == env["WORLD_SIZE"] == "3"
    assert env["SLURM_STEP_NUM_TASKS"] == "3"
    assert env["LOCAL_WORLD_SIZE"] == "1"
    assert "SLURM_STEP_ID" not in env  # the controller gives it out, with the launch
    assert env["SLURM_STEP_NODELIST"] == "node-a,node-b"
    assert env["SLURM_STEP_TASKS_PER_NODE"] == "2,1"
    assert env["SLURM_CPUS_PER_TASK"] == "2"


def test_task_argv_runs_the_command_as_given(tmp_path: Path) -> None:
    argv = task_argv(str(tmp_path), ["sh", "-c", 'echo "$A" $SLURM_PROCID; pwd'])
    env = {"PATH": os.environ["PATH"], "A": "it's $HOME", "SLURM_PROCID": "1"}
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    assert out.splitlines() == ["it's $HOME 1", str(tmp_path)]
    # a working directory the node lacks: the task stays where it started
    argv = task_argv("/no/such/dir", ["a=b"])
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 127  # "a=b" is run as a command, not taken as a variable


def test_export() -> None:
    environ = {"A": "1", "HOME": "/h", "FUSESCHED_JOB_TOKEN": "t", "SLURM_STEP_ID": "0", "B": "2"}
    assert export_vars("ALL", environ) == {"A": "1", "B": "2"}
    assert export_vars("NONE", environ) == {}
    assert export_vars("A,C=3", environ) == {"A": "1", "C": "3"}
    assert export_vars("ALL,C=3", environ) == {"A": "1", "B": "2", "C": "3"}
    # each node's agent gives its tasks its own path to the controller's CA
    assert export_vars("ALL", {"FUSESCHED_CA": "/work/a/ca.pem", "A": "1"}) == {"A": "1"}


def test_the_jobs_export_is_the_steps_default_and_its_options_are_told() -> None:
    """As Slurm's srun: with no ``--export`` of its own the step takes the job's (sbatch's
    ``--export``, told as ``SLURM_EXPORT_ENV``), else ``ALL``; its tasks are told its own
    ``--ntasks-per-node`` and GPU options over the job's, which the script passes on."""
    job = {"A": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_GPUS_PER_TASK": "2"}
    assert step_exports(parse_args(["true"]), job) == job  # (ALL)
    told = {**job, "SLURM_EXPORT_ENV": "NONE"}
    assert step_exports(parse_args(["true"]), told) == {}  # the job's own environment
    assert step_exports(parse_args(["--export=A", "true"]), told) == {"A": "1"}
    assert step_exports(parse_args(["true"]), {**job, "SLURM_EXPORT_ENV": "A,B=2"}) == {
        "A": "1",
        "B": "2",
    }
    # every --export sbatch takes: NONE or NIL with variables (sbatch gave them to the job's
    # own environment, as Slurm's srun passes none of them), any case, spaces
    for given in ("NONE,A=2", "nil", "none , B=3"):
        assert step_exports(parse_args(["true"]), {**job, "SLURM_EXPORT_ENV": given}) == {}
    lower = {**job, "SLURM_EXPORT_ENV": "all, B=2"}
    assert step_exports(parse_args(["true"]), lower) == lower | {"B": "2"}
    own = parse_args(["--ntasks-per-node=1", "--gpus-per-task=1", "-N", "2", "true"])
    assert step_exports(own, job) == job | {
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_GPUS_PER_TASK": "1",
    }
    assert option_env(parse_args(["-G", "2", "true"])) == {"SLURM_GPUS": "2"}
    assert option_env(parse_args(["--gpus-per-node=1", "true"])) == {"SLURM_GPUS_PER_NODE": "1"}
    assert option_env(parse_args(["--gres=gpu:1", "-n", "2", "true"])) == {}  # (not Slurm's)


def test_exit_status() -> None:
    assert exit_status([0, 0]) == 0
    assert exit_status([0, 3, 1]) == 3
    assert exit_status([0, -9]) == 137


def test_outside_a_job_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FUSESCHED_JOB_ID", raising=False)
    assert main(["-n", "1", "true"]) == 2
    assert "not inside a fusesched job" in capsys.readouterr().err
    assert main(["--bogus", "true"]) == 2
    assert "unknown option --bogus" in capsys.readouterr().err


def test_the_wrapper_runs_the_step(tmp_path: Path) -> None:
    folder = install_wrapper(tmp_path)
    wrapper = folder / "srun"
    assert stat.S_IMODE(wrapper.stat().st_mode) == 0o755
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSESCHED_")}
    done = subprocess.run(
        [str(wrapper), "-n", "1", "true"], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 2 and "not inside a fusesched job" in done.stderr
    # nothing else on stderr: the agent package must not import the step module, or every
    # step printed runpy's "found in sys.modules" warning into the job's output
    assert "Warning" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert install_wrapper(tmp_path) == folder  # again: unchanged
    assert sys.executable in wrapper.read_text()


def test_scontrol_beside_srun_gives_the_host_lists_scripts_ask_for(tmp_path: Path) -> None:
    """``MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)``, the usual
    line of multi-node scripts, works in a job: the agent's ``scontrol`` is first on its PATH
    (no Slurm needed); the rest of scontrol is ``fusesched scontrol``'s, which asks the
    controller (none here: it says so)."""
    scontrol = install_wrapper(tmp_path) / "scontrol"
    assert stat.S_IMODE(scontrol.stat().st_mode) == 0o755

    def run(*args: str, nodes: str | None = "gpu[01-02],cpu7") -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["FUSESCHED_CONTROLLER"] = "http://127.0.0.1:9"  # (nothing listens there)
        if nodes is not None:
            env["SLURM_JOB_NODELIST"] = nodes
        return subprocess.run([str(scontrol), *args], capture_output=True, text=True, env=env)

    assert run("show", "hostnames").stdout == "gpu01\ngpu02\ncpu7\n"
    assert run("show", "hostnames", "n[1-2]").stdout == "n1\nn2\n"
    assert run("show", "hostlist", "n1,n2,n3,x").stdout == "n[1-3],x\n"
    assert run("show", "hostlistsorted", "n3,n1,n2").stdout == "n[1-3]\n"
    bad = run("show", "hostnames", "n[2-1]")
    assert bad.returncode == 1 and "scontrol: error:" in bad.stderr and not bad.stdout
    unset = run("show", "hostnames", nodes=None)
    assert unset.returncode == 1 and "SLURM_JOB_NODELIST is not set" in unset.stderr
    other = run("show", "job", "5")
    assert other.returncode == 1
    assert "cannot reach the controller at http://127.0.0.1:9" in other.stderr
    unknown = run("frobnicate")
    assert unknown.returncode == 1 and "supported: show job [ID]" in unknown.stderr
    assert "Traceback" not in bad.stderr + unset.stderr + other.stderr + unknown.stderr


def test_the_wrapper_is_never_written_through_a_link(tmp_path: Path) -> None:
    """``<work dir>/bin`` made a link (by whoever could write the work dir) must not make the
    agent chmod, or write ``srun`` into, the folder it leads to."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    work = tmp_path / "work"
    work.mkdir()
    (work / "bin").symlink_to(elsewhere)
    with pytest.raises(OSError, match="not a folder of the agent's own"):
        install_wrapper(work)
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o700
    assert list(elsewhere.iterdir()) == []


def test_the_wrapper_ignores_the_jobs_own_modules(tmp_path: Path) -> None:
    """A module of the job's named like one srun imports, in the folder srun runs in or on
    the job's ``PYTHONPATH``, does not replace the agent's."""
    folder = install_wrapper(tmp_path / "work")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "httpx.py").write_text("raise SystemExit('the job own httpx')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSESCHED_")}
    for cwd, extra in ((mine, {}), (tmp_path, {"PYTHONPATH": str(mine)})):
        done = subprocess.run(
            [str(folder / "srun"), "-n", "1", "true"],
            capture_output=True,
            text=True,
            env=env | extra,
            cwd=cwd,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "not inside a fusesched job" in done.stderr


def test_a_step_spans_the_jobs_nodes_as_slurms_srun_does() -> None:
    """srun reads ``$SLURM_NNODES`` as ``-N``: ``srun -n 2`` in a 2-node job runs a task on
    each node (not both on the first); ``-n 1`` uses one node, without a warning."""
    job = {"SLURM_NTASKS": "4", "SLURM_NNODES": "2"}

    def nodes_of(argv: list[str], environ: dict[str, str] = job) -> list[str]:
        options = parse_args([*argv, "true"])
        ntasks, nodes = step_shape(options, environ, len(HOSTS))
        tasks, warnings = place(HOSTS, ntasks, nodes, options.ntasks_per_node)
        assert warnings == []
        return [t.node for t in tasks]

    assert nodes_of(["-n", "2"]) == ["node-a", "node-b"]
    assert nodes_of(["-n", "3"]) == ["node-a", "node-a", "node-b"]
    assert nodes_of(["-n", "1"]) == ["node-a"]
    assert nodes_of([]) == ["node-a", "node-a", "node-b", "node-b"]
    assert nodes_of(["-N", "1"]) == ["node-a"]
    assert nodes_of(["--ntasks-per-node", "1"]) == ["node-a", "node-b"]
    assert nodes_of(["-n", "2"], {}) == ["node-a", "node-a"]  # no job variables: -n only
    assert nodes_of([], {"SLURM_NNODES": "2"}) == ["node-a", "node-b"]
