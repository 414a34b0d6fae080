"""The options ``fusesched sacct`` takes besides its first ones (:mod:`fusesched.cli.sacct`),
by Slurm 22.05's sacct's names, and the command class that reads ``--whole-hetjob`` as
Slurm's getopt does (a value only after ``=``).

Options that change nothing here are taken, as scripts pass them: ``-L``, ``--local``,
``--federation`` (fusesched is one cluster, in no federation), ``-D`` (fusesched never reuses
a job id; a requeued job shows its latest run, its Restarts field counting the others),
``--whole-hetjob`` (a heterogeneous job is one row with its components: ``-j`` shows all of
it), ``--use-local-uid`` (UID and GID are read from this machine's user database already).

The option set is Slurm 22.05's sacct's (checked against its sacct: ``-U`` is ``--usage``,
``-t`` ``-X``'s old name; ``-R`` is refused as its sacct refuses it, though its man page
names it: ``--reason``), with three extensions kept: ``--array`` (Slurm 23.02's),
``--limit`` (fusesched's) and the hidden ``--cluster`` (Slurm's getopt takes it as the start
of ``--clusters``).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Final

import typer
from typer.core import TyperCommand

from fusesched.cli.clusters import checked

ListOpt = list[str] | None
#: What ``--usage`` prints, as Slurm's sacct.
USAGE: Final = "Usage: sacct [options]\n\tUse --help for help\n"
#: ``--whole-hetjob``'s values (any case).
HETJOB_VALUES: Final = {"yes": True, "y": True, "no": False, "n": False}
_HETJOB: Final = "--whole-hetjob"


class SacctCommand(TyperCommand):
    """sacct's command: a bare ``--whole-hetjob`` is ``--whole-hetjob=yes`` (its value is
    optional, as Slurm's getopt reads it: only after ``=``); ``-R`` (``-R Dependency``,
    ``-RDependency``: no option of Slurm 22.05's sacct) is refused saying to give
    ``--reason``, where it is no option's value."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from fusesched.cli.sacct_reasons import NO_SHORT_R

        valued = {
            name
            for param in self.params
            if param.param_type_name == "option"
            and not getattr(param, "is_flag", False)
            and not getattr(param, "count", False)
            for name in (*param.opts, *param.secondary_opts)
        }
        words: list[str] = []
        value_next = False
        for i, word in enumerate(args):
            if word == "--":
                words.extend(args[i:])
                break
            if not value_next and word.startswith("-R"):
                raise typer.BadParameter(NO_SHORT_R, ctx=ctx, param_hint="'-R'")
            word = f"{_HETJOB}=yes" if word == _HETJOB else word
            value_next = not value_next and word in valued
            words.append(word)
        return super().parse_args(ctx, words)


def hetjob_value(text: str | None) -> bool | None:
    """``--whole-hetjob``'s value (None: not given); a ``ValueError`` for another."""
    if text is None:
        return None
    value = HETJOB_VALUES.get(text.strip().lower())
    if value is None:
        raise ValueError(f'invalid --whole-hetjob value "{text}": yes or no')
    return value


def _usage(given: bool) -> None:
    if given:
        sys.stdout.write(USAGE)
        raise typer.Exit()


def _no_short_reason(given: bool) -> None:
    if given:
        from fusesched.cli.sacct_reasons import NO_SHORT_R

        raise typer.BadParameter(NO_SHORT_R)


def _flag(*names: str, help: str) -> Any:
    return typer.Option(*names, help=help, show_default=False)


Brief = Annotated[bool, _flag("--brief", "-b", help="The fields JobID, State, ExitCode.")]
Long = Annotated[bool, _flag("--long", "-l", help="Slurm's long field list (not with --format).")]
Truncate = Annotated[
    bool,
    _flag(
        "--truncate", "-T", help="Starts before --starttime and ends after --endtime cut to them."
    ),
]
Units = Annotated[
    str | None,
    typer.Option(
        "--units",
        help="Sizes (MaxRSS, AveRSS, ReqMem, ConsumedEnergy) in K, M, G, T or P.",
        show_default=False,
    ),
]
NoConvert = Annotated[
    bool, _flag("--noconvert", help="Sizes in the unit they are kept in (2048M stays 2048M).")
]
Duplicates = Annotated[
    bool,
    _flag(
        "--duplicates",
        "-D",
        help="Taken: fusesched never reuses a job id (a requeued job shows its latest run).",
    ),
]
TimelimitMin = Annotated[
    str | None,
    typer.Option(
        "--timelimit-min",
        "-k",
        help="Jobs with this time limit (with -K: at least this), e.g. 60, 2:00:00, 1-0.",
        show_default=False,
    ),
]
TimelimitMax = Annotated[
    str | None,
    typer.Option(
        "--timelimit-max",
        "-K",
        help="With -k: jobs with at most this time limit.",
        show_default=False,
    ),
]
Delimiter = Annotated[
    str | None,
    typer.Option(
        "--delimiter", help="What separates -p/-P's values (default |).", show_default=False
    ),
]
Nodelist = Annotated[
    ListOpt,
    typer.Option("--nodelist", "-N", help="Jobs that ran on any of these nodes (n[1-3],g1)."),
]
Qos = Annotated[ListOpt, typer.Option("--qos", "-q", help="Jobs of these QOS (a comma list).")]
Array = Annotated[
    bool,
    _flag("--array", help="Each waiting array member on its own line (default: 12_[3-9])."),
]
Wckeys = Annotated[
    ListOpt, typer.Option("--wckeys", "-W", help="Jobs of these WCKeys (fusesched keeps none).")
]
Associations = Annotated[
    ListOpt,
    typer.Option(
        "--associations", "-x", help="Jobs of these association ids (fusesched keeps none)."
    ),
]
BatchScript = Annotated[
    bool, _flag("--batch-script", "-B", help="Print each job's batch script (with -j).")
]
EnvVars = Annotated[bool, _flag("--env-vars", help="Print each job's environment (with -j).")]
Gid = Annotated[
    ListOpt,
    typer.Option("--gid", "--group", "-g", help="Jobs of users in these groups (gids or names)."),
]
Nnodes = Annotated[
    str | None,
    typer.Option(
        "--nnodes", "-i", help="Jobs that ran on N nodes, or MIN-MAX.", show_default=False
    ),
]
Ncpus = Annotated[
    str | None,
    typer.Option("--ncpus", "-I", help="Jobs that ran on N CPUs, or MIN-MAX.", show_default=False),
]
Completion = Annotated[
    bool,
    _flag("--completion", "-c", help="Job completion data: ended jobs, no steps, its fields."),
]
File = Annotated[
    str | None,
    typer.Option(
        "--file",
        "-f",
        help="Slurm's job completion file: checked, not read (as -c).",
        show_default=False,
    ),
]
AllClusters = Annotated[bool, _flag("--allclusters", "-L", help="Taken: fusesched is one cluster.")]
Local = Annotated[bool, _flag("--local", help="Taken: fusesched is in no federation.")]
Federation = Annotated[bool, _flag("--federation", help="Taken: fusesched is in no federation.")]
WholeHetjob = Annotated[
    str | None,
    typer.Option(
        _HETJOB,
        metavar="[=yes|no]",
        help="Taken: -j shows a heterogeneous job whole (one row).",
        show_default=False,
    ),
]
Verbose = Annotated[
    int, typer.Option("--verbose", "-v", count=True, help="Say the time window on stderr.")
]
Yaml = Annotated[bool, _flag("--yaml", help="As --json, in YAML.")]
Constraints = Annotated[
    ListOpt,
    typer.Option(
        "--constraints",
        "-C",
        help="Jobs that asked for all these node features (sbatch --constraint), where the "
        "controller serves them.",
    ),
]
Flags = Annotated[
    ListOpt,
    typer.Option(
        "--flags",
        "-F",
        help="Jobs with these scheduler flags (SchedSubmit, SchedMain, SchedBackfill, any "
        "case: fusesched keeps none).",
    ),
]
Reason = Annotated[
    ListOpt,
    typer.Option(
        "--reason",
        help="Jobs whose reason is one of these (Slurm 22.05's codes, as squeue's %r: "
        "Dependency, Priority…).",
    ),
]
NoShortReason = Annotated[
    bool, typer.Option("-R", hidden=True, callback=_no_short_reason, show_default=False)
]
UseLocalUid = Annotated[
    bool, _flag("--use-local-uid", help="Taken: UIDs are read from this machine already.")
]
Usage = Annotated[
    bool,
    typer.Option(
        "--usage", "-U", help="Print a usage line and exit.", is_eager=True, callback=_usage
    ),
]
Cluster = Annotated[
    ListOpt, typer.Option("--cluster", hidden=True, callback=checked, show_default=False)
]
