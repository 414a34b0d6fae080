"""sbatch's --comment, --nice/--priority, --requeue/--no-requeue, --mem-per-gpu/--cpus-per-gpu,
--export, --kill-on-invalid-dep, and the reasons --tmp and --time-min are ignored."""

from __future__ import annotations

import re

import pytest

from fusesched.cli.srun_args import split_run_args
from fusesched.submit import JobRequest, ParsedJob, SubmitError, parse_sbatch
from fusesched.submit.request import MAX_COMMENT, parse_request

GPU_OPTIONS = "--gpus-per-task, --gres=gpu:N, --gpus-per-node or -G/--gpus"


def parsed(directives: str, args: list[str] | None = None) -> ParsedJob:
    return parse_sbatch("#!/bin/sh\n" + directives + "\n./run\n", source="s.sh", args=args or [])


def parse(directives: str, args: list[str] | None = None) -> JobRequest:
    return parsed(directives, args).request


def refused(directives: str, args: list[str] | None = None) -> str:
    with pytest.raises(SubmitError) as caught:
        parsed(directives, args)
    return str(caught.value)


# --comment


def test_comment_is_kept_as_written() -> None:
    req = parse('#SBATCH --comment="sweep 3 of 10, lr=3e-4"')
    assert req.comment == "sweep 3 of 10, lr=3e-4"
    assert JobRequest.from_json(req.to_json()).comment == req.comment
    assert parse("").comment == ""
    assert parse("#SBATCH --comment=old", ["--comment=new"]).comment == "new"


def test_comment_must_be_one_bounded_line() -> None:
    assert refused("#SBATCH --comment=" + "x" * (MAX_COMMENT + 1)) == (
        f"s.sh:2: --comment: the comment is {MAX_COMMENT + 1} characters long: "
        f"at most {MAX_COMMENT}"
    )
    assert refused("", ["--comment=a\nb"]) == "command line: --comment: must be one line"
    assert parse("#SBATCH --comment=" + "x" * MAX_COMMENT).comment == "x" * MAX_COMMENT
    with pytest.raises(SubmitError, match="comment: the comment must be one line"):
        parse_request({"comment": "a\rb", "groups": [{"resources": {"cpu": 1}, "argv": ["x"]}]})


@pytest.mark.parametrize(
    ("text", "code"),
    [("red \x1b[31mtext", "001B"), ("bell\x07", "0007"), ("a\tb", "0009"), ("a\u2028b", "2028")],
)
def test_comment_refuses_control_characters(text: str, code: str) -> None:
    """An escape sequence in a comment would reach the terminal of whoever runs ``show``."""
    reason = f"the comment holds a control character (U+{code}): give printable text"
    assert refused("", [f"--comment={text}"]) == f"command line: --comment: {reason}"
    with pytest.raises(SubmitError, match=re.escape(f"comment: {reason}")):
        parse_request({"comment": text, "groups": [{"resources": {"cpu": 1}, "argv": ["x"]}]})
    assert parse("", ["--comment=café — ok [b]x[/b]"]).comment == "café — ok [b]x[/b]"


# --nice, --priority


@pytest.mark.parametrize(
    ("directives", "priority"),
    [
        ("", 0),
        ("#SBATCH --nice", -100),  # Slurm's default adjustment
        ("#SBATCH --nice=250", -250),
        ("#SBATCH --nice=-20", 20),  # a negative adjustment raises it
        ("#SBATCH --nice=+0", 0),
        ("#SBATCH --priority=42", 42),
        ("#SBATCH --priority=-7", -7),
        ("#SBATCH --priority 2147483647", 2**31 - 1),
        ("#SBATCH --nice=2147483645", -2147483645),
    ],
)
def test_nice_and_priority(directives: str, priority: int) -> None:
    req = parse(directives)
    assert req.priority == priority
    assert req.to_job_spec("1", 0.0).priority == priority


def test_priority_wins_over_nice_with_a_warning() -> None:
    job = parsed("#SBATCH --nice=10\n#SBATCH --priority=5")
    assert job.request.priority == 5
    assert job.warnings == (
        "s.sh:2: --nice is ignored: --priority sets the job's priority (as Slurm)",
    )


@pytest.mark.parametrize(
    ("directives", "message"),
    [
        ("--nice=low", "--nice: expected a whole number (an adjustment, default 100), got 'low'"),
        ("--nice=2147483646", "--nice: the adjustment must be within ±2147483645, got 2147483646"),
        ("--priority=2147483648", "--priority: the priority must be within -2147483648 … "),
        ("--priority=TOP", "--priority: give a number (-2147483648 … 2147483647): TOP is not"),
        ("--priority=1.5", "--priority: expected a whole number, got '1.5'"),
        ("--priority", "--priority: --priority needs a value"),
    ],
)
def test_nice_and_priority_refusals(directives: str, message: str) -> None:
    assert refused(f"#SBATCH {directives}").startswith(f"s.sh:2: {message}")


def test_nice_takes_its_value_attached_only() -> None:
    """As sbatch: ``--nice 5`` is ``--nice`` and a stray word."""
    assert "unexpected word '5'" in refused("#SBATCH --nice 5")


# --requeue, --no-requeue


def test_no_requeue_marks_the_job_not_to_be_requeued() -> None:
    job = parse("#SBATCH --no-requeue")
    assert job.requeue is False
    assert job.restart == parse("").restart  # (its restart policy is the default)
    assert parse("").requeue is True and parse("#SBATCH --requeue").requeue is True
    # the last one given wins, the command line over the script
    assert parse("#SBATCH --requeue", ["--no-requeue"]).requeue is False
    assert parse("#SBATCH --no-requeue", ["--requeue"]).requeue is True
    assert parse("#SBATCH --no-requeue --requeue").requeue is True
    spec = parse("#SBATCH --no-requeue").to_job_spec("1", 0.0)
    assert spec.requeue is False  # (the core reads it when the job is preempted)


def test_requeue_takes_no_value() -> None:
    assert refused("#SBATCH --requeue=yes") == "s.sh:2: --requeue: takes no value"
    assert refused("", ["--no-requeue=1"]) == "command line: --no-requeue: takes no value"


# --cpus-per-gpu, --mem-per-gpu


@pytest.mark.parametrize(
    ("directives", "resources"),
    [
        (
            "#SBATCH --gpus-per-task=2 --cpus-per-gpu=4 --mem-per-gpu=10G",
            {"cpu": "8", "memory": "20Gi", "nvidia.com/gpu": "2"},
        ),
        (  # 4 GPUs per node, 2 tasks a node: 2 GPUs per task
            "#SBATCH --gres=gpu:a100:4 --ntasks-per-node=2 --cpus-per-gpu=6 --mem-per-cpu=1G",
            {"cpu": "12", "memory": "12Gi", "nvidia.com/gpu": "2"},
        ),
        (
            "#SBATCH -G 4 -n 4 --mem-per-gpu=512M",
            {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "1"},
        ),
        ("#SBATCH --gpus-per-node=8 -N 2 --cpus-per-gpu=2", {"cpu": "16", "nvidia.com/gpu": "8"}),
        (
            "#SBATCH --gpus-per-task=1 -c 3 --mem-per-gpu=2G",
            {"cpu": "3", "memory": "2Gi", "nvidia.com/gpu": "1"},
        ),
    ],
)
def test_per_gpu_amounts(directives: str, resources: dict[str, str]) -> None:
    assert parse(directives).groups[0].resources == resources


@pytest.mark.parametrize(
    ("directives", "message"),
    [
        ("-c 2 --cpus-per-gpu=4 --gpus-per-task=1", "2: --cpus-per-gpu: -c and --cpus-per-gpu "),
        (
            "--cpus-per-task=2\n#SBATCH --cpus-per-gpu=4 -G 1",
            "3: --cpus-per-gpu: --cpus-per-task and --cpus-per-gpu cannot both be given",
        ),
        ("--cpus-per-gpu=4", f"2: --cpus-per-gpu: needs GPUs ({GPU_OPTIONS})"),
        ("--mem-per-gpu=4G --gres=fpga:1", f"2: --mem-per-gpu: needs GPUs ({GPU_OPTIONS})"),
        ("--mem=1G --mem-per-gpu=4G -G 1", "2: --mem-per-gpu: --mem and --mem-per-gpu cannot both"),
        (
            "--mem-per-cpu=1G -G 1\n#SBATCH --mem-per-gpu=4G",
            "3: --mem-per-gpu: --mem-per-cpu and --mem-per-gpu cannot both be given",
        ),
        ("--mem-per-gpu=lots -G 1", "2: --mem-per-gpu: "),
        ("--cpus-per-gpu=0 -G 1", "2: --cpus-per-gpu: expected a whole number ≥ 1, got '0'"),
    ],
)
def test_per_gpu_refusals(directives: str, message: str) -> None:
    assert refused(f"#SBATCH {directives}").startswith(f"s.sh:{message}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpus-per-gpu=²", "-G", "1"], "--cpus-per-gpu: expected a whole number ≥ 1, got '²'"),
        (["-c", "²"], "-c: expected a whole number ≥ 1, got '²'"),
        (["--gpus-per-task=²"], "--gpus-per-task: expected [type:]count, got '²'"),
        (["-N", "²"], "-N: expected a node count such as 4 or 2-4, got '²'"),
    ],
)
def test_counts_in_other_digits_are_refused_not_a_traceback(args: list[str], message: str) -> None:
    """``str.isdigit`` takes "²", which ``int`` refuses: a located error, not a ValueError."""
    assert refused("", args).startswith(f"command line: {message}")


# --export


@pytest.mark.parametrize(
    ("value", "env", "warned"),
    [
        ("NONE", {}, False),
        ("none", {}, False),
        ("ALL", {}, True),
        ("A=1", {"A": "1"}, False),
        ("A=1,B=two words", {"A": "1", "B": "two words"}, False),
        ("NONE,A=1,URL=http://x/?q=1", {"A": "1", "URL": "http://x/?q=1"}, False),
        ("ALL,EMPTY=", {"EMPTY": ""}, True),
    ],
)
def test_export(value: str, env: dict[str, str], warned: bool) -> None:
    job = parsed(f'#SBATCH "--export={value}"')
    assert job.request.groups[0].env == env
    if warned:
        (warning,) = job.warnings
        assert warning.startswith("s.sh:2: --export=ALL: the submitting shell's environment was")
    else:
        assert job.warnings == ()


def test_export_all_is_warned_of_once() -> None:
    job = parsed("#SBATCH --export=ALL", ["--export=ALL,A=1"])
    assert len(job.warnings) == 1 and job.warnings[0].startswith("command line: --export=ALL")
    assert job.request.groups[0].env == {"A": "1"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("HOME", "--export: HOME has no value: write HOME=value (the submitting shell's"),
        ("ALL,PATH", "--export: PATH has no value: write PATH=value"),
        ("A=1,,B=2", "--export: expected ALL, NONE or NAME=value joined by ',', got 'A=1,,B=2'"),
        ("", "--export: expected ALL, NONE or NAME=value"),
        ("1A=x", "--export: invalid environment variable name '1A'"),
        ("A=1,NONE", "--export: NONE may only come first (--export=NONE,NAME=value)"),
        ("A=1,A=2", "--export: A is given twice"),
    ],
)
def test_export_refusals(value: str, message: str) -> None:
    assert refused("", [f"--export={value}"]).startswith(f"command line: {message}")


# --kill-on-invalid-dep, --tmp, --time-min


def test_kill_on_invalid_dep() -> None:
    assert parsed("#SBATCH --kill-on-invalid-dep=yes").warnings == ()
    (warning,) = parsed("#SBATCH --kill-on-invalid-dep=no").warnings
    assert warning.startswith("s.sh:2: --kill-on-invalid-dep=no: fusesched always cancels")
    assert refused("#SBATCH --kill-on-invalid-dep=maybe") == (
        "s.sh:2: --kill-on-invalid-dep: expected yes or no, got 'maybe'"
    )


def test_tmp_and_time_min_are_ignored_with_the_reason() -> None:
    job = parsed("#SBATCH --time-min=10 --tmp=10G -n 2")
    assert job.request.groups[0].replicas == 2
    assert job.warnings == (
        "s.sh:2: --time-min is not supported: a job's time limit is its --time, never "
        "shortened to start it sooner; ignored",
        "s.sh:2: --tmp is not supported: nodes do not advertise local disk space; ignored",
    )


# fusesched run shares the parser


def test_run_passes_the_new_options_to_the_parser() -> None:
    args = split_run_args(
        ["--export=A=1", "--nice", "--no-requeue", "--comment=hi there", "-G", "1",
         "--cpus-per-gpu", "2", "env"]
    )  # fmt: skip
    assert args.warnings == () and args.command == ("env",)
    assert args.options == (
        "--export=A=1", "--nice", "--no-requeue", "--comment=hi there", "-G", "1",
        "--cpus-per-gpu", "2",
    )  # fmt: skip
    req = parse_sbatch("", source="run", args=[*args.options, "--wrap=env"]).request
    assert req.groups[0].env == {"A": "1"} and req.priority == -100
    assert req.requeue is False and req.comment == "hi there"
    assert req.groups[0].resources == {"cpu": "2", "nvidia.com/gpu": "1"}
