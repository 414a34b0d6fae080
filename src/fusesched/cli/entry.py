"""The ``fusesched`` console script.

Client commands (``submit``, ``jobs``, ``show``…) are run through a command table that holds
only them, so a submission does not import the simulator, NumPy and the policies first: a
scripted loop of ``fusesched submit`` calls starts several times faster. Everything else
(and ``--help``) goes through the full command table in :mod:`fusesched.cli.main`.
``fusesched scontrol show hostnames|hostlist`` (what scripts call in loops, through ``fusesched
slurm-commands``' ``scontrol``) is answered before any command table, as a job's own
``scontrol`` answers it (:mod:`fusesched.scontrol`).
"""

from __future__ import annotations

import sys
from typing import Final

CLIENT_COMMANDS = frozenset(
    {
        "submit",
        "sbatch",
        "run",
        "salloc",
        "jobs",
        "show",
        "eff",
        "logs",
        "cancel",
        "hold",
        "release",
        "requeue",
        "update",
        "nodes",
        "sinfo",
        "drain",
        "undrain",
        "queues",
        "share",
        "licenses",
        "reconfigure",
        "token",
        "sacct",
        "priority",
        # Slurm's names (cli/slurm_names.py, cli/scontrol.py, cli/slurm_commands.py)
        "squeue",
        "scancel",
        "srun",
        "seff",
        "sshare",
        "sprio",
        "sacctmgr",
        "scontrol",
        "slurm-commands",
    }
)


#: The name in usage lines, also when run as ``python -m fusesched`` (as the native front
#: hands over: src/fusesched/cli/front.c).
PROG = "fusesched"

#: How help texts are read: as Markdown, so that a docstring's lines wrap as one paragraph
#: to the terminal's width (blank lines separate paragraphs), `code` shows as code, and
#: brackets such as ``[@SECONDS]`` stay literal (Rich markup would take them for tags).
HELP_MARKUP: Final = "markdown"


#: Commands with a quick path that needs no command framework (see :mod:`fusesched.cli.fast`).
FAST_COMMANDS = frozenset({"submit", "sbatch"})
#: Options that leave the quick path to the full command (``--test-only`` submits nothing:
#: it asks the controller when the jobs would start; ``--parsable`` and ``-W/--wait`` are the
#: full command's, cli/submission.py).
SLOW_OPTIONS = frozenset({"--help", "-h", "--test-only", "--wait", "-W"})


#: sbatch's words that ask for the command's help where an option stands (Slurm's ``-h``).
SBATCH_HELP = frozenset({"--help", "-h"})


def sbatch_line(words: list[str]) -> tuple[list[str], list[str]]:
    """sbatch's words split where Slurm's sbatch splits them (:func:`~fusesched.submit.
    sbatch_words.split_sbatch_words`): (the words before the script, what the command
    framework is given). It is given the command's own options where they stand as options
    (:func:`~fusesched.submit.sbatch_words.command_words`: ``--json``, ``--controller URL``;
    ``--help`` or ``-h``: the help), then ``--`` and every other word: Slurm's options and
    their values, so that ``-J --json`` names the job ``--json``, and, behind a second
    ``--``, the script and its arguments (also ``--json``, ``--help`` or ``--controller``:
    the script's, as every word after it; a script named like an option stays the script).
    A line that cannot be read is left whole, for the command to say what is wrong."""
    from fusesched.submit.sbatch_words import (
        COMMAND_OPTIONS,
        VALUE,
        SbatchWordsError,
        command_words,
        option_places,
        split_sbatch_words,
    )

    try:
        split = split_sbatch_words(words)
    except SbatchWordsError:
        return words, words
    own, slurm = command_words(split.options)
    if own and COMMAND_OPTIONS.get(own[-1][2:]) == VALUE and own[-1] == words[-1]:
        return words, words  # (--controller with no value: the framework says so)
    places = option_places(split.options)
    if any(p and w in SBATCH_HELP for w, p in zip(split.options, places, strict=True)):
        own.append("--help")
    script = [] if split.script is None else ["--", split.script, *split.script_args]
    return split.options, [*own, "--", *slurm, *script]


_protected: list[str] | None = None


def protect_sbatch_argv() -> list[str]:
    """For ``sbatch``, give the command framework in ``sys.argv`` the command's own options
    alone, the other words behind ``--`` (:func:`sbatch_line`), once; the command and its
    options (the words before the script; all of ``sys.argv[1:]`` for any other command, and
    for a line that cannot be read)."""
    global _protected
    if _protected is None:
        _protected = sys.argv[1:]
        if _protected[:1] == ["sbatch"]:
            options, given = sbatch_line(_protected[1:])
            _protected = ["sbatch", *options]
            sys.argv[2:] = given
    return _protected


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "scontrol":  # (show hostnames|hostlist: no command framework)
        from fusesched.scontrol import host_lists

        code = host_lists(args[1:])
        if code is not None:
            sys.exit(code)
    options = protect_sbatch_argv()[1:] if args and args[0] == "sbatch" else args
    if args and args[0] in FAST_COMMANDS and not SLOW_OPTIONS & set(options):
        from fusesched.cli.fast import run

        code = run(args[0], args[1:])
        if code is not None:  # (None: a script asks for what only the full command does)
            sys.exit(code)
    if len(sys.argv) > 1 and sys.argv[1] in ("squeue", "jobs"):  # (bare -s, -j: Slurm's)
        from fusesched.cli.squeue_options import normalise_argv

        sys.argv[2:] = normalise_argv(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] in CLIENT_COMMANDS:
        import typer

        from fusesched.cli.live import register_clients

        app = typer.Typer(
            rich_markup_mode=HELP_MARKUP,
            name=PROG,
            add_completion=False,
            pretty_exceptions_enable=False,
        )
        register_clients(app)
        app(prog_name=PROG)
        return
    from fusesched.cli.main import main as full

    full()
