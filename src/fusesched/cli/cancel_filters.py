"""``fusesched cancel`` with scancel's filters: ``-u USER``, ``--me``, ``-n NAME``, ``-t
STATE``, ``-p QUEUE``, ``-A ACCOUNT``, ``-q QOS``, ``-w NODES``, and job ids with them (the
given ids that match). The options are the ``cancel`` command's (cli/live.py); like it,
this imports nothing heavy until it runs.

The matching jobs are cancelled in one request (``POST /v1/jobs/cancel``); a controller older
than that route is asked for the matching jobs page by page and each is cancelled alone.
``-A`` (an account: a tenant), ``-q`` and ``-w``, which that route does not take, are matched
here: the jobs the route's filters match are listed (``GET /v1/jobs``), those these match
too kept, and their ids cancelled in one request (:meth:`Filters.matches`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import typer

ListOpt = list[str] | None
UserOpt = Annotated[
    ListOpt, typer.Option("--user", "-u", help="Only these users' jobs (a comma list).")
]
MeOpt = Annotated[
    bool,
    typer.Option("--me", help="Only your jobs (the token's user; without a token, your name)."),
]
NameOpt = Annotated[
    ListOpt, typer.Option("--name", "-n", help="Only jobs of this name (may be repeated).")
]
StateOpt = Annotated[
    ListOpt,
    typer.Option(
        "--state", "-t", help="Only jobs in these states: PENDING/PD, RUNNING/R, SUSPENDED/S."
    ),
]
QueueOpt = Annotated[
    ListOpt,
    typer.Option("--partition", "--queue", "-p", help="Only these queues' jobs (a comma list)."),
]

#: the states scancel's ``-t`` takes: the state they match (SUSPENDED: none, fusesched never
#: suspends a job)
STATES: Final[dict[str, str | None]] = {
    "PENDING": "Pending",
    "PD": "Pending",
    "RUNNING": "Running",
    "R": "Running",
    "SUSPENDED": None,
    "S": None,
}
#: pages of the fallback's listing
PAGE: Final = 1000
#: the most ids one ``POST /v1/jobs/cancel`` names (api/cancel_routes.py)
MAX_IDS: Final = 10_000


def parse_states(given: list[str]) -> list[str]:
    """``-t PD,R`` as the states to match (none: ``SUSPENDED`` alone); a ``ValueError``
    naming the ones scancel takes for any other."""
    from fusesched.cli.id_lists import comma_list

    found: list[str] = []
    for word in comma_list(given, "job state"):
        if word.upper() not in STATES:
            known = "PENDING/PD, RUNNING/R, SUSPENDED/S"
            raise ValueError(f"invalid job state {word!r}: cancel takes {known}")
        state = STATES[word.upper()]
        if state is not None and state not in found:
            found.append(state)
    return found


@dataclass(frozen=True, slots=True)
class Filters:
    """The jobs to cancel: the given ``ids`` (none: every job) that match every filter."""

    ids: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    me: bool = False
    names: list[str] = field(default_factory=list)
    states: list[str] | None = None  # None: any unfinished; []: none at all (SUSPENDED)
    queues: list[str] = field(default_factory=list)
    # matched here, not by the controller's filters (see the module's docstring)
    accounts: list[str] = field(default_factory=list)
    qos: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    @property
    def listed(self) -> bool:
        """Whether some filter is matched here (the jobs are listed first)."""
        return bool(self.accounts or self.qos or self.nodes)

    def matches(self, view: dict[str, Any]) -> bool:
        """Whether a listed job (``GET /v1/jobs``) matches ``-A``, ``-q`` and ``-w``."""
        return (
            (not self.accounts or view.get("tenant") in self.accounts)
            and (not self.qos or view.get("qos") in self.qos)
            and (not self.nodes or bool(set(self.nodes) & set(view.get("nodes") or ())))
        )

    def body(self) -> dict[str, Any]:
        """As ``POST /v1/jobs/cancel`` takes them."""
        named = {
            "id": self.ids,
            "user": self.users,
            "name": self.names,
            "queue": self.queues,
            "state": self.states,
        }
        return {k: v for k, v in named.items() if v} | ({"me": True} if self.me else {})


def given(
    ids: list[str] | None,
    user: ListOpt,
    me: bool,
    name: ListOpt,
    state: ListOpt,
    queue: ListOpt,
    account: ListOpt = None,
    qos: ListOpt = None,
    nodelist: str | None = None,
) -> Filters | None:
    """The filters given (``None`` when none is: the ids alone, cancelled one by one); exit 2
    when neither ids nor a filter is given, or one is bad."""
    from fusesched.cli.id_lists import comma_list
    from fusesched.cli.live import _fail

    if not any_filter(user, me, name, state, queue, account, qos, nodelist):
        if not ids:
            _fail("no job identification provided", 2)
        return None
    if any(not i.strip() for i in ids or ()):  # (dropped, it would widen to every match)
        _fail("a job id must not be empty", 2)
    try:
        return Filters(
            ids=[i.strip() for i in ids or ()],
            users=comma_list(user, "user"),
            me=me,
            names=list(name or []),
            states=None if state is None else parse_states(state),
            queues=comma_list(queue, "queue"),
            accounts=comma_list(account, "account"),
            qos=comma_list(qos, "QoS"),
            nodes=[] if nodelist is None else host_names(nodelist),
        )
    except ValueError as exc:
        _fail(str(exc), 2)


def any_filter(
    user: ListOpt,
    me: bool,
    name: ListOpt,
    state: ListOpt,
    queue: ListOpt,
    account: ListOpt,
    qos: ListOpt,
    nodelist: str | None,
) -> bool:
    """Whether any of scancel's filters is given."""
    return bool(user or me or name or state or queue or account or qos or nodelist is not None)


def host_names(text: str) -> list[str]:
    """``-w``'s hosts: a host list (``n[1-4],gpu1``), or, with a ``/``, a file of host lists
    (by commas, blanks or lines), as Slurm's; a ``ValueError`` for none or a bad one."""
    from fusesched.hostlist import expand_hostlist

    if "/" in text:
        try:
            with open(text, encoding="utf-8") as f:
                text = ",".join(f.read().split())
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"-w/--nodelist: cannot read {text}: {exc}") from None
    names = [n for part in text.split(",") if part.strip() for n in expand_hostlist(part.strip())]
    if not names:
        raise ValueError("-w/--nodelist names no node")
    return names


def cancel_filtered(
    client: Any,
    f: Filters,
    signal: str | None,
    target: str,
    as_json: bool,
    quiet: bool = False,
) -> None:
    """Cancel (or, with ``signal``, a bare name, signal the processes ``target`` names of)
    the jobs ``f`` matches, and say which (``quiet``: an unknown job is none)."""
    from fusesched.cli.id_lists import counted_ids
    from fusesched.cli.live import _print_json, console, err

    f = resolved(client, f)
    if signal is not None:
        from fusesched.cli.job_signals import signal_jobs

        ids = signal_targets(client, f)
        if not ids:
            _say_none(as_json, {"signalled": [], "signal": signal})
            return
        signal_jobs(client, ids, signal, target, as_json, quiet)
        return
    cancelled, denied = cancel_matched(client, f)
    if as_json:
        _print_json({"cancelled": cancelled} | ({"denied": denied} if denied else {}))
    elif cancelled:
        console.print(f"Cancelling {counted_ids(cancelled)}", highlight=False)
    elif not denied:
        console.print("No matching jobs", highlight=False)
    if denied:
        many = "s" if len(denied) > 1 else ""
        err.print(
            f"[red]error:[/] Kill job error on job id{many} {counted_ids(denied)}: "
            "Access/permission denied",
            highlight=False,
        )
        raise typer.Exit(1)


def signal_targets(client: Any, f: Filters) -> list[str]:
    """The ids of the running jobs ``f`` (resolved) matches, oldest first: those a signal
    goes to (a waiting job has nothing to signal)."""
    from fusesched.cli.live import _call

    running = [s for s in (f.states or ["Running"]) if s == "Running"]
    return list(_call(_listed, client, f, running)) if running else []


def cancel_matched(client: Any, f: Filters) -> tuple[list[str], list[str]]:
    """Cancel the jobs ``f`` (resolved) matches: the ids cancelled, and those refused as
    another user's (``denied``)."""
    from fusesched.cli.live import _call, err, refused
    from fusesched.sdk import ControllerError

    if f.states == []:  # (SUSPENDED alone: fusesched never suspends a job)
        return [], []
    try:
        if f.listed:
            done = _cancel_ids(client, f, matching_ids(client, f))
        else:
            done = client.cancel_matching(**f.body())
    except ControllerError as exc:
        if exc.status not in (404, 405):
            refused(exc)
        err.print(
            "note: this controller cannot cancel by filter in one request: listing the "
            "matching jobs and cancelling them one by one",
            highlight=False,
        )
        done = _one_by_one(client, _call(_listed, client, f, f.states or ["Pending", "Running"]))
    return list(done["cancelled"]), list(done.get("denied") or [])


def _say_none(as_json: bool, empty: dict[str, Any]) -> None:
    from fusesched.cli.live import _print_json, console

    if as_json:
        _print_json(empty)
    else:
        console.print("No matching jobs", highlight=False)


def resolved(client: Any, f: Filters) -> Filters:
    """``f`` with ``--me`` named (a controller without authentication: your user name)."""
    from dataclasses import replace

    from fusesched.cli.job_list import _me

    if not (f.me and not client.token):
        return f
    users, _ = _me(client)
    return replace(f, users=[*f.users, *users], me=False)


def matching_ids(client: Any, f: Filters, states: list[str] | None = None) -> list[str]:
    """The ids of the unfinished jobs ``f`` matches (of ``states``, default its own), oldest
    first, as listed now."""
    wanted = states if states is not None else (f.states or ["Pending", "Running"])
    return [str(v["id"]) for v in listed_views(client, f, wanted) if f.matches(v)]


def matching_views(client: Any, f: Filters) -> list[dict[str, Any]]:
    """The unfinished jobs ``f`` matches, oldest first (``-i``: what to ask about)."""
    if f.states == []:
        return []
    return [v for v in listed_views(client, f, f.states or ["Pending", "Running"]) if f.matches(v)]


def _cancel_ids(client: Any, f: Filters, ids: list[str]) -> dict[str, list[str]]:
    """Cancel the jobs ``ids`` (matched here) in requests of at most :data:`MAX_IDS`, with
    the controller's filters too (one that changed meanwhile is left)."""
    done: dict[str, list[str]] = {"cancelled": [], "denied": []}
    for first in range(0, len(ids), MAX_IDS):
        answer = client.cancel_matching(**(f.body() | {"id": ids[first : first + MAX_IDS]}))
        done["cancelled"].extend(answer["cancelled"])
        done["denied"].extend(answer.get("denied") or [])
    return done


def _listed(client: Any, f: Filters, states: list[str]) -> list[str]:
    """The ids of the jobs ``f`` matches in ``states``, as ``GET /v1/jobs`` lists them
    (every page), oldest first."""
    return [str(v["id"]) for v in listed_views(client, f, states) if f.matches(v)]


def listed_views(client: Any, f: Filters, states: list[str]) -> list[dict[str, Any]]:
    """The jobs the controller's filters of ``f`` match in ``states``, as ``GET /v1/jobs``
    lists them (every page), oldest first."""
    found: list[dict[str, Any]] = []
    before = None
    while True:
        page = client.jobs(
            user=f.users or None,
            states=states,
            queue=f.queues or None,
            limit=PAGE,
            ids=f.ids,
            names=f.names,
            me=f.me,
            before=before,
        )
        found.extend(page)
        if len(page) < PAGE or page[-1].get("seq") is None:
            return found[::-1]
        before = page[-1]["seq"]


def _one_by_one(client: Any, ids: list[str]) -> dict[str, list[str]]:
    """Cancel each of ``ids`` alone (a controller older than ``POST /v1/jobs/cancel``): the
    ids cancelled, and those refused as another user's; one that ended meanwhile is none."""
    from fusesched.cli.live import refused
    from fusesched.sdk import ControllerError

    done: dict[str, list[str]] = {"cancelled": [], "denied": []}
    for job_id in ids:
        try:
            done["cancelled"].extend(client.cancel(job_id))
        except ControllerError as exc:
            if exc.status == 403:
                done["denied"].append(job_id)
            elif exc.status != 404:
                refused(exc)
    return done
