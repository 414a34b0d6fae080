"""``fusesched drain`` and ``fusesched undrain``: take nodes out of scheduling for maintenance
and give them back (cluster-admins; docs/LIVE.md, "Draining nodes")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusesched.cli.live import (
    CaOpt,
    ControllerOpt,
    JsonOpt,
    TokenOpt,
    _client,
    _print_json,
    console,
    err,
)

NodesArg = Annotated[list[str], typer.Argument(help="Node names (as `fusesched nodes` lists).")]


def drain(
    nodes: NodesArg,
    reason: Annotated[
        str,
        typer.Option(
            "--reason", "-r", help="Why (required, like Slurm's Reason=): shown by `nodes`."
        ),
    ],
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drain nodes: what runs there runs to the end, nothing new is placed there
    (`scontrol update State=DRAIN`, `kubectl cordon`). The drain outlives restarts."""
    _each(
        nodes,
        lambda client, name: client.drain_node(name, reason),
        controller_url,
        token,
        ca,
        as_json,
    )


def undrain(
    nodes: NodesArg,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give drained nodes back to the scheduler (`scontrol update State=RESUME`,
    `kubectl uncordon`). A node that reports itself unhealthy stays draining."""
    _each(nodes, lambda client, name: client.undrain_node(name), controller_url, token, ca, as_json)


def _each(
    nodes: list[str],
    call: Any,
    controller_url: str | None,
    token: str | None,
    ca: Any,
    as_json: bool,
) -> None:
    """``call`` for every node; a refused one is reported and the others still done, the
    exit status then that of the last refusal (as ``cancel``)."""
    from fusesched.sdk import ControllerError

    client = _client(controller_url, token, ca)
    done: list[dict[str, Any]] = []
    code = 0
    for name in nodes:
        if not name.strip():
            err.print("[red]error:[/] a node name must not be empty", highlight=False)
            code = 2
            continue
        try:
            done.append(call(client, name))
        except ControllerError as exc:
            err.print(f"[red]error:[/] {exc}", highlight=False)
            code = 2 if 400 <= exc.status < 500 else 1
    if as_json:
        _print_json(done)
    else:
        for node in done:
            why = f" ({node['drain_reason']})" if node["drain_reason"] else ""
            console.print(f"{node['node']}: {node['state']}{why}", highlight=False)
    if code:
        raise typer.Exit(code)
