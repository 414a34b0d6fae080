"""What one job holds, for accounting: its cores and GPUs (whole-GPU equivalents), and for
fair share after a restart its resources in all.

Read from the job's stored request (the sum over its task groups of ``replicas × resources``):
cores from ``cpu``; GPUs from ``nvidia.com/gpu`` (and any vendor's ``*/gpu``),
``fusesched.io/gpu-milli`` / 1000 and MIG instances (``nvidia.com/mig-3g.40gb`` counts 3/7).
:func:`fusesched.store.usage.usage_report` reads each distinct shape once (few jobs differ in
it): :func:`shape_key` picks what decides it out of a request's text, :func:`job_shape` reads
it (cached); :func:`job_total` reads the same text into the resources the scheduling core
charges fair share for (:mod:`fusesched.store.past_runs`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any, Final

from sqlalchemy import ColumnElement, Connection, Select, String, literal_column, type_coerce

from fusesched.model.resources import (
    CPU,
    GPU,
    GPU_MILLI,
    MAX_QUANTITY,
    QuantityError,
    Resources,
    parse_quantity,
)
from fusesched.store.schema import jobs

#: Compute slices of a whole GPU (MIG profiles are named ``<slices>g.<memory>``).
MIG_SLICES: Final = 7

_MIG_RE: Final = re.compile(r"^nvidia\.com/mig-(\d+)g\.")


@dataclass(frozen=True, slots=True)
class Shape:
    """What one job holds: cores and GPUs (whole-GPU equivalents)."""

    cores: float
    gpus: float


#: One task group in a stored request's JSON text (the controller stores ``model_dump``
#: output, whose group fields start ``name, replicas, resources``). A quoted key cannot match
#: inside a JSON string, where its quotes would be escaped.
_GROUP_RE: Final = re.compile(r'"replicas": (\d+), "resources": (\{[^{}]*\})')
_REPLICAS: Final = '"replicas": '


#: A job's resources as a query returns them cheaply: on SQLite the stored request's text
#: (parsing JSON in SQLite costs more than the scan; Python picks the groups out, see
#: :func:`job_shape`), on PostgreSQL a compact ``[[replicas, {resource: quantity}], ...]``
#: built from the JSONB.
RESOURCES: Final[Mapping[str, ColumnElement[str]]] = {
    "sqlite": type_coerce(jobs.c.request, String),
    "postgresql": literal_column(
        "(SELECT jsonb_agg(jsonb_build_array(g -> 'replicas', g -> 'resources'))::text "
        "FROM jsonb_array_elements(CASE jsonb_typeof(jobs.request -> 'groups') "
        "WHEN 'array' THEN jobs.request -> 'groups' END) AS g)",
        String,
    ),
}

#: Rows fetched at a time: a row at a time costs more than the scan, and a block small
#: enough dies young (the garbage collector does not carry its rows into its older
#: generations, whose collections cost the more the larger the process: 10,000 at a time
#: read 100,000 runs back in a controller about a fifth slower).
_FETCH_BLOCK: Final = 1_000


def in_blocks(conn: Connection, stmt: Select[Any]) -> Iterable[Sequence[Any]]:
    """The rows of ``stmt``, fetched in blocks (:data:`_FETCH_BLOCK`)."""
    return chain.from_iterable(conn.execute(stmt).partitions(_FETCH_BLOCK))


def shape_key(text: str | None) -> str | None:
    """What decides a job's shape, short: for a request of one group written the usual way,
    that group's ``"replicas": N, "resources": {...}`` (which few jobs differ in, so
    :func:`job_shape` reads each once); else the whole text."""
    if text and text[0] == "{":
        at = text.find(_REPLICAS)
        found = _GROUP_RE.match(text, at) if at >= 0 else None
        if found is not None and text.count('"resources"') == 1:
            return found.group(0)
    return text


@lru_cache(maxsize=4096)
def job_shape(text: str | None) -> Shape:
    """Cores and GPUs of one job from its resources as the usage query gives them
    (:data:`RESOURCES`): a request's JSON text, or a compact
    ``[[replicas, resources], ...]``."""
    return _groups_shape(_groups_text(text))


@lru_cache(maxsize=4096)
def job_total(text: str | None) -> Resources:
    """The resources one job holds in all (its spec's ``total``: the sum over its task
    groups of ``replicas ×`` what a task asks for) from its resources as
    :func:`job_shape` takes them. A group whose quantities cannot be read counts nothing."""
    return _groups_total(_groups_text(text))


def _groups_text(text: str | None) -> str | tuple[tuple[str, str], ...]:
    """What decides a job's groups, for :func:`_groups`: a compact ``[[replicas,
    resources], ...]``, or each group's ``(replicas, resources JSON)`` found in a request."""
    if not text:
        return ()
    if text[0] == "[":
        return text
    groups = _GROUP_RE.findall(text)  # a whole request, or one group (see shape_key)
    if len(groups) == text.count('"resources"'):
        return tuple(groups)
    # written differently (another key order or spacing): read the whole request
    try:
        request = json.loads(text)
    except ValueError:
        return ()
    found = request.get("groups") if isinstance(request, dict) else None
    if not isinstance(found, list):
        return ()
    return json.dumps(
        [[g.get("replicas"), g.get("resources")] if isinstance(g, dict) else None for g in found]
    )


@lru_cache(maxsize=4096)
def _groups(groups: str | tuple[tuple[str, str], ...]) -> tuple[tuple[int, dict[str, Any]], ...]:
    """Each task group's ``(replicas, resources)`` from what :func:`_groups_text` gives
    (cached: few jobs differ in this). A group that cannot be read (a request stored by
    hand or by another version: no resources, a replica count not a whole number from 1)
    is left out, and so is every group of a list that cannot be read: a stored job row
    never stops a report, nor a controller from starting (:mod:`fusesched.store.past_runs`)."""
    if isinstance(groups, str):  # a JSON list of ``[replicas, resources]``
        try:
            pairs = json.loads(groups)
        except ValueError:
            return ()
        if not isinstance(pairs, list):
            return ()
    else:  # each group's (replicas, resources JSON) as _GROUP_RE found them
        pairs = [[replicas, _object(resources)] for replicas, resources in groups]
    return tuple(group for pair in pairs if (group := _group(pair)) is not None)


def _object(text: str) -> object:
    """The JSON value of ``text`` (``None`` when it is not JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _group(pair: object) -> tuple[int, dict[str, Any]] | None:
    """One group's ``(replicas, resources)`` from ``[replicas, resources]``, or ``None``
    when it cannot be read. The replica count is read as the request model reads it (a
    whole number, ``2.0`` or ``"2"`` too; missing: 1)."""
    if not isinstance(pair, list) or len(pair) != 2:
        return None
    value, resources = pair
    if value is None:
        replicas = 1
    elif isinstance(value, float) and value.is_integer():
        replicas = int(value)
    elif isinstance(value, str) and value.strip().isdecimal() and len(value) < 20:
        replicas = int(value)  # (more digits than MAX_QUANTITY has: none that can be read)
    elif type(value) is int:
        replicas = value
    else:
        return None
    if not 1 <= replicas <= MAX_QUANTITY or not isinstance(resources, dict):
        return None  # (more than any quantity: a float could not hold what it charges)
    return replicas, resources


@lru_cache(maxsize=4096)
def _groups_total(groups: str | tuple[tuple[str, str], ...]) -> Resources:
    """:func:`job_total` of a job's groups (cached: few jobs differ in this)."""
    total = Resources()
    for replicas, resources in _groups(groups):
        try:
            total = total + Resources.parse(resources).scaled(replicas)
        except (QuantityError, TypeError, ValueError):
            continue
    return total


@lru_cache(maxsize=4096)
def _groups_shape(groups: str | tuple[tuple[str, str], ...]) -> Shape:
    """Cores and GPUs of a job from its groups (cached: few jobs differ in this)."""
    cores = gpus = 0.0
    for replicas, resources in _groups(groups):
        for name, quantity in resources.items():
            try:
                if name == CPU:
                    cores += replicas * parse_quantity(CPU, quantity) / 1000.0
                else:
                    gpus += replicas * _gpu_share(name, quantity)
            except (QuantityError, TypeError):
                continue
    return Shape(cores, gpus)


def _gpu_share(name: str, quantity: str | int | float) -> float:
    """Whole-GPU equivalents of ``quantity`` of resource ``name`` (0 for non-GPU ones)."""
    if name == GPU_MILLI:
        return parse_quantity(name, quantity) / 1000.0
    mig = _MIG_RE.match(name)
    if mig is not None:
        return parse_quantity(name, quantity) * min(int(mig.group(1)), MIG_SLICES) / MIG_SLICES
    if name == GPU or name.endswith("/gpu"):
        return float(parse_quantity(name, quantity))
    return 0.0
