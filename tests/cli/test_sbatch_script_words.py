"""sbatch's script on its command line, as Slurm's sbatch finds it (the first word that is no
option nor an option's value), the script's arguments after it, and a script read from
standard input (``sbatch < job.sh``, ``… | sbatch /dev/stdin``): the quick path (the
Python ``fusesched``, whose ``sbatch`` hands the script's arguments to the full command) and
the full command, as real processes against a server on loopback that records what it gets."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.conftest import FULL_COMMAND
from tests.cli.old_controller import serving

from fusesched.cli import fast

QUICK = [sys.executable, "-m", "fusesched"]
SCRIPT = '#!/bin/bash\n#SBATCH -n 1\necho "$@"\n'
#: Words a shell would hand the script as they are.
ARGS = ["in put.csv", "", "q\"u'ote", "日本 🚀", "-o", "--parsable", "$HOME"]


@pytest.fixture
def taking() -> Iterator[tuple[str, list[Any]]]:
    with serving(lambda body: []) as served:
        yield served


def _sbatch(
    command: list[str], url: str, folder: Path, *args: str, stdin: Any = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "USER": "ann", "FUSESCHED_CONTROLLER": url, "LANG": "C.UTF-8"}
    env["XDG_CONFIG_HOME"] = str(folder / "config")
    return subprocess.run(
        [*command, "sbatch", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=60,
        stdin=stdin,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "job.sh").write_text(SCRIPT)
    (tmp_path / "out.txt").write_text("the last run's output\n")
    return tmp_path


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
def test_an_existing_file_named_by_an_option_is_not_the_script(
    taking: tuple[str, list[Any]], folder: Path, command: list[str]
) -> None:
    """``sbatch -o out.txt job.sh`` the second time (out.txt exists): still job.sh."""
    url, received = taking
    done = _sbatch(command, url, folder, "-o", "out.txt", "-e", "out.txt", "job.sh")
    assert done.returncode == 0, done.stderr
    (body,) = received
    if command is QUICK:  # (the text, parsed by the controller)
        (item,) = body["files"]
        assert (item["name"], item["text"]) == ("job.sh", SCRIPT)
        assert item["args"] == ["-o", "out.txt", "-e", "out.txt"]
    else:
        assert body["groups"][0]["script"] == SCRIPT and body["name"] == "job.sh"
        assert body["output"] == body["error"] == "out.txt"


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
@pytest.mark.parametrize(
    ("options", "array", "hetjob"),
    [([], False, False), (["--array=0-1"], True, False), (["-n1", ":", "-n2"], False, True)],
    ids=["plain", "array", "hetjob"],
)
def test_the_words_after_the_script_are_its_arguments(
    taking: tuple[str, list[Any]],
    folder: Path,
    command: list[str],
    options: list[str],
    array: bool,
    hetjob: bool,
) -> None:
    url, received = taking
    done = _sbatch(command, url, folder, "--parsable", *options, "job.sh", *ARGS)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "5\n"  # (--parsable before the script is sbatch's; after, the script's)
    (body,) = received
    assert body["script_args"] == ARGS
    assert ("array" in body, body.get("hetjob", False)) == (array, hetjob)


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
def test_the_commands_own_options_after_the_script_are_its_arguments(
    taking: tuple[str, list[Any]], folder: Path, command: list[str]
) -> None:
    """As Slurm's sbatch gives every word after the script to the script, fusesched's
    ``--json``, ``--controller``, ``--help`` and ``--`` there are the script's too; before
    it they are the command's (``--controller URL`` takes its value: the URL is no script)."""
    url, received = taking
    theirs = ["--json", "--controller", "http://127.0.0.1:9", "--help", "--", "-h", "--ca=x"]
    done = _sbatch(command, url, folder, "-n", "1", "job.sh", *theirs)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Submitted batch job 5\n"  # (not --json's answer, not help)
    before = _sbatch(command, "http://127.0.0.1:9", folder, "--json", "--controller", url, "job.sh")
    assert before.returncode == 0, before.stderr
    assert '"id"' in before.stdout  # (--json before the script: the command's)
    first, second = received
    assert first["script_args"] == theirs
    assert "script_args" not in second
    if command is QUICK:
        assert [f["name"] for f in second["files"]] == ["job.sh"]


def _name(body: Any) -> str:
    """The job's name in what was sent: the full command's job, or the quick path's options
    (the controller's parser names it: -J's value, else the file's name)."""
    if "files" not in body:
        return str(body["name"])
    (item,) = body["files"]
    args = item["args"]
    return str(args[args.index("-J") + 1] if "-J" in args else item["name"])


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["-J", "--json", "job.sh"], "--json"),  # (was: the answer as JSON, the job "--")
        (["-J", "--help", "job.sh"], "--help"),  # (was: the help, nothing submitted)
        (["-J", "--parsable", "job.sh"], "--parsable"),  # (was: only the id printed)
        (["-J", "--controller", "job.sh"], "--controller"),  # (was: no script, stdin read)
        (["-J", "--wait", "job.sh"], "--wait"),  # (was: waited for the job)
        (["--", "--json"], "--json"),  # a script named like our option (was: stdin read)
        (["-J", "--wrap=x", "job.sh"], "--wrap=x"),  # (was: "give a batch script or --wrap")
    ],
)
def test_an_options_value_spelt_like_ours_is_that_value(
    taking: tuple[str, list[Any]],
    folder: Path,
    command: list[str],
    args: list[str],
    name: str,
) -> None:
    """Slurm's sbatch reads an option's value whatever it looks like (``sbatch -J --json
    job.sh`` names the job ``--json``: checked against Slurm 22.05's), so fusesched's own
    options count only where an option stands, as every word after the script is the
    script's."""
    (folder / "--json").write_text(SCRIPT)
    url, received = taking
    done = _sbatch(command, url, folder, *args)
    assert (done.returncode, done.stdout) == (0, "Submitted batch job 5\n"), done.stderr
    (body,) = received
    assert _name(body) == name


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
def test_dash_h_is_the_help_as_slurms(
    taking: tuple[str, list[Any]], folder: Path, command: list[str]
) -> None:
    """Slurm's ``sbatch -h`` prints its help (was: a usage error, or with a script on
    standard input, that script submitted with a warning)."""
    url, received = taking
    with (folder / "job.sh").open() as script:
        done = _sbatch(command, url, folder, "-h", stdin=script)
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "sbatch" in done.stdout
    assert received == []


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
def test_a_script_on_standard_input(
    taking: tuple[str, list[Any]], folder: Path, command: list[str]
) -> None:
    url, received = taking
    with (folder / "job.sh").open() as script:
        done = _sbatch(command, url, folder, "-J", "piped", stdin=script)
    assert done.returncode == 0, done.stderr
    with (folder / "job.sh").open() as script:  # (and named: /dev/stdin, a pipe's)
        piped = subprocess.Popen(["cat"], stdin=script, stdout=subprocess.PIPE)
        named = _sbatch(command, url, folder, "/dev/stdin", stdin=piped.stdout)
        piped.wait()
    assert named.returncode == 0, named.stderr
    first, second = received
    if command is QUICK:
        assert [(f["name"], f["text"]) for b in received for f in b["files"]] == [
            ("<stdin>", SCRIPT),
            ("stdin", SCRIPT),
        ]
    else:  # (Slurm's names: "sbatch" for a script on standard input, else the file's)
        assert (first["name"], first["groups"][0]["script"]) == ("piped", SCRIPT)
        assert (second["name"], second["groups"][0]["script"]) == ("stdin", SCRIPT)


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
def test_a_piped_script_the_full_command_takes_over_is_read_once(
    taking: tuple[str, list[Any]], folder: Path, command: list[str]
) -> None:
    """``#SBATCH --parsable`` is the full command's: it has what the quick path read."""
    url, received = taking
    text = SCRIPT.replace("-n 1", "--parsable")
    result = subprocess.run(
        [*command, "sbatch"],
        input=text,
        capture_output=True,
        text=True,
        cwd=folder,
        env={"PATH": "/usr/bin:/bin", "USER": "ann", "FUSESCHED_CONTROLLER": url},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "5\n"
    (body,) = received
    assert body["name"] == "sbatch" and body["groups"][0]["script"] == text


@pytest.mark.parametrize("command", [QUICK, FULL_COMMAND], ids=["quick", "full"])
@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "no batch script given"),  # (standard input is empty)
        (["--frobnicate", "job.sh"], "unknown sbatch option --frobnicate: cannot tell"),
        (["--wrap=hostname", "job.sh", "x"], "give a batch script or --wrap, not both"),
        (["-N", "2", "missing.sh", "x"], "missing.sh: no such file"),
        (["-o", "out.txt", "."], ".: a folder, not a batch script"),
    ],
)
def test_usage_errors(
    taking: tuple[str, list[Any]], folder: Path, command: list[str], args: list[str], said: str
) -> None:
    url, received = taking
    done = _sbatch(command, url, folder, *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert received == []


def test_an_older_controller_is_said_to_take_no_arguments(folder: Path) -> None:
    """A controller older than ``script_args`` refuses it (422): the job is not submitted
    without its arguments, and the command says why."""

    def refusal(body: Any) -> list[dict[str, Any]]:
        said = "Extra inputs are not permitted"
        return [{"loc": ["body", "script_args"], "msg": said}] if "script_args" in body else []

    with serving(refusal) as (url, received):
        done = _sbatch(QUICK, url, folder, "job.sh", "x")
        plain = _sbatch(QUICK, url, folder, "job.sh")
    assert done.returncode == 2, done.stderr
    assert "cannot pass arguments to a batch script" in done.stderr
    assert plain.returncode == 0, plain.stderr
    assert len(received) == 2 and "script_args" not in received[1]["files"][0]


def test_standard_input_is_read_once_and_never_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quick path reads the piped script; the full command, taking over, gets the same
    text (the pipe is empty by then). On a terminal nothing is read: a usage error."""
    reading, writing = os.pipe()
    os.write(writing, "#!/bin/sh\r\ntrue 日本\n".encode())
    os.close(writing)
    monkeypatch.setattr(fast, "_SCRIPTS", {})
    with open(reading, encoding="utf-8") as pipe:
        monkeypatch.setattr(sys, "stdin", pipe)
        assert fast.script_text(None) == "#!/bin/sh\ntrue 日本\n"
        assert fast.script_text(None) == "#!/bin/sh\ntrue 日本\n"

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(fast, "_SCRIPTS", {})
    monkeypatch.setattr(sys, "stdin", Terminal("#!/bin/sh\n"))
    with pytest.raises(fast.UsageError, match="no batch script given"):
        fast.script_text(None)
