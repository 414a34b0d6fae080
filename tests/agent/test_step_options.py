"""srun's options inside a job (agent/step_args.py, agent/step_option_table.py): every option
of Slurm 22.05's srun is applied, accepted or refused with a reason, never "unknown"; values
with a syntax are checked as Slurm's srun checks them."""

from __future__ import annotations

import pytest

from fusesched.agent.step_args import MPI_LIST, VERSION, mpi_listing, parse_args, takes_value
from fusesched.agent.step_files import split_files
from fusesched.agent.step_option_table import ACCEPTED, REFUSED
from fusesched.agent.step_plan import StepError

JOB = {"SLURM_JOB_ID": "12", "FUSESCHED_JOB_ID": "12"}


def test_snakemakes_step_line_runs() -> None:
    """What Snakemake's Slurm executor runs inside its jobs (the report that found this)."""
    options = parse_args(
        ["-n1", "--cpu-bind=q", "--cpus-per-task=2", "--mem=1G", "snakemake", "--rule", "a"], JOB
    )
    assert (options.ntasks, options.cpus_per_task, options.mem) == (1, 2, "1G")
    assert options.command == ("snakemake", "--rule", "a")
    assert options.warnings == ()


CPU_BINDS = [
    "none",
    "no",
    "q",
    "quiet",
    "v",
    "verbose",
    "cores",
    "threads",
    "sockets",
    "ldoms",
    "boards",
    "rank",
    "rank_ldom",
    "map_cpu:0,2,4",
    "map_cpu:0x1*2,3",
    "mask_cpu:0x3,0xC",
    "mask_cpu:f0",
    "map_ldom:0,1",
    "mask_ldom:0x1,0x2",
    "quiet,cores",
    "v,map_cpu:1",
    "verbose,none",
    "help",
]


@pytest.mark.parametrize("value", CPU_BINDS)
def test_every_cpu_bind_form_is_accepted(value: str) -> None:
    assert parse_args([f"--cpu-bind={value}", "x"], JOB).command == ("x",)
    assert parse_args(["--cpu-bind", value, "x"], JOB).command == ("x",)


def test_cpu_bind_says_how_tasks_are_bound_when_asked() -> None:
    assert parse_args(["--cpu-bind=quiet,cores", "x"], JOB).warnings == ()
    (said,) = parse_args(["--cpu-bind=verbose,cores", "x"], JOB).warnings
    assert "CPUs of its own" in said
    (said,) = parse_args(["--cpu-bind=map_cpu:0,1", "x"], JOB).warnings
    assert said.startswith("--cpu-bind=map_cpu:0,1:")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cpu-bind=bogus", "x"], "unrecognized type 'bogus'"),
        (["--cpu-bind=cores,threads", "x"], "one binding type"),
        (["--cpu-bind=map_cpu:", "x"], "takes CPU numbers"),
        (["--cpu-bind=map_cpu:a-b", "x"], "takes CPU numbers"),
        (["--mem-bind=bogus", "x"], "--mem-bind: unrecognized"),
        (["--hint=fast", "x"], "--hint takes"),
        (["--accel-bind=z", "x"], "g, m, n and v"),
        (["-m", "diagonal", "x"], "block, cyclic, plane=N"),
        (["-m", "block:block:block:block", "x"], "block, cyclic"),
        (["-m", "cyclic,Stack", "x"], "Pack or NoPack"),
        (["-m", "arbitrary", "x"], "SLURM_HOSTFILE"),
        (["-t", "soon", "x"], "cannot read time"),
        (["--signal=KILL@10", "x"], "not a signal a task can catch"),
        (["--signal=USR1@x", "x"], "whole seconds"),
        (["-W", "-1", "x"], "whole number"),
        (["-w", "a[1-", "x"], "-w/--nodelist"),
        (["-w", "/etc/hosts", "x"], "host files are not supported"),
        (["-r", "1", "-w", "a", "x"], "cannot be given with"),
        (["-D", "", "x"], "needs a path"),
        (["--exclusive=others", "x"], "user or mcs"),
        (["--uid=0", "x"], "only root"),
        (["--bcast", "x"], "not copied"),
        (["--prolog=p", "x"], "in the script, before srun"),
        (["--gpus-per-socket=1", "x"], "--gpus-per-task"),
        (["-Z", "x"], "within its job's allocation"),
        (["--multi-prog", "--mpi=pmix", "c"], "--mpi=none"),
        (["--pty", "-D", "/tmp", "bash"], "not supported with it"),
        (["--het-group=1", "-w", "a", "x"], "heterogeneous"),
        (["--jobid=99", "x"], "its own job \\(12\\) only"),
        (["--cpu-bnd=q", "x"], "did you mean --cpu-bind"),
    ],
)
def test_bad_values_and_refused_options_say_why(argv: list[str], message: str) -> None:
    with pytest.raises(StepError, match=message):
        parse_args(argv, JOB)


def test_multi_prog_under_a_site_mpi_type_is_refused() -> None:
    with pytest.raises(StepError, match="--mpi=none"):
        parse_args(["--multi-prog", "c"], JOB | {"SLURM_MPI_TYPE": "pmix"})
    assert parse_args(["--multi-prog", "--mpi=none", "c"], JOB | {"SLURM_MPI_TYPE": "pmix"})


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_every_accepted_option_is_taken(name: str) -> None:
    known = ACCEPTED[name]
    written = f"--{name}" if known.takes != "yes" else f"--{name}=1"
    if name in ("cpu-bind", "mem-bind"):
        written = f"--{name}=none"
    elif name == "hint":
        written = "--hint=nomultithread"
    elif name == "accel-bind":
        written = "--accel-bind=g"
    assert parse_args([written, "x"], JOB).command == ("x",)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_refused_option_says_why(name: str) -> None:
    with pytest.raises(StepError, match=f"--{name} is not supported inside a job: .+"):
        parse_args([f"--{name}=1" if REFUSED[name].takes == "yes" else f"--{name}", "x"], JOB)


def test_short_letters_of_accepted_options() -> None:
    options = parse_args(
        ["-vvv", "-Q", "-X", "-A", "acct", "-pgpu", "-q", "high", "-C", "a100", "-k", "x"], JOB
    )
    assert options.command == ("x",)
    (said,) = parse_args(["-O", "-s", "x"], JOB).warnings
    assert "-O/--overcommit" in said


def test_applied_options_are_read() -> None:
    options = parse_args(
        [
            "-D",
            "sub",
            "-t",
            "1:30",
            "--signal=R:USR1@20",
            "--task-prolog=/p",
            "--task-epilog",
            "/e",
            "-w",
            "a[1-2]",
            "-x",
            "b1",
            "-m",
            "cyclic:block,NoPack",
            "-W",
            "5",
            "--jobid=12",
            "x",
        ],
        JOB,
    )
    assert options.chdir == "sub"
    assert options.time_limit == 120  # (1:30 rounded up to whole minutes, as Slurm)
    assert options.signal == (10, 20)
    assert (options.task_prolog, options.task_epilog) == ("/p", "/e")
    assert options.nodelist == ("a1", "a2")
    assert options.exclude == ("b1",)
    assert options.distribution == "cyclic"
    assert options.wait == 5
    assert parse_args(["-r2", "-m", "plane=4", "-t", "0", "x"], JOB).relative == 2
    assert parse_args(["-m", "*:fcyclic", "x"], JOB).distribution == "block"
    assert parse_args(["-t", "UNLIMITED", "--signal=2", "x"], JOB).time_limit == 0
    said = parse_args(["--begin=now+60", "x"], JOB).warnings
    assert said == ("--begin is ignored: the job's nodes are already allocated",)


def test_kill_on_bad_exit_and_exclusive_take_their_values_attached() -> None:
    assert parse_args(["-K1", "x"], JOB).kill_on_bad_exit is True
    assert parse_args(["-K0", "x"], JOB).kill_on_bad_exit is False
    assert parse_args(["-Kl", "x"], JOB).label is True
    assert parse_args(["--exclusive=user", "--exclusive", "x"], JOB).command == ("x",)


def test_preserve_env_takes_the_jobs_counts_over_n_and_big_n() -> None:
    options = parse_args(["-E", "-n", "1", "-N", "1", "x"], JOB)
    assert (options.ntasks, options.nodes) == (None, None)
    assert parse_args(["-n", "1", "x"], JOB).ntasks == 1


def test_help_usage_and_version_print_instead_of_a_step() -> None:
    for argv in (["-h"], ["--help"], ["--usage"], ["-n", "2", "--help", "x"]):
        listing = mpi_listing(argv)
        assert listing is not None and listing.startswith("usage: srun")
    assert mpi_listing(["-V"]) == VERSION
    assert mpi_listing(["--mpi=list"]) == MPI_LIST
    assert mpi_listing(["-n", "2", "x"]) is None


def test_the_file_options_pass_over_the_values_of_the_others() -> None:
    for option in ("-w", "-x", "-D", "-t", "-W", "-m", "-r", "-p", "-A", "--cpu-bind"):
        assert takes_value(option) is True
    for option in ("-v", "-Q", "-O", "-X", "--multi-prog", "-E", "--nice", "-k"):
        assert takes_value(option) is False
    files, rest = split_files(["-w", "-o", "-vo", "out", "-p", "-e", "x"])
    assert rest == ["-w", "-o", "-v", "-p", "-e", "x"]  # (-o and -e: values of -w and -p)
    assert files.output == "out"
