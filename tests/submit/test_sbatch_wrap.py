"""``sbatch --wrap=COMMAND``: a job without a script file."""

from __future__ import annotations

import re

import pytest

from fusesched.submit import SubmitError, parse_sbatch, parse_submission
from fusesched.submit.sbatch_words import split_sbatch_words


def test_wrap_makes_the_script() -> None:
    parsed = parse_sbatch("", args=["-n", "2", "--wrap", "srun hostname", "--mem-per-cpu=1G"])
    req = parsed.request
    (group,) = req.groups
    assert group.script == "#!/bin/sh\nsrun hostname\n"
    assert group.replicas == 2 and group.resources == {"cpu": "1", "memory": "1Gi"}
    assert req.name == "wrap" and parsed.warnings == ()
    named = parse_sbatch("", args=["--wrap=echo 'a b'", "--job-name=mine"]).request
    assert named.name == "mine" and named.groups[0].script == "#!/bin/sh\necho 'a b'\n"


def test_wrap_through_the_submission_entry() -> None:
    (parsed,) = parse_submission("", source="wrap", sbatch_args=["--wrap=true"])
    assert parsed.request.groups[0].script == "#!/bin/sh\ntrue\n"


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("#!/bin/sh\necho\n", ["--wrap=ls"], "command line: --wrap: give a batch script or --wrap"),
        ("#!/bin/sh\n#SBATCH --wrap=ls\necho\n", [], "<script>:2: --wrap: give a batch script"),
        ("", ["--wrap=ls", "job.sh"], "unexpected argument 'job.sh': give a batch script or"),
        ("", ["--wrap=  "], "--wrap needs a command line"),
        ("", ["--wrap"], "--wrap needs a value"),
        ("", ["-n", "2"], "the batch script is empty"),
    ],
)
def test_wrap_errors(script: str, args: list[str], message: str) -> None:
    with pytest.raises(SubmitError, match=re.escape(message)):
        parse_sbatch(script, args=args)


def test_wrap_as_another_options_value_is_that_value() -> None:
    """``-J --wrap=x`` names the job ``--wrap=x``, as Slurm's getopt reads it: it asks for no
    wrapped command (was: with no script, a KeyError, a 500 from the controller's parser;
    with one, "give a batch script or --wrap, not both")."""
    named = parse_sbatch("#!/bin/sh\ntrue\n", source="job.sh", args=["-J", "--wrap=x"])
    assert named.request.name == "--wrap=x"
    with pytest.raises(SubmitError, match="the batch script is empty"):
        parse_sbatch("", source="wrap", args=["-N", "--wrap=true"])
    assert split_sbatch_words(["-J", "--wrap=x", "job.sh"]).script == "job.sh"
