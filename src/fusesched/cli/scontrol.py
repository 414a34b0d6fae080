"""``fusesched scontrol``: Slurm's scontrol, its grammar read into fusesched's calls, so that
scripts and tools that call ``scontrol`` run unchanged (docs/SUBMIT.md, "Slurm commands").

``show job|node|partition|reservation|licenses`` print Slurm's ``Key=Value`` records
(:mod:`fusesched.cli.scontrol_show`; ``-o`` a record a line); ``show hostnames|hostlist`` are
:mod:`fusesched.scontrol`'s; ``ping``, ``version`` (``-V``), ``show config|steps|topology``
and the refusals of ``suspend``, ``resume``, ``listpids``, ``notify`` and ``top`` are
:mod:`fusesched.cli.scontrol_cluster`'s; ``hold``, ``uhold``, ``release``, ``requeue``,
``requeuehold`` take job lists; ``update`` changes a job's ``TimeLimit`` (``+30`` adds to
it), ``Priority`` (or ``Nice``), ``QOS``, ``Name``, ``Comment``, ``Partition``,
``Dependency`` and ``StartTime``, drains and resumes nodes and changes reservations;
``create reservation``,
``delete ReservationName=`` and ``reconfigure`` do what fusesched's commands of those names
do (:mod:`fusesched.cli.scontrol_update` reads their words). As Slurm's, a command that
works prints nothing; an unknown job is ``slurm_load_jobs error: Invalid job id specified``;
every error exits 1, and anything else is refused saying what is supported.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final

import typer

from fusesched.cli import scontrol_update as su
from fusesched.cli.live import CaOpt, ControllerOpt, TokenOpt
from fusesched.cli.own_job import outlive_own_stop
from fusesched.cli.scontrol_update import ScontrolError
from fusesched.scontrol import host_lists, option_word

SUPPORTED: Final = (
    "supported: show job [ID], show node [NAME], show partition [NAME], show reservation "
    "[NAME], show licenses, show steps [JOB[.STEP]], show config, show topology, show "
    "hostnames [LIST], show hostlist LIST; ping; version; hold, uhold, release, requeue, "
    "requeuehold JOB_LIST; update JobId=ID TimeLimit=T Priority=N|Nice=N QOS=Q Name=N "
    "Comment=C Partition=P Dependency=D StartTime=T; update "
    "NodeName=NODES State=DRAIN Reason=WHY | State=RESUME; update ReservationName=R ...; "
    "create reservation ...; delete ReservationName=R; reconfigure"
)
INVALID_JOB: Final = "slurm_load_jobs error: Invalid job id specified"
#: ``show``'s entities by the words (any case) that name them.
SHOWN: Final = {
    **dict.fromkeys(("job", "jobs", "jobid"), "job"),
    **dict.fromkeys(("node", "nodes"), "node"),
    **dict.fromkeys(("partition", "partitions"), "partition"),
    **dict.fromkeys(("reservation", "reservations", "res"), "reservation"),
    **dict.fromkeys(("license", "licenses", "lic"), "licenses"),
}
#: The most jobs ``show job`` lists (what one ``GET /v1/jobs`` answers).
MAX_JOBS: Final = 1000
#: The most jobs one ``GET /v1/jobs?id=…`` names (the API's bound on a filter's values), and
#: the ids it takes (a number, or an array member's ``ARRAY_INDEX``).
IDS_AT_ONCE: Final = 100
LISTABLE: Final = re.compile(r"[0-9]{1,18}(_[0-9]{1,9})?")
#: scontrol's options here: ``-o`` (a record a line) and those that change nothing.
ONELINER: Final = frozenset({"-o", "--oneliner"})
#: ``-V``: the version line, as ``scontrol version``.
VERSION: Final = frozenset({"-V", "--version"})

Client = Any


def scontrol(
    words: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="COMMAND [ARGS]...",
            help="What scontrol is to do: show job 12, hold 12, update JobId=12 "
            "TimeLimit=2:00:00, update NodeName=n1 State=DRAIN Reason=disk, …",
            show_default=False,
        ),
    ] = None,
    controller_url: ControllerOpt = None,
    token: TokenOpt = None,
    ca: CaOpt = None,
) -> None:
    """Slurm's scontrol: `show job|node|partition|reservation|licenses|steps|config|topology|
    hostnames|hostlist`, `ping`, `version` (-V), `hold`, `release`, `requeue`, `update JobId=…
    TimeLimit=… Priority=…|Nice=… QOS=… Name=… Comment=… Partition=… Dependency=…
    StartTime=…`, `update NodeName=… State=DRAIN Reason=…|RESUME`, `create|update|delete
    reservation`,
    `reconfigure`, in scontrol's words and output (`-o`: a record a line). What works prints
    nothing, as Slurm's; every error exits 1; anything else is refused, saying what works."""
    raise typer.Exit(run(words or [], controller_url, token, ca))


def run(argv: Sequence[str], url: str | None, token: str | None, ca: Any) -> int:
    """``scontrol argv`` against the controller at ``url`` (None: as every command finds
    it); the exit status."""
    from fusesched.cli import scontrol_cluster as sc
    from fusesched.sdk import Client as Sdk
    from fusesched.sdk import ControllerError

    oneliner = any(w in ONELINER for w in argv)
    words = [w for w in argv if not option_word(w)]
    try:
        flags = [w for w in words if w.startswith("-") and "=" not in w]
        if flags and flags[0] in VERSION:
            sys.stdout.write(sc.version_line() + "\n")
            return 0
        if flags:
            raise ScontrolError(f"option {flags[0]} is not supported here (-o, -d, -a, -Q, -V are)")
        if not words:
            raise ScontrolError(f"give a command; {SUPPORTED}")
        code = host_lists(words)
        if code is not None:
            return code
        client = Sdk(url, token=token, ca=ca)
        return _command(client, words, oneliner, ca)
    except ScontrolError as exc:
        return _said(f"scontrol: error: {exc}")
    except ControllerError as exc:
        return _said(f"scontrol: error: {exc}")
    except OSError as exc:  # (a CA certificate that cannot be read)
        return _said(f"scontrol: error: cannot use the CA certificate: {exc}")


def _said(message: str) -> int:
    sys.stderr.write(message + "\n")
    return 1


def _command(client: Client, words: list[str], oneliner: bool, ca: Any = None) -> int:
    from fusesched.cli import scontrol_cluster as sc

    verb, rest = words[0].lower(), words[1:]
    if verb in ("ping", "version") and not rest:
        return sc.ping(client, ca) if verb == "ping" else _version()
    if verb in sc.REFUSED:
        return sc.refuse(verb)
    if verb == "show" and rest and rest[0].lower() in sc.SHOWN:
        what, name = sc.SHOWN[rest[0].lower()], rest[1] if len(rest) > 1 else None
        if len(rest) > 2:
            raise ScontrolError(f"'show {rest[0]}' takes at most one name")
        if what == "steps":
            return sc.show_steps(client, name, oneliner)
        return sc.show_config(client, ca) if what == "config" else sc.show_topology(name)
    if verb == "show":
        if not rest or rest[0].lower() not in SHOWN:
            what = f"'show {rest[0]}'" if rest else "'show' without what"
            raise ScontrolError(f"{what} is not supported here; {SUPPORTED}")
        if len(rest) > 2:
            raise ScontrolError(f"'show {rest[0]}' takes at most one name")
        name = rest[1] if len(rest) == 2 else None
        return SHOW[SHOWN[rest[0].lower()]](client, name, oneliner)
    if verb in JOB_ACTIONS:
        ids = [j for word in rest for j in word.split(",") if j]
        if not ids:
            raise ScontrolError(f"'{verb}' needs job ids")
        if verb.startswith("requeue"):  # (its own job's stop must not kill it: own_job.py)
            outlive_own_stop(ids)
        return _each(ids, lambda j: JOB_ACTIONS[verb](client, j))
    if verb == "update":
        return _update(client, su.pairs(rest))
    if verb == "create" and rest and rest[0].lower() in ("reservation", "res"):
        return _create(client, su.new_reservation(su.pairs(rest[1:])))
    if verb == "delete":
        return _delete(client, rest)
    if verb == "reconfigure" and not rest:
        client.reconfigure()
        return 0
    raise ScontrolError(f"'{' '.join(words[:2])}' is not supported here; {SUPPORTED}")


def _version() -> int:
    from fusesched.cli import scontrol_cluster as sc

    sys.stdout.write(sc.version_line() + "\n")
    return 0


def _each(ids: Sequence[str], act: Callable[[str], object]) -> int:
    """``act`` on every id, a refused one said on stderr (as Slurm's, for that job) and the
    others still done; 1 if any was refused."""
    from fusesched.sdk import ControllerError

    code = 0
    for job_id in ids:
        try:
            act(job_id)
        except ControllerError as exc:
            code = _said(_refusal(exc, job_id))
        except ScontrolError as exc:
            code = _said(f"scontrol: error: {exc}")
    return code


def _refusal(exc: Any, job_id: str) -> str:
    if exc.status == 404:
        return f"Invalid job id specified for job {job_id}"
    return f"scontrol: error: {exc}"


JOB_ACTIONS: Final[dict[str, Callable[[Client, str], object]]] = {
    "hold": lambda c, j: c.hold(j),
    "uhold": lambda c, j: c.hold(j),
    "release": lambda c, j: c.release(j),
    "requeue": lambda c, j: c.requeue(j),
    "requeuehold": lambda c, j: c.requeue(j, "", True),
}


# ---------------------------------------------------------------------- show


def _show_job(client: Client, name: str | None, oneliner: bool) -> int:
    from fusesched.cli.scontrol_show import job_record, render
    from fusesched.sdk import ControllerError

    if name is None:
        jobs = list(reversed(client.jobs(limit=MAX_JOBS)))
        if not jobs:
            sys.stdout.write("No jobs in the system\n")
    else:
        try:
            jobs = [client.show(name)]
        except ControllerError as exc:
            if exc.status != 404:
                raise
            jobs = _members(client, name)
            if not jobs:
                return _said(INVALID_JOB)
    now = time.time()
    others = _depended_on(client, jobs)
    sys.stdout.write(render((job_record(job, now, others) for job in jobs), oneliner))
    return 0


def _depended_on(client: Client, jobs: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The views of the jobs that ``jobs``' dependencies name while they wait for them (an
    array's id: its members); one this caller may not see, or that is gone, is left out (its
    dependency: unfulfilled). Those not among ``jobs`` are read :data:`IDS_AT_ONCE` at a
    time (``GET /v1/jobs?id=…``: a thousand waiting jobs are not a thousand calls); those of
    an answer that may be cut short, and ids the filter does not take, one by one."""
    from fusesched.cli.scontrol_show import dependency_targets

    shown = {str(job["id"]): job for job in jobs}
    wanted = list(dict.fromkeys(t for job in jobs for t in dependency_targets(job)))
    found = {t: [shown[t]] for t in wanted if t in shown}
    listable = [t for t in wanted if t not in found and LISTABLE.fullmatch(t)]
    for first in range(0, len(listable), IDS_AT_ONCE):
        found.update(_listed(client, listable[first : first + IDS_AT_ONCE]))
    for target in wanted:
        if target not in found:
            found[target] = _looked_up(client, target)
    return found


def _listed(client: Client, ids: Sequence[str]) -> dict[str, list[Any]]:
    """The views of jobs ``ids`` (an array's id: its members) from one listing; none when
    the answer may be cut short (they are looked up one by one)."""
    from fusesched.sdk import ControllerError

    try:
        views: list[dict[str, Any]] = client.jobs(ids=ids, limit=MAX_JOBS)
    except ControllerError as exc:
        if exc.status != 403:
            raise
        return {t: [] for t in ids}  # (not this caller's to see)
    if len(views) >= MAX_JOBS:
        return {}
    out: dict[str, list[Any]] = {t: [] for t in ids}
    for view in views:
        for key in {str(view.get("id")), str(view.get("array_parent"))}:
            if key in out:
                out[key].append(view)
    for members in out.values():  # (an array's: lowest index first, as _members's)
        members.sort(key=lambda j: int(str(j["id"]).rpartition("_")[2] or 0))
    return out


def _looked_up(client: Client, target: str) -> list[Any]:
    """Job ``target``'s view, or an array's members (none: not seen, or gone)."""
    from fusesched.sdk import ControllerError

    try:
        return [client.show(target)]
    except ControllerError as exc:
        if exc.status not in (403, 404):
            raise
        members = _members(client, target) if exc.status == 404 else []
    if len(members) >= MAX_JOBS:  # (more not read: their phases count as unknown)
        members.append({"id": f"{target}_?", "array_parent": target, "phase": ""})
    return members


def _members(client: Client, array_id: str) -> list[dict[str, Any]]:
    """An array's members, lowest index first (none: it is no array's id)."""
    if not (array_id.isascii() and array_id.isdigit() and len(array_id) <= 18):
        return []
    members: list[dict[str, Any]] = client.jobs(array=array_id, limit=MAX_JOBS)
    return sorted(members, key=lambda j: int(str(j["id"]).rpartition("_")[2] or 0))


def _show_node(client: Client, name: str | None, oneliner: bool) -> int:
    from fusesched.cli.scontrol_show import node_record, render
    from fusesched.hostlist import expand_hostlist

    views = sorted(client.nodes(), key=lambda v: str(v["name"]))
    if name is not None:
        try:
            wanted = expand_hostlist(name)
        except ValueError as exc:
            raise ScontrolError(str(exc)) from None
        known = {str(v["name"]) for v in views}
        missing = [n for n in wanted if n not in known]
        if missing:
            return _said(f"Node {missing[0]} not found")
        views = [v for v in views if v["name"] in wanted]
    elif not views:
        sys.stdout.write("No nodes in the system\n")
    sys.stdout.write(render((node_record(v) for v in views), oneliner))
    return 0


def _show_partition(client: Client, name: str | None, oneliner: bool) -> int:
    from fusesched.cli.scontrol_show import partition_records, render

    found = partition_records(client.nodes())
    if name is not None:
        if name not in found:
            return _said(f"Partition {name} not found")
        found = {name: found[name]}
    elif not found:
        sys.stdout.write("No partitions in the system\n")
    sys.stdout.write(render(found.values(), oneliner))
    return 0


def _show_reservation(client: Client, name: str | None, oneliner: bool) -> int:
    from fusesched.cli.scontrol_show import render, reservation_record

    found = client.reservations()
    if name is not None:
        found = [r for r in found if r["name"] == name]
        if not found:
            return _said(f"Reservation {name} not found")
    elif not found:
        sys.stdout.write("No reservations in the system\n")
    sys.stdout.write(render((reservation_record(r) for r in found), oneliner))
    return 0


def _show_licenses(client: Client, name: str | None, oneliner: bool) -> int:
    from fusesched.cli.scontrol_show import license_record, render

    found = [lic for lic in client.licenses() if name is None or lic["name"] == name]
    if name is not None and not found:
        return _said(f"License {name} not found")
    sys.stdout.write(render((license_record(lic) for lic in found), oneliner))
    return 0


SHOW: Final[dict[str, Callable[[Client, str | None, bool], int]]] = {
    "job": _show_job,
    "node": _show_node,
    "partition": _show_partition,
    "reservation": _show_reservation,
    "licenses": _show_licenses,
}


# ---------------------------------------------------------------------- changes


def _update(client: Client, given: su.Pairs) -> int:
    kind = su.target(given)
    if kind == "node":
        nodes, state, reason = su.node_update(given)
        if state == "drain":
            for node in nodes:
                client.drain_node(node, reason)
        else:
            for node in nodes:
                client.undrain_node(node)
        return 0
    if kind == "res":
        return _change_reservation(client, su.reservation_change(given))
    change = su.job_update(given)

    def act(job_id: str) -> object:
        limit = change.time_limit_s
        if change.time_delta_s is not None:
            now = client.show(job_id).get("time_limit_s")
            if now is None:
                raise ScontrolError(f"job {job_id} has no time limit to add to")
            limit = now + change.time_delta_s
            if limit <= 0:
                raise ScontrolError(f"job {job_id}: its time limit would end before it starts")
        return client.update(
            job_id,
            change.priority,
            change.qos,
            limit,
            name=change.name,
            comment=change.comment,
            queue=change.partition,
            dependencies=change.dependencies,
            begin_time=change.begin_time,
        )

    return _each(change.job_ids, act)


def _create(client: Client, spec: su.ReservationSpec) -> int:
    from fusesched.cli.reservations import window

    try:
        start, end = window(spec.start, spec.end, spec.duration, time.time())
    except ValueError as exc:
        raise ScontrolError(su.option_text(str(exc))) from None
    answer = client.create_reservation(spec.name, spec.nodes, start, end, spec.users, spec.tenants)
    sys.stdout.write(f"Reservation created: {answer['reservation']['name']}\n")
    for warning in answer.get("warnings") or []:
        sys.stderr.write(f"scontrol: warning: {warning}\n")
    return 0


def _change_reservation(client: Client, change: su.ReservationChange) -> int:
    from fusesched.cli.reservations import changed_window

    try:
        window = changed_window(change.start, change.end, change.duration, time.time())
    except ValueError as exc:
        raise ScontrolError(su.option_text(str(exc))) from None
    answer = client.update_reservation(
        change.name, nodes=change.nodes, users=change.users, tenants=change.tenants, **window
    )
    for warning in answer.get("warnings") or []:
        sys.stderr.write(f"scontrol: warning: {warning}\n")
    return 0


def _delete(client: Client, rest: list[str]) -> int:
    """``delete ReservationName=R`` (Slurm's) or ``delete reservation R``."""
    if len(rest) == 2 and rest[0].lower() in ("reservation", "res"):
        name = rest[1]
    else:
        given = su.pairs(rest) if all("=" in word for word in rest) else {}
        if set(given) != {"reservationname"} or not given["reservationname"]:
            raise ScontrolError(f"'delete' takes ReservationName=NAME; {SUPPORTED}")
        name = given["reservationname"]
    client.delete_reservation(name)
    return 0


def register(app: typer.Typer) -> None:
    """Add ``scontrol`` to the ``fusesched`` command (its words are its own: ``-o`` and
    ``Key=Value`` are not the command's options)."""
    app.command(
        rich_help_panel="Slurm's commands",
        short_help="Slurm's scontrol: show job, hold, release, requeue, update, reconfigure….",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    )(scontrol)
