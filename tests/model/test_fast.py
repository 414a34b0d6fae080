"""The cheaper construction of frozen model objects (``fusesched.model.fast``): objects built
through a draft, through a class's builder or through slot descriptors are the objects the
plain dataclass would build, and behave as such."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fusesched.model.events import (
    GroupPlacement,
    JobExited,
    JobSubmitted,
    ReserveJob,
    StartJob,
)
from fusesched.model.fast import DRAFT_MIN_FIELDS, builder, fast_init
from fusesched.model.job import JobSpec, JobType, TaskGroup
from fusesched.model.resources import CPU, Resources
from fusesched.sim.engine import SimJob

CPU1 = Resources({CPU: 1000})
GROUPS = (TaskGroup("main", 2, CPU1),)
NAMES = np.array(["n0", "n1", "n2"], dtype=object)


def _placement() -> GroupPlacement:
    return GroupPlacement("main", CPU1, np.array([0, 2]), np.array([1, 1]), NAMES)


#: (class, positional arguments, the same by keyword) for each fast class of the model
CASES: list[tuple[type, tuple[Any, ...], dict[str, Any]]] = [
    (
        JobExited,
        ("j", 3, "oom", True),
        {"job_id": "j", "exit_code": 3, "reason": "oom", "timed_out": True},
    ),
    (ReserveJob, ("j", 5.0, ("n0",)), {"job_id": "j", "start_time": 5.0, "nodes": ("n0",)}),
    (
        StartJob,
        ("j", (_placement(),), True),
        {"job_id": "j", "groups": (_placement(),), "backfilled": True},
    ),
    (TaskGroup, ("main", 2, CPU1), {"name": "main", "replicas": 2, "resources": CPU1}),
    (JobSpec, ("j", GROUPS, JobType.HPC), {"id": "j", "task_groups": GROUPS, "type": JobType.HPC}),
    (JobSubmitted, (JobSpec("j", GROUPS),), {"job": JobSpec(id="j", task_groups=GROUPS)}),
]


#: Classes whose objects pickle and hash: not a spec, whose placement holds a mappingproxy
#: (as it always did)
PLAIN_VALUES = (JobExited, ReserveJob, StartJob, TaskGroup)


def _same_hash(a: object, b: object) -> bool:
    return type(a) not in PLAIN_VALUES or hash(a) == hash(b)


def _plain(cls: type) -> type:
    """The same fields as ``cls`` in a plain frozen, slotted dataclass (the reference)."""
    fields = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, fields, frozen=True, slots=True)


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_objects_equal_keyword_built_and_plain_dataclass_ones(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    obj = cls(*args)
    assert type(obj) is cls
    assert obj == cls(**kwargs) and _same_hash(obj, cls(**kwargs))
    plain = _plain(cls)(*args)
    names = [f.name for f in dataclasses.fields(cls)]
    assert [getattr(obj, n) for n in names] == [getattr(plain, n) for n in names]
    assert repr(obj) == repr(plain)
    assert not hasattr(obj, "__dict__")  # still slotted


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_objects_stay_frozen(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    obj = cls(*args)
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, first, "other")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(obj, first)


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_pickle_copy_and_replace(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    obj = cls(*args)
    assert copy.copy(obj) == obj and type(copy.copy(obj)) is cls
    if cls in PLAIN_VALUES:
        assert copy.deepcopy(obj) == obj and type(copy.deepcopy(obj)) is cls
        again = pickle.loads(pickle.dumps(obj))
        assert again == obj and type(again) is cls
    first = dataclasses.fields(cls)[0]
    value = getattr(obj, first.name)
    changed = dataclasses.replace(obj, **{first.name: value})
    assert changed == obj and changed is not obj


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_builders_build_the_same_objects(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    if len(dataclasses.fields(cls)) < DRAFT_MIN_FIELDS:
        with pytest.raises(KeyError):  # built through slot descriptors: no builder
            builder(cls)
        return
    build = builder(cls)
    obj = build(*args)
    assert type(obj) is cls and obj == cls(*args) and _same_hash(obj, cls(*args))
    assert build(**kwargs) == obj
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, dataclasses.fields(cls)[0].name, "other")
    assert inspect.signature(build).parameters.keys() == inspect.signature(cls).parameters.keys()


def test_post_init_runs_on_every_path() -> None:
    with pytest.raises(ValueError, match="needs an id"):
        JobSpec("", GROUPS)
    with pytest.raises(ValueError, match="needs an id"):
        builder(JobSpec)("", GROUPS)
    with pytest.raises(ValueError, match="replicas"):
        builder(TaskGroup)("main", 0, CPU1)
    with pytest.raises(TypeError):
        JobExited()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        builder(JobExited)()


def test_draft_classes_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError, match="final"):

        class Later(JobExited):
            pass


def test_match_args_and_patterns() -> None:
    match JobExited("j", 1):
        case JobExited(job_id, code):
            assert (job_id, code) == ("j", 1)
        case _:  # pragma: no cover - the case above matches
            pytest.fail("no match")


@pytest.mark.parametrize("count", [1, 2, 3, 4, 8])
def test_any_number_of_fields_with_defaults(count: int) -> None:
    """A fresh class of ``count`` fields (the last half defaulted), built either way."""
    fields: list[Any] = [
        (f"f{i}", int, dataclasses.field(default=i)) if i >= count // 2 else (f"f{i}", int)
        for i in range(count)
    ]
    reference = dataclasses.make_dataclass("Ref", fields, frozen=True, slots=True)
    fast: Any = fast_init(dataclasses.make_dataclass("Ref", fields, frozen=True, slots=True))
    required = [10 + i for i in range(count // 2)]
    makers: list[Callable[..., Any]] = [fast]
    if count >= DRAFT_MIN_FIELDS:
        makers.append(builder(fast))
    for make in makers:
        obj = make(*required)
        want = reference(*required)
        assert [getattr(obj, f"f{i}") for i in range(count)] == [
            getattr(want, f"f{i}") for i in range(count)
        ]
        assert obj == fast(*required) and repr(obj) == repr(want)


def test_unsupported_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="unsupported"):

        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class Listed:
            items: list[int] = dataclasses.field(default_factory=list)


def test_sim_job_built_by_its_builder() -> None:
    spec = JobSpec("j", GROUPS)
    assert builder(SimJob)(spec, 5.0) == SimJob(spec, 5.0, 0)
