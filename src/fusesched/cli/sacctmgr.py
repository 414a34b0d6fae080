"""``fusesched sacctmgr``: Slurm's ``sacctmgr list user`` (or ``show user``), the one query
tools make of it — which accounts a user may submit under (Snakemake's SLURM executor runs
``sacctmgr -n -s list user NAME format=account%256`` before ``sshare``). The users'
associations are ``sshare``'s (:mod:`fusesched.cli.sshare_format`): the tenancy
configuration's tenants and ``default``. Anything else sacctmgr does (adding accounts,
users, QoS, …) is refused: fusesched's tenancy configuration holds them (docs/TENANCY.md)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Final

import typer

from fusesched.cli import sshare_format as sf
from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail
from fusesched.cli.queue_status import _caller
from fusesched.cli.slurm_version import VersionOpt

#: sacctmgr's user fields (right-justified, as sacctmgr prints them).
FIELDS: Final = {
    "user": sf.Field("User", 10, False, lambda a: a.user),
    "defaultaccount": sf.Field("Def Acct", 10, False, lambda a: sf.DEFAULT_ACCOUNT),
    "account": sf.Field("Account", 10, False, lambda a: a.account),
    "partition": sf.Field("Partition", 10, False, lambda a: a.partition),
}
#: What fusesched answers: ``list|show user [NAMES] [where] [name=NAMES] [format=FIELDS]``.
ANSWERED: Final = "`sacctmgr list user [NAMES] [format=User,Account,…]` (or `show user`)"


def _words(words: list[str]) -> tuple[list[str], str | None, bool]:
    """The user names, the format and whether ``withassoc`` is among ``list user …``'s
    words; exit 1 for anything else."""
    if len(words) < 2 or words[0].lower() not in ("list", "show"):
        _fail(f"fusesched answers only {ANSWERED}, not `sacctmgr {' '.join(words)}`")
    if words[1].lower() not in ("user", "users"):
        _fail(f"sacctmgr {words[0]} {words[1]}: fusesched lists users only ({ANSWERED})")
    names: list[str] = []
    fmt = None
    withassoc = False
    for word in words[2:]:
        key, eq, value = word.partition("=")
        if not eq:
            withassoc = withassoc or key.lower() == "withassoc"
            if key.lower() not in ("where", "withassoc"):
                names.extend(n for n in key.split(",") if n)
        elif key.lower() == "format":
            fmt = value
        elif key.lower() in ("name", "names", "user", "users"):
            names.extend(n for n in value.split(",") if n)
        else:
            _fail(f"sacctmgr list user: {key}= is not answered ({ANSWERED})")
    return names, fmt, withassoc


def sacctmgr(
    words: Annotated[list[str], typer.Argument(help="list user [NAMES] [format=FIELDS]")],
    noheader: Annotated[bool, typer.Option("--noheader", "-n", help="No header.")] = False,
    associations: Annotated[
        bool,
        typer.Option(
            "--associations", "-s", help="One row per association (account), not one per user."
        ),
    ] = False,
    parsable: Annotated[
        bool, typer.Option("--parsable", "-p", help="'|' after each field.")
    ] = False,
    parsable2: Annotated[
        bool, typer.Option("--parsable2", "-P", help="'|' between fields.")
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    version: VersionOpt = False,  # (eager: printed before anything else)
) -> None:
    """Slurm's `sacctmgr list user` (`show user`): each user's associations — the accounts
    (tenants) they may submit under, `default` among them — as `sshare` shows them."""
    names, fmt, withassoc = _words(words)
    associations = associations or withassoc
    default = "User,DefaultAccount,Account,Partition" if associations else "User,DefaultAccount"
    try:
        fields = sf.parse_format(fmt or default, FIELDS, "sacctmgr format=")
    except ValueError as exc:
        _fail(str(exc))
    found = _call(_client(controller_url, token, ca).fairshare)
    in_tree = {a.user for a in sf.associations(found, []) if a.user}
    whom = list(dict.fromkeys(names)) or sorted(in_tree | {_caller()})
    rows = sorted(  # (by user, as sacctmgr lists them)
        (
            dataclasses.replace(a, depth=1)
            for a in sf.associations(found, whom)
            if a.user in whom and (associations or a.account == sf.DEFAULT_ACCOUNT)
        ),
        key=lambda a: a.user,
    )
    delimiter = "|" if parsable or parsable2 else None
    lines = sf.render(rows, fields, header=not noheader, delimiter=delimiter, trailing=parsable)
    if lines:
        typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    """Add ``fusesched sacctmgr`` to the ``fusesched`` command, in Slurm's panel."""
    from fusesched.cli.slurm_names import PANEL

    app.command(rich_help_panel=PANEL)(sacctmgr)
