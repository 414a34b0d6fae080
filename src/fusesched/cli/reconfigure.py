"""``fusesched reconfigure``: the controller re-reads its tenancy file and takes new license
counts without a restart, as Slurm's ``scontrol reconfigure`` (cluster-admins;
docs/TENANCY.md, "Changing the configuration of a running controller")."""

from __future__ import annotations

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
)

#: ``--licenses none``: the cluster has no license any more.
NO_LICENSES = "none"


def reconfigure(
    licenses: Annotated[
        str | None,
        typer.Option(
            "--licenses",
            metavar="NAME:COUNT[,NAME:COUNT…]",
            help="The cluster's licenses from now on, all of them (as the controller's "
            "--licenses): a license left out is removed (refused while jobs hold or ask for "
            "it), `none` removes them all. A count below what running jobs hold keeps them "
            "running; waiting jobs wait. Lasts until the controller restarts: change its "
            "--licenses too.",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check the file (and licenses): say what would change, change nothing.",
        ),
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-read the controller's tenancy file (the `--tenancy FILE` it was started with) and
    apply it without a restart, between scheduling cycles, as `scontrol reconfigure`; SIGHUP
    to the controller does the same. Cluster-admins only.

    All or nothing: an invalid file changes nothing and gets the error the controller gives
    at startup; removing a queue, tenant, QoS tier or license that jobs still use is refused
    (drain it first). A quota that shrinks below what running jobs use keeps them running;
    the queue admits nothing new until enough has ended. Says what changed."""
    counts = _licenses(licenses)
    found = _call(_client(controller_url, token, ca).reconfigure, counts, dry_run)
    if as_json:
        _print_json(found)
        return
    _show(found)


def _licenses(text: str | None) -> dict[str, int] | None:
    """``--licenses`` as a mapping (``none``: empty); exit 2 with the reason if malformed."""
    from fusesched.model.licenses import LicenseError, parse_licenses

    if text is None:
        return None
    if text.strip().lower() == NO_LICENSES:
        return {}
    try:
        return dict(parse_licenses(text))
    except LicenseError as exc:
        _fail(f"--licenses: {exc}", 2)


def _show(found: dict[str, Any]) -> None:
    changes: list[dict[str, Any]] = found["changes"]
    path = found["tenancy_file"]
    if found["dry_run"]:
        head = "dry run, nothing changed"
        verb = "would change"
    else:
        head = "applied" if found["applied"] else "nothing to change"
        verb = "changed"
    source = f"re-read {path}" if path else "no tenancy file"
    console.print(f"{source}: {head}", highlight=False, markup=False)
    if changes:
        console.print(f"{verb}:", highlight=False)
        for change in changes:
            console.print(f"  {change['text']}", highlight=False, markup=False, soft_wrap=True)
    for note in found["notes"]:
        console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
