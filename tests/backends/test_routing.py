"""Routing jobs to pools: rules, image constraints, load and liveness, config errors, placement."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fusesched.backends.federation_config import (
    EXAMPLE_YAML,
    FederationConfig,
    FederationError,
    PoolConfig,
    RouteMatch,
    RouteRule,
    load_federation,
    parse_federation,
)
from fusesched.backends.routing import (
    PoolLoad,
    Route,
    RouteError,
    pool_weights,
    route,
    routed_placement,
)
from fusesched.model.job import JobType, LabelOp, LabelRequirement, Placement, PreferredTerm
from fusesched.model.node import LABEL_POOL
from fusesched.submit import JobRequest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "FEDERATION_ROUTING.md"

CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "slurm", "kind": "slurm", "options": {"partition": "compute"}},
        {"name": "slurm2", "kind": "slurm"},
        {
            "name": "k8s",
            "kind": "kubernetes",
            "options": {"namespace": "jobs", "default_image": "python:3.11"},
        },
        {"name": "k8s-bare", "kind": "kubernetes", "options": {"namespace": "jobs"}},
        {"name": "edge", "kind": "local"},
    ],
    "rules": [
        {"name": "hpc-to-slurm", "match": {"types": ["hpc"]}, "pools": ["slurm", "slurm2"]},
        {"name": "ai", "match": {"types": ["ai-train", "ai-infer"]}, "pools": ["local", "k8s"]},
        {"name": "services", "match": {"types": ["service"]}, "pools": ["k8s"]},
        {
            "name": "physics",
            "match": {"tenants": ["physics"], "queues": ["long", "short"]},
            "pools": ["slurm2", "local"],
            "max_load": 0.8,
        },
        {"name": "vision", "match": {"labels": {"team": "vision"}}, "pools": ["edge", "local"]},
        {"name": "ada", "match": {"users": ["ada"]}, "pools": ["local", "edge", "slurm"]},
        {"name": "bare", "match": {"labels": {"bare": "yes"}}, "pools": ["k8s-bare", "local"]},
        {"name": "spread", "match": {"labels": {"spread": "yes"}}, "pools": ["slurm", "slurm2"]},
        {
            "name": "loaded",
            "match": {"labels": {"loaded": "yes"}},
            "pools": ["slurm", "slurm2", "local"],
            "max_load": 0.5,
        },
    ],
    "default": ["local", "k8s"],
}


@pytest.fixture(scope="module")
def config() -> FederationConfig:
    return parse_federation(CONFIG, "fed.yaml")


def job(**fields: Any) -> JobRequest:
    """A one-group job (``image`` goes to the group); other fields as JobRequest's."""
    group: dict[str, Any] = {"resources": {"cpu": 1}, "argv": ["./run"]}
    if "image" in fields:
        group["image"] = fields.pop("image")
    fields.setdefault("type", "batch")
    return JobRequest.model_validate({**fields, "groups": [group]})


# ----------------------------------------------------------------------------- rules

BUSY = PoolLoad(0.93)
IDLE = PoolLoad(0.10)
DOWN = PoolLoad(0.0, up=False)

CASES: list[tuple[str, dict[str, Any], dict[str, PoolLoad], tuple[str, ...], str | None]] = [
    # (case, job fields, loads, expected pools, expected rule)
    ("hpc to slurm", {"type": "hpc"}, {}, ("slurm", "slurm2"), "hpc-to-slurm"),
    ("ai-train to local", {"type": "ai-train"}, {}, ("local", "k8s"), "ai"),
    ("ai-infer to local", {"type": "ai-infer"}, {}, ("local", "k8s"), "ai"),
    ("service to kubernetes", {"type": "service"}, {}, ("k8s",), "services"),
    (
        "tenant and queue",
        {"tenant": "physics", "queue": "long"},
        {},
        ("slurm2", "local"),
        "physics",
    ),
    ("tenant but other queue", {"tenant": "physics", "queue": "debug"}, {}, ("local", "k8s"), None),
    ("label rule", {"labels": {"team": "vision"}}, {}, ("edge", "local"), "vision"),
    ("label with other value", {"labels": {"team": "nlp"}}, {}, ("local", "k8s"), None),
    ("user rule", {"user": "ada"}, {}, ("local", "edge", "slurm"), "ada"),
    ("first match wins", {"type": "hpc", "user": "ada"}, {}, ("slurm", "slurm2"), "hpc-to-slurm"),
    (
        "first match wins over labels",
        {"tenant": "physics", "queue": "short", "labels": {"team": "vision"}},
        {},
        ("slurm2", "local"),
        "physics",
    ),
    ("no rule: default", {}, {}, ("local", "k8s"), None),
    ("explicit pool", {"type": "hpc", "pool": "edge"}, {}, ("edge",), None),
    ("explicit pool, even down", {"pool": "slurm"}, {"slurm": DOWN}, ("slurm",), None),
    (
        "registry image: kubernetes only",
        {"type": "ai-train", "image": "docker.io/library/python:3.11"},
        {},
        ("k8s",),
        "ai",
    ),
    ("path image: local only", {"type": "ai-train", "image": "/img/t.tar"}, {}, ("local",), "ai"),
    ("path image on slurm route", {"user": "ada", "image": "/img/t"}, {}, ("local", "edge"), "ada"),
    ("kubernetes without default image", {"labels": {"bare": "yes"}}, {}, ("local",), "bare"),
    (
        "kubernetes without default image, image given",
        {"labels": {"bare": "yes"}, "image": "nginx:1"},
        {},
        ("k8s-bare",),
        "bare",
    ),
    ("down pool last", {"type": "hpc"}, {"slurm": DOWN}, ("slurm2", "slurm"), "hpc-to-slurm"),
    (
        "all down keeps order",
        {"type": "hpc"},
        {"slurm": DOWN, "slurm2": DOWN},
        ("slurm", "slurm2"),
        "hpc-to-slurm",
    ),
    (
        "over max_load: overflow",
        {"tenant": "physics", "queue": "long"},
        {"slurm2": BUSY, "local": IDLE},
        ("local", "slurm2"),
        "physics",
    ),
    (
        "at max_load: not over",
        {"tenant": "physics", "queue": "long"},
        {"slurm2": PoolLoad(0.8)},
        ("slurm2", "local"),
        "physics",
    ),
    (
        "overflow before down",
        {"labels": {"loaded": "yes"}},
        {"slurm": DOWN, "slurm2": BUSY, "local": IDLE},
        ("local", "slurm2", "slurm"),
        "loaded",
    ),
    (
        "overflow keeps the rule's order",
        {"labels": {"loaded": "yes"}},
        {"slurm": BUSY, "slurm2": PoolLoad(0.99)},
        ("local", "slurm", "slurm2"),
        "loaded",
    ),
    (
        "load ignored without max_load",
        {"labels": {"spread": "yes"}},
        {"slurm": PoolLoad(0.99)},
        ("slurm", "slurm2"),
        "spread",
    ),
]


@pytest.mark.parametrize(
    ("fields", "loads", "pools", "rule"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_route_table(
    config: FederationConfig,
    fields: dict[str, Any],
    loads: dict[str, PoolLoad],
    pools: tuple[str, ...],
    rule: str | None,
) -> None:
    result = route(config, job(**fields), loads)
    assert result.pools == pools
    assert result.rule == rule


def test_type_is_identified_when_not_given(config: FederationConfig) -> None:
    request = JobRequest.model_validate(
        {"groups": [{"resources": {"cpu": 4}, "argv": ["mpirun", "-n", "4", "./sim"]}]}
    )
    result = route(config, request, {})
    assert result.rule == "hpc-to-slurm"
    assert "job: type hpc (identified: MPI launcher mpirun)" in result.explanation[0]


def test_explain_lines(config: FederationConfig) -> None:
    request = job(type="batch", tenant="physics", queue="long", image="python:3.11")
    loads = {"slurm2": BUSY}
    with pytest.raises(RouteError):
        route(config, request, loads)
    result = route(config, job(tenant="physics", queue="long"), loads)
    assert result.explanation == (
        "job: type batch, tenant physics, queue long, user (none)",
        "rule 'hpc-to-slurm' skipped: type batch not in [hpc]",
        "rule 'ai' skipped: type batch not in [ai-train, ai-infer]",
        "rule 'services' skipped: type batch not in [service]",
        "rule 'physics' matches (tenant physics, queue long)",
        "rule 'physics' names pools: slurm2, local",
        "pool slurm2 above its load limit (0.93 > 0.80): kept as overflow",
        "route: local, slurm2 (local preferred)",
    )


@pytest.mark.parametrize(
    ("fields", "loads", "line"),
    [
        ({"type": "hpc"}, {"slurm": DOWN}, "pool slurm is down: tried last"),
        ({"labels": {"team": "nlp"}}, {}, "rule 'vision' skipped: label team is nlp, not vision"),
        ({}, {}, "rule 'vision' skipped: label team missing (wanted vision)"),
        ({}, {}, "rule 'ada' skipped: user (none) not in [ada]"),
        ({"user": "bob"}, {}, "rule 'ada' skipped: user bob not in [ada]"),
        ({"tenant": "physics"}, {}, "rule 'physics' skipped: queue default not in [long, short]"),
        ({}, {}, "no rule matches: default pools local, k8s"),
        ({"pool": "k8s"}, {}, "pool k8s asked for by the job: rules not consulted"),
        ({"labels": {"team": "vision"}}, {}, "rule 'vision' matches (label team=vision)"),
        ({"type": "service"}, {}, "route: k8s"),
        (
            {"type": "ai-train", "image": "/img/t.tar"},
            {},
            "pool k8s dropped: images given as paths run only in local pools "
            "(group main: /img/t.tar)",
        ),
        (
            {"labels": {"bare": "yes"}},
            {},
            "pool k8s-bare dropped: group main gives no image and the pool has no default_image",
        ),
        (
            {"type": "ai-train", "image": "python:3.11"},
            {},
            "pool local dropped: registry images run only in kubernetes pools "
            "(group main: python:3.11)",
        ),
    ],
)
def test_explanation_lines(
    config: FederationConfig, fields: dict[str, Any], loads: dict[str, PoolLoad], line: str
) -> None:
    assert line in route(config, job(**fields), loads).explanation


def test_empty_match_matches_everything() -> None:
    cfg = FederationConfig(
        pools=(PoolConfig("slurm", "slurm"),),
        rules=(RouteRule("all", RouteMatch(), ("slurm", "local")),),
    )
    result = route(cfg, job(type="service"), {})
    assert result.pools == ("slurm", "local")
    assert "rule 'all' matches (it matches every job)" in result.explanation


def test_job_placement_excluding_a_pool_drops_it(config: FederationConfig) -> None:
    request = job(
        type="ai-train",
        placement={"required": [{"key": LABEL_POOL, "op": "NotIn", "values": ["local"]}]},
    )
    result = route(config, request, {})
    assert result.pools == ("k8s",)
    assert (
        f"pool local dropped: the job's placement excludes it (by the {LABEL_POOL} label)"
        in result.explanation
    )


# ----------------------------------------------------------------------------- route errors


def test_unknown_explicit_pool(config: FederationConfig) -> None:
    with pytest.raises(RouteError) as err:
        route(config, job(pool="slurm3"), {})
    assert str(err.value) == (
        "the job asks for pool 'slurm3', which is not configured; did you mean 'slurm'? "
        "(known pools: local, slurm, slurm2, k8s, k8s-bare, edge)"
    )


def test_no_pool_left_says_why_each_was_dropped(config: FederationConfig) -> None:
    with pytest.raises(RouteError) as err:
        route(config, job(type="hpc", image="python:3.11"), {})
    assert str(err.value) == (
        "no pool can run this job (rule 'hpc-to-slurm' names slurm, slurm2): "
        "pool slurm: registry images run only in kubernetes pools (group main: python:3.11); "
        "pool slurm2: registry images run only in kubernetes pools (group main: python:3.11)"
    )
    assert set(err.value.reasons) == {"slurm", "slurm2"}
    assert err.value.explanation[-1].startswith("pool slurm2 dropped:")
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"type": "service", "image": "/img/s.tar"},
            "no pool can run this job (rule 'services' names k8s): pool k8s: images given as "
            "paths run only in local pools (group main: /img/s.tar)",
        ),
        (
            {"pool": "k8s-bare"},
            "no pool can run this job (it asks for pool k8s-bare): pool k8s-bare: group main "
            "gives no image and the pool has no default_image",
        ),
        (
            {"pool": "slurm", "image": "/img/a"},
            "no pool can run this job (it asks for pool slurm): pool slurm: images given as "
            "paths run only in local pools (group main: /img/a)",
        ),
    ],
)
def test_route_error_messages(
    config: FederationConfig, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(RouteError) as err:
        route(config, job(**fields), {})
    assert str(err.value) == message


def test_mixed_images_fit_no_pool(config: FederationConfig) -> None:
    request = JobRequest.model_validate(
        {
            "type": "batch",
            "groups": [
                {"name": "a", "resources": {"cpu": 1}, "argv": ["x"], "image": "/img/a"},
                {"name": "b", "resources": {"cpu": 1}, "argv": ["x"], "image": "python:3.11"},
            ],
        }
    )
    with pytest.raises(RouteError, match=r"default pools local, k8s\): pool local: registry"):
        route(config, request, {})


# ----------------------------------------------------------------------------- config


def test_local_pool_always_exists() -> None:
    cfg = parse_federation({"pools": [{"name": "hpc", "kind": "slurm"}]}, "f.yaml")
    assert cfg.pool_names == ("local", "hpc")
    assert cfg.pool("local").kind == "local"
    assert cfg.default == ("local",)
    assert parse_federation(None, "empty.yaml").pool_names == ("local",)
    assert FederationConfig().default == ("local",)


def test_local_pool_may_be_listed_with_options() -> None:
    cfg = parse_federation({"pools": [{"name": "local", "options": {"x": 1}}]}, "f.yaml")
    assert cfg.pool_names == ("local",)
    assert cfg.pool("local").options == {"x": 1}


def test_parsed_config(config: FederationConfig) -> None:
    assert config.pool("slurm").options["partition"] == "compute"
    assert config.pool("k8s").default_image == "python:3.11"
    assert config.pool("k8s-bare").default_image is None
    physics = config.rules[3]
    assert physics.match.tenants == ("physics",)
    assert physics.max_load == 0.8
    assert config.rules[0].match.types == (JobType.HPC,)
    with pytest.raises(KeyError, match="unknown pool 'nope'"):
        config.pool("nope")


def _with(path: str, value: Any) -> dict[str, Any]:
    """CONFIG with one value replaced (``rules.0.max_load``), or removed when ``...``."""
    data: Any = yaml.safe_load(yaml.safe_dump(CONFIG))
    *parents, last = path.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is ...:
        del target[int(last) if last.isdigit() else last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return dict(data)


PARSE_ERRORS: list[tuple[Any, str]] = [
    ([1], "fed.yaml: the federation config must be a mapping, got [1]"),
    (
        {"pool": []},
        "fed.yaml: unknown field 'pool'; did you mean 'pools'? (allowed: default, pools, rules)",
    ),
    ({"pools": {"a": 1}}, "fed.yaml: pools: must be a list, got {'a': 1}"),
    (_with("pools.0", "slurm"), "fed.yaml: pools[0]: must be a mapping, got 'slurm'"),
    (
        _with("pools.0.kind", "slurmm"),
        "fed.yaml: pools[0].kind: unknown pool kind 'slurmm'; did you mean 'slurm'? "
        "(choose from local, slurm, kubernetes)",
    ),
    (
        _with("pools.0.name", "Slurm_A"),
        "fed.yaml: pools[0].name: invalid pool name 'Slurm_A': lower-case letters, digits "
        "and '-', 63 characters at most, starting and ending with a letter or digit",
    ),
    (_with("pools.1.name", ...), "fed.yaml: pools[1].name: a pool needs a name"),
    (
        _with("pools.1.name", "slurm"),
        "fed.yaml: pools[1].name: duplicate pool name 'slurm' (also pools[0])",
    ),
    (
        _with("pools.0.partition", "x"),
        "fed.yaml: pools[0]: unknown field 'partition' (allowed: kind, name, options)",
    ),
    (
        _with("pools.0.options", ["a"]),
        "fed.yaml: pools[0].options: options must be a mapping of setting names",
    ),
    (
        _with("pools.2.options.default_image", ""),
        "fed.yaml: pools[2].options.default_image: default_image must be an image reference "
        "such as docker.io/library/python:3.11",
    ),
    (
        {"pools": [{"name": "local", "kind": "slurm"}]},
        "fed.yaml: pools[0].kind: pool 'local' is the local agents' pool: its kind must be "
        "local, not slurm; give the slurm pool another name",
    ),
    (
        _with("rules.1.pools", ["local", "k8", "gpu"]),
        "fed.yaml: rules[1].pools: rule 'ai': unknown pool 'k8'; did you mean 'k8s'? "
        "(known pools: local, slurm, slurm2, k8s, k8s-bare, edge)",
    ),
    (_with("rules.1.pools", []), "fed.yaml: rules[1].pools: rule 'ai' must name at least one pool"),
    (_with("rules.1.pools", "k8s"), "fed.yaml: rules[1].pools: must be a list, e.g. [k8s]"),
    (
        _with("rules.1.pools", ["k8s", "local", "k8s"]),
        "fed.yaml: rules[1].pools: rule 'ai' lists pool(s) more than once: k8s",
    ),
    (_with("rules.1.pools", ...), "fed.yaml: rules[1].pools: a rule needs pools"),
    (_with("rules.1.name", ...), "fed.yaml: rules[1].name: a rule needs name"),
    (
        _with("rules.1.name", "hpc-to-slurm"),
        "fed.yaml: rules[1].name: duplicate rule name 'hpc-to-slurm' (also rules[0])",
    ),
    (
        _with("rules.1.name", "my rule"),
        "fed.yaml: rules[1].name: invalid rule name 'my rule': letters, digits, '-', '_' and "
        "'.', 63 characters at most",
    ),
    (
        _with("rules.1.max_load", 1.5),
        "fed.yaml: rules[1].max_load: must be in (0, 1], the fraction of the pool in use, got 1.5",
    ),
    (
        _with("rules.1.max_load", 0),
        "fed.yaml: rules[1].max_load: must be in (0, 1], the fraction of the pool in use, got 0",
    ),
    (
        _with("rules.1.max_load", "80%"),
        "fed.yaml: rules[1].max_load: must be a number in (0, 1], the fraction of the pool in "
        "use, got '80%'",
    ),
    (
        _with("rules.1.max_load", True),
        "fed.yaml: rules[1].max_load: must be a number in (0, 1], the fraction of the pool in "
        "use, got True",
    ),
    (
        _with("rules.1.priority", 3),
        "fed.yaml: rules[1]: unknown field 'priority' (allowed: match, max_load, name, pools)",
    ),
    (
        _with("rules.1.match.type", ["hpc"]),
        "fed.yaml: rules[1].match: unknown field 'type'; did you mean 'types'? "
        "(allowed: labels, queues, tenants, types, users)",
    ),
    (
        _with("rules.1.match.types", ["ai-train", "training"]),
        "fed.yaml: rules[1].match.types: unknown job type 'training'; did you mean 'ai-train'? "
        "(choose from ai-train, ai-infer, hpc, batch, service)",
    ),
    (
        _with("rules.1.match.types", []),
        "fed.yaml: rules[1].match.types: an empty list matches no job; leave the field out "
        "to match every job",
    ),
    (
        _with("rules.1.match.types", "hpc"),
        "fed.yaml: rules[1].match.types: must be a list, e.g. [hpc]",
    ),
    (
        _with("rules.3.match.tenants", ["physics", ""]),
        "fed.yaml: rules[3].match.tenants: expected a non-empty name, got ''",
    ),
    (
        _with("rules.4.match.labels", {"team": 7}),
        "fed.yaml: rules[4].match.labels.team: give the value as a string (quote it: team: '7')",
    ),
    (
        _with("rules.4.match.labels", ["team"]),
        "fed.yaml: rules[4].match.labels: labels must be a mapping of label: value",
    ),
    (_with("rules.4.match", "all"), "fed.yaml: rules[4].match: must be a mapping, got 'all'"),
    (
        _with("default", ["local", "gpu"]),
        "fed.yaml: default: default: unknown pool 'gpu' "
        "(known pools: local, slurm, slurm2, k8s, k8s-bare, edge)",
    ),
    (_with("default", []), "fed.yaml: default: default must name at least one pool"),
]


@pytest.mark.parametrize(("data", "message"), PARSE_ERRORS)
def test_parse_errors(data: Any, message: str) -> None:
    with pytest.raises(FederationError) as err:
        parse_federation(data, "fed.yaml")
    assert str(err.value) == message
    assert isinstance(err.value, ValueError)


def test_config_objects_validate_themselves() -> None:
    with pytest.raises(FederationError, match=r"^max_load: must be in \(0, 1\]"):
        RouteRule("r", pools=("local",), max_load=2.0)
    with pytest.raises(FederationError, match=r"^kind: unknown pool kind 'lsf'"):
        PoolConfig("lsf", "lsf")  # type: ignore[arg-type]
    with pytest.raises(FederationError, match=r"^types: unknown job type 'gpu'"):
        RouteMatch(types=("gpu",))  # type: ignore[arg-type]
    with pytest.raises(FederationError, match=r"^rules\[0\]\.pools: rule 'r': unknown pool 'x'"):
        FederationConfig(rules=(RouteRule("r", pools=("x",)),))


def test_load_federation_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "federation.yaml"
    path.write_text(EXAMPLE_YAML)
    cfg = load_federation(path)
    assert cfg.pool_names == ("local", "hpc", "k8s")
    assert [r.name for r in cfg.rules] == ["hpc-to-slurm", "ai", "services", "physics-batch"]


def test_load_federation_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "federation.yaml"
    path.write_text("pools:\n  - name: hpc\n    kind: slurm\nrules:\n  - {name: a, pools: [hpx]}\n")
    with pytest.raises(FederationError) as err:
        load_federation(path)
    assert str(err.value) == (
        f"{path}: rules[0].pools: rule 'a': unknown pool 'hpx'; did you mean 'hpc'? "
        "(known pools: local, hpc)"
    )


def test_load_federation_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "federation.yaml"
    path.write_text("pools:\n  - name: hpc\n   kind: [slurm\n")
    with pytest.raises(FederationError, match=rf"^{re.escape(str(path))}:\d+: not valid YAML"):
        load_federation(path)
    missing = tmp_path / "nope.yaml"
    with pytest.raises(FederationError, match="cannot read the federation config"):
        load_federation(missing)


def test_docs_example_is_the_module_example() -> None:
    text = DOCS.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert EXAMPLE_YAML in blocks
    for block in blocks:
        parse_federation(yaml.safe_load(block), "docs")


def test_pool_load_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="used_fraction"):
        PoolLoad(-0.1)
    with pytest.raises(ValueError, match="used_fraction"):
        PoolLoad(float("nan"))


# ----------------------------------------------------------------------------- placement

OWN = Placement(
    node_selector={"fusesched.io/gpu-model": "H200"},
    required=(LabelRequirement("rack", LabelOp.IN, ("r1", "r2")),),
    preferred=(PreferredTerm(LabelRequirement("rack", LabelOp.IN, ("r1",)), 20),),
)


def _node(pool: str, rack: str = "r1", model: str = "H200") -> dict[str, str]:
    return {LABEL_POOL: pool, "rack": rack, "fusesched.io/gpu-model": model}


def _score(placement: Placement, labels: dict[str, str]) -> int:
    return sum(t.weight for t in placement.preferred if t.requirement.matches(labels))


def test_routed_placement_restricts_and_orders() -> None:
    placed = routed_placement(OWN, Route(("slurm", "local", "k8s"), "r", ()))
    assert placed.node_selector == OWN.node_selector
    assert placed.required == (
        *OWN.required,
        LabelRequirement(LABEL_POOL, LabelOp.IN, ("slurm", "local", "k8s")),
    )
    assert placed.preferred == (
        *OWN.preferred,
        PreferredTerm(LabelRequirement(LABEL_POOL, LabelOp.IN, ("slurm",)), 100),
        PreferredTerm(LabelRequirement(LABEL_POOL, LabelOp.IN, ("local",)), 50),
    )
    assert OWN.required == (LabelRequirement("rack", LabelOp.IN, ("r1", "r2")),)  # untouched
    scores = [_score(placed, _node(p)) for p in ("slurm", "local", "k8s")]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == 3


@pytest.mark.parametrize(
    ("labels", "allowed"),
    [
        (_node("slurm"), True),
        (_node("k8s", rack="r2"), True),
        (_node("edge"), False),  # not in the route
        ({"rack": "r1", "fusesched.io/gpu-model": "H200"}, False),  # no pool label
        (_node("local", rack="r3"), False),  # the job's own requirement
        (_node("local", model="A100"), False),  # the job's own selector
    ],
)
def test_routed_placement_allows(labels: dict[str, str], allowed: bool) -> None:
    placed = routed_placement(OWN, Route(("slurm", "local", "k8s"), None, ()))
    assert placed.allows(labels) is allowed
    assert placed.constrained


def test_one_pool_needs_no_preference() -> None:
    placed = routed_placement(Placement(), Route(("k8s",), "services", ()))
    assert placed.preferred == ()
    assert placed.required == (LabelRequirement(LABEL_POOL, LabelOp.IN, ("k8s",)),)
    assert placed.allows({LABEL_POOL: "k8s"})
    assert not placed.allows({LABEL_POOL: "local"})


def test_routed_placement_needs_a_pool() -> None:
    with pytest.raises(ValueError, match="at least one pool"):
        routed_placement(Placement(), Route((), None, ()))


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 20, 101])
def test_pool_weights_strictly_decrease_within_range(count: int) -> None:
    weights = pool_weights(count)
    assert len(weights) == count - 1
    assert all(1 <= w <= 100 for w in weights)
    assert all(a > b for a, b in itertools.pairwise(weights))
    if count <= 8:
        assert weights[:3] == (100, 50, 25)[: count - 1]
