"""The administration commands: ``fusesched token …`` (API tokens) and ``fusesched ca …``
(the cluster's certificate authority, for TLS)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from fusesched.cli.entry import HELP_MARKUP
from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _ago,
    _call,
    _client,
    _fail,
    _print_json,
    console,
    err,
)

token_app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="token",
    help="Make, list and revoke API tokens (admins).",
    no_args_is_help=True,
)


@token_app.command("create")
def token_create(
    user: Annotated[str, typer.Argument(help="Whose token (not for --join).")] = "",
    role: Annotated[
        str, typer.Option(help="user, tenant-admin or cluster-admin (people's tokens).")
    ] = "user",
    tenant: Annotated[str, typer.Option(help="Tenant (default: your own).")] = "",
    join: Annotated[
        bool, typer.Option("--join", help="A one-time join token for a node instead.")
    ] = False,
    node: Annotated[
        str | None, typer.Option(help="With --join: only this node name may use it.")
    ] = None,
    expires: Annotated[
        float | None, typer.Option(help="Seconds until the token expires (default: never).")
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a token. It is printed once: only its hash is kept."""
    if not join and not user:
        _fail("name the user the token is for (or use --join for a node)", 2)
    made = _call(
        _client(controller_url, token, ca).create_token,
        user,
        tenant=tenant,
        role=role,
        kind="join" if join else "user",
        node=node,
        expires_in_s=expires,
    )
    if as_json:
        _print_json(made)
        return
    sys.stdout.write(made["token"] + "\n")
    what = f"join token for {node or 'any node'}" if join else f"{made['role']} {made['user']}"
    err.print(f"token {made['id']} ({what}, tenant {made['tenant'] or '-'}); shown only once")


@token_app.command("list")
def token_list(
    kind: Annotated[str | None, typer.Option(help="user, join, agent or job.")] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked tokens.")] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List tokens (never their secrets)."""
    found = _call(_client(controller_url, token, ca).tokens, kind, revoked)
    if as_json:
        _print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("id", "kind", "user", "tenant", "role", "node/job", "created", "state"):
        table.add_column(name, no_wrap=name == "id")  # the id is what `token revoke` takes
    for t in found:
        state = "revoked" if t["revoked"] else ("used" if t.get("used_at") else "valid")
        table.add_row(
            t["id"],
            t["kind"],
            t["user"],
            t["tenant"],
            t["role"],
            t.get("node") or t.get("job_id") or "",
            _ago(t["created_at"]),
            state,
        )
    console.print(table)


@token_app.command("revoke")
def token_revoke(
    token_ids: Annotated[list[str], typer.Argument(help="Token ids (from `token list`).")],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Revoke tokens: they stop working at once."""
    client = _client(controller_url, token, ca)
    for token_id in token_ids:
        _call(client.revoke_token, token_id)
        console.print(f"Revoked token {token_id}", highlight=False)


# ---------------------------------------------------------------------- certificates

ca_app = typer.Typer(
    rich_markup_mode=HELP_MARKUP,
    name="ca",
    help="The cluster's certificate authority, for TLS.",
    no_args_is_help=True,
)
CaDirOpt = Annotated[Path, typer.Option("--dir", help="Folder of the CA's files.")]


@ca_app.command("init")
def ca_init(folder: CaDirOpt = Path("fusesched-ca")) -> None:
    """Create the cluster's CA: DIR/ca.crt (give it to clients, --ca) and DIR/ca.key (0600)."""
    from fusesched.tls import init_ca

    try:
        cert = init_ca(folder)
    except OSError as exc:
        _fail(str(exc), 2)
    console.print(f"CA certificate {cert}; key {folder / 'ca.key'} (keep it private)")


@ca_app.command("issue")
def ca_issue(
    folder: CaDirOpt = Path("fusesched-ca"),
    name: Annotated[str, typer.Option(help="Certificate name (files DIR/NAME.crt, .key).")] = (
        "controller"
    ),
    host: Annotated[
        list[str] | None, typer.Option(help="Host name or IP address it is for (repeatable).")
    ] = None,
    days: Annotated[int, typer.Option(min=1, help="Validity in days.")] = 825,
) -> None:
    """Issue a server certificate signed by the CA (for `controller --tls-cert --tls-key`)."""
    from fusesched.tls import issue

    try:
        cert, key = issue(folder, name, host or ["127.0.0.1", "localhost"], days)
    except (OSError, ValueError) as exc:
        _fail(str(exc), 2)
    console.print(f"certificate {cert}; key {key} (mode 0600)")
