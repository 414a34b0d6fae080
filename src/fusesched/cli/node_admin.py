"""``fusesched drain`` and ``fusesched undrain``: take nodes out of scheduling for maintenance
and give them back (cluster-admins; docs/LIVE.md, "Draining nodes")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusesched.cli.live import CaOpt, ControllerOpt, JsonOpt, TokenOpt, _client, run_each

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
    (`scontrol update State=DRAIN`, `kubectl cordon`). The drain outlives restarts; a node
    not back since a controller restart is shown `down` and comes back draining."""
    client = _client(controller_url, token, ca)
    act = lambda c, n: c.drain_node(n, reason)  # noqa: E731
    run_each(client, nodes, "node name", act, as_json, _nodes, _line)


def undrain(
    nodes: NodesArg,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give drained nodes back to the scheduler (`scontrol update State=RESUME`,
    `kubectl uncordon`). A node that reports itself unhealthy stays draining."""
    client = _client(controller_url, token, ca)
    run_each(client, nodes, "node name", lambda c, n: c.undrain_node(n), as_json, _nodes, _line)


def _line(name: str, node: dict[str, Any]) -> str:
    why = f" ({node['drain_reason']})" if node["drain_reason"] else ""
    return f"{node['node']}: {node['state']}{why}"


def _nodes(done: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return list(done.values())
