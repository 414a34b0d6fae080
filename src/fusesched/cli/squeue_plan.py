"""What one ``fusesched jobs`` (or ``squeue``) listing is to show, read from its options
before the controller is asked: the filters, the layout (a table, Slurm's lines, JSON or
YAML), the order, and whether it lists jobs, expected starts (``--start``) or steps
(``-s``). Called by Slurm's name, Slurm's defaults apply: the active jobs (pending, running,
completing) unless ``-t`` says more (``--start``: the pending ones), in squeue's own lines,
in squeue's own order (:func:`fusesched.cli.squeue_sort.default_order`); the environment's
``SQUEUE_*`` defaults are read before (:mod:`fusesched.cli.squeue_env`).

Pure: :func:`plan` turns :class:`Given` into a :class:`Plan`, or raises ``ValueError`` (a
:class:`~fusesched.cli.squeue_format.FormatError` for a format) saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from fusesched.cli import squeue_filters as sf

if TYPE_CHECKING:
    from fusesched.cli.squeue_format import Piece, StateMatch
    from fusesched.cli.squeue_sort import SortKey
    from fusesched.cli.squeue_steps import StepFilter

ListOpt = list[str] | None

#: What Slurm's ``squeue`` lists without ``-t``: pending, running and completing jobs, not
#: the ended ones (which ``squeue -u $USER -h | wc -l`` in a throttling script must not
#: count); ``fusesched jobs`` lists every job.
SQUEUE_DEFAULT: Final = "PENDING,RUNNING,COMPLETING"
#: squeue's own default format, its lines when called by that name without ``-o``/``-O``.
SQUEUE_FORMAT: Final = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
#: squeue's ``-l`` format (``fusesched jobs -l`` too: Slurm's long lines, not the table).
LONG_FORMAT: Final = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"


#: ``--limit`` not given to ``squeue`` (Slurm's name): every job, a page of 1,000 after
#: another, as Slurm's squeue lists them all (``jobs``: 50).
EVERY = 2**62
#: How long ``squeue`` (Slurm's name) still lists a job after it ended: Slurm's controller
#: keeps an ended job this long (``MinJobAge``, 300 s by default), then only ``sacct`` has it.
MIN_JOB_AGE_S = 300.0


class Given(NamedTuple):
    """The listing's options as given (each list option: its repeats, each a comma list)."""

    users: ListOpt = None
    states: ListOpt = None
    queues: ListOpt = None
    ids: ListOpt = None
    names: ListOpt = None
    accounts: ListOpt = None
    qos: ListOpt = None
    nodelist: ListOpt = None
    licenses: ListOpt = None
    reservations: ListOpt = None
    array: str | None = None
    limit: int | None = None  # (None: 50; by Slurm's name, every job)
    each_member: bool = False  # -r, --array-unique
    start: bool = False
    fmt: str | None = None
    long_fmt: str | None = None
    long: bool = False
    noheader: bool = False
    sort: str | None = None
    steps: str | None = None  # "": every step
    as_json: bool = False
    as_yaml: bool = False
    iterate: bool = False
    convert: bool = True  # not --noconvert
    time_format: str | None = None  # SLURM_TIME_FORMAT (squeue_time.py)


class Filters(NamedTuple):
    """What ``GET /v1/jobs`` is asked for (``match``: the states and phases, None: any;
    ``me``: the token's user)."""

    users: list[str]
    match: StateMatch | None
    queues: list[str]
    array: str | None
    ids: list[str]
    names: list[str]
    me: bool


class Plan(NamedTuple):
    """One listing, ready to ask for and print. ``out``: ``table`` (fusesched's), ``lines``
    (Slurm's, in ``pieces``), ``json`` or ``yaml``; ``dated``: a date line before the
    header (squeue's ``-l`` and ``-i``); ``order``: ``-S`` (None: the listing's own);
    ``steps``: list job steps (None: jobs)."""

    slurm: bool
    filters: Filters
    local: sf.LocalFilters
    limit: int
    combine: bool  # an array's waiting members as one row
    start: bool
    pieces: list[Piece] | None
    out: str
    header: bool
    dated: bool
    order: list[SortKey] | None
    steps: StepFilter | None
    convert: bool


def _limit(slurm: bool, given: int | None) -> int:
    """The rows to show: ``--limit``'s; without it 50, and by Slurm's name every job, as
    Slurm's squeue lists them (:data:`~fusesched.cli.job_list.EVERY`)."""
    if given is not None:
        return given
    return EVERY if slurm else 50


def plan(slurm: bool, g: Given) -> Plan:
    """The listing ``g`` asks for; ``slurm``: called by Slurm's name (``squeue``)."""
    from fusesched.cli import id_lists as il
    from fusesched.cli import squeue_format as sq

    if g.as_json and g.as_yaml:
        raise ValueError("give --json or --yaml, not both")
    if g.fmt is not None and g.long_fmt is not None:
        raise ValueError("give --format (-o) or --Format (-O), not both")
    if g.steps is not None and g.start:
        raise ValueError("give --steps (-s) or --start, not both")
    structured = g.as_json or g.as_yaml
    states = g.states
    if slurm and not states and g.steps is None and not (g.start and structured):
        # (the active jobs unless -t says more; --start in squeue's lines: the pending ones)
        states = ["PENDING" if g.start else SQUEUE_DEFAULT]
    filters = Filters(
        il.comma_list(g.users, "user"),
        sq.parse_states(states) if states else None,
        il.comma_list(g.queues, "queue"),
        g.array,
        il.job_ids(g.ids),
        il.comma_list(g.names, "name"),
        False,
    )
    local = sf.parse(g.accounts, g.qos, g.nodelist, g.licenses, g.reservations)
    out = "yaml" if g.as_yaml else "json" if g.as_json else "lines"
    steps = None
    if g.steps is not None:
        pieces, fields, steps = _step_layout(g, structured)
    else:
        pieces, out = _layout(slurm, g, out)
        fields = sq.FIELDS
    if pieces is not None and g.time_format is not None:
        from fusesched.cli.squeue_time import parse_time_format, restamp

        pieces = restamp(pieces, parse_time_format(g.time_format))
    return Plan(
        slurm=slurm,
        filters=filters,
        local=local,
        limit=_limit(slurm, g.limit),
        combine=not g.each_member and not structured,
        start=g.start,
        pieces=pieces,
        out=out,
        header=not g.noheader,
        dated=(g.long or g.iterate) and out == "lines",
        order=_order(slurm, g, out, fields),
        steps=steps,
        convert=g.convert,
    )


def _order(slurm: bool, g: Given, out: str, fields: Any) -> list[SortKey] | None:
    """``-S``'s keys; without it, by Slurm's name in squeue's lines, squeue's own order
    (jobs: partition, state, priority; ``--start``: expected start); else None: the
    listing's (newest first; steps: their own)."""
    from fusesched.cli import squeue_sort as ss

    if g.sort is not None:
        return ss.parse_sort(g.sort, fields)
    if not slurm or out != "lines" or g.steps is not None:
        return None
    return ss.default_order(ss.START_SORT if g.start else ss.JOB_SORT, fields)


def _layout(slurm: bool, g: Given, out: str) -> tuple[list[Piece] | None, str]:
    """The format's pieces and the output: Slurm's lines for ``-o``/``-O``/``-l`` (and by
    Slurm's name), fusesched's table otherwise; ``--start`` by Slurm's name: squeue's start
    lines."""
    from fusesched.cli import squeue_format as sq

    plain = g.fmt is not None or g.long_fmt is not None
    if out != "lines":  # (-l: a layout of lines, nothing to do in JSON, as Slurm's)
        if plain:
            raise ValueError(f"--format prints plain lines: leave out --{out}")
        return None, out
    if g.start:
        if not slurm:
            if plain or g.long:
                raise ValueError("--format and --long print plain lines: leave out --start")
            return None, "table"
        from fusesched.cli import squeue_start

        return squeue_start.parse(g.fmt, g.long_fmt), "lines"
    if g.long_fmt is not None:
        return sq.parse_long_format(g.long_fmt), "lines"
    if g.fmt is None and not g.long and not slurm:
        return None, "table"
    default = LONG_FORMAT if g.long else SQUEUE_FORMAT
    return sq.parse_format(default if g.fmt is None else g.fmt), "lines"


def _step_layout(g: Given, structured: bool) -> tuple[list[Piece] | None, Any, StepFilter]:
    """A step listing's pieces (None for JSON/YAML), its fields and its step filter."""
    from fusesched.cli import squeue_steps as ss

    chosen = ss.parse_steps(g.steps or "")
    if structured:
        if g.fmt is not None or g.long_fmt is not None:
            raise ValueError("--format prints plain lines: leave out --json and --yaml")
        return None, ss.STEP_FIELDS, chosen
    return ss.parse_format(g.fmt, g.long_fmt), ss.STEP_FIELDS, chosen


def settings(p: Plan) -> dict[str, Any]:
    """What ``-v`` says the listing asks for (names as Slurm's squeue says them)."""
    f, local = p.filters, p.local
    states: Sequence[str] = ()
    if f.match is not None:
        states = [*f.match.states, *f.match.phases, *(["completing"] if f.match.completing else [])]
    return {
        "accounts": sorted(local.accounts),
        "array": f.array,
        "output": p.out,
        "jobs": f.ids,
        "licenses": sorted(local.licenses),
        "limit": None if p.limit >= EVERY else p.limit,
        "me": f.me,
        "names": f.names,
        "nodes": sorted(local.nodes),
        "partitions": f.queues,
        "qos": sorted(local.qos),
        "reservation": sorted(local.reservations),
        "sort": ",".join(  # (not squeue's own tie-break, which has no letter)
            ("-" if k.descending else "") + k.letter
            for k in p.order or ()
            if not k.letter.startswith("_")
        ),
        "start_flag": p.start,
        "states": list(states),
        "step_flag": p.steps is not None,
        "users": f.users,
    }
