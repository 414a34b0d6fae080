"""Accounting: CPU-hours, GPU-hours by model and estimated energy per tenant, user and queue.

What ``fusesched usage`` and ``GET /v1/usage`` report, as Slurm's ``sreport`` does, from the
job rows the controller writes (the same records fair share is charged from, see
:func:`~fusesched.policies.fairshare.billing_units`). See docs/TENANCY.md, "Accounting:
fusesched usage".

How a job is counted:

* its **resources** are the sum over its task groups of ``replicas × resources`` of the stored
  request: cores from ``cpu``; GPUs from ``nvidia.com/gpu`` (and any vendor's ``*/gpu``),
  ``fusesched.io/gpu-milli`` / 1000 and MIG instances (``nvidia.com/mig-3g.40gb`` counts 3/7);
* its **time** is ``[start_time, end_time]`` clipped to the window; a Running job counts until
  ``now`` (or the window's end); a job that never started counts nothing, and so does a
  finished job without an end time (one the controller lost on a restart);
* its **GPU model** is the ``fusesched.io/gpu-model`` label of the first node it ran on, else
  that node's first device's model, else ``unknown``;
* its **energy** is an estimate (``energy_kwh_est``): no measured energy is stored yet, so a
  :class:`PowerModel` (watts per allocated core and per GPU of each model) is applied.

The database filters the jobs that overlap the window and clips their times (one scan, or a
walk of the tenant's or user's index); Python sums them per group. A job's resources are read
from its stored request once per distinct shape (few jobs differ in it). On SQLite a month or
a tenant out of a million jobs takes under a second, the whole million about ten (measured in
docs/TENANCY.md): reading the requests' text is what costs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy import (
    Connection,
    Double,
    case,
    literal,
    or_,
    select,
)

from fusesched.model.node import LABEL_GPU_MODEL
from fusesched.policies.fairshare import billing_units
from fusesched.store.records import JobState
from fusesched.store.schema import jobs, nodes
from fusesched.store.store import Store
from fusesched.store.usage_shapes import RESOURCES, in_blocks, job_shape, shape_key

#: The fields a report may be grouped by, in their canonical order.
USAGE_FIELDS: Final = ("tenant", "user", "queue")
#: The GPU model of GPUs on nodes that name none.
UNKNOWN_MODEL: Final = "unknown"

_RELATIVE_RE: Final = re.compile(r"^-(\d+(?:\.\d+)?)([smhdw])$", re.ASCII)
_UNIT_S: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


class UsageQueryError(ValueError):
    """A report that cannot be made as asked (bad window, unknown field): the caller's fault."""


class UsageForbidden(UsageQueryError):
    """The caller may not see the usage asked for (another tenant's, another user's)."""


# --------------------------------------------------------------------------- power model


@dataclass(frozen=True, slots=True)
class Watts:
    """The draw of one core or one GPU: idle and at full load."""

    idle: float
    peak: float

    def at(self, load: float) -> float:
        return self.idle + load * (self.peak - self.idle)


#: Typical board power of common GPU models (idle, peak W): vendors' TDPs, idle as measured
#: with ``nvidia-smi`` on idle devices.
DEFAULT_GPU_WATTS: Final[Mapping[str, Watts]] = MappingProxyType(
    {
        "H200": Watts(75, 700),
        "H100": Watts(70, 700),
        "A100": Watts(50, 400),
        "A800": Watts(50, 400),
        "L40S": Watts(35, 350),
        "L40": Watts(35, 300),
        "A40": Watts(30, 300),
        "A10": Watts(20, 150),
        "V100": Watts(40, 300),
        "T4": Watts(10, 70),
    }
)


@dataclass(frozen=True, slots=True)
class PowerModel:
    """How energy is estimated: each allocated core draws ``cpu_core`` and each GPU its
    model's watts (``gpu``; a model not listed, or ``unknown``, draws ``other_gpu``), all at
    ``load`` (0 idle … 1 peak) for the time the job held them.

    The CPU default is a 64-core 280 W server CPU's share per core plus memory and board
    (about 2 W idle, 8 W at full load)."""

    cpu_core: Watts = Watts(2.0, 8.0)
    gpu: Mapping[str, Watts] = field(default_factory=lambda: DEFAULT_GPU_WATTS)
    other_gpu: Watts = Watts(50, 400)
    load: float = 0.8

    def __post_init__(self) -> None:
        if not 0.0 <= self.load <= 1.0:
            raise ValueError(f"load must be between 0 and 1, got {self.load}")

    def kwh(self, cpu_hours: float, gpu_hours: Mapping[str, float]) -> float:
        """Estimated kWh of ``cpu_hours`` core-hours and ``gpu_hours`` GPU-hours by model."""
        watt_hours = cpu_hours * self.cpu_core.at(self.load)
        for model, hours in gpu_hours.items():
            watt_hours += hours * self.gpu.get(model, self.other_gpu).at(self.load)
        return watt_hours / 1000.0


DEFAULT_POWER: Final = PowerModel()


# --------------------------------------------------------------------------- fair share


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class UsageRow:
    """The usage of one group (``key`` holds its values of the report's ``by`` fields)."""

    key: tuple[str, ...]
    jobs: int
    cpu_hours: float
    gpu_hours: Mapping[str, float]  # GPU model -> GPU-hours
    energy_kwh_est: float

    @property
    def gpu_hours_total(self) -> float:
        return sum(self.gpu_hours.values())

    @property
    def billing(self) -> float:
        """The fair-share charge of this usage (:func:`billing_units`)."""
        return billing_units(self.cpu_hours, self.gpu_hours_total)


@dataclass(frozen=True, slots=True)
class UsageReport:
    """Usage over ``[start, end]`` grouped by ``by``; ``rows`` sorted by key, ``total`` of all.
    ``tenant`` and ``user`` are the filters applied (``None``: all)."""

    start: float
    end: float
    by: tuple[str, ...]
    rows: tuple[UsageRow, ...]
    total: UsageRow
    tenant: str | None = None
    user: str | None = None

    @property
    def gpu_models(self) -> list[str]:
        """Every GPU model that has GPU-hours in the report, sorted."""
        return sorted(self.total.gpu_hours)


def usage_report(
    source: Store | Connection,
    start: float,
    end: float,
    by: Sequence[str] = ("tenant", "user"),
    tenant: str | None = None,
    user: str | None = None,
    *,
    now: float | None = None,
    power: PowerModel = DEFAULT_POWER,
) -> UsageReport:
    """Usage of the jobs that ran within ``[start, end]`` (epoch seconds), grouped by ``by``
    (any of :data:`USAGE_FIELDS`) and filtered to ``tenant`` / ``user`` when given. Running
    jobs count until ``now`` (default: ``end``). :class:`UsageQueryError` for a bad window or
    field."""
    fields = parse_by(by)
    if not (math.isfinite(start) and math.isfinite(end)):
        raise UsageQueryError("start and end must be finite times")
    if end < start:
        raise UsageQueryError(f"the window ends ({_iso(end)}) before it starts ({_iso(start)})")
    at = end if now is None else now
    if isinstance(source, Store):
        with source._read() as conn:  # the store's own read connection (same package)
            return _report_on(conn, start, end, fields, tenant, user, at, power)
    return _report_on(source, start, end, fields, tenant, user, at, power)


def _report_on(
    conn: Connection,
    start: float,
    end: float,
    fields: tuple[str, ...],
    tenant: str | None,
    user: str | None,
    now: float,
    power: PowerModel,
) -> UsageReport:
    models = _node_models(conn)
    found = _query(conn, start, end, fields, tenant, user, now)
    return _report(found, models, start, end, fields, tenant, user, power)


def _query(
    conn: Connection,
    start: float,
    end: float,
    fields: tuple[str, ...],
    tenant: str | None,
    user: str | None,
    now: float,
) -> Iterable[Sequence[Any]]:
    """(key fields…, first node, seconds in the window, resources) of each job that ran in
    the window; resources as the dialect gives them cheaply (see :data:`RESOURCES`)."""
    t0, t1, t_now = (literal(v, Double) for v in (start, end, now))
    stop = case((jobs.c.end_time.is_(None), t_now), else_=jobs.c.end_time)
    hi = case((stop > t1, t1), else_=stop)
    lo = case((jobs.c.start_time < t0, t0), else_=jobs.c.start_time)
    stmt = select(
        *(jobs.c[name] for name in fields),
        jobs.c.nodes[0].as_string(),
        hi - lo,
        RESOURCES[conn.dialect.name],
    ).where(
        jobs.c.start_time.is_not(None),
        jobs.c.start_time < t1,
        stop > t0,
        or_(jobs.c.end_time.is_not(None), jobs.c.state == JobState.RUNNING.value),
    )
    if tenant is not None:
        stmt = stmt.where(jobs.c.tenant == tenant)
    if user is not None:
        stmt = stmt.where(jobs.c.user == user)
    return in_blocks(conn, stmt)


def _node_models(conn: Connection) -> dict[str, str]:
    """Each registered node's GPU model: its label, else its first device's model."""
    out: dict[str, str] = {}
    for name, labels, devices in conn.execute(
        select(nodes.c.name, nodes.c.labels, nodes.c.devices)
    ):
        model = (labels or {}).get(LABEL_GPU_MODEL) or ""
        if not model and devices and isinstance(devices[0], dict):
            model = str(devices[0].get("model") or "")
        out[name] = model or UNKNOWN_MODEL
    return out


def _report(
    found: Iterable[Sequence[Any]],
    models: Mapping[str, str],
    start: float,
    end: float,
    fields: tuple[str, ...],
    tenant: str | None,
    user: str | None,
    power: PowerModel,
) -> UsageReport:
    width = len(fields)
    # one pass over the jobs: count and seconds per (key…, GPU model, shape key)
    sums: dict[tuple[Any, ...], list[float]] = {}
    for row in found:
        group = (*row[:width], models.get(row[width], UNKNOWN_MODEL), shape_key(row[width + 2]))
        entry = sums.get(group)
        if entry is None:
            sums[group] = [1, row[width + 1]]
        else:
            entry[0] += 1
            entry[1] += row[width + 1]
    jobs_of: dict[tuple[str, ...], int] = {}
    cpu_s: dict[tuple[str, ...], float] = {}
    gpu_s: dict[tuple[str, ...], dict[str, float]] = {}
    for (*values, model, shape_text), (count, seconds) in sums.items():
        key = tuple(values)
        shape = job_shape(shape_text)
        jobs_of[key] = jobs_of.get(key, 0) + int(count)
        cpu_s[key] = cpu_s.get(key, 0.0) + shape.cores * seconds
        by_model = gpu_s.setdefault(key, {})
        if shape.gpus > 0:
            by_model[model] = by_model.get(model, 0.0) + shape.gpus * seconds
    rows = tuple(_row(key, jobs_of[key], cpu_s[key], gpu_s[key], power) for key in sorted(jobs_of))
    total_gpu: dict[str, float] = {}
    for r in rows:
        for model, hours in r.gpu_hours.items():
            total_gpu[model] = total_gpu.get(model, 0.0) + hours
    total = UsageRow(
        key=(),
        jobs=sum(r.jobs for r in rows),
        cpu_hours=sum(r.cpu_hours for r in rows),
        gpu_hours=dict(sorted(total_gpu.items())),
        energy_kwh_est=sum(r.energy_kwh_est for r in rows),
    )
    return UsageReport(start, end, fields, rows, total, tenant, user)


def _row(
    key: tuple[str, ...], count: int, cpu_s: float, gpu_s: Mapping[str, float], power: PowerModel
) -> UsageRow:
    cpu_hours = cpu_s / 3600.0
    gpu_hours = {m: s / 3600.0 for m, s in sorted(gpu_s.items())}
    return UsageRow(key, count, cpu_hours, gpu_hours, power.kwh(cpu_hours, gpu_hours))


# --------------------------------------------------------------------------- inputs


def parse_by(by: str | Sequence[str]) -> tuple[str, ...]:
    """Grouping fields from ``"tenant,user"`` or a sequence; :class:`UsageQueryError` for an
    unknown or repeated field. Empty: one row, the total."""
    names = [n.strip() for n in by.split(",")] if isinstance(by, str) else [*by]
    names = [n for n in names if n]
    for name in names:
        if name not in USAGE_FIELDS:
            raise UsageQueryError(
                f"cannot group usage by {name!r}; choose from {', '.join(USAGE_FIELDS)}"
            )
    if len(set(names)) != len(names):
        raise UsageQueryError(f"a field is repeated in by={','.join(names)}")
    return tuple(names)


def parse_time(text: str, now: float) -> float:
    """Epoch seconds from ``now``, a relative time (``-7d``, ``-12h``, ``-30m``, ``-2w``,
    ``-90s``), an ISO date (``2026-11-01``, midnight UTC), an ISO date and time (``…T08:00``,
    UTC unless it names an offset) or epoch seconds. :class:`UsageQueryError` otherwise, also
    for a time outside the years 1 to 9999."""
    seconds = _parse_time(text, now)
    if not _FIRST_TIME <= seconds <= _LAST_TIME:
        raise UsageQueryError(f"not a time: {text!r} (outside the years 1 to 9999)")
    return seconds


_FIRST_TIME: Final = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_LAST_TIME: Final = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def _parse_time(text: str, now: float) -> float:
    value = text.strip()
    if value.lower() == "now":
        return now
    relative = _RELATIVE_RE.fullmatch(value.lower())
    if relative is not None:
        return now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise UsageQueryError(f"not a time: {text!r}")
        return seconds
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageQueryError(
            f"not a time: {text!r} (use an ISO date such as 2026-11-01, an ISO date and time, "
            "now, or a relative time such as -7d, -12h)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def usage_scope(
    role: str, own_user: str, own_tenant: str, tenant: str | None, user: str | None
) -> tuple[str | None, str | None]:
    """The ``(tenant, user)`` filters a caller with ``role`` (``cluster-admin``,
    ``tenant-admin``, ``user``) may report on when asking for ``tenant`` / ``user``: a
    cluster-admin anything; a tenant-admin its own tenant; a user its own usage.
    :class:`UsageForbidden` when the caller asks for more than that."""
    if role == "cluster-admin":
        return tenant, user
    if tenant is not None and tenant != own_tenant:
        raise UsageForbidden(f"you cannot see the usage of tenant {tenant!r}")
    if role == "tenant-admin":
        return own_tenant, user
    if role == "user":
        if user is not None and user != own_user:
            raise UsageForbidden(f"you cannot see the usage of user {user!r}")
        return own_tenant, own_user
    raise UsageForbidden(f"a {role} credential cannot see usage")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
