"""sbatch's ``--deadline`` (the forms of ``--begin``) and ``--open-mode``, the request fields
they become (``deadline``, ``open_mode``, also in YAML) and what is refused, located."""

from __future__ import annotations

import pytest

from fusesched.submit import SubmitError, parse_sbatch
from fusesched.submit.request import JobRequest, parse_request
from fusesched.submit.yaml_spec import parse_job_yaml

NOW = 1_700_000_000.0


def parse(directives: str, args: list[str] | None = None) -> JobRequest:
    script = "#!/bin/sh\n" + directives + "\n./run\n"
    return parse_sbatch(script, source="s.sh", args=args or [], now=NOW).request


def refused(directives: str, args: list[str] | None = None) -> str:
    with pytest.raises(SubmitError) as caught:
        parse(directives, args)
    return str(caught.value)


@pytest.mark.parametrize(
    ("value", "ahead"),
    [("now+1hour", 3600.0), ("now+90minutes", 5400.0), ("now+2h", 7200.0), ("now+1d", 86400.0)],
)
def test_deadline_takes_the_forms_of_begin(value: str, ahead: float) -> None:
    job = parse(f"#SBATCH -t 30 --deadline={value}")
    assert job.deadline == NOW + ahead
    assert job.to_job_spec("1", NOW).deadline == NOW + ahead  # (the core removes it then)


def test_deadline_absolute_and_on_the_command_line() -> None:
    job = parse("#SBATCH -t 30 --deadline=now+1hour", ["--deadline=2030-01-31T08:00:00Z"])
    assert job.deadline == 1896076800.0
    assert parse("#SBATCH -t 30").deadline is None


@pytest.mark.parametrize(
    ("directives", "message"),
    [
        ("--deadline=now+1hour", "--deadline: a deadline needs a time limit (--time)"),
        ("-t 30 --deadline=junk", "--deadline: cannot read the deadline 'junk' (use HH:MM"),
        ("-t 30 --deadline=2001-01-01", "--deadline: the deadline '2001-01-01' has passed"),
        ("-t 30 --deadline=now", "--deadline: the deadline 'now' has passed"),
        (
            "-t 2:00:00 --deadline=now+1hour",
            "--deadline: the job cannot end by its deadline 'now+1hour': its time limit "
            "(7200 s) runs past it even if it started now",
        ),
        ("-t 30 --deadline=now+5parsecs", "--deadline: deadline 'now+5parsecs': unknown unit"),
        ("-t 30 --deadline=25:00", "--deadline: deadline '25:00': no such time of day"),
        (
            "-t 60 --begin=now+1hour --deadline=now+90minutes",
            "the begin time and the deadline are incompatible",
        ),
    ],
)
def test_deadline_refusals(directives: str, message: str) -> None:
    assert message in refused(f"#SBATCH {directives}")


def test_open_mode() -> None:
    assert parse("").open_mode == "truncate"  # Slurm's default (JobFileAppend=0)
    assert parse("#SBATCH --open-mode=append").open_mode == "append"
    assert parse("#SBATCH --open-mode=Truncate", ["--open-mode=APPEND"]).open_mode == "append"
    assert refused("#SBATCH --open-mode=sometimes") == (
        "s.sh:2: --open-mode: expected append or truncate, got 'sometimes'"
    )


def test_open_mode_is_no_longer_warned_about() -> None:
    job = parse_sbatch("#!/bin/sh\n#SBATCH --open-mode=append\n./run\n", now=NOW)
    assert job.warnings == ()


def test_request_fields_and_their_checks() -> None:
    group = [{"argv": ["true"], "resources": {"cpu": "1"}}]
    job = parse_request({"groups": group, "walltime_s": 60, "deadline": NOW, "requeue": False})
    spec = job.to_job_spec("7", NOW - 100)
    assert (spec.deadline, spec.requeue) == (NOW, False)
    assert JobRequest.from_json(job.to_json()) == job
    with pytest.raises(SubmitError, match="a deadline needs a time limit"):
        parse_request({"groups": group, "deadline": NOW})
    with pytest.raises(SubmitError, match="begin time and the deadline are incompatible"):
        parse_request({"groups": group, "walltime_s": 60, "begin_time": NOW, "deadline": NOW})
    with pytest.raises(SubmitError, match="open_mode"):
        parse_request({"groups": group, "open_mode": "sometimes"})


def test_yaml_deadline_takes_a_time() -> None:
    text = "command: ./run\nresources: {cpu: 1}\nwalltime: 10m\ndeadline: "
    (job,) = parse_job_yaml(text + "2030-01-31T08:00:00Z\n")
    assert job.deadline == 1896076800.0
    (job,) = parse_job_yaml(text + "1896076800\n")
    assert job.deadline == 1896076800.0
    with pytest.raises(SubmitError, match=r"<string>:4: cannot read the deadline 'soon'"):
        parse_job_yaml(text + "soon\n")
