"""The twin's snapshot: a live cluster's nodes, policies, quotas and job history in one file.

A snapshot is self-contained (it needs neither the store nor the configuration files it came
from): JSON, gzip-compressed when the file name ends in ``.gz``, with a ``format`` and a
``version`` field. It holds

* the nodes as the agents registered them (capacity, labels, devices, state), in
  registration order (the order the core numbers them);
* the core's policies (queue order, backfill, placement, …), the tenancy configuration
  (organisations, queues, quotas, QoS: the YAML's own data) and the power-saving settings;
* every job: its submitted request (what the core's spec is built from), its submit, start
  and end times as the store has them, its state and exit code. The measured run time of a
  finished job is ``end - start``: what the twin replays;
* the advance reservations the store holds (name, nodes, window, users and tenants, when it
  was made; version 2: a version 1 file, from before, loads with none).
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import inspect

from fusesched.model.reservation import Reservation
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.store.records import JobRow
from fusesched.store.schema import reservations as reservation_table
from fusesched.store.store import Store

FORMAT: Final = "fusesched-twin-snapshot"
VERSION: Final = 2
#: the versions this fusesched reads (1: before reservations were kept)
READS: Final = (1, 2)
PAGE: Final = 5000  # jobs read from the store per query


class SnapshotError(ValueError):
    """A snapshot that cannot be written or read; the message names the file."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SnapNode(_Model):
    name: str
    capacity: dict[str, str]  # quantities as strings ("64Gi")
    labels: dict[str, str] = Field(default_factory=dict)
    devices: list[dict[str, Any]] = Field(default_factory=list)  # as the agent sent them
    state: str = "up"
    address: str = "127.0.0.1"


class SnapJob(_Model):
    id: str
    seq: int
    submit: float
    start: float | None = None
    end: float | None = None
    state: str
    exit_code: int | None = None
    queue: str = "default"
    tenant: str = "default"
    user: str = ""
    request: dict[str, Any]  # the submitted JobRequest (of the array for array members)
    array_parent: str | None = None

    @property
    def runtime(self) -> float | None:
        """The measured run time (its last run), or None when it never ended after a start."""
        if self.start is None or self.end is None:
            return None
        return max(0.0, self.end - self.start)


class SnapReservation(_Model):
    """An advance reservation as the store keeps it (times in Unix seconds)."""

    name: str
    nodes: list[str]
    start: float
    end: float
    users: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    created_at: float | None = None  # None: made before anything the snapshot holds
    created_by: str = ""

    @model_validator(mode="after")
    def _valid(self) -> SnapReservation:
        self.reservation()  # the model's own checks (name, nodes, end after start, …)
        return self

    def reservation(self) -> Reservation:
        return Reservation(
            self.name,
            tuple(self.nodes),
            self.start,
            self.end,
            tuple(self.users),
            tuple(self.tenants),
        )


class SnapCore(_Model):
    queue_order: str = "fcfs"
    backfill: str = "easy"
    placement: str = "best-fit"
    default_estimate_s: float = 3600.0
    reject_unschedulable: bool = True
    conservative_depth: int = 64
    runtime_prediction: str = "none"
    licenses: dict[str, int] = Field(default_factory=dict)  # cluster licenses (--licenses)

    @classmethod
    def of(cls, config: CoreConfig) -> SnapCore:
        return cls(
            queue_order=config.queue_order,
            backfill=config.backfill,
            placement=config.placement,
            default_estimate_s=config.default_estimate_s,
            reject_unschedulable=config.reject_unschedulable,
            conservative_depth=config.conservative_depth,
            runtime_prediction=config.runtime_prediction,
            licenses=dict(config.licenses),
        )


class Snapshot(_Model):
    format: Literal["fusesched-twin-snapshot"] = FORMAT
    version: int = VERSION
    created_at: float = 0.0
    source: str = ""
    core: SnapCore = Field(default_factory=SnapCore)
    tenancy: dict[str, Any] | None = None  # the tenancy YAML's data (docs/TENANCY.md)
    power: dict[str, Any] | None = None  # the power-saving YAML's data (docs/ENERGY.md)
    nodes: list[SnapNode]
    jobs: list[SnapJob] = Field(default_factory=list)
    reservations: list[SnapReservation] = Field(default_factory=list)

    def core_config(self) -> CoreConfig:
        """The core's configuration (tenancy included); :class:`SnapshotError` if invalid."""
        from fusesched.model.tenancy import TenancyError
        from fusesched.policies.tenancy_policy import TenancyPolicy

        try:
            tenancy = TenancyPolicy.from_dict(self.tenancy) if self.tenancy else None
            return CoreConfig(**self.core.model_dump(), tenancy=tenancy)
        except (PolicyError, TenancyError) as exc:
            raise SnapshotError(f"snapshot policies: {exc}") from None


def _job(row: JobRow) -> SnapJob:
    return SnapJob(
        id=row.id,
        seq=row.seq,
        submit=row.submit_time,
        start=row.start_time,
        end=row.end_time,
        state=row.state.value,
        exit_code=row.exit_code,
        queue=row.queue,
        tenant=row.tenant,
        user=row.user,
        request=dict(row.request),
        array_parent=row.array_parent,
    )


def _reservations(store: Store) -> list[SnapReservation]:
    """Every reservation the store holds, by start and name (the store keeps one until it
    has ended, and its row until the table is next read), read as the controller reads
    them; none from a store older than reservations (a snapshot does not upgrade the
    store)."""
    from fusesched.controller.reservations import _read

    with store._read() as conn:  # the store's own connection (as controller/reservations.py)
        if not inspect(conn).has_table(reservation_table.name):
            return []
    return [
        SnapReservation(
            name=s.reservation.name,
            nodes=list(s.reservation.nodes),
            start=s.reservation.start,
            end=s.reservation.end,
            users=list(s.reservation.users),
            tenants=list(s.reservation.tenants),
            created_at=s.created_at,
            created_by=s.created_by,
        )
        for s in _read(store)
    ]


def take_snapshot(
    store: Store,
    core: CoreConfig,
    *,
    tenancy: Mapping[str, Any] | None = None,
    power: Mapping[str, Any] | None = None,
    source: str = "",
    now: float | None = None,
) -> Snapshot:
    """Read every node, job and reservation of ``store``; ``core``, ``tenancy`` and
    ``power`` are the settings the controller runs with (they are not kept in the store)."""
    node_rows = sorted(store.list_nodes(), key=lambda n: (n.registered_at, n.name))
    nodes = [
        SnapNode(
            name=n.name,
            capacity=dict(n.capacity),
            labels=dict(n.labels),
            devices=[dict(d) for d in n.devices],
            state=n.state.value,
            address=n.address,
        )
        for n in node_rows
        if ":" not in n.name  # external pools' nodes (pool:node) are not the twin's
    ]
    rows: list[JobRow] = []
    before: int | None = None
    while True:
        page = store.list_jobs(limit=PAGE, before_seq=before)
        rows.extend(page)
        if len(page) < PAGE:
            break
        before = page[-1].seq
    rows.sort(key=lambda r: r.seq)
    return Snapshot(
        created_at=time.time() if now is None else now,
        source=source,
        core=SnapCore.of(core),
        tenancy=dict(tenancy) if tenancy is not None else None,
        power=dict(power) if power is not None else None,
        nodes=nodes,
        jobs=[_job(r) for r in rows],
        reservations=_reservations(store),
    )


def save(snapshot: Snapshot, path: Path) -> None:
    """Write ``snapshot`` to ``path`` (gzip when it ends in ``.gz``)."""
    data = snapshot.model_dump_json().encode()
    try:
        # no file name and mtime 0 in the gzip header: the same snapshot, the same bytes
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    except OSError as exc:
        raise SnapshotError(f"cannot write the snapshot {path}: {exc.strerror}") from None


def loads(data: bytes, source: str = "<snapshot>") -> Snapshot:
    """A snapshot from its (possibly gzip-compressed) bytes; :class:`SnapshotError` if bad."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise SnapshotError(f"{source}: broken gzip data: {exc}") from None
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{source}: not a JSON snapshot: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise SnapshotError(f"{source}: not a fusesched twin snapshot (no format {FORMAT!r})")
    if raw.get("version") not in READS:
        raise SnapshotError(
            f"{source}: snapshot version {raw.get('version')!r}; this fusesched reads "
            f"{' and '.join(map(str, READS))}"
        )
    try:
        return Snapshot.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SnapshotError(f"{source}: {where}: {first['msg']}") from None


def load(path: Path) -> Snapshot:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read the snapshot {path}: {exc.strerror}") from None
    return loads(data, str(path))
