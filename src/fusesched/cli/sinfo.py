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

from fusesched.cli.clusters import ClustersOpt
from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt, _call, _client, _fail, err
from fusesched.cli.slurm_version import VersionOpt

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
            help="The time first, then Slurm 22.05's long columns: JOB_SIZE ROOT OVERSUBS "
            "GROUPS (Slurm's defaults: pools have no such settings) and long state names; node "
            "by node CPUS S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON; with -R the STATE "
            "and USER(uid).",
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
    as_yaml: Annotated[bool, typer.Option("--yaml", help="As --json, in YAML.")] = False,
    responding: Annotated[
        bool, typer.Option("--responding", "-r", help="Only nodes that answer (no `*`).")
    ] = False,
    dead: Annotated[
        bool, typer.Option("--dead", "-d", help="Only nodes that do not answer (`*`).")
    ] = False,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            "-S",
            help='The lines\' order: -o letters, "+P,-m" (-: descending; #P: the '
            "partitions' own order, the default).",
            show_default=False,
        ),
    ] = None,
    reservation: Annotated[
        bool,
        typer.Option(
            "--reservation",
            "-T",
            help="The advance reservations instead (RESV_NAME STATE START_TIME END_TIME "
            "DURATION NODELIST).",
        ),
    ] = False,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Every partition (none is hidden here).")
    ] = False,
    hide: Annotated[
        bool, typer.Option("--hide", help="Not the hidden partitions (none is hidden here).")
    ] = False,
    exact: Annotated[
        bool,
        typer.Option(
            "--exact", "-e", help="Group nodes only on equal values (fusesched always does)."
        ),
    ] = False,
    noconvert: Annotated[
        bool, typer.Option("--noconvert", help="Sizes as they are (they are: MB).")
    ] = False,
    federation: Annotated[
        bool, typer.Option("--federation", help="Accepted: fusesched is one cluster.")
    ] = False,
    local: Annotated[
        bool, typer.Option("--local", help="Accepted: fusesched is one cluster.")
    ] = False,
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Accepted (says nothing more).")
    ] = 0,
    clusters: ClustersOpt = None,  # (cli/clusters.py: checked, nothing else to do)
    version: VersionOpt = False,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """The cluster's nodes as Slurm's sinfo shows them (-N -l -R -s -p -n -t -r -d -h -o -O
    -S -i; -T: the reservations). A partition is a pool (`local`: the local agents' nodes,
    the default, marked `*`)."""
    from fusesched.cli import sinfo_format as si
    from fusesched.cli import sinfo_long, sinfo_sort
    from fusesched.cli.id_lists import comma_list
    from fusesched.cli.squeue_format import FormatError, Piece, render
    from fusesched.hostlist import expand_hostlist

    del show_all, hide, exact, noconvert, federation, local, verbose, clusters, version
    if as_json and as_yaml:
        _fail("give --json or --yaml, not both", 2)
    as_data = as_json or as_yaml
    if long and (fmt is not None or long_fmt is not None):  # (as Slurm 22.05's sinfo)
        _fail(LONG_AND_FORMAT, 1)
    try:
        order = sinfo_sort.parse(sort) if sort is not None else None
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
        if reservation:
            return reservations(client, noheader, as_json, as_yaml)
        found: list[dict[str, Any]] = client.nodes()
        listed = [si.node_info(view) for view in found]
        listed = [
            n
            for n in listed
            if (not pools or n.partition in pools)
            and (names is None or n.name in names)
            and (wanted is None or wanted(n))
            and (not list_reasons or si.reasons_only(n))
            and (not responding or n.responding)
            and (not dead or not n.responding)
        ]
        if as_data:
            return _data([si.record(n) for n in listed], as_yaml)
        shown = pieces or si.parse(
            si.default_format(
                listed,
                node_oriented=node_oriented,
                long=long,
                summarize=summarize,
                reasons=list_reasons,
            )
        )
        rows = si.rows(listed, shown, node_oriented)
        if order is not None:
            rows = sinfo_sort.ordered(rows, order)
        return "".join(line + "\n" for line in render(shown, rows, header=not noheader))

    dated = not (noheader or as_data)  # (-l and each -i listing: the time above, as sinfo)
    if iterate is None:
        text = _call(listing)
        stamped = long and dated and not reservation
        sys.stdout.write((si.timestamp() + "\n" if stamped else "") + text)
    else:
        every(iterate, listing, dated=dated)


#: ``-l`` with ``-o`` or ``-O``: Slurm 22.05's sinfo refuses them together (exit 1).
LONG_AND_FORMAT = (
    "Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."
)


def reservations(client: Any, noheader: bool, as_json: bool, as_yaml: bool) -> str:
    """``-T``: the advance reservations in sinfo's layout (or as data)."""
    from fusesched.cli import sinfo_reservations as sr

    found: list[dict[str, Any]] = client.reservations()
    if as_json or as_yaml:
        return _data([sr.record(r) for r in found], as_yaml)
    return "".join(line + "\n" for line in sr.lines(found, header=not noheader))


def _data(records: list[dict[str, Any]], as_yaml: bool) -> str:
    """``--json`` (or ``--yaml``): the records as a list."""
    if as_yaml:
        import yaml

        return str(yaml.safe_dump(records, sort_keys=False, default_flow_style=False))
    return json.dumps(records, indent=2, default=str) + "\n"


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
