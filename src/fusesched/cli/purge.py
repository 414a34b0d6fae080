"""``fusesched purge``: remove the records of the jobs that ended long ago, as Slurm's
``PurgeJobAfter`` does (cluster-admins; ``POST /v1/admin/purge``; docs/DEPLOY.md,
"Retention"). Asks before it removes anything, unless ``--yes``."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any, Final

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

#: An age: a number and a unit (s, m, h, d, w).
_AGE_RE: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.ASCII | re.IGNORECASE)


def parse_age(text: str, what: str = "--older-than") -> float:
    """Seconds from an age such as ``90d``, ``12h``, ``2w``, ``30m`` (``fusesched usage``'s
    relative times, without their minus); a ``ValueError`` that says what is wrong."""
    from fusesched.store.usage import UsageQueryError, parse_time

    match = _AGE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{what} {text!r}: give a number and a unit, as 90d, 12h, 2w or 30m")
    number, unit = match.groups()
    now = time.time()
    try:
        seconds = now - parse_time(f"-{number}{unit.lower()}", now)
    except UsageQueryError as exc:  # (beyond the years 1 to 9999)
        raise ValueError(f"{what} {text!r}: {exc}") from None
    if not seconds > 0:
        raise ValueError(f"{what} {text!r} must be more than nothing")
    return seconds


def purge(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Purge the jobs that ended more than AGE ago: 90d, 12h, 2w, 30m.",
        ),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            metavar="TIME",
            help="Purge the jobs that ended before TIME: an ISO date (2026-01-01, midnight "
            "UTC), an ISO date and time, or Unix seconds.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also purge jobs whose usage fair share still reads back after a restart "
            "(20 half-lives of the tenancy's half_life_s): that usage is forgotten at the "
            "controller's next restart. Without it such a cutoff is refused.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before purging.")] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove the records of the jobs that ended before a cutoff, as Slurm's PurgeJobAfter:
    each job whole (its row, tasks, events, job tokens and log folder) and the submitting
    environments no job names any more. Cluster-admins only.

    Waiting and running jobs stay, and so do the jobs a waiting job depends on, job arrays
    not all ended before the cutoff, and the audit log. Purged jobs leave `sacct`, `show`
    and `fusesched usage` for good (there are no separate usage roll-ups yet). Asks first
    (unless --yes), saying what would go."""
    cutoff = _cutoff(older_than, before)
    client = _client(controller_url, token, ca)
    if dry_run or not yes:
        preview = _call(client.purge, cutoff, dry_run=True, force=force)
        if dry_run or not (preview["jobs"] or preview["environments"]):
            _show(preview, cutoff, as_json)
            return
        _show(preview, cutoff, False, on_stderr=as_json)  # (--json: stdout is the answer's)
        try:
            confirmed = typer.confirm("Remove them?", default=False, err=as_json)
        except typer.Abort:
            confirmed = False
        if not confirmed:
            _fail("not confirmed: nothing was purged (--yes skips the question)")
    done = _call(client.purge, cutoff, force=force)
    _show(done, cutoff, as_json)


def _cutoff(older_than: str | None, before: str | None) -> float:
    """The cutoff the options give (Unix seconds); exit 2 with the reason if they do not."""
    from fusesched.store.usage import UsageQueryError, parse_time

    if (older_than is None) == (before is None):
        _fail("give one of --older-than AGE (90d) or --before TIME (2026-01-01)", 2)
    now = time.time()
    try:
        if older_than is not None:
            cutoff = now - parse_age(older_than)
        else:
            assert before is not None
            cutoff = parse_time(before, now)
    except (ValueError, UsageQueryError) as exc:
        message = str(exc) if older_than is not None else f"--before: {exc}"
        _fail(message, 2)
    if cutoff < 0:  # (the controller takes no time before 1970)
        given = f"--older-than {older_than}" if older_than is not None else f"--before {before}"
        _fail(f"{given}: that is before 1970, when no job had ended", 2)
    return cutoff


def _show(found: dict[str, Any], cutoff: float, as_json: bool, on_stderr: bool = False) -> None:
    if as_json:
        _print_json(found)
        return
    out = err if on_stderr else console
    from fusesched.store.purge import PurgeCounts, when

    counts = PurgeCounts(**{k: int(found.get(k, 0)) for k in PurgeCounts.__dataclass_fields__})
    at = when(cutoff)
    if not (counts.jobs or counts.environments):
        out.print(f"nothing to purge: no job that ended before {at} may go", highlight=False)
    else:
        verb = "would remove" if found.get("dry_run") else "removed"
        line = f"jobs that ended before {at}: {verb} {counts.text()}"
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if counts.kept:
        out.print(
            f"kept {counts.kept} jobs that ended before then: a waiting job depends on them, "
            "their array has not all ended before then, or the controller still holds them",
            highlight=False,
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Jobs and cluster")(purge)
