"""The warning signal before the time limit as a job asks for it: ``sbatch --signal`` in its
forms, the job field ``signal`` (YAML, JSON), the signal names and numbers, and the refusals
and warnings a user gets."""

from __future__ import annotations

import pytest

from fusesched.submit.errors import SubmitError
from fusesched.submit.job_signal import JobSignal, parse_signal_option, signal_name
from fusesched.submit.load import parse_submission
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/bash\n#SBATCH --time=10:00\nsrun hostname\n"


def signal_of(*args: str, script: str = SCRIPT) -> JobSignal | None:
    return parse_sbatch(script, source="job.sh", args=list(args)).request.signal


@pytest.mark.parametrize(
    ("option", "name", "before_s", "main_only"),
    [
        ("USR1", "USR1", 60.0, False),  # Slurm's default lead: 60 s
        ("SIGUSR1", "USR1", 60.0, False),
        ("usr2@120", "USR2", 120.0, False),
        ("10@30", "USR1", 30.0, False),  # by number
        ("B:USR1@90", "USR1", 90.0, True),  # the batch shell only
        ("b:sigterm@5", "TERM", 5.0, True),
        ("SIGIOT", "ABRT", 60.0, False),  # an alias: its usual name
        ("  INT @ 7 ", "INT", 7.0, False),
    ],
)
def test_sbatch_signal_forms(option: str, name: str, before_s: float, main_only: bool) -> None:
    assert signal_of(f"--signal={option}") == JobSignal(
        name=name, before_s=before_s, main_only=main_only
    )


def test_the_directive_and_the_command_line() -> None:
    script = "#!/bin/bash\n#SBATCH --time=10:00\n#SBATCH --signal=B:USR2@45\nsrun true\n"
    assert signal_of(script=script) == JobSignal(name="USR2", before_s=45, main_only=True)
    # the command line overrides the directive, as for every option
    assert signal_of("--signal", "USR1", script=script) == JobSignal(name="USR1")
    assert signal_of() is None


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("R:USR1@60", "R: flag (signal when a reservation ends) is not supported"),
        ("RB:USR1", "R: flag"),
        ("X:USR1", "unknown flag 'X:'"),
        (":USR1", "unknown flag"),
        ("KILL", "SIGKILL cannot be caught"),
        ("SIGSTOP@10", "SIGSTOP cannot be caught"),
        ("9", "SIGKILL cannot be caught"),
        ("FOO", "unknown signal 'FOO'"),
        ("99", "unknown signal number 99"),
        ("USR1@0", "whole number of seconds from 1 to 65535"),
        ("USR1@-5", "whole number of seconds"),
        ("USR1@1.5", "whole number of seconds"),
        ("USR1@70000", "from 1 to 65535"),
        ("USR1@", "whole number of seconds"),
        ("@60", "no signal"),
        ("B:", "no signal"),
    ],
)
def test_bad_sbatch_signals_are_refused_with_the_reason(option: str, message: str) -> None:
    with pytest.raises(SubmitError, match="--signal") as caught:
        signal_of(f"--signal={option}")
    assert message in str(caught.value)
    assert "Traceback" not in str(caught.value)


def test_a_directive_error_names_its_line() -> None:
    script = "#!/bin/bash\n#SBATCH --time=10:00\n#SBATCH --signal=R:USR1\nsrun true\n"
    with pytest.raises(SubmitError) as caught:
        signal_of(script=script)
    assert "job.sh:3" in str(caught.value) and "R: flag" in str(caught.value)


def test_without_a_time_limit_the_job_is_accepted_with_a_warning() -> None:
    parsed = parse_sbatch("#!/bin/bash\n#SBATCH --signal=USR1@30\ntrue\n", source="job.sh")
    assert parsed.request.signal == JobSignal(name="USR1", before_s=30)
    (warning,) = parsed.warnings
    assert "no time limit" in warning and "fusesched update --time" in warning


def test_a_lead_as_long_as_the_limit_warns_that_it_comes_at_once() -> None:
    parsed = parse_sbatch(SCRIPT, source="job.sh", args=["--signal=USR1@600"])  # limit 600 s
    (warning,) = parsed.warnings
    assert "sent as soon as the job starts" in warning
    assert parse_sbatch(SCRIPT, args=["--signal=USR1@599"]).warnings == ()


def test_the_yaml_field_as_a_mapping_or_in_sbatch_form() -> None:
    text = (
        "resources: {cpu: 1}\ncommand: ./train\nwalltime: 2h\n"
        "signal: {name: SIGUSR1, before_s: 300, main_only: true}\n"
        "---\n"
        "resources: {cpu: 1}\ncommand: ./train\nwalltime: 2h\nsignal: B:USR2@90\n"
        "---\n"
        "resources: {cpu: 1}\ncommand: ./train\nwalltime: 2h\nsignal: {name: 12}\n"
    )
    parsed = parse_submission(text, source="jobs.yaml")
    assert [p.request.signal for p in parsed] == [
        JobSignal(name="USR1", before_s=300, main_only=True),
        JobSignal(name="USR2", before_s=90, main_only=True),
        JobSignal(name="USR2", before_s=60),
    ]
    assert all(p.warnings == () for p in parsed)
    untimed = parse_submission("resources: {cpu: 1}\ncommand: ./train\nsignal: USR1\n")
    assert "no time limit" in untimed[0].warnings[0]


@pytest.mark.parametrize(
    ("signal", "message"),
    [
        ({"name": "KILL"}, "SIGKILL cannot be caught"),
        ({"name": "USR1", "before_s": 0}, "greater than 0"),
        ({"name": "USR1", "before_s": -3}, "greater than 0"),
        ({"name": "USR1", "before_s": float("inf")}, "finite"),
        ({"name": "USR1", "before_s": 1e6}, "65535"),
        ({"name": "USR1", "at": 60}, "unknown field 'at'"),
        ({"before_s": 60}, "required field is missing"),
        ({"name": True}, "string"),
        ("R:USR1", "R: flag"),
    ],
)
def test_bad_signal_fields_are_refused(signal: object, message: str) -> None:
    group = {"resources": {"cpu": 1}, "argv": ["true"]}
    data = {"walltime_s": 600, "signal": signal, "groups": [group]}
    with pytest.raises(SubmitError) as caught:
        JobRequest.from_json(_json(data))
    assert message in str(caught.value) and "signal" in str(caught.value)


def test_the_request_keeps_the_canonical_form() -> None:
    data = {"signal": "sigusr1@15", "groups": [{"resources": {"cpu": 1}, "argv": ["true"]}]}
    request = JobRequest.from_json(_json(data))
    stored = request.model_dump(mode="json", exclude_none=True)
    assert stored["signal"] == {"name": "USR1", "before_s": 15.0, "main_only": False}
    assert JobRequest.model_validate(stored) == request
    plain = JobRequest.from_json(_json({"groups": data["groups"]}))
    assert "signal" not in plain.model_dump(mode="json", exclude_none=True)


def test_signal_names_and_numbers() -> None:
    assert [signal_name(s) for s in ("usr1", "SIGUSR2", "15", 2, "sigcld", "POLL")] == [
        "USR1",
        "USR2",
        "TERM",
        "INT",
        "CHLD",
        "IO",
    ]
    for bad in ("", "SIG", "0", "USR3", "STOP", "19"):
        with pytest.raises(ValueError):
            signal_name(bad)
    assert parse_signal_option("B:HUP") == {"name": "HUP", "before_s": 60.0, "main_only": True}


def _json(data: object) -> str:
    import json

    return json.dumps(data, allow_nan=True)
