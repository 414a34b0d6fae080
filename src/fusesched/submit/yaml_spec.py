"""fusesched's own job file: YAML, one job per document (``---`` separates several).

The fields are those of :class:`~fusesched.submit.request.JobRequest` (see docs/SUBMIT.md),
with five conveniences:

* a one-group job may put the group's fields (``resources``, ``command``, ``replicas``, …)
  at the top level instead of under ``groups`` (the group is then called ``main``);
* ``command`` is a shell-like string (split into words, no shell) or a list, for ``argv``;
  numbers in ``command``/``argv`` and ``env`` values are taken as the words they are written as;
* ``walltime`` takes a duration (``90m``, ``4h``, ``1d12h``, ``02:00:00``, ``unlimited``)
  instead of ``walltime_s`` seconds;
* ``dependencies`` items and ``array`` may be written as in Slurm (``afterok:123``,
  ``0-99:2%10``);
* ``begin`` takes a time (ISO, or a Slurm ``--begin`` form such as ``now+1hour``) instead of
  ``begin_time`` (a Unix time); ``deadline`` takes the same forms, or a Unix time.

An optional ``apiVersion: fusesched.io/v1`` and ``kind: Job`` head may mark the file.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Final

from fusesched.submit._yamldoc import Document, load_documents
from fusesched.submit.begin import begin_of, parse_begin
from fusesched.submit.errors import SubmitError, read_source
from fusesched.submit.problems import Loc
from fusesched.submit.request import JobRequest, parse_request
from fusesched.submit.syntax import parse_array, parse_dependencies, parse_duration
from fusesched.submit.task_group import TaskGroupRequest

API_VERSION: Final = "fusesched.io/v1"
KIND: Final = "Job"
# (a top-level placement is the job's: a one-group job needs no group placement of its own)
GROUP_FIELDS: Final = frozenset(TaskGroupRequest.model_fields) - {"name", "placement"} | {"command"}
_RENAMED: Final = {"argv": "command", "walltime_s": "walltime"}
_KUBE_VERSIONS: Final = frozenset({"v1", "batch/v1"})


def parse_job_yaml(text: str, source: str = "<string>") -> list[JobRequest]:
    """Every job in a fusesched YAML text (one per document), validated.

    Raises :class:`SubmitError` (with ``source`` and line) for malformed YAML, unknown fields,
    bad values, or a text without any job.
    """
    docs = load_documents(text, source)
    if not docs:
        raise SubmitError("no job in the file (it is empty)", source=source)
    return [job_from_document(doc) for doc in docs]


def load_job_yaml(path: str | Path) -> list[JobRequest]:
    """:func:`parse_job_yaml` on a file."""
    text, name = read_source(path, "the job file")
    return parse_job_yaml(text, source=name)


def job_from_document(doc: Document, now: float | None = None) -> JobRequest:
    """One job from one YAML document (conveniences expanded, then validated); a relative
    ``begin`` is read against ``now`` (None: this machine's clock)."""
    data = doc.data
    if not isinstance(data, Mapping):
        hint = (
            " (a batch script must start with #! and its interpreter, e.g. #!/bin/bash, as "
            "for sbatch)"
            if isinstance(data, str)
            else ""
        )
        raise doc.error(f"a job must be a mapping of fields, not a {type(data).__name__}{hint}")
    out = {str(k): v for k, v in data.items()}
    _check_head(out, doc)
    if "begin" in out:
        if "begin_time" in out:
            raise doc.error("give begin or begin_time, not both", ("begin",))
        out["begin_time"] = _begin(out.pop("begin"), doc, now)
    if isinstance(out.get("deadline"), str | datetime | date):  # (a number: a Unix time)
        out["deadline"] = _begin(out["deadline"], doc, now, "deadline")
    if "walltime" in out:
        if "walltime_s" in out:
            raise doc.error("give walltime or walltime_s, not both", ("walltime",))
        value = out.pop("walltime")
        out["walltime_s"] = _duration(value, doc, ("walltime",))
    shorthand = sorted(GROUP_FIELDS & out.keys())
    if shorthand:
        if "groups" in out:
            raise doc.error(
                f"{', '.join(shorthand)} belong to a group: put them under groups, or drop "
                "groups for a one-group job",
                (shorthand[0],),
            )
        out["groups"] = [{key: out.pop(key) for key in shorthand}]
    groups = out.get("groups")
    if isinstance(groups, list):
        out["groups"] = [
            _group(g, doc, () if shorthand else ("groups", i)) for i, g in enumerate(groups)
        ]
    if "dependencies" in out:
        out["dependencies"] = _dependencies(out["dependencies"], doc)
    if isinstance(out.get("array"), str | int):
        try:
            out["array"] = parse_array(str(out["array"])).model_dump()
        except ValueError as exc:
            raise doc.error(str(exc), ("array",)) from None

    def rename(loc: Loc) -> Loc:
        path = list(loc[2:] if shorthand and loc[:2] == ("groups", 0) else loc)
        for i, part in enumerate(path):
            renamed = _RENAMED.get(str(part))
            if renamed is not None and (*path[:i], renamed) in doc.lines:
                path[i] = renamed
        return tuple(path)

    return parse_request(out, source=doc.source, locate=doc.line_of, rename=rename)


def _begin(value: object, doc: Document, now: float | None, field: str = "begin") -> float:
    """``begin`` (or ``deadline``): a Slurm ``--begin`` form or an ISO time (a YAML timestamp
    included)."""
    try:
        if isinstance(value, datetime | date):
            return begin_of(value)
        if not isinstance(value, str):
            raise ValueError(
                f"expected a time such as now+1hour or 2030-01-31T08:00, got {value!r}"
            )
        what = "begin time" if field == "begin" else field
        return parse_begin(value, time.time() if now is None else now, what=what)
    except ValueError as exc:
        raise doc.error(str(exc), (field,)) from None


def _check_head(out: dict[str, object], doc: Document) -> None:
    version = out.pop("apiVersion", None)
    kind = out.pop("kind", None)
    if version is not None and version != API_VERSION:
        hint = (
            "; this looks like a Kubernetes object: submit it as Kubernetes YAML"
            if version in _KUBE_VERSIONS
            else ""
        )
        raise doc.error(
            f"apiVersion must be {API_VERSION!r}, not {version!r}{hint}", ("apiVersion",)
        )
    if kind is not None and kind != KIND:
        raise doc.error(f"kind must be {KIND!r}, not {kind!r}", ("kind",))


def _duration(value: object, doc: Document, loc: Loc) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise doc.error("walltime must be a duration such as 90m, 4h or 02:00:00", loc)
    # YAML 1.1 reads 01:30:00 as a base-60 number: use the text as written.
    text = doc.raw.get(loc, str(value))
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise doc.error(str(exc), loc) from None


def _group(group: object, doc: Document, loc: Loc) -> object:
    if not isinstance(group, Mapping):
        return group  # validation reports it
    out = {str(k): v for k, v in group.items()}
    if "command" in out:
        if "argv" in out:
            raise doc.error("give command or argv, not both", (*loc, "command"))
        command = out.pop("command")
        if isinstance(command, str):
            try:
                out["argv"] = shlex.split(command)
            except ValueError as exc:
                raise doc.error(f"command: {exc}", (*loc, "command")) from None
            if not out["argv"]:
                raise doc.error("command is empty", (*loc, "command"))
        else:
            out["argv"] = command
    if isinstance(out.get("argv"), list):
        out["argv"] = [_text(word) for word in out["argv"]]
    if isinstance(out.get("env"), Mapping):
        out["env"] = {k: _text(v) for k, v in out["env"].items()}
    return out


def _text(value: object) -> object:
    """Numbers as written words (``sleep 10``, ``EPOCHS: 3``); anything else unchanged."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _dependencies(value: object, doc: Document) -> object:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        return value
    out: list[object] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            try:
                out.extend(d.model_dump() for d in parse_dependencies(item))
            except ValueError as exc:
                raise doc.error(str(exc), ("dependencies", i)) from None
        else:
            out.append(item)
    return out
