"""The federation file: pools (local agents, Slurm and Kubernetes clusters) and the rules that
route jobs to them (docs/FEDERATION_ROUTING.md, :data:`EXAMPLE_YAML`).

:func:`load_federation` reads and checks it; every problem raises :class:`FederationError`
naming the file and the field. :mod:`fusesched.backends.routing` applies the rules to jobs.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from os import PathLike
from types import MappingProxyType
from typing import Any, Final, Literal, TypeVar, get_args

from fusesched.model.job import JobType
from fusesched.submit.errors import SubmitError
from fusesched.yamlfile import YamlFileError, read_yaml

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


# ----------------------------------------------------------------------------- config types


def _check_pool_name(name: object) -> str:
    if not isinstance(name, str) or not _POOL_NAME_RE.fullmatch(name):
        raise FederationError(
            f"invalid pool name {name!r}: lower-case letters, digits and '-', 63 characters at "
            "most, starting and ending with a letter or digit"
        )
    return name


def close_hint(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
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
    ``kubeconfig``, ``host``). Routing itself reads only kubernetes ``default_image`` and
    ``gang_mode``.
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
                f"unknown pool kind {self.kind!r}{close_hint(str(self.kind), POOL_KINDS)} "
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
    hint = close_hint(str(value), choices)
    raise FederationError(f"unknown job type {value!r}{hint} (choose from {', '.join(choices)})")


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
        if not isinstance(self.name, str) or not _RULE_NAME_RE.fullmatch(self.name):
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
                    f"{owner}: unknown pool {name!r}{close_hint(name, known)} "
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
        data = read_yaml(path, "federation config")
    except YamlFileError as exc:
        if exc.line is None:  # the message names the file already
            raise FederationError(str(exc)) from None
        raise FederationError(exc.reason, source=source, line=exc.line) from None
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
                f"unknown field {key!r}{close_hint(str(key), allowed, cutoff=0.75)} "
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
