"""``fusesched sinfo``: the cluster's nodes as Slurm's sinfo shows them, by partition (a
pool) and state, or node by node.

The nodes come from ``GET /v1/nodes`` (one request); states, fields and lines are in
:mod:`fusesched.cli.sinfo_format`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, err

ListOpt = list[str] | None


def sinfo(
    node_oriented: Annotated[
        bool,
        typer.Option("--Node", "-N", help="A line per node (NODELIST NODES PARTITION STATE)."),
    ] = False,
    long: Annotated[
        bool,
        typer.Option(
            "--long",
            "-l",
            help="The time first, then more columns: CPUS, MEMORY (MB), GRES, REASON; node by "
            "node also TMP_DISK and AVAIL_FEATURES.",
        ),
    ] = False,
    list_reasons: Annotated[
        bool,
        typer.Option(
            "--list-reasons",
            "-R",
            help="Drained, draining and down nodes with why, who set it and when "
            "(REASON USER TIMESTAMP NODELIST).",
        ),
    ] = False,
    summarize: Annotated[
        bool,
        typer.Option(
            "--summarize",
            "-s",
            help="A line per partition: NODES(A/I/O/T) (allocated, idle, "
            "other: drained or down, total).",
        ),
    ] = False,
    partition: Annotated[
        ListOpt,
        typer.Option("--partition", "-p", help="Only these partitions (pools; a comma list)."),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option("--nodes", "-n", help="Only these nodes (a host list: node[01-04],gpu1)."),
    ] = None,
    states: Annotated[
        ListOpt,
        typer.Option(
            "--states",
            "-t",
            help="Only nodes in these states (a comma list: idle, mix, alloc, comp, drain, "
            "drained, drng, down, powered_down, no_respond, all).",
        ),
    ] = None,
    noheader: Annotated[bool, typer.Option("--noheader", "-h", help="No header line.")] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            envvar="SINFO_FORMAT",
            help='Fields, as "%9P %.5a %.6D %.6t %N" (%[.][WIDTH]LETTER, ".": right-justified; '
            "letters: docs/LIVE.md) (default: SINFO_FORMAT, else the view's own).",
            show_default=False,
            show_envvar=False,
        ),
    ] = None,
    long_fmt: Annotated[
        str | None,
        typer.Option(
            "--Format",
            "-O",
            help='Fields by sinfo\'s long names, as "NodeList,StateLong:12,CPUsState:.15" '
            "(NAME[:[.]WIDTH], 20 wide unless said; names: docs/LIVE.md); over -o.",
            show_default=False,
        ),
    ] = None,
    iterate: Annotated[
        int | None,
        typer.Option(
            "--iterate",
            "-i",
            min=1,
            max=2**31 - 1,  # (Slurm's too: a C int; more would overflow time.sleep)
            help="Print the listing every SECONDS seconds, each under the time (not with -h or "
            "--json), until Ctrl-C.",
            metavar="SECONDS",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="A JSON list: an object a node listed (the format options aside)."
        ),
    ] = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """The cluster's nodes as Slurm's sinfo shows them (-N -l -R -s -p -n -t -h -o -O -i). A
    partition is a pool (`local`: the local agents' nodes, the default, marked `*`)."""
    from fusesched.cli import sinfo_format as si
    from fusesched.cli import sinfo_long
    from fusesched.cli.id_lists import comma_list
    from fusesched.cli.squeue_format import FormatError, Piece
    from fusesched.hostlist import expand_hostlist

    try:
        wanted = si.parse_states(states) if states else None
        pools = set(comma_list(partition, "partition"))
        names = set(expand_hostlist(nodes)) if nodes is not None else None
        pieces: list[Piece] | None = None
        if long_fmt is not None:
            pieces = sinfo_long.parse(long_fmt)
        elif fmt is not None:
            pieces = si.parse(fmt)
    except (FormatError, ValueError) as exc:
        _fail(str(exc), 2)
    client = _client(controller_url, token, ca)

    def listing() -> str:
        found: list[dict[str, Any]] = client.nodes()
        listed = [si.node_info(view) for view in found]
        listed = [
            n
            for n in listed
            if (not pools or n.partition in pools)
            and (names is None or n.name in names)
            and (wanted is None or wanted(n))
            and (not list_reasons or si.reasons_only(n))
        ]
        if as_json:
            return json.dumps([si.record(n) for n in listed], indent=2, default=str) + "\n"
        shown = pieces or si.parse(
            si.default_format(
                listed,
                node_oriented=node_oriented,
                long=long,
                summarize=summarize,
                reasons=list_reasons,
            )
        )
        lines = si.lines(listed, shown, node_oriented=node_oriented, header=not noheader)
        return "".join(line + "\n" for line in lines)

    dated = not (noheader or as_json)  # (-l and each -i listing: the time above, as sinfo)
    if iterate is None:
        text = _call(listing)
        sys.stdout.write((si.timestamp() + "\n" if long and dated else "") + text)
    else:
        every(iterate, listing, dated=dated)


def every(seconds: int, listing: Callable[[], str], *, dated: bool) -> NoReturn:
    """``-i``: ``listing`` every ``seconds`` seconds, each under the time (``dated``) and
    followed by a blank line, as sinfo's; a controller that cannot be reached or fails is
    said on stderr and asked again next time, one that refuses (4xx: a bad token) ends it
    (exit 2). Ctrl-C ends it (exit 130, as a shell shows a command it interrupted)."""
    from fusesched.cli.sinfo_format import timestamp
    from fusesched.sdk import ControllerError

    try:
        while True:
            try:
                text = listing()
            except ControllerError as exc:
                if 400 <= exc.status < 500:
                    _fail(str(exc), 2)
                err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
                text = ""
            stamp = timestamp() + "\n" if dated else ""
            sys.stdout.write(stamp + text + "\n")
            sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add ``fusesched sinfo`` to the ``fusesched`` command."""
    app.command(rich_help_panel="Jobs and cluster")(sinfo)
