"""sbatch options taken without a word, as Slurm's sbatch takes them (``--get-user-env``, a
script's ``#SBATCH --version``), and the warnings about the options fusesched does not take:
why, or the closest option for a misspelt one, never a suggestion for an option of Slurm's."""

from __future__ import annotations

import pytest

from fusesched.submit.errors import SubmitError
from fusesched.submit.sbatch import parse_sbatch
from fusesched.submit.sbatch_reader import COMMAND_FLAGS, FLAG_OPTIONS, VALUE_OPTIONS
from fusesched.submit.sbatch_words import FLAG, SLURM_OPTIONS


def _warnings(directives: str, args: tuple[str, ...] = ()) -> tuple[str, ...]:
    script = f"#!/bin/bash\n{directives}\necho hi\n"
    return parse_sbatch(script, source="s.sh", args=list(args)).warnings


@pytest.mark.parametrize(
    "option",
    [
        "--get-user-env",
        "--get-user-env=L",  # (batchspawner's and pysqa's templates)
        "--get-user-env=S",
        "--get-user-env=l",
        "--get-user-env=10",
        "--get-user-env=60L",
        "--get-user-env=10LS",  # (Slurm's reads no further than the mode)
        "--get-user-env=",
    ],
)
def test_get_user_env_is_taken_silently(option: str) -> None:
    """A job inherits the submitting environment (``--export=ALL``): the user's variables
    are the job's already; Slurm's sbatch takes every one of these."""
    assert _warnings(f"#SBATCH {option}\n#SBATCH -n 2") == ()
    assert _warnings("#SBATCH -n 2", (option,)) == ()


@pytest.mark.parametrize("value", ["junk", "x10", "10x", "+"])
def test_a_get_user_env_slurm_refuses_is_an_error(value: str) -> None:
    with pytest.raises(SubmitError) as caught:
        _warnings(f"#SBATCH -n 2\n#SBATCH --get-user-env={value}")
    said = str(caught.value)
    assert said.startswith(f"s.sh:3: --get-user-env: invalid value {value!r}: give [TIMEOUT][MODE]")


def test_a_scripts_version_directive_is_ignored_as_slurms() -> None:
    """Slurm's sbatch ignores ``#SBATCH --version`` (on the command line it prints the
    version: cli/submission.py); ``--version=1`` it refuses."""
    assert _warnings("#SBATCH --version\n#SBATCH -V -n 2") == ()
    with pytest.raises(SubmitError, match=r"^s\.sh:2: --version: takes no value$"):
        _warnings("#SBATCH --version=1")
    with pytest.raises(SubmitError, match=r"^command line: --version: takes no value$"):
        _warnings("#SBATCH -n 1", ("--version=1",))


def _slurms_not_taken() -> list[str]:
    """Slurm's sbatch options fusesched does not take (it warns about them)."""
    taken = {*VALUE_OPTIONS, *FLAG_OPTIONS, *COMMAND_FLAGS, "test-only", "get-user-env"}
    return sorted(set(SLURM_OPTIONS) - taken - {"version", "tasks-per-node"})


@pytest.mark.parametrize("name", _slurms_not_taken())
def test_an_option_of_slurms_is_not_taken_for_a_misspelling(name: str) -> None:
    """``--mincpus`` is Slurm's: "did you mean --ntasks?" would only mislead."""
    written = f"--{name}" if SLURM_OPTIONS[name] == FLAG else f"--{name}=1"
    (warning,) = _warnings(f"#SBATCH {written}")
    assert warning.startswith(f"s.sh:2: --{name} is not supported")
    assert "did you mean" not in warning and warning.endswith("; ignored")


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("--partiton=gpu", "--partition"),
        ("--get-user-envs", "--get-user-env"),
        ("--job-nme=x", "--job-name"),
    ],
)
def test_a_misspelt_option_is_given_the_closest(written: str, meant: str) -> None:
    name = written.partition("=")[0]
    assert _warnings(f"#SBATCH {written}") == (
        f"s.sh:2: {name} is not supported (did you mean {meant}?); ignored",
    )


def test_slurms_short_options_are_known_and_b_is_begin() -> None:
    """``-b`` is Slurm's ``--begin`` (honoured); ``-k`` (``--no-kill``) is Slurm's too: no
    suggestion, and as a flag it takes no word (a stray one is refused, as Slurm refuses
    it)."""
    parsed = parse_sbatch("#!/bin/bash\n#SBATCH -b now+1hour -k\necho\n", source="s.sh")
    assert parsed.request.begin_time is not None
    assert parsed.warnings == ("s.sh:2: -k is not supported; ignored",)
    with pytest.raises(SubmitError, match="unexpected word 'foo'"):
        _warnings("#SBATCH --contiguous foo")
    assert _warnings("#SBATCH --mcs-label lab -n 2") == (
        "s.sh:2: --mcs-label is not supported; ignored",
    )


@pytest.mark.parametrize(
    ("directive", "tasks", "nodes", "name", "hold", "warnings"),
    [
        ("-HV", 1, None, "s.sh", True, ()),  # (was: "--hold takes no value")
        ("-Hn4", 4, None, "s.sh", True, ()),  # (was: the same error; Slurm: held, 4 tasks)
        ("-vN2 -n4", 4, 2, "s.sh", False, ("s.sh:2: -v is not supported; ignored",)),
        ("-vJ2", 1, None, "2", False, ("s.sh:2: -v is not supported; ignored",)),
        ("-VHJx", 1, None, "x", True, ()),
        ("-kN2", 1, None, "s.sh", False, ("s.sh:2: -k is not supported; ignored",)),
    ],
)
def test_one_letter_flags_run_together_as_slurms(
    directive: str,
    tasks: int,
    nodes: int | None,
    name: str,
    hold: bool,
    warnings: tuple[str, ...],
) -> None:
    """Slurm's getopt reads ``-HV`` as ``-H -V`` and ``-vJ2`` as ``-v -J 2`` (checked against
    Slurm 22.05's sbatch: ``#SBATCH -Hn2`` holds a job of 2 CPUs, ``#SBATCH -vJ2`` names it
    2; ``-vN2`` was read as ``-v`` alone, its ``N2`` dropped); up to a letter that takes a
    value (``-k``'s is optional: ``N2`` is its value). On the command line too."""
    for script, args in (
        (f"#!/bin/bash\n#SBATCH {directive}\necho\n", []),
        ("#!/bin/bash\necho\n", directive.split()),
    ):
        parsed = parse_sbatch(script, source="s.sh", args=args, input_variables=False)
        request = parsed.request
        shape = (request.groups[0].replicas, request.placement.nodes, request.name, request.hold)
        assert shape == (tasks, nodes, name, hold)
        where = "s.sh:2" if not args else "command line"
        assert parsed.warnings == tuple(w.replace("s.sh:2", where) for w in warnings)
