"""Where sbatch's script is on its command line (submit/sbatch_words.py), what the parser
makes of the script's arguments and of a script read from standard input, and how the
controller hands those arguments to the script's launch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fusesched.backends.base import RemoteJob, RemotePlacement
from fusesched.backends.slurm_script import batch_script
from fusesched.controller.run_launches import script_args
from fusesched.model.resources import CPU, Resources
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest, parse_request
from fusesched.submit.sbatch import parse_sbatch
from fusesched.submit.sbatch_reader import (
    COMMAND_FLAGS,
    FLAG_OPTIONS,
    SHORT_OPTIONS,
    VALUE_OPTIONS,
)
from fusesched.submit.sbatch_words import (
    FLAG,
    SLURM_OPTIONS,
    SLURM_SHORT,
    STDIN_SOURCE,
    VALUE,
    SbatchWordsError,
    command_words,
    option_places,
    split_sbatch_words,
)

FRONT = Path(__file__).parents[2] / "src" / "fusesched" / "cli" / "front.c"
SCRIPT = '#!/bin/bash\n#SBATCH -n 1\necho "$@"\n'


def _split(*words: str) -> tuple[list[str], str | None, list[str]]:
    found = split_sbatch_words(words)
    return found.options, found.script, found.script_args


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        # an option's value is never the script, whether a file of that name exists or not
        (["-o", "out.txt", "job.sh"], (["-o", "out.txt"], "job.sh", [])),
        (["--output", "out.txt", "job.sh"], (["--output", "out.txt"], "job.sh", [])),
        (["-oout.txt", "--error=e.txt", "job.sh"], (["-oout.txt", "--error=e.txt"], "job.sh", [])),
        # after the script, every word is the script's, options too
        (["job.sh", "in.csv", "4", "-o", "x"], ([], "job.sh", ["in.csv", "4", "-o", "x"])),
        (["job.sh", "", "a b"], ([], "job.sh", ["", "a b"])),
        # flags take no value; --nice/--exclusive take one only with '='
        (["--hold", "--nice", "job.sh"], (["--hold", "--nice"], "job.sh", [])),
        (["--exclusive", "job.sh", "x"], (["--exclusive"], "job.sh", ["x"])),
        (["-k", "job.sh"], (["-k"], "job.sh", [])),
        # flags run together, then one that takes a value
        (["-HQJ", "name", "job.sh"], (["-HQJ", "name"], "job.sh", [])),
        # a heterogeneous job's ':' (and ':' as a value)
        (["-n1", ":", "-n2", "job.sh", "1"], (["-n1", ":", "-n2"], "job.sh", ["1"])),
        (["-J", ":", "job.sh"], (["-J", ":"], "job.sh", [])),
        # '--' ends the options
        (["-N", "2", "--", "-odd.sh", "x"], (["-N", "2"], "-odd.sh", ["x"])),
        # no script named: standard input's
        (["--contiguous", "-N", "2"], (["--contiguous", "-N", "2"], None, [])),
        ([], ([], None, [])),
        # an option Slurm's table lacks is a flag where only options follow it
        (["--frobnicate", "-N", "2", "job.sh"], (["--frobnicate", "-N", "2"], "job.sh", [])),
        (["--frobnicate=3", "job.sh"], (["--frobnicate=3"], "job.sh", [])),
        (["--wrap", "echo hi", "-N", "2"], (["--wrap", "echo hi", "-N", "2"], None, [])),
    ],
)
def test_the_script_is_the_first_word_no_option_takes(
    words: list[str], expected: tuple[list[str], str | None, list[str]]
) -> None:
    assert _split(*words) == expected


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--frobnicate", "job.sh"], r"option --frobnicate: cannot tell .*'job\.sh'.*=VALUE"),
        (["-Z", "job.sh"], r"option -Z: cannot tell .*write -ZVALUE"),
        (["--wrap=hostname", "job.sh"], "give a batch script or --wrap, not both"),
        (["--wrap", "hostname", "--", "x"], "give a batch script or --wrap, not both"),
    ],
)
def test_what_cannot_be_told_is_refused(words: list[str], message: str) -> None:
    with pytest.raises(SbatchWordsError, match=message):
        split_sbatch_words(words)


def test_fusescheds_options_agree_with_slurms_table() -> None:
    """The parser's options (submit/sbatch_reader.py) take a value where Slurm's take one."""
    for name in VALUE_OPTIONS - FLAG_OPTIONS - COMMAND_FLAGS:  # (-H, -W: flags first)
        assert SLURM_OPTIONS[name] == VALUE, name
    for name in COMMAND_FLAGS:
        assert SLURM_OPTIONS[name] == FLAG, name
    for name in FLAG_OPTIONS:
        assert SLURM_OPTIONS[name] != VALUE, name
    for letter, name in SHORT_OPTIONS.items():
        assert SLURM_SHORT[letter] == name
    assert set(SLURM_SHORT.values()) <= set(SLURM_OPTIONS)


def test_the_native_fronts_table_is_this_one() -> None:
    """cli/front.c finds the script with the same table (it hands what it lacks to Python,
    so a missing name would only be slower, a wrong one would submit the wrong script)."""
    source = FRONT.read_text()

    def names(array: str) -> set[str]:
        body = re.search(rf"{array}\[\] = \{{(.*?)\}};", source, re.S)
        assert body is not None, array
        return set(re.findall(r'"([^"]+)"', body.group(1)))

    def letters(array: str) -> set[str]:
        found = re.search(rf'{array}\[\] = "([^"]*)";', source)
        assert found is not None, array
        return set(found.group(1))

    assert names("SBATCH_VALUES") == {n for n, kind in SLURM_OPTIONS.items() if kind == VALUE}
    assert names("SBATCH_OTHERS") == {n for n, kind in SLURM_OPTIONS.items() if kind != VALUE}
    short_values = {c for c, n in SLURM_SHORT.items() if SLURM_OPTIONS[n] == VALUE}
    assert letters("SBATCH_SHORT_VALUES") == short_values
    assert letters("SBATCH_SHORT_OTHERS") == set(SLURM_SHORT) - short_values
    assert {n for n, kind in SLURM_OPTIONS.items() if kind == FLAG} <= names("SBATCH_OTHERS")


def test_the_scripts_arguments_are_carried_exactly() -> None:
    words = ["in put.csv", "", "q\"u'ote", "日本 🚀", "-o", "--wrap=x"]
    job = parse_sbatch(SCRIPT, source="job.sh", script_args=words).request
    assert job.script_args == words
    assert JobRequest.from_json(job.to_json()).script_args == words  # (as the store keeps it)
    assert "script_args" not in parse_sbatch(SCRIPT, source="job.sh").request.model_dump(
        mode="json"
    )  # (none: not named, so an older controller takes the job)


def test_arrays_and_heterogeneous_jobs_take_arguments() -> None:
    array = parse_sbatch(SCRIPT, source="a.sh", args=["--array=0-2"], script_args=["x"])
    assert array.request.array is not None and array.request.script_args == ["x"]
    het = parse_sbatch(SCRIPT, source="h.sh", args=["-n1", ":", "-n2"], script_args=["y"])
    assert het.request.hetjob and het.request.script_args == ["y"]
    first, second = het.request.groups
    assert script_args(het.request, first) == ["y"]
    assert script_args(het.request, second) == []  # (its tasks are srun's slots)


def test_only_a_batch_script_takes_arguments() -> None:
    with pytest.raises(SubmitError, match="only a batch script"):
        parse_request(
            {
                "groups": [{"name": "main", "argv": ["true"], "resources": {"cpu": "1"}}],
                "script_args": ["x"],
            }
        )


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("a\udcffb", r"script_args\[1\]: an argument must be UTF-8 text"),
        ("a\x00b", r"script_args: a NUL character .* is not allowed \(in \[1\]\)"),
    ],
)
def test_an_argument_must_be_text_without_nul(word: str, message: str) -> None:
    """A command line's undecodable bytes (a lone surrogate) or a NUL: refused, with where."""
    with pytest.raises(SubmitError, match=message):
        parse_request(
            {
                "groups": [{"name": "main", "script": SCRIPT, "resources": {"cpu": "1"}}],
                "script_args": ["ok", word],
            }
        )


def test_slurms_other_name_for_ntasks_per_node() -> None:
    """``--tasks-per-node`` is Slurm's alias of ``--ntasks-per-node``, with a value."""
    assert _split("--tasks-per-node", "2", "job.sh", "x")[1:] == ("job.sh", ["x"])
    parsed = parse_sbatch(SCRIPT, source="job.sh", args=["-n", "4", "--tasks-per-node", "2"])
    assert parsed.request.placement.max_tasks_per_node == 2


def test_a_script_from_standard_input_is_named_as_slurm_names_it() -> None:
    """``sbatch < job.sh``: the job is called "sbatch", as Slurm's; -J still names it."""
    assert parse_sbatch(SCRIPT, source=STDIN_SOURCE).request.name == "sbatch"
    named = parse_sbatch(SCRIPT.replace("-n 1", "-J mine"), source=STDIN_SOURCE)
    assert named.request.name == "mine"
    with pytest.raises(SubmitError, match=r"<stdin>:2"):
        parse_sbatch("#!/bin/sh\n#SBATCH --nodes=x\n", source=STDIN_SOURCE)


def test_a_slurm_pools_batch_script_passes_the_arguments_on(tmp_path: Path) -> None:
    """A job routed to a Slurm pool: the generated script execs the user's with them."""
    request = parse_sbatch(SCRIPT, source="job.sh", script_args=["a b", ""]).request
    placement = RemotePlacement("main", {"n1": 1}, Resources({CPU: 1000}))
    job = RemoteJob("42", request, (placement,), {})
    text = batch_script(job, {"script": tmp_path / "user-script"})
    assert text.endswith(f"exec {tmp_path}/user-script 'a b' ''\n")


@pytest.mark.parametrize(
    ("options", "own", "slurm"),
    [
        # an option's value is that value, though it is spelt like one of ours (Slurm's
        # getopt: sbatch -J --json names the job "--json")
        (["-J", "--json"], [], ["-J", "--json"]),
        (["--comment", "--controller", "--json"], ["--json"], ["--comment", "--controller"]),
        (["-HJ", "--token=x"], [], ["-HJ", "--token=x"]),
        # ours where an option stands, with the value each takes
        (
            ["--json", "-n1", "--controller", "http://h:1", ":", "--token=t", "-n2"],
            ["--json", "--controller", "http://h:1", "--token=t"],
            ["-n1", ":", "-n2"],
        ),
        (["--ca", "-J", "x"], ["--ca", "-J"], ["x"]),  # (as Slurm's getopt: its value)
        (["-N1", "--controller"], ["--controller"], ["-N1"]),  # (no value: the command says)
        (["--json=1", "--ca="], ["--ca="], ["--json=1"]),  # (--json takes none: not ours)
    ],
)
def test_the_commands_own_options_where_an_option_stands(
    options: list[str], own: list[str], slurm: list[str]
) -> None:
    assert command_words(options) == (own, slurm)


def test_option_places() -> None:
    words = ["-J", "--help", "--parsable", "-o", "x", "-oy", ":", "--bogus", "--wait"]
    assert option_places(words) == [True, False, True, True, False, True, True, True, True]
