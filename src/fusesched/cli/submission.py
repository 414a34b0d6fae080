"""The submitting commands: ``fusesched submit`` (job files of any format) and
``fusesched sbatch`` (a Slurm batch script, or ``--wrap``), each with ``--test-only``,
``--parsable`` (print only the ids) and ``--wait`` (return when the jobs have ended, with their
exit status: :mod:`fusesched.cli.waiting`)."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

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
from fusesched.cli.waiting import Target, target

#: The name ``sbatch --wrap``'s job is read under (no file: the options say what runs).
WRAP_SOURCE = "wrap"

#: sbatch takes Slurm's own options, so the command lets unknown options through to them.
SBATCH_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}

#: Options for the command itself that sbatch takes among Slurm's (not for the job):
#: ``--test-only``, ``--parsable``, ``-W/--wait``.
PARSABLE = "--parsable"
WAIT = ("-W", "--wait")


def _script_flags(path: Path) -> frozenset[str]:
    """``parsable``/``wait`` when the file is a batch script whose ``#SBATCH`` lines ask for
    them (Slurm lets a script give sbatch's own options)."""
    from fusesched.submit.sbatch import command_flags

    try:
        return command_flags(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):  # (the parser has already read it)
        return frozenset()


def print_ids(ids: Sequence[str]) -> None:
    """``--parsable``: the ids, one a line, and nothing else on stdout."""
    sys.stdout.write("".join(f"{job_id}\n" for job_id in ids))
    sys.stdout.flush()


def wait_and_exit(client: Any, targets: Sequence[Target], prog: str) -> None:
    """``--wait``: say each change of state on stderr until every job of ``targets`` has ended,
    then exit with their status (:func:`fusesched.cli.waiting.exit_status`). Ctrl-C stops
    waiting (the jobs keep running, as with sbatch) and exits 130."""
    from fusesched.cli.waiting import INTERRUPTED, exit_status, wait_for

    def say(line: str) -> None:
        err.print(f"{prog}: {line}", highlight=False, markup=False)

    try:
        total, ended = _call(wait_for, client, targets, say)
    except KeyboardInterrupt:
        ids = [t.id for t in targets]
        shown = ", ".join(ids[:3]) + (", …" if len(ids) > 3 else "")
        say(f"stopped waiting; job {shown} keeps running (fusesched cancel to stop it)")
        raise typer.Exit(INTERRUPTED) from None
    outcome = exit_status(ended)
    if outcome.code:
        if total > 1:
            say(f"{len(outcome.lines)} of {total} jobs did not complete")
        say(f"exit status {outcome.code}")
        raise typer.Exit(outcome.code)


def _check_flags(test_only: bool, parsable: bool, wait: bool, as_json: bool) -> None:
    """Usage errors (exit 2) among the command's own options, as given on the command line
    (a script's ``#SBATCH --wait`` is simply not acted on with ``--test-only``)."""
    if test_only and (wait or parsable):
        shown = "--wait" if wait else "--parsable"
        _fail(f"--test-only submits nothing: it takes no {shown}", 2)
    if as_json and parsable:
        _fail("give --json or --parsable, not both", 2)


def _sent(call: Any, payload: Any) -> Any:
    """``call(payload)``; a controller older than one of :data:`~fusesched.cli.fast.
    NEWER_FIELDS` (``submit_dir``, ``submit_env``, ``submit_host``, ``slurm_options``: it
    refuses them, having submitted nothing) gets the payload again without them, with a
    warning each where it matters; one older than a :data:`~fusesched.cli.fast.NEEDED_FIELDS`
    field (``script_args``) is a usage error saying so."""
    from fusesched.cli.fast import NEEDED_FIELDS, NEWER_FIELDS, refused_fields
    from fusesched.client_base import older_than
    from fusesched.sdk import ControllerError

    try:
        return call(payload)
    except ControllerError as exc:
        for name, why in NEEDED_FIELDS.items():  # (script_args: nothing to leave out)
            if older_than(exc, name):
                _fail(why, 2)
        refused = refused_fields(exc)
        if not refused:
            raise
    for name in refused:
        if NEWER_FIELDS[name] is not None:
            err.print(f"[yellow]warning:[/] {NEWER_FIELDS[name]}", highlight=False)
    if isinstance(payload, list):
        return call([{k: v for k, v in p.items() if k not in refused} for p in payload])
    return call({k: v for k, v in payload.items() if k not in refused})


def _processors(request: Any) -> int:
    """The CPUs a job asks for in all (whole CPUs, as Slurm counts them)."""
    from fusesched.model.resources import CPU, parse_quantity

    milli = sum(parse_quantity(CPU, g.resources.get(CPU, "1")) * g.replicas for g in request.groups)
    return max(1, math.ceil(int(milli) / 1000))


def _targets(job_ids: Sequence[str], requests: Sequence[Any]) -> list[Target]:
    """The jobs to wait for: each submitted job, an array as a whole."""
    return [target(job_id, r.array) for job_id, r in zip(job_ids, requests, strict=True)]


def submit(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Job files: fusesched YAML, Kubernetes YAML (Pod, Job, Deployment, Kubeflow "
            "PyTorchJob or MPIJob, Volcano Job) or a batch script."
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
    parsable: Annotated[
        bool,
        typer.Option(
            "--parsable",
            help="Print only the job ids, one a line (as sbatch --parsable): "
            "`ids=$(fusesched submit --parsable a.yaml b.sh)`.",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            "-W",
            help="Return when every job (each member of an array) has ended: exit 0 if all "
            "completed, else the highest exit code (1 for a job cancelled, timed out or ended "
            "without one). State changes are said on stderr; Ctrl-C stops waiting (exit 130), "
            "the jobs keep running.",
        ),
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit jobs; the format of each file is recognised from its content.

    A batch script's `#SBATCH --parsable` or `#SBATCH --wait` line counts as the option; it
    runs in the current folder, as with sbatch."""
    from fusesched.cli.fast import submit_dir
    from fusesched.model.submit_env import text_environ
    from fusesched.model.submit_host import this_host
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.load import load_submission
    from fusesched.submit.slurm_options import with_submit_host

    requests = []
    flags: set[str] = set()
    folder, host = submit_dir(), this_host()
    environ = text_environ(os.environ)  # (what a batch script's job inherits, as sbatch's)
    try:
        for path in files:
            for parsed in load_submission(path, submit_dir=folder, submit_env=environ):
                requests.append(with_submit_host(parsed.request, host))
                for warning in parsed.warnings:
                    err.print(f"[yellow]warning:[/] {warning}", highlight=False)
            flags |= _script_flags(path)
    except SubmitError as exc:
        _fail(str(exc), 2)
    _check_flags(test_only, parsable, wait, as_json)
    parsable = parsable or ("parsable" in flags and not as_json)  # (--json given wins)
    wait = wait or "wait" in flags
    client = _client(controller_url, token, ca)
    payload = [r.model_dump(mode="json", exclude_none=True) for r in requests]
    if test_only:
        from fusesched.cli.starts import report_trial

        report_trial(_call(_sent, client.test_start, payload), as_json)
        return
    ids = (
        [_call(_sent, client.submit, payload[0])]
        if len(payload) == 1
        else _call(_sent, client.submit_many, payload)
    )
    if parsable:
        print_ids(ids)
    elif as_json:
        _print_json({"id": ids[0], "ids": ids} if len(ids) == 1 else {"ids": ids})
    else:
        for job_id in ids:
            console.print(f"Submitted job {job_id}", highlight=False)
    if wait:
        wait_and_exit(client, _targets(ids, requests), "submit")


def sbatch(
    ctx: typer.Context,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a Slurm batch script: fusesched sbatch [SBATCH OPTIONS] SCRIPT [ARGS...].

    The script's #SBATCH directives are honoured; options given here override them, as with
    Slurm's sbatch (e.g. fusesched sbatch -N 2 --time=10:00 job.sh). The words after the
    script are its arguments ($1, $2, ...: fusesched sbatch job.sh input.csv 4). With no
    script named, it is read from standard input (fusesched sbatch -N 2 < job.sh); or
    --wrap="COMMAND" runs the command (fusesched sbatch -n 2 --wrap="hostname"). The job
    runs in the current folder (where its node has it) unless -D names another, and writes
    its output to slurm-<id>.out there unless -o names another file.

    A heterogeneous job: ':' separates its components' options (fusesched sbatch -n1 -c4 :
    -n2 --gpus-per-task=1 job.sh), as do `#SBATCH hetjob` lines in the script. The script
    runs on component 0; `srun --het-group=1` in it runs a step on component 1.

    `--parsable` prints only the job id: `jid=$(fusesched sbatch --parsable job.sh)`.
    `-W`/`--wait` returns when the job (every member of an array) has ended, with its exit
    code (an array's highest; 1 for a job cancelled, timed out or ended without a code),
    saying its state changes on stderr; Ctrl-C stops waiting and leaves the job running
    (exit 130). A script's `#SBATCH --parsable` and `#SBATCH --wait` lines count as the options.

    -d/--dependency on an array's id waits on all its members (map-reduce: fusesched sbatch
    -d afterok:$jid reduce.sh); -d aftercorr:$jid runs each member of an array after the
    member of the same index of array $jid completed; -d afterok:$jid_[1-3] (or _[1,5-7])
    waits on those members only.

    `-V`/`--version` (before the script) prints the Slurm release fusesched's commands
    follow, as Slurm's sbatch prints its own (`slurm 22.05.0`), and submits nothing.
    """
    from fusesched.cli.fast import UsageError, sbatch_words, script_text, submit_dir
    from fusesched.cli.slurm_version import print_version
    from fusesched.model.submit_env import text_environ
    from fusesched.model.submit_host import this_host
    from fusesched.submit.errors import SubmitError
    from fusesched.submit.sbatch import command_flags, parse_sbatch
    from fusesched.submit.sbatch_words import STDIN_SOURCE, asks_version, option_places
    from fusesched.submit.slurm_options import with_submit_host

    # the command's own flags count before the script only (after it, as every word there,
    # they are the script's arguments, as Slurm's)
    try:
        words = sbatch_words(list(ctx.args))
    except UsageError as exc:
        _fail(str(exc), 2)
    given = words.options
    if asks_version(given):  # (-V/--version: that alone, as Slurm's; no script is read)
        print_version(True)
    # the command's own flags where an option stands (-J --wait names the job "--wait")
    places = option_places(given)
    at_option = [a for a, place in zip(given, places, strict=True) if place]
    test_only = "--test-only" in at_option  # (submit nothing, say when it would start)
    parsable = PARSABLE in at_option
    wait = any(a in WAIT for a in at_option)
    own = {"--test-only", PARSABLE, *WAIT}
    options = [a for a, place in zip(given, places, strict=True) if not place or a not in own]
    folder = submit_dir()  # (the job's working directory, as Slurm's)
    environ = text_environ(os.environ)  # (the job inherits it, as Slurm's --export=ALL)
    text = ""  # (--wrap: none, the options say what runs)
    try:
        source = WRAP_SOURCE
        if not words.wraps:  # the script named, else standard input's (sbatch < job.sh)
            text = script_text(words.script)
            source = STDIN_SOURCE if words.script is None else os.path.basename(words.script)
        parsed = parse_sbatch(
            text,
            source=source,
            args=options,
            script_args=words.script_args,
            submit_dir=folder,
            submit_env=environ,
        )
    except (UsageError, SubmitError) as exc:
        _fail(str(exc), 2)
    request = with_submit_host(parsed.request, this_host())  # (SLURM_SUBMIT_HOST)
    for warning in parsed.warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    _check_flags(test_only, parsable, wait, as_json)
    flags = frozenset() if words.wraps or test_only else command_flags(text)
    parsable = parsable or ("parsable" in flags and not as_json)  # (--json given wins)
    wait = wait or "wait" in flags
    client = _client(controller_url, token, ca)
    payload = request.model_dump(mode="json", exclude_none=True)
    if test_only:  # (Slurm's line, as sbatch's; --json: the answer)
        from fusesched.cli.starts import report_trial, report_trial_slurm, trial_slurm

        if as_json:
            report_trial(_call(_sent, client.test_start, [payload]), as_json)
        else:
            tried = trial_slurm(lambda: _sent(client.test_start, [payload]))
            report_trial_slurm(tried, _processors(request), request.queue)
        return
    job_id = _call(_sent, client.submit, payload)
    if parsable:
        print_ids([job_id])
    elif as_json:
        _print_json({"id": job_id})
    else:
        console.print(f"Submitted batch job {job_id}", highlight=False)
    if wait:
        wait_and_exit(client, _targets([job_id], [request]), "sbatch")
