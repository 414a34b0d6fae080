"""``fusesched run``'s arguments (pure): its options end at the first word that is not an
option (or an option's value) or at ``--``, and the rest is the command.
:func:`split_run_args` is that split (``salloc`` splits its own the same way,
:mod:`fusesched.cli.salloc_plan`); :func:`job_request` builds the job, sbatch's for the options
(:func:`fusesched.submit.sbatch.parse_sbatch` with ``--wrap``), whose every task runs the
command itself, as srun's tasks do. :mod:`fusesched.cli.srun` runs it.
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Options of ``run`` itself (not of the job).
LABEL = ("-l", "--label")
QUIET = ("-Q", "--quiet")
UNBUFFERED = ("-u", "--unbuffered")  # accepted: output is passed on as it arrives anyway
HELP = ("-h", "--help")
#: Print the Slurm release fusesched's commands follow, as Slurm's srun and salloc do.
VERSION = ("-V", "--version")
OWN_VALUES = ("--controller", "--token", "--ca")
#: ``run``'s own flag for an interactive task (Slurm's ``srun --pty``).
PTY = "--pty"

#: srun options (not sbatch's) that have no meaning here: accepted with a warning (and their
#: value skipped), with their short letters. The same as ``srun`` inside a job accepts
#: (agent/step_option_table.py), where they concern a job rather than a step.
IGNORED_VALUES = {
    "mpi": "",
    "cpu-bind": "",
    "mem-bind": "",
    "distribution": "m",
    "accel-bind": "",
    "gpu-bind": "",
    "gpu-freq": "",
    "cpu-freq": "",
    "gres-flags": "",
    "threads": "T",
    "slurmd-debug": "",
    "msg-timeout": "",
    "profile": "",
    "acctg-freq": "",
    "bcast-exclude": "",
    "clusters": "M",
    "cluster-constraint": "",
    "mcs-label": "",
    "power": "",
    "bb": "",
    "bbf": "",
    "delay-boot": "",
    "switches": "",
    "network": "",
    "core-spec": "S",
    "thread-spec": "",
    "sockets-per-node": "",
    "cores-per-socket": "",
    "threads-per-core": "",
    "extra-node-info": "B",
    "ntasks-per-core": "",
    "ntasks-per-socket": "",
    "mincpus": "",
    "tmp": "",
    "time-min": "",
    "wckey": "",
}
#: srun flags (some with a value, attached only: ``--propagate=STACK``) accepted with no
#: effect, with their short letters: srun's own workings, or what each task has anyway; a
#: warning only for those a user could expect an effect of.
IGNORED_FLAGS = {
    "verbose": ("v", False),
    "disable-status": ("X", False),
    "quit-on-interrupt": ("", False),  # (one Ctrl-C already cancels the job)
    "exact": ("", False),
    "preserve-env": ("E", False),
    "send-libs": ("", False),
    "propagate": ("", False),
    "compress": ("", False),
    "resv-ports": ("", False),
    "overcommit": ("O", True),
    "oversubscribe": ("s", True),
    "no-kill": ("k", True),
    "contiguous": ("", True),
    "spread-job": ("", True),
    "use-min-nodes": ("", True),
    "reboot": ("", True),
}

_INSIDE = "an srun inside a job (a batch script or salloc) applies it to a job step"
#: sbatch and srun options ``run`` refuses, and why, with the short letters of srun's.
REFUSED = {
    "wrap": "run takes the command itself (fusesched run [OPTIONS] COMMAND [ARGS...])",
    "array": "run starts one job, not an array: use fusesched sbatch --array",
    "test-only": "use fusesched sbatch --test-only --wrap=... to ask when it would start",
    "parsable": "sbatch's; run prints the command's output, not the job id",
    "wait": "sbatch's; run always waits for the command",
    "multi-prog": f"run starts one command on every task; {_INSIDE}",
    "task-prolog": f"not supported by run; {_INSIDE}",
    "task-epilog": f"not supported by run; {_INSIDE}",
    "prolog": "run the program before run, in the same shell",
    "epilog": "run the program after run, in the same shell",
    "relative": "a new job has no allocation to be relative to (as Slurm's srun outside one)",
    "het-group": "run starts one job of one component: use fusesched sbatch with hetjob",
    "pack-group": "run starts one job of one component: use fusesched sbatch with hetjob",
    "kill-on-bad-exit": f"a job's tasks run to their own ends under run; {_INSIDE}",
    "input": "run forwards standard input only with --pty",
    "immediate": "run waits for its job to start (fusesched cancel to give up)",
    "uid": "a job runs as the user who submits it",
    "gid": "a job runs as the user who submits it",
    "bcast": "the program is not copied to the nodes: put it on a shared file system",
    "container": "give the image as fusesched's job types do (docs/SUBMIT.md)",
    "x11": "X11 forwarding is not supported",
    "no-allocate": "a job always runs in an allocation of its own",
    "nodefile": "give the nodes with -w/--nodelist",
    "gpus-per-socket": "GPUs are given per task or per node: --gpus-per-task or --gpus-per-node",
    "ntasks-per-gpu": "GPUs are given per task or per node: --gpus-per-task or --gpus-per-node",
    "tres-per-task": "use -c and --gpus-per-task",
}
_REFUSED_SHORT = {
    "r": "relative",
    "K": "kill-on-bad-exit",
    "i": "input",
    "I": "immediate",
    "Z": "no-allocate",
    "F": "nodefile",
}
#: A job name is at most this long (``JobRequest.name``).
MAX_NAME = 200
#: sbatch's output file when ``-o`` names none (run has no array: never ``%A_%a``).
SBATCH_OUTPUT = "slurm-%j.out"


class RunUsageError(Exception):
    """A mistake in ``run``'s arguments (exit status 2)."""


@dataclass(frozen=True, slots=True)
class RunArgs:
    """``run``'s arguments, split: the sbatch options for the job, run's own settings and the
    command."""

    options: tuple[str, ...]
    command: tuple[str, ...]
    label: bool = False
    quiet: bool = False
    help: bool = False
    own: dict[str, str] = field(default_factory=dict)  # --controller, --token, --ca
    warnings: tuple[str, ...] = ()
    version: bool = False  # -V/--version: print it, run nothing


def _option_names() -> tuple[dict[str, str], frozenset[str], frozenset[str]]:
    from fusesched.submit.sbatch_reader import (
        COMMAND_FLAGS,
        FLAG_OPTIONS,
        SHORT_OPTIONS,
        VALUE_OPTIONS,
    )

    return SHORT_OPTIONS, VALUE_OPTIONS | COMMAND_FLAGS, FLAG_OPTIONS


def split_run_args(
    args: Sequence[str],
    prog: str = "run",
    refused: Mapping[str, str] = REFUSED,
    own_flags: frozenset[str] = frozenset({PTY}),
    command_needed: bool = True,
    own_values: Sequence[str] = OWN_VALUES,
) -> RunArgs:
    """Split ``run``'s arguments at the command: options up to the first word that is not one
    (or an option's value), or up to ``--``. Raises :class:`RunUsageError` for an unknown
    option, a refused one, a missing value or no command.

    ``salloc`` splits its own the same way (:mod:`fusesched.cli.salloc_plan`): ``prog`` names
    the command in messages, ``refused`` are its refusals, ``own_flags`` its own flags
    (kept in ``own`` with an empty value) and ``command_needed`` False lets the command be
    left out. ``own_values``: the options of the command itself that take a value (run's
    ``--jobid`` too)."""
    short, values, flags = _option_names()
    options: list[str] = []
    own: dict[str, str] = {}
    warnings: list[str] = []
    label = quiet = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            i -= 1
            break
        if arg in HELP:
            return RunArgs((), (), help=True)
        if arg in VERSION:
            return RunArgs((), (), version=True)
        if arg in LABEL:
            label = True
            continue
        if arg in QUIET:
            quiet = True
            continue
        if arg in UNBUFFERED:
            continue
        if arg in own_flags:
            own[arg] = ""
            continue
        written, eq, value = arg.partition("=")
        if written in own_values:
            if not eq:
                if i >= len(args):
                    raise RunUsageError(f"{written} needs a value")
                value = args[i]
                i += 1
            own[written] = value
            continue
        if arg.startswith("--"):
            name, attached = written[2:], bool(eq)
        else:
            name, attached = short.get(arg[1], ""), len(arg) > 2
            if not name:
                name = next((k for k, s in IGNORED_VALUES.items() if s == arg[1]), "")
            if not name:
                name = next((k for k, (s, _) in IGNORED_FLAGS.items() if s == arg[1]), "")
            name = name or _REFUSED_SHORT.get(arg[1], "")
            written = arg[:2]
        if name in refused:
            raise RunUsageError(f"{written}: {refused[name]}")
        if name in IGNORED_FLAGS and (arg.startswith("--") or arg[1:] == arg[1] * len(arg[1:])):
            if IGNORED_FLAGS[name][1]:
                warnings.append(f"{written} has no effect with fusesched {prog}; ignored")
            continue
        if name in IGNORED_VALUES:
            if not attached:
                if i >= len(args):
                    raise RunUsageError(f"{written} needs a value")
                i += 1
            warnings.append(f"{written} is not supported by fusesched {prog}; ignored")
            continue
        if name in flags:  # (--exclusive=user takes its value attached)
            options.append(arg)
            continue
        if name in values:
            options.append(arg)
            if not attached:
                if i >= len(args):
                    raise RunUsageError(f"{written} needs a value")
                options.append(args[i])
                i += 1
            continue
        if arg.startswith("--") and eq:
            options.append(arg)  # the sbatch parser warns that it is not supported, as sbatch
            continue
        raise RunUsageError(_unknown(written, short, values, flags, prog))
    command = tuple(args[i:])
    if not command and command_needed:
        raise RunUsageError(
            f"no command given (usage: fusesched {prog} [OPTIONS] COMMAND [ARGS...])"
        )
    return RunArgs(tuple(options), command, label, quiet, False, own, tuple(warnings))


def _unknown(
    written: str, short: dict[str, str], values: frozenset[str], flags: frozenset[str], prog: str
) -> str:
    known = sorted(
        {f"--{o}" for o in (*values, *flags, *IGNORED_VALUES, *IGNORED_FLAGS)}
        | {"--label", "--quiet", "--unbuffered", "--version"}
        | {f"-{s}" for s in short}
    )
    close = difflib.get_close_matches(written, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return (
        f"unknown option {written}{hint}: fusesched {prog} cannot tell whether the next word is "
        f"its value or the command (an option it does not know is ignored, with a warning, "
        f"when written as {written}=VALUE)"
        if written.startswith("--")
        else f"unknown option {written}{hint}"
    )


def job_args(parsed: RunArgs) -> list[str]:
    """The sbatch options that make the job: the command as ``--wrap`` and, unless ``-J``
    names it, the command's base name as the job name (a later option wins)."""
    name = os.path.basename(parsed.command[0].rstrip("/")) or parsed.command[0]
    name = "".join(c for c in name if c.isprintable()).strip() or "run"  # (a job name is one line)
    return [
        f"--job-name={name[:MAX_NAME]}",
        *parsed.options,
        f"--wrap={shlex.join(parsed.command)}",
    ]


def job_request(
    parsed: RunArgs, submit_dir: str | None = None, submit_host: str | None = None
) -> tuple[Any, tuple[str, ...]]:
    """The job (a ``JobRequest``) and the parser's warnings: sbatch's job for the options,
    whose every task runs the command itself (not a batch script, whose first task alone
    would run it), in ``submit_dir`` (the folder run runs in, as srun's tasks) unless ``-D``
    says otherwise, with this process's environment (as srun's ``--export=ALL``), submitted
    from ``submit_host`` (its tasks' ``SLURM_SUBMIT_HOST``; None: not said). No output
    file but one ``-o`` names (sbatch's default ``slurm-%j.out``
    is not written: run prints the output); no ``SLURM_EXPORT_ENV`` (sbatch's, not srun's).
    :class:`fusesched.submit.errors.SubmitError` for a bad option value."""
    from fusesched.model.submit_env import text_environ
    from fusesched.submit.request import parse_request
    from fusesched.submit.sbatch import parse_sbatch

    job = parse_sbatch(
        "",
        source="run",
        args=job_args(parsed),
        submit_dir=submit_dir,
        submit_env=text_environ(os.environ),  # (its tasks inherit it, as srun's)
        input_variables=False,  # (SBATCH_* are sbatch's, not srun's)
    )
    data = job.request.model_dump(mode="json", exclude_none=True)
    if data.get("output") == SBATCH_OUTPUT:
        del data["output"]
    group = data["groups"][0]
    del group["script"]
    group["argv"] = list(parsed.command)
    told = data.pop("slurm_options", {})
    told.pop("export", None)
    if told:
        data["slurm_options"] = told
    if submit_host is not None:
        data["submit_host"] = submit_host
    return parse_request(data, source="run"), job.warnings
