"""What-if scenarios: a small declarative YAML file of changes to a snapshot.

Example (every section is optional; an empty file is the snapshot as it is)::

    name: two-more-h200
    nodes:
      add:
        - {like: gpu-node-1, count: 2}            # copies of a node
        - {name: big, count: 1, capacity: {cpu: 64, memory: 512Gi, nvidia.com/gpu: 8},
           labels: {fusesched.io/gpu-model: H200}}
      remove:
        - {match: {fusesched.io/gpu-model: V100}, count: 4}   # the last 4 matching nodes
    policy: {queue_order: sjf, backfill: conservative, placement: best-fit}
    quotas:
      - {queue: ml-train, flavor: a100-x86, resource: nvidia.com/gpu, nominal: 24}
    arrival: {rate: 1.5, jitter_s: 30}
    failures:
      - {at_s: 3600, duration_s: 7200, node: gpu-node-3}
      - {at_s: 86400, duration_s: 3600, rack: r12}
      - {at_s: 0, duration_s: 600, gpu_model: A100}
    power: {policy: idle-timeout, idle_threshold_s: 600, default_min_warm: 1}
    reservations:
      remove: [llm-run]                       # one the snapshot holds
      add:
        - {name: maint, nodes: "gpu-node-[1-4]", start: "2027-01-11T08:00:00Z",
           duration_s: 14400}                 # maintenance: nobody's jobs
        - {name: ml, nodes: [cpu-1, cpu-2], start_s: 3600, end_s: 7200, tenants: [ml]}
    seeds: [0, 1, 2]
    dispatch_latency_s: 0.01   # default: measured from the snapshot

Errors name the file and the field (``a.yaml: failures.0.at_s: …``); never a traceback.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fusesched.model.reservation import RESERVATION_NAME
from fusesched.model.resources import QuantityError, canonical_name, parse_quantity
from fusesched.yamlfile import YamlFileError, read_yaml


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Field(ge=1)]


class AddNodes(_Model):
    """``count`` new nodes: copies of node ``like``, of the first node matching ``match``, or
    of a new type (``name``, ``capacity``, ``labels``)."""

    count: Annotated[int, Field(ge=0)] = 1
    like: str | None = None
    match: dict[str, str] | None = None
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = None
    capacity: dict[str, str | int | float] | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("capacity")
    @classmethod
    def _quantities(
        cls, value: dict[str, str | int | float] | None
    ) -> dict[str, str | int | float] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("a new node type needs some capacity (cpu: 32, …)")
        for raw, amount in value.items():
            try:
                parse_quantity(canonical_name(str(raw)), amount)
            except QuantityError as exc:
                raise ValueError(f"{raw}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_template(self) -> Self:
        given = [k for k in ("like", "match", "capacity") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of like (a node), match (labels) or capacity")
        if self.capacity is not None and self.name is None:
            raise ValueError("a new node type (capacity) needs a name")
        return self


class RemoveNodes(_Model):
    """Remove the named nodes, or the last ``count`` nodes matching ``match``."""

    nodes: list[str] = Field(default_factory=list)
    match: dict[str, str] | None = None
    count: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        if bool(self.nodes) == (self.match is not None):
            raise ValueError("give either nodes (names) or match (labels) with a count")
        if self.match is not None and self.count is None:
            raise ValueError("match needs a count")
        return self


class NodeChanges(_Model):
    add: list[AddNodes] = Field(default_factory=list)
    remove: list[RemoveNodes] = Field(default_factory=list)


class PolicyChange(_Model):
    queue_order: str | None = None
    backfill: str | None = None
    placement: str | None = None
    runtime_prediction: str | None = None
    default_estimate_s: Annotated[float, Field(gt=0)] | None = None


class QuotaChange(_Model):
    """One queue's quota of one resource in one flavour (the tenancy file's fields)."""

    queue: str
    flavor: str
    resource: str
    nominal: str | int | None = None
    borrowing_limit: str | int | None = None
    lending_limit: str | int | None = None


class Arrival(_Model):
    """``rate``: arrivals this many times as frequent (submit gaps divided by it);
    ``jitter_s``: each submit moved by up to ± this, drawn from the run's seed."""

    rate: Annotated[float, Field(gt=0)] = 1.0
    jitter_s: Annotated[float, Field(ge=0)] = 0.0

    @field_validator("rate")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class Failure(_Model):
    """Nodes down from ``at_s`` (seconds after the first submit) for ``duration_s`` (none:
    for good): one ``node``, a ``rack`` (its topology label) or every node of a ``gpu_model``."""

    at_s: Annotated[float, Field(ge=0)]
    duration_s: Annotated[float, Field(gt=0)] | None = None
    node: str | None = None
    rack: str | None = None
    gpu_model: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        given = [k for k in ("node", "rack", "gpu_model") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of node, rack or gpu_model")
        return self


class PowerChange(_Model):
    """Power saving in the twin (docs/ENERGY.md's settings)."""

    policy: str = "always-on"
    idle_threshold_s: Annotated[float, Field(ge=0)] | None = None
    default_min_warm: Annotated[int, Field(ge=0)] | None = None
    min_warm: dict[str, Annotated[int, Field(ge=0)]] | None = None
    max_suspends_per_min: Annotated[int, Field(ge=0)] | None = None
    max_resumes_per_min: Annotated[int, Field(ge=0)] | None = None
    tick_s: Annotated[float, Field(gt=0)] = 60.0

    @field_validator("policy")
    @classmethod
    def _known(cls, value: str) -> str:
        from fusesched.power.saving import SAVING_POLICIES

        if value not in SAVING_POLICIES:
            raise ValueError(f"unknown policy {value!r}; choose from {', '.join(SAVING_POLICIES)}")
        return value


def absolute_time(value: datetime | str | float) -> float:
    """Unix seconds of a time given as a number of them, or as an ISO 8601 date and time
    (UTC unless it names its zone; YAML reads an unquoted one as a date and time already);
    ``ValueError`` otherwise."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.timestamp()
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number of Unix seconds")
        return float(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO 8601 date and time (2027-01-11T08:00:00Z) or Unix seconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class AddReservation(_Model):
    """An advance reservation the scenario makes (docs/RESERVATIONS.md): ``nodes`` (a Slurm
    host list such as ``"gpu-[1-8]"``, or a list of names) from ``start`` (an ISO 8601 date
    and time, UTC unless it says, or Unix seconds) or ``start_s`` (seconds after the first
    submission, as ``failures.at_s``) until ``end``, ``end_s`` or ``start + duration_s``; for
    ``users`` and ``tenants`` (neither: a maintenance window). It is made at ``made_at_s``
    (seconds after the first submission), by default at the snapshot's time."""

    name: Annotated[str, Field(pattern=RESERVATION_NAME.pattern)]
    nodes: str | list[str]
    start: datetime | str | float | None = None
    start_s: float | None = None
    end: datetime | str | float | None = None
    end_s: float | None = None
    duration_s: Annotated[float, Field(gt=0)] | None = None
    users: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    made_at_s: Annotated[float, Field(ge=0)] | None = None

    @field_validator("start", "end")
    @classmethod
    def _time(cls, value: datetime | str | float | None) -> datetime | str | float | None:
        if value is not None:
            absolute_time(value)
        return value

    @field_validator("start_s", "end_s", "duration_s", "made_at_s")
    @classmethod
    def _finite_s(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    @model_validator(mode="after")
    def _one_of_each(self) -> Self:
        if (self.start is None) == (self.start_s is None):
            raise ValueError("give exactly one of start (a date and time) or start_s")
        ends = [k for k in ("end", "end_s", "duration_s") if getattr(self, k) is not None]
        if len(ends) != 1:
            raise ValueError("give exactly one of end, end_s or duration_s")
        if not self.nodes:
            raise ValueError("a reservation needs nodes")
        return self


class ReservationChanges(_Model):
    """Reservations the scenario takes away (names the snapshot holds) and makes."""

    remove: list[str] = Field(default_factory=list)
    add: list[AddReservation] = Field(default_factory=list)


class Scenario(_Model):
    name: str = "baseline"
    description: str = ""
    nodes: NodeChanges = Field(default_factory=NodeChanges)
    policy: PolicyChange = Field(default_factory=PolicyChange)
    quotas: list[QuotaChange] = Field(default_factory=list)
    arrival: Arrival = Field(default_factory=Arrival)
    failures: list[Failure] = Field(default_factory=list)
    power: PowerChange | None = None
    reservations: ReservationChanges = Field(default_factory=ReservationChanges)
    seeds: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0], min_length=1)
    # how long the controller takes from a submission to the cycle that can start it; None:
    # measured from the snapshot's history (see fusesched.twin.build.dispatch_latency)
    dispatch_latency_s: Annotated[float, Field(ge=0)] | None = None


def parse_scenario(data: object, source: str = "<scenario>") -> Scenario:
    """A scenario from YAML data; :class:`ScenarioError` naming ``source`` and the field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping (name:, nodes:, policy:, …)")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            lines.append(f"{source}: {where}: {msg}")
        raise ScenarioError("\n".join(lines)) from None


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file."""
    try:
        data: Any = read_yaml(path, "scenario")
    except YamlFileError as exc:
        raise ScenarioError(str(exc)) from None
    scenario = parse_scenario(data, str(path))
    if scenario.name == "baseline" and "name" not in (data or {}):
        scenario = scenario.model_copy(update={"name": path.stem})
    return scenario
