"""The environment variables Slurm 22.05's ``squeue`` reads, read by ``squeue`` (not by
``fusesched jobs``): each is its option's default, and the option given on the command line
wins (``export SQUEUE_FORMAT="%.18i %.9P %.30j %.8u %.2t %.10M %.6D %R"`` in a ``.bashrc``).

=====================  ==========================================================
``SQUEUE_ACCOUNT``     ``-A``
``SQUEUE_ARRAY``       ``-r`` (set at all, whatever its value, as Slurm's)
``SQUEUE_FORMAT``      ``-o``; not with ``-O``, ``-l``, ``-s``, ``--start``, ``--json``
                       or ``--yaml`` given (they choose their own lines, as Slurm's)
``SQUEUE_FORMAT2``     ``-O``; the same, and ``SQUEUE_FORMAT`` first when both are set
``SQUEUE_LICENSES``    ``-L``
``SQUEUE_NAMES``       ``-n``
``SQUEUE_PARTITION``   ``-p``
``SQUEUE_QOS``         ``-q``
``SQUEUE_SORT``        ``-S``; with ``-s`` only if it names step fields (else the steps'
                       own order: Slurm's skips the letters a step has not)
``SQUEUE_STATES``      ``-t`` (not with ``-s``, which lists running steps, as Slurm's)
``SQUEUE_USERS``       ``-u`` (not with ``--me``)
``SLURM_CLUSTERS``     ``-M``: ``all`` or ``fusesched``
``SLURM_TIME_FORMAT``  the time stamps' form (:mod:`fusesched.cli.squeue_time`)
=====================  ==========================================================

Taken, with nothing to do here (as their options): ``SQUEUE_ALL``, ``SQUEUE_FEDERATION``,
``SQUEUE_LOCAL``, ``SQUEUE_PRIORITY``, ``SQUEUE_SIBLING``; and Slurm's own ``SLURM_CONF``,
``SLURM_DEBUG_FLAGS``, ``SLURM_BITSTR_LEN`` (fusesched reads no slurm.conf; an array's
indices are written whole). A variable set empty is not set. ``fusesched squeue --start
--json`` (fusesched's own data) takes the users and partitions variables only, naming one.

A value that its option would refuse is an :class:`EnvError` naming the variable (exit 1,
as Slurm's squeue for a bad ``SQUEUE_STATES``). Pure: the environment comes in as a mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from fusesched.cli.squeue_plan import Given

#: The variables of list options: the option's field of :class:`Given` and its check.
LISTS: Final = {
    "SQUEUE_ACCOUNT": "accounts",
    "SQUEUE_LICENSES": "licenses",
    "SQUEUE_NAMES": "names",
    "SQUEUE_PARTITION": "queues",
    "SQUEUE_QOS": "qos",
    "SQUEUE_STATES": "states",
    "SQUEUE_USERS": "users",
}
#: The variables taken that change nothing (Slurm's reads them).
TAKEN: Final = (
    "SQUEUE_ALL",
    "SQUEUE_FEDERATION",
    "SQUEUE_LOCAL",
    "SQUEUE_PRIORITY",
    "SQUEUE_SIBLING",
    "SLURM_BITSTR_LEN",
    "SLURM_CONF",
    "SLURM_DEBUG_FLAGS",
)


class EnvError(ValueError):
    """A variable whose value its option would refuse; the message names it."""


def _check_list(field: str, text: str) -> None:
    """Raise a ``ValueError`` if the option of ``field`` would refuse ``text``."""
    from fusesched.cli import id_lists as il
    from fusesched.cli import squeue_filters as sf
    from fusesched.cli.squeue_states import parse_states

    if field == "states":
        parse_states([text])
    elif field in ("accounts", "qos", "licenses"):
        sf.parse(**{field: [text]})
    else:
        il.comma_list([text], {"users": "user", "queues": "queue", "names": "name"}[field])


def _checked(name: str, text: str, check: Callable[..., Any], *args: Any) -> None:
    """``check(*args)``; its ``ValueError`` an :class:`EnvError` naming ``name=text``."""
    try:
        check(*args)
    except ValueError as exc:
        raise EnvError(f"{name}={text!r}: {exc}") from None


def apply(
    g: Given, env: Mapping[str, str], *, me: bool = False, clusters_given: bool = False
) -> Given:
    """``g`` with the options not given taken from ``env`` (``me``: ``--me`` was given;
    ``clusters_given``: ``-M`` was); an :class:`EnvError` for a bad value."""
    from fusesched.cli.squeue_time import parse_time_format

    def value(name: str) -> str | None:
        text = env.get(name)
        return text if text is not None and text.strip() else None

    changes: dict[str, Any] = {}
    own_starts = g.start and (g.as_json or g.as_yaml)  # (GET /v1/starts' own filters)
    for name, field in LISTS.items():
        text = value(name)
        if text is None or getattr(g, field) is not None:
            continue
        if (field == "users" and me) or (field == "states" and g.steps is not None):
            continue
        if own_starts and (field not in ("users", "queues") or "," in text):
            continue
        _checked(name, text, _check_list, field, text)
        changes[field] = [text]
    if "SQUEUE_ARRAY" in env and not g.each_member:
        changes["each_member"] = True
    if (text := value("SQUEUE_SORT")) is not None and g.sort is None and not own_starts:
        sort = _sort(text, g.steps is not None)
        if sort is not None:
            changes["sort"] = sort
    changes.update(_format(g, value("SQUEUE_FORMAT"), value("SQUEUE_FORMAT2")))
    if (text := value("SLURM_CLUSTERS")) is not None and not clusters_given:
        _checked("SLURM_CLUSTERS", text, _clusters, text)
    if (text := value("SLURM_TIME_FORMAT")) is not None and g.time_format is None:
        _checked("SLURM_TIME_FORMAT", text, parse_time_format, text)
        changes["time_format"] = text
    return g._replace(**changes)


def _sort(text: str, steps: bool) -> str | None:
    """``SQUEUE_SORT``'s ``-S`` (None: not for this listing, a step listing's letters
    being others)."""
    from fusesched.cli import squeue_format as sq
    from fusesched.cli.squeue_sort import parse_sort

    if steps:
        from fusesched.cli.squeue_steps import STEP_FIELDS

        try:
            parse_sort(text, STEP_FIELDS)
        except ValueError:
            _checked("SQUEUE_SORT", text, parse_sort, text, sq.FIELDS)
            return None  # (job letters: the steps keep their own order)
        return text
    _checked("SQUEUE_SORT", text, parse_sort, text, sq.FIELDS)
    return text


def _format(g: Given, fmt: str | None, long_fmt: str | None) -> dict[str, str]:
    """``SQUEUE_FORMAT`` (first) or ``SQUEUE_FORMAT2`` as ``-o``/``-O``, where no option
    chooses the lines."""
    from fusesched.cli import squeue_format as sq

    own = g.fmt is not None or g.long_fmt is not None or g.long or g.start
    if own or g.steps is not None or g.as_json or g.as_yaml:
        return {}
    if fmt is not None:
        _checked("SQUEUE_FORMAT", fmt, sq.parse_format, fmt)
        return {"fmt": fmt}
    if long_fmt is not None:
        _checked("SQUEUE_FORMAT2", long_fmt, sq.parse_long_format, long_fmt)
        return {"long_fmt": long_fmt}
    return {}


def _clusters(text: str) -> None:
    """``SLURM_CLUSTERS`` as ``-M`` takes it: ``all`` or fusesched's one cluster."""
    from fusesched.cli.clusters import CLUSTER_NAME, TAKEN

    for item in (part.strip() for part in text.split(",")):
        if item.lower() not in TAKEN:
            raise ValueError(
                f"no cluster {item!r}: this is fusesched's one cluster, {CLUSTER_NAME!r} (or 'all')"
            )
