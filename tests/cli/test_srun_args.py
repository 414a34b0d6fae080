"""``fusesched run``'s arguments, the exit status of waited-for jobs and the output passed on:
the pure parts (tests/live/test_cli_run_wait.py runs them against a live cluster)."""

from __future__ import annotations

import pytest

from fusesched.cli.fast import _asks_the_command
from fusesched.cli.srun import Output, task_index
from fusesched.cli.srun_args import RunUsageError, job_args, job_request, split_run_args
from fusesched.cli.waiting import Target, exit_code, exit_status, target
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import ArrayRequest
from fusesched.submit.sbatch import command_flags, parse_sbatch


@pytest.mark.parametrize(
    ("args", "options", "command"),
    [
        (["echo", "hello"], [], ["echo", "hello"]),
        (["-n", "2", "-t", "5", "hostname"], ["-n", "2", "-t", "5"], ["hostname"]),
        (["-n2", "--mem=1G", "ls", "-l"], ["-n2", "--mem=1G"], ["ls", "-l"]),
        (
            ["--exclusive", "-J", "x", "a.out", "-n", "3"],
            ["--exclusive", "-J", "x"],
            ["a.out", "-n", "3"],
        ),
        (["-N", "1", "--", "-weird", "arg"], ["-N", "1"], ["-weird", "arg"]),
        (
            ["--gres", "gpu:1", "-c", "4", "nvidia-smi"],
            ["--gres", "gpu:1", "-c", "4"],
            ["nvidia-smi"],
        ),
        (
            ["--exclusive=user", "-w", "node-a", "true"],
            ["--exclusive=user", "-w", "node-a"],
            ["true"],
        ),
    ],
)
def test_the_options_end_at_the_command(
    args: list[str], options: list[str], command: list[str]
) -> None:
    parsed = split_run_args(args)
    assert list(parsed.options) == options
    assert list(parsed.command) == command


def test_run_own_options_are_not_the_jobs() -> None:
    parsed = split_run_args(
        ["-l", "-Q", "-u", "--controller", "http://c:1", "--token=t", "-n", "2", "env"]
    )
    assert parsed.label and parsed.quiet
    assert parsed.own == {"--controller": "http://c:1", "--token": "t"}
    assert parsed.options == ("-n", "2")
    assert split_run_args(["--help"]).help
    assert not split_run_args(["echo", "--help"]).help  # the command's own


def test_pty_is_runs_own_flag_up_to_the_command() -> None:
    parsed = split_run_args(["-p", "gpu", "--pty", "bash", "--pty"])
    assert parsed.own == {"--pty": ""} and parsed.options == ("-p", "gpu")
    assert parsed.command == ("bash", "--pty")  # (the command's own)


def test_srun_options_without_meaning_here_are_ignored_with_a_warning() -> None:
    parsed = split_run_args(["--mpi", "pmix", "-m", "block", "--cpu-bind=cores", "./a.out"])
    assert parsed.command == ("./a.out",)
    assert parsed.options == ()
    assert len(parsed.warnings) == 3 and "--mpi is not supported" in parsed.warnings[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no command given"),
        (["-n", "2"], "no command given"),
        (["-n"], "-n needs a value"),
        (["--frobnicate", "x"], "unknown option --frobnicate"),
        (["--ntask", "2", "x"], "did you mean --ntasks?"),
        (["-y", "x"], "unknown option -y"),
        (["-Z", "x"], "-Z: a job always runs in an allocation of its own"),
        (["--wrap=ls"], "run takes the command itself"),
        (["-a", "1-3", "x"], "use fusesched sbatch --array"),
        (["--wait", "x"], "run always waits"),
        (["--parsable", "x"], "sbatch's"),
        (["--controller"], "--controller needs a value"),
    ],
)
def test_bad_arguments_are_named(args: list[str], message: str) -> None:
    with pytest.raises(RunUsageError, match=message.replace("?", r"\?")):
        split_run_args(args)


def test_an_unknown_option_with_its_value_attached_is_passed_on() -> None:
    parsed = split_run_args(["--frobnicate=high", "x"])
    assert parsed.options == ("--frobnicate=high",)
    job = parse_sbatch("", source="run", args=job_args(parsed))
    assert any("--frobnicate is not supported" in w for w in job.warnings)


def test_the_job_runs_the_command_and_is_named_after_it() -> None:
    args = ["-n", "2", "-t", "5", "/bin/echo", "it's", "a b"]
    wrapped = parse_sbatch("", source="run", args=job_args(split_run_args(args)))
    assert wrapped.request.groups[0].script == "#!/bin/sh\n/bin/echo 'it'\"'\"'s' 'a b'\n"
    request, warnings = job_request(split_run_args(args))
    assert request.name == "echo" and warnings == ()
    assert request.walltime_s == 300
    group = request.groups[0]
    assert group.replicas == 2
    assert group.script is None  # every task runs the command (a script: the first only)
    assert group.argv == ["/bin/echo", "it's", "a b"]
    # a command whose name holds a tab or a newline names the job without them (one line)
    odd, _ = job_request(split_run_args(["./my\tprog\n"]))
    assert odd.name == "myprog" and odd.groups[0].argv == ["./my\tprog\n"]
    named, _ = job_request(split_run_args(["-J", "mine", "true"]))
    assert named.name == "mine"


def test_the_job_starts_where_run_runs_and_writes_no_output_file() -> None:
    here, _ = job_request(split_run_args(["pwd"]), "/home/ann/run")
    assert here.submit_dir == "/home/ann/run" and here.groups[0].workdir is None
    assert here.output is None  # (sbatch's slurm-%j.out: run prints the output instead)
    inner, _ = job_request(split_run_args(["-D", "sub", "-o", "out.txt", "pwd"]), "/home/ann")
    assert (inner.submit_dir, inner.groups[0].workdir) == ("/home/ann", "sub")
    assert inner.output == "out.txt"  # (one -o names is kept)
    unknown, _ = job_request(split_run_args(["pwd"]))  # (the folder cannot be told)
    assert unknown.submit_dir is None


def test_a_bad_value_is_the_sbatch_parsers_error() -> None:
    with pytest.raises(SubmitError, match="cannot read time"):
        job_request(split_run_args(["-t", "soon", "true"]))


def test_task_index() -> None:
    assert task_index("12.main.0") == 0
    assert task_index("12-r1.main.3") == 3


def test_output_labels_whole_lines_per_task() -> None:
    written: list[str] = []
    out = Output(written.append, label=True, width=12)
    out.add(0, "a")
    out.add(11, "x\ny\n")
    out.add(0, "b\nc")
    out.end()
    assert "".join(written) == "11: x\n11: y\n 0: ab\n 0: c\n"
    plain: list[str] = []
    one = Output(plain.append, label=False, width=1)
    one.add(0, "par")
    one.add(0, "tial")
    one.end()
    assert plain == ["par", "tial"]  # one task: passed on as it comes


def job(
    state: str, code: int | None = None, phase: str = "", job_id: str = "1"
) -> dict[str, object]:
    return {"id": job_id, "state": state, "exit_code": code, "phase": phase or state.lower()}


@pytest.mark.parametrize(
    ("record", "code"),
    [
        (job("Completed", 0), 0),
        (job("Failed", 3), 3),
        (job("Failed", -9), 137),
        (job("Failed", None), 1),
        (job("Failed", -15, phase="timeout"), 1),
        (job("Cancelled", None), 1),
        (job("Cancelled", -15), 1),
        (job("Failed", 300), 1),
    ],
)
def test_exit_code_of_one_job(record: dict[str, object], code: int) -> None:
    assert exit_code(record) == code


def test_exit_status_of_several_is_the_highest() -> None:
    outcome = exit_status(
        [
            job("Completed", 0, job_id="1_0"),
            job("Failed", 2, job_id="1_1"),
            job("Failed", 5, job_id="1_2"),
        ]
    )
    assert outcome.code == 5
    assert outcome.lines == ("job 1_1 failed with exit code 2", "job 1_2 failed with exit code 5")
    assert exit_status([job("Completed", 0)]).code == 0


def test_targets() -> None:
    assert target("7", None) == Target("7") and Target("7").count == 1
    assert target("7", ArrayRequest(start=1, stop=5, step=2)) == Target("7", 3)


def test_a_script_may_ask_for_the_commands_own_options() -> None:
    script = "#!/bin/sh\n#SBATCH -W\n#SBATCH --parsable --time=1\necho hi\n#SBATCH --wait\n"
    assert command_flags(script) == {"wait", "parsable"}
    assert command_flags("#!/bin/sh\n#SBATCH --time=1\n") == frozenset()
    assert command_flags("name: yaml\n") == frozenset()
    parsed = parse_sbatch(script)  # no effect on the job, no warning about them
    assert not [w for w in parsed.warnings if "wait" in w or "parsable" in w]
    with pytest.raises(SubmitError, match="--wait takes no value"):
        parse_sbatch("#!/bin/sh\n#SBATCH --wait=10\ntrue\n")
    assert _asks_the_command(script)
    assert not _asks_the_command("#!/bin/sh\ngcc -Wall x.c\n")


def test_srun_flags_with_no_effect_are_taken_as_srun_inside_a_job_takes_them() -> None:
    parsed = split_run_args(
        ["-vvv", "-X", "--quit-on-interrupt", "--exact", "--propagate=STACK", "-O", "-n", "2", "a"]
    )
    assert parsed.options == ("-n", "2") and parsed.command == ("a",)
    assert parsed.warnings == ("-O has no effect with fusesched run; ignored",)
    parsed = split_run_args(["--mem-bind=local", "-T", "4", "--gpu-bind=closest", "a"])
    assert parsed.options == () and len(parsed.warnings) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--multi-prog", "mp.conf"], "one command on every task"),
        (["--task-prolog=p", "a"], "applies it to a job step"),
        (["-r", "1", "a"], "no allocation to be relative to"),
        (["-K", "a"], "run to their own ends"),
        (["-i", "none", "a"], "only with --pty"),
        (["--het-group=1", "a"], "hetjob"),
        (["--uid=0", "a"], "as the user who submits it"),
    ],
)
def test_srun_options_run_cannot_apply_are_refused_with_why(args: list[str], message: str) -> None:
    with pytest.raises(RunUsageError, match=message):
        split_run_args(args)
