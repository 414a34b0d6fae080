"""``fusesched route``: which pools may take a job, in order of preference, and why."""

from __future__ import annotations

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
)


def route(
    target: Annotated[
        str,
        typer.Argument(
            help="A job id, or a job file (fusesched YAML, Kubernetes YAML, batch script) to "
            "route as if it were submitted now."
        ),
    ],
    explain: Annotated[
        bool, typer.Option("--explain", help="Show every rule and pool considered, and why.")
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the pools a job is routed to (local agents, Slurm, Kubernetes), most preferred
    first; the later ones take it only when the first are full."""
    client = _client(controller_url, token, ca)
    found: list[dict[str, Any]]
    if Path(target).is_file():
        from fusesched.submit.errors import SubmitError
        from fusesched.submit.load import load_submission

        try:
            requests = [p.request for p in load_submission(Path(target))]
        except SubmitError as exc:
            _fail(str(exc), 2)
        found = [
            _call(client.route, r.model_dump(mode="json", exclude_none=True)) for r in requests
        ]
    else:
        found = [_call(client.route, target)]
    if as_json:
        _print_json(found[0] if len(found) == 1 else found)
        return
    for k, answer in enumerate(found):
        name = answer.get("job_id") or (target if len(found) == 1 else f"{target} [{k}]")
        rule = f" (rule {answer['rule']})" if answer.get("rule") else ""
        ran = f"; runs in {answer['pool']}" if answer.get("pool") else ""
        console.print(f"{name}: {' → '.join(answer['pools'])}{rule}{ran}", highlight=False)
        if explain:
            for line in answer["explanation"]:
                console.print(f"  {line}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Jobs and cluster")(route)
