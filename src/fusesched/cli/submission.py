"""The submitting commands: ``fusesched submit`` (job files of any format) and
``fusesched sbatch`` (a Slurm batch script, or ``--wrap``), each with ``--test-only``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _call,
    _client,
    _fail,
    _print_json,
    console,
    err,
)

#: The name ``sbatch --wrap``'s job is read under (no file: the options say what runs).
WRAP_SOURCE = "wrap"

#: sbatch takes Slurm's own options, so the command lets unknown options through to them.
SBATCH_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def _wraps(args: list[str]) -> bool:
    """True when sbatch's options have ``--wrap``: no script file, the command stands for it."""
    return any(arg == "--wrap" or arg.startswith("--wrap=") for arg in args)


def _split_sbatch_args(args: list[str]) -> tuple[list[str], Path | None, list[str]]:
    """(options, script, script arguments): the script is the first existing file named
    (none with ``--wrap``: every argument is an option, and the parser refuses a script)."""
    if _wraps(args):
        return args, None, []
    for k, arg in enumerate(args):
        if not arg.startswith("-") and Path(arg).is_file():
            return args[:k], Path(arg), args[k + 1 :]
    return args, None, []


def submit(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Job files: fusesched YAML, Kubernetes Pod/Job YAML or a batch script."
        ),
    ],
    test_only: Annotated[
        bool,
        typer.Option(
            "--test-only",
            help="Submit nothing: say when and where each job would start if submitted now "
            "(as sbatch --test-only).",
        ),
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit jobs; the format of each file is recognised from its content."""
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.load import load_submission

    requests = []
    try:
        for path in files:
            for parsed in load_submission(path):
                requests.append(parsed.request)
                for warning in parsed.warnings:
                    err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    except SubmitError as exc:
        _fail(str(exc), 2)
    client = _client(controller_url, token, ca)
    payload = [r.model_dump(mode="json", exclude_none=True) for r in requests]
    if test_only:
        from fusesched.cli.starts import report_trial

        report_trial(_call(client.test_start, payload), as_json)
        return
    ids = (
        [_call(client.submit, payload[0])]
        if len(payload) == 1
        else _call(client.submit_many, payload)
    )
    if as_json:
        _print_json({"id": ids[0], "ids": ids} if len(ids) == 1 else {"ids": ids})
    else:
        for job_id in ids:
            console.print(f"Submitted job {job_id}", highlight=False)


def sbatch(
    ctx: typer.Context,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a Slurm batch script: fusesched sbatch [SBATCH OPTIONS] SCRIPT.

    The script's #SBATCH directives are honoured; options given here override them, as with
    Slurm's sbatch (e.g. fusesched sbatch -N 2 --time=10:00 job.sh). Without a script,
    --wrap="COMMAND" runs the command (fusesched sbatch -n 2 --wrap="hostname").
    """
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.sbatch import load_sbatch, parse_sbatch

    args = list(ctx.args)
    test_only = "--test-only" in args  # (sbatch's own: submit nothing, say when it would start)
    options, script, rest = _split_sbatch_args([a for a in args if a != "--test-only"])
    if script is None and not _wraps(options):
        _fail(
            "no batch script given (usage: fusesched sbatch [OPTIONS] SCRIPT, or "
            'fusesched sbatch [OPTIONS] --wrap="COMMAND")',
            2,
        )
    if rest:
        _fail(f"arguments after the script are not supported: {' '.join(rest)}", 2)
    try:
        if script is None:
            parsed = parse_sbatch("", source=WRAP_SOURCE, args=options)
        else:
            parsed = load_sbatch(script, options)
    except SubmitError as exc:
        _fail(str(exc), 2)
    request = parsed.request
    for warning in parsed.warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    client = _client(controller_url, token, ca)
    payload = request.model_dump(mode="json", exclude_none=True)
    if test_only:
        from fusesched.cli.starts import report_trial

        report_trial(_call(client.test_start, [payload]), as_json)
        return
    job_id = _call(client.submit, payload)
    if as_json:
        _print_json({"id": job_id})
    else:
        console.print(f"Submitted batch job {job_id}", highlight=False)
