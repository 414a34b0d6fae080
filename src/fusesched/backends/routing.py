"""Routing: which pools may take a job, in which order of preference (federation, issue 7).

fusesched schedules every job itself over one set of nodes; the nodes of each pool (the local
agents, a Slurm cluster, a Kubernetes cluster) carry the label
:data:`~fusesched.model.node.LABEL_POOL`. Routing runs once, at submission: it picks the
ordered pools a job may use (:func:`route`) and turns that choice into label constraints the
scheduling core already understands (:func:`routed_placement`): the job must land in one of the
pools, and earlier pools score higher, so later ones act as overflow when the first is full.

The rules live in a YAML file (``docs/FEDERATION_ROUTING.md``, :data:`EXAMPLE_YAML`), read by
:func:`load_federation`. Every problem in it raises :class:`FederationError` naming the file
and the field. Apart from reading that file, nothing here does I/O: the controller passes what
it knows of each pool's load (:class:`PoolLoad`) at the time of the call.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, TypeVar, get_args

import yaml

from fusesched.model.job import JobType, LabelOp, LabelRequirement, Placement, PreferredTerm
from fusesched.model.node import LABEL_POOL
from fusesched.submit.errors import SubmitError
from fusesched.submit.identify import identify
from fusesched.submit.request import JobRequest

PoolKind = Literal["local", "slurm", "kubernetes"]
POOL_KINDS: Final[tuple[str, ...]] = get_args(PoolKind)
#: The pool of the local fusesched agents; it exists whether the file lists it or not.
LOCAL_POOL: Final = "local"
#: Preferred-term weights the core accepts (see ``PreferredTermRequest``).
MAX_WEIGHT: Final = 100

_POOL_NAME_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_RULE_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([-\w.]{0,61}[A-Za-z0-9])?$")

_T = TypeVar("_T")


# ----------------------------------------------------------------------------- errors


class FederationError(SubmitError):
    """An invalid federation config. ``str(error)`` reads ``source:line: field: message``,
    as every file error does (:class:`~fusesched.submit.errors.SubmitError`).

    Config objects raise it with ``field`` relative to themselves (``kind``); the parser
    prefixes where the object sits in the file (``pools[2].kind``) and names the file, so the
    user can go straight to the line.
    """

    def under(self, prefix: str) -> FederationError:
        """The same error, its field inside ``prefix`` (``kind`` → ``pools[1].kind``)."""
        inner = self.field
        joined = prefix if not inner else f"{prefix}{'' if inner.startswith('[') else '.'}{inner}"
        return FederationError(self.message, source=self.source, line=self.line, field=joined)

    def located(self, source: str | None, line: int | None = None) -> FederationError:
        """The same error naming ``source`` (kept when it already names one)."""
        return FederationError(
            self.message,
            source=self.source or source,
            line=self.line if self.line is not None else line,
            field=self.field,
        )


class RouteError(ValueError):
    """No pool can take the job (or it asks for an unknown pool).

    ``reasons`` maps each dropped candidate to why; ``explanation`` is the routing trace up to
    the failure, for ``fusesched route JOB --explain``.
    """

    def __init__(
        self,
        message: str,
        *,
        reasons: Mapping[str, str] | None = None,
        explanation: Sequence[str] = (),
    ) -> None:
        self.reasons: Mapping[str, str] = MappingProxyType(dict(reasons or {}))
        self.explanation: tuple[str, ...] = tuple(explanation)
        super().__init__(message)


# ----------------------------------------------------------------------------- config types


def _check_pool_name(name: object) -> str:
    if not isinstance(name, str) or not _POOL_NAME_RE.match(name):
        raise FederationError(
            f"invalid pool name {name!r}: lower-case letters, digits and '-', 63 characters at "
            "most, starting and ending with a letter or digit"
        )
    return name


def _hint(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """``; did you mean 'x'?`` for the choice closest to a misspelt ``word``, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def _names(values: object, field_name: str, check: Callable[[object], str]) -> tuple[str, ...]:
    """A tuple of names from a list (a lone string is a mistake worth naming, not a list)."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise FederationError(f"must be a list, e.g. [{values}]", field=field_name)
    return tuple(_inside(field_name, partial(check, value)) for value in values)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One pool: its name (the value of its nodes' pool label), its kind and the back end's
    own settings (``options``; opaque here, read by the back end: slurm ``partition``,
    ``sbatch_args``, ``log_dir``; kubernetes ``namespace``, ``scheduler_name``, ``default_image``,
    ``kubeconfig``, ``host``). Routing itself reads only kubernetes ``default_image``.
    """

    name: str
    kind: PoolKind = "local"
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            _check_pool_name(self.name)
        except FederationError as exc:
            raise exc.under("name") from None
        if self.kind not in POOL_KINDS:
            raise FederationError(
                f"unknown pool kind {self.kind!r}{_hint(str(self.kind), POOL_KINDS)} "
                f"(choose from {', '.join(POOL_KINDS)})",
                field="kind",
            )
        if self.name == LOCAL_POOL and self.kind != "local":
            raise FederationError(
                f"pool {LOCAL_POOL!r} is the local agents' pool: its kind must be local, "
                f"not {self.kind}; give the {self.kind} pool another name",
                field="kind",
            )
        if not isinstance(self.options, Mapping) or not all(
            isinstance(k, str) for k in self.options
        ):
            raise FederationError("options must be a mapping of setting names", field="options")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        image = self.options.get("default_image")
        if image is not None and (not isinstance(image, str) or not image.strip()):
            raise FederationError(
                "default_image must be an image reference such as docker.io/library/python:3.11",
                field="options.default_image",
            )

    @property
    def default_image(self) -> str | None:
        """The image a kubernetes pool runs jobs that give none (``None``: it cannot)."""
        image = self.options.get("default_image")
        return image if isinstance(image, str) and self.kind == "kubernetes" else None


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """Which jobs a rule is for. Every given criterion must hold (a job's value must be one
    of those listed; every label listed must be on the job with that value); criteria left
    empty hold for every job, so ``RouteMatch()`` matches all of them."""

    types: tuple[JobType, ...] = ()
    tenants: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "types", _names(self.types, "types", _job_type))
        for name in ("tenants", "queues", "users"):
            object.__setattr__(self, name, _names(getattr(self, name), name, _non_empty))
        if not isinstance(self.labels, Mapping):
            raise FederationError("labels must be a mapping of label: value", field="labels")
        for key, value in self.labels.items():
            if not isinstance(key, str) or not key:
                raise FederationError(f"invalid label key {key!r}", field="labels")
            if not isinstance(value, str):
                raise FederationError(
                    f"give the value as a string (quote it: {key}: '{value}')",
                    field=f"labels.{key}",
                )
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


def _job_type(value: object) -> JobType:
    choices = [t.value for t in JobType]
    if isinstance(value, str) and value in choices:
        return JobType(value)
    raise FederationError(
        f"unknown job type {value!r}{_hint(str(value), choices)} (choose from {', '.join(choices)})"
    )


def _non_empty(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise FederationError(f"expected a non-empty name, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class RouteRule:
    """Jobs that ``match`` go to ``pools``, the first preferred, the next ones as overflow.

    ``max_load`` (a fraction in (0, 1]): a pool of the rule using more than this is moved
    behind the others (kept as overflow rather than dropped).
    """

    name: str
    match: RouteMatch = field(default_factory=RouteMatch)
    pools: tuple[str, ...] = (LOCAL_POOL,)
    max_load: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _RULE_NAME_RE.match(self.name):
            raise FederationError(
                f"invalid rule name {self.name!r}: letters, digits, '-', '_' and '.', "
                "63 characters at most",
                field="name",
            )
        if not isinstance(self.match, RouteMatch):
            raise FederationError("match must be a RouteMatch", field="match")
        object.__setattr__(self, "pools", _pool_list(self.pools, f"rule {self.name!r}", "pools"))
        object.__setattr__(self, "max_load", _max_load(self.max_load))


def _pool_list(pools: object, owner: str, field_name: str) -> tuple[str, ...]:
    """An ordered, non-empty list of distinct pool names."""
    names = _names(pools, field_name, _check_pool_name)
    if not names:
        raise FederationError(f"{owner} must name at least one pool", field=field_name)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise FederationError(
            f"{owner} lists pool(s) more than once: {', '.join(repeated)}", field=field_name
        )
    return names


def _max_load(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise FederationError(
            f"must be a number in (0, 1], the fraction of the pool in use, got {value!r}",
            field="max_load",
        )
    if not 0 < value <= 1:
        raise FederationError(
            f"must be in (0, 1], the fraction of the pool in use, got {value}", field="max_load"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class FederationConfig:
    """All pools, the routing rules (first match wins) and the pools of jobs no rule matches.

    A pool named ``local`` of kind ``local`` is always there: it is added (first) when
    ``pools`` does not list it. Field paths in errors index ``pools`` as given.
    """

    pools: tuple[PoolConfig, ...] = ()
    rules: tuple[RouteRule, ...] = ()
    default: tuple[str, ...] = (LOCAL_POOL,)

    def __post_init__(self) -> None:
        pools = tuple(self.pools)
        rules = tuple(self.rules)
        _unique("pool", [p.name for p in pools], "pools")
        _unique("rule", [r.name for r in rules], "rules")
        if all(p.name != LOCAL_POOL for p in pools):
            pools = (PoolConfig(LOCAL_POOL), *pools)
        object.__setattr__(self, "pools", pools)
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "default", _pool_list(self.default, "default", "default"))
        known = {p.name for p in pools}
        for index, rule in enumerate(rules):
            self._check_known(rule.pools, known, f"rule {rule.name!r}", f"rules[{index}].pools")
        self._check_known(self.default, known, "default", "default")

    def _check_known(
        self, names: Iterable[str], known: set[str], owner: str, field_name: str
    ) -> None:
        for name in names:
            if name not in known:
                raise FederationError(
                    f"{owner}: unknown pool {name!r}{_hint(name, known)} "
                    f"(known pools: {', '.join(self.pool_names)})",
                    field=field_name,
                )

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pools)

    def pool(self, name: str) -> PoolConfig:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"unknown pool {name!r}; known pools: {', '.join(self.pool_names)}")


def _unique(kind: str, names: Sequence[str], where: str) -> None:
    first: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in first:
            raise FederationError(
                f"duplicate {kind} name {name!r} (also {where}[{first[name]}])",
                field=f"{where}[{index}].name",
            )
        first[name] = index


# ----------------------------------------------------------------------------- loading

_TOP_FIELDS: Final = frozenset({"pools", "rules", "default"})
_POOL_FIELDS: Final = frozenset({"name", "kind", "options"})
_RULE_FIELDS: Final = frozenset({"name", "match", "pools", "max_load"})
_MATCH_FIELDS: Final = frozenset({"types", "tenants", "queues", "users", "labels"})


def load_federation(path: str | PathLike[str]) -> FederationConfig:
    """Read and validate a federation YAML file; every problem is a :class:`FederationError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FederationError(f"cannot read the federation config: {exc}", source=source) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else int(mark.line) + 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise FederationError(f"not valid YAML: {problem}", source=source, line=line) from None
    return parse_federation(data, source)


def parse_federation(data: object, source: str = "<federation>") -> FederationConfig:
    """Validate the structure a federation YAML file parses into (``None``: an empty file,
    only the ``local`` pool). Errors name ``source`` and the field."""
    try:
        return _config(data)
    except FederationError as exc:
        raise exc.located(source) from None


def _config(data: object) -> FederationConfig:
    top = {} if data is None else _mapping(data, "the federation config")
    _only(top, _TOP_FIELDS)
    pools = tuple(
        _inside(f"pools[{i}]", partial(_pool, p)) for i, p in enumerate(_list(top, "pools"))
    )
    rules = tuple(
        _inside(f"rules[{i}]", partial(_rule, r)) for i, r in enumerate(_list(top, "rules"))
    )
    if "default" in top:
        return FederationConfig(pools, rules, top["default"])
    return FederationConfig(pools, rules)


def _inside(prefix: str, build: Callable[[], _T]) -> _T:
    """Run ``build``, placing the field of any error it raises inside ``prefix``."""
    try:
        return build()
    except FederationError as exc:
        raise exc.under(prefix) from None


def _mapping(value: object, what: str = "") -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FederationError(f"{what} must be a mapping, got {value!r}".lstrip())
    return value


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise FederationError(f"must be a list, got {value!r}", field=key)
    return value


def _only(data: Mapping[str, Any], allowed: frozenset[str]) -> None:
    for key in data:
        if key not in allowed:
            raise FederationError(
                f"unknown field {key!r}{_hint(str(key), allowed, cutoff=0.75)} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )


def _pool(spec: object) -> PoolConfig:
    pool = _mapping(spec)
    _only(pool, _POOL_FIELDS)
    if "name" not in pool:
        raise FederationError("a pool needs a name", field="name")
    options = pool.get("options")
    return PoolConfig(pool["name"], pool.get("kind", "local"), {} if options is None else options)


def _rule(spec: object) -> RouteRule:
    rule = _mapping(spec)
    _only(rule, _RULE_FIELDS)
    for required in ("name", "pools"):
        if required not in rule:
            raise FederationError(f"a rule needs {required}", field=required)
    match = _inside("match", partial(_match, rule.get("match")))
    return RouteRule(rule["name"], match, rule["pools"], rule.get("max_load"))


def _match(spec: object) -> RouteMatch:
    match = {} if spec is None else _mapping(spec)
    _only(match, _MATCH_FIELDS)
    for key, value in match.items():
        if isinstance(value, list) and not value:
            raise FederationError(
                "an empty list matches no job; leave the field out to match every job",
                field=key,
            )
    return RouteMatch(
        **{key: value for key, value in match.items() if value is not None},
    )


# ----------------------------------------------------------------------------- routing


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """What the controller knows of a pool now: the fraction of its capacity in use and
    whether it is reachable (a pool with no report counts as up and unloaded)."""

    used_fraction: float
    up: bool = True

    def __post_init__(self) -> None:
        if not (0 <= self.used_fraction < math.inf):
            raise ValueError(f"used_fraction must be a non-negative number: {self.used_fraction}")


@dataclass(frozen=True, slots=True)
class Route:
    """The pools a job may use, most preferred first; the rule that chose them (``None``: the
    job named its pool, or no rule matched); and, line by line, why."""

    pools: tuple[str, ...]
    rule: str | None
    explanation: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Job:
    """The facts about a request that rules and pools are judged on."""

    type: JobType
    type_note: str
    tenant: str
    queue: str
    user: str
    labels: Mapping[str, str]

    @classmethod
    def of(cls, request: JobRequest) -> _Job:
        found = identify(request)
        note = "" if request.type is not None else f" (identified: {found.reason})"
        return cls(found.type, note, request.tenant, request.queue, request.user, request.labels)


def route(config: FederationConfig, request: JobRequest, loads: Mapping[str, PoolLoad]) -> Route:
    """The ordered pools for ``request``; :class:`RouteError` when none can run it.

    An explicit ``request.pool`` wins over the rules; otherwise the first matching rule
    decides, and without one ``config.default``. Pools that cannot run the job (its images)
    are dropped; pools over the rule's ``max_load`` move behind the others; pools that are
    down go last. Every step leaves a line in ``Route.explanation``.
    """
    job = _Job.of(request)
    lines = [_describe(job)]
    candidates, rule = _candidates(config, request, job, lines)
    reasons: dict[str, str] = {}
    for name in candidates:
        why = _cannot_run(config.pool(name), request)
        if why is not None:
            reasons[name] = why
            lines.append(f"pool {name} dropped: {why}")
    kept = [name for name in candidates if name not in reasons]
    if not kept:
        detail = "; ".join(f"pool {name}: {why}" for name, why in reasons.items())
        raise RouteError(
            f"no pool can run this job ({_origin(request, rule, candidates)}): {detail}",
            reasons=reasons,
            explanation=lines,
        )
    ordered = _order(kept, None if rule is None else rule.max_load, loads, lines)
    preference = "" if len(ordered) == 1 else f" ({ordered[0]} preferred)"
    lines.append(f"route: {', '.join(ordered)}{preference}")
    return Route(tuple(ordered), None if rule is None else rule.name, tuple(lines))


def _describe(job: _Job) -> str:
    user = job.user or "(none)"
    return (
        f"job: type {job.type}{job.type_note}, tenant {job.tenant}, queue {job.queue}, user {user}"
    )


def _candidates(
    config: FederationConfig, request: JobRequest, job: _Job, lines: list[str]
) -> tuple[tuple[str, ...], RouteRule | None]:
    """The pools before capability and load are judged, and the rule that named them."""
    if request.pool is not None:
        if request.pool not in config.pool_names:
            raise RouteError(
                f"the job asks for pool {request.pool!r}, which is not configured"
                f"{_hint(request.pool, config.pool_names)} "
                f"(known pools: {', '.join(config.pool_names)})",
                explanation=lines,
            )
        lines.append(f"pool {request.pool} asked for by the job: rules not consulted")
        return (request.pool,), None
    for rule in config.rules:
        mismatch = _mismatch(rule.match, job)
        if mismatch is None:
            lines.append(f"rule {rule.name!r} matches ({_matched(rule.match, job)})")
            lines.append(f"rule {rule.name!r} names pools: {', '.join(rule.pools)}")
            return rule.pools, rule
        lines.append(f"rule {rule.name!r} skipped: {mismatch}")
    lines.append(f"no rule matches: default pools {', '.join(config.default)}")
    return config.default, None


def _origin(request: JobRequest, rule: RouteRule | None, candidates: Sequence[str]) -> str:
    if request.pool is not None:
        return f"it asks for pool {request.pool}"
    if rule is not None:
        return f"rule {rule.name!r} names {', '.join(candidates)}"
    return f"default pools {', '.join(candidates)}"


def _listed(values: Iterable[str]) -> str:
    return f"[{', '.join(values)}]"


def _mismatch(match: RouteMatch, job: _Job) -> str | None:
    """Why ``job`` does not match (the first criterion that fails), or ``None`` if it does."""
    if match.types and job.type not in match.types:
        return f"type {job.type} not in {_listed(match.types)}"
    for what, value, allowed in (
        ("tenant", job.tenant, match.tenants),
        ("queue", job.queue, match.queues),
        ("user", job.user, match.users),
    ):
        if allowed and value not in allowed:
            return f"{what} {value or '(none)'} not in {_listed(allowed)}"
    for key, wanted in match.labels.items():
        have = job.labels.get(key)
        if have is None:
            return f"label {key} missing (wanted {wanted})"
        if have != wanted:
            return f"label {key} is {have}, not {wanted}"
    return None


def _matched(match: RouteMatch, job: _Job) -> str:
    """The criteria a matching job met, in words (``type hpc, tenant physics``)."""
    parts = [f"type {job.type}"] if match.types else []
    parts += [f"tenant {job.tenant}"] if match.tenants else []
    parts += [f"queue {job.queue}"] if match.queues else []
    parts += [f"user {job.user}"] if match.users else []
    parts += [f"label {key}={value}" for key, value in match.labels.items()]
    return ", ".join(parts) or "it matches every job"


def _cannot_run(pool: PoolConfig, request: JobRequest) -> str | None:
    """Why ``pool`` cannot run the job, or ``None`` when it can.

    Registry images are pulled only by Kubernetes; images given as filesystem paths are
    unpacked only by the local agents; a Kubernetes pod needs some image, so a group without
    one needs the pool's ``default_image``. The job's own placement may also exclude the pool
    by its label.
    """
    for group in request.groups:
        image = f"(group {group.name}: {group.image})"
        if group.registry_image and pool.kind != "kubernetes":
            return f"registry images run only in kubernetes pools {image}"
        if group.image is not None and not group.registry_image and pool.kind != "local":
            return f"images given as paths run only in local pools {image}"
        if group.image is None and pool.kind == "kubernetes" and pool.default_image is None:
            return f"group {group.name} gives no image and the pool has no default_image"
    if not _placement_allows_pool(request.placement.to_model(), pool.name):
        return f"the job's placement excludes it (by the {LABEL_POOL} label)"
    return None


def _placement_allows_pool(placement: Placement, pool: str) -> bool:
    """False when the job's own constraints on the pool label exclude ``pool``."""
    labels = {LABEL_POOL: pool}
    selector = placement.node_selector.get(LABEL_POOL)
    if selector is not None and selector != pool:
        return False
    if any(r.key == LABEL_POOL and not r.matches(labels) for r in placement.required):
        return False
    return not any(r.key == LABEL_POOL and r.matches(labels) for r in placement.anti_affinity)


def _order(
    pools: Sequence[str], max_load: float | None, loads: Mapping[str, PoolLoad], lines: list[str]
) -> list[str]:
    """Pools within their load limit first, those above it next, those down last; the
    order among each set is the rule's."""
    ready: list[str] = []
    overflow: list[str] = []
    down: list[str] = []
    for name in pools:
        load = loads.get(name)
        if load is not None and not load.up:
            lines.append(f"pool {name} is down: tried last")
            down.append(name)
        elif max_load is not None and load is not None and load.used_fraction > max_load:
            lines.append(
                f"pool {name} above its load limit "
                f"({load.used_fraction:.2f} > {max_load:.2f}): kept as overflow"
            )
            overflow.append(name)
        else:
            ready.append(name)
    return ready + overflow + down


# ----------------------------------------------------------------------------- placement


def pool_weights(count: int) -> tuple[int, ...]:
    """Preferred-term weights for the first ``count - 1`` of ``count`` ordered pools (the last
    needs none: it only has to score lowest).

    Halving from 100 (100, 50, 25, …) keeps a clear gap between the first choices; never
    below the number of pools still to come, so the weights stay strictly decreasing (up to
    101 pools) within the core's -100..100.
    """
    return tuple(
        min(MAX_WEIGHT, max(MAX_WEIGHT >> index, count - 1 - index)) for index in range(count - 1)
    )


def routed_placement(placement: Placement, route: Route) -> Placement:
    """``placement`` restricted to the route's pools, earlier pools scoring higher.

    The job's own selector, requirements and preferred terms are kept; a requirement
    ``fusesched.io/pool In route.pools`` is added, and one preferred term per pool but the
    last with the weights of :func:`pool_weights`.
    """
    if not route.pools:
        raise ValueError("a route names at least one pool")
    required = LabelRequirement(LABEL_POOL, LabelOp.IN, route.pools)
    terms = tuple(
        PreferredTerm(LabelRequirement(LABEL_POOL, LabelOp.IN, (name,)), weight)
        for name, weight in zip(route.pools, pool_weights(len(route.pools)), strict=False)
    )
    return replace(
        placement,
        required=(*placement.required, required),
        preferred=(*placement.preferred, *terms),
    )


EXAMPLE_YAML: Final = """\
pools:
  - name: hpc
    kind: slurm
    options:
      partition: compute
      sbatch_args: [--account=physics]
      log_dir: /shared/fusesched/slurm-logs
  - name: k8s
    kind: kubernetes
    options:
      namespace: fusesched
      scheduler_name: volcano
      default_image: docker.io/library/python:3.11
      kubeconfig: /etc/fusesched/kubeconfig
rules:
  - name: hpc-to-slurm
    match: {types: [hpc]}
    pools: [hpc, local]
    max_load: 0.8
  - name: ai
    match: {types: [ai-train, ai-infer]}
    pools: [local, k8s]
  - name: services
    match: {types: [service]}
    pools: [k8s]
  - name: physics-batch
    match: {tenants: [physics], labels: {site: cern}}
    pools: [hpc, local]
default: [local, k8s]
"""
