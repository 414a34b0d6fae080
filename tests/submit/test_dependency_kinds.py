"""The dependency kinds a submission may name — ``after``, ``afterok``, ``afternotok``,
``afterany`` and ``singleton`` — in Slurm's ``-d`` syntax (sbatch scripts and YAML items) and
in the API's request model, with clear refusals for what stays unsupported."""

from __future__ import annotations

import pytest

from fusesched.model.job import Dependency, DependencyKind
from fusesched.submit import SubmitError, parse_job_yaml, parse_request, parse_sbatch
from fusesched.submit.request import DependencyRequest
from fusesched.submit.syntax import parse_dependencies

K = DependencyKind


def pairs(text: str) -> list[tuple[str, str]]:
    return [(d.kind.value, d.job_id) for d in parse_dependencies(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("after:12", [("after", "12")]),
        ("after:12:13_4", [("after", "12"), ("after", "13_4")]),
        ("afternotok:7", [("afternotok", "7")]),
        ("afternotok:7:8", [("afternotok", "7"), ("afternotok", "8")]),
        ("singleton", [("singleton", "")]),
        (" singleton , afterany:4", [("singleton", ""), ("afterany", "4")]),
        ("afterok:12_[1-3]", [("afterok", "12_1"), ("afterok", "12_2"), ("afterok", "12_3")]),
        (
            "afterok:12_[1,5-6],after:3",
            [("afterok", "12_1"), ("afterok", "12_5"), ("afterok", "12_6"), ("after", "3")],
        ),
        (
            "afterany:12_[2,1-2]:13",
            [("afterany", "12_2"), ("afterany", "12_1"), ("afterany", "13")],
        ),
        (
            "after:1,afterok:2,afternotok:3,afterany:4,singleton",
            [
                ("after", "1"),
                ("afterok", "2"),
                ("afternotok", "3"),
                ("afterany", "4"),
                ("singleton", ""),
            ],
        ),
    ],
)
def test_every_kind_is_read(text: str, expected: list[tuple[str, str]]) -> None:
    assert pairs(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("afterok:1?afternotok:1", r"'\?' \(any of\) is not supported; use ',' \(all of\)"),
        ("after:1+10", r"'after:1\+10': '\+time' delays are not supported"),
        ("afternotok:5+1", r"'\+time' delays are not supported"),
        ("singleton:12", "'singleton:12': singleton takes no job ids"),
        ("singleton:", "singleton takes no job ids"),
        ("after", "'after': give job ids, as in after:123:124"),
        ("afternotok:", "give job ids, as in afternotok:123:124"),
        (
            "afterburstbuffer:3",
            r"'afterburstbuffer:3' is not supported \(use after:ID, afterok:ID, afternotok:ID, "
            r"afterany:ID, aftercorr:ID or singleton\)",
        ),
        ("expand:3", "'expand:3' is not supported"),
        ("Singleton", "'Singleton' is not supported"),
        ("afterok:1,,after:2", "an empty item"),
        ("after:1,", "an empty item"),
        ("  ", "no dependency given"),
        ("afterok:12_[3-1]", r"'afterok:12_\[3-1\]': '3-1' ends before it starts"),
        ("afterok:12_[", r"cannot read '12_\[' \(array members go in brackets, as in 12_\[1-3\]"),
        ("afterok:12_[1,2", r"cannot read '12_\[1' \(array members go in brackets"),
        ("afterok:12_[1-9:2]", r"cannot read '12_\[1-9' \(array members go in brackets"),
        ("afterok:12_[a]", r"cannot read index 'a' of '12_\[a\]'"),
        ("afterok:12_[]", r"cannot read index '' of '12_\[\]'"),
        ("afterok:12[1]", r"cannot read job id '12\[1\]' \(as in 12, 12_3, 12_\[1-3\] or 12_\*\)"),
        ("afterok:12_[0-99999999]", r"more than 10000 dependencies in all; .* array \(12\)"),
        # (the limit holds for all the ranges together, not for each)
        ("afterok:5:6,afterok:12_[1-9999]", "'afterok:12_.*more than 10000 dependencies"),
    ],
)
def test_what_stays_refused_says_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_dependencies(text)


def test_sbatch_dependency_option() -> None:
    script = "#!/bin/sh\n#SBATCH -J nightly\n#SBATCH -d after:5,singleton\n./run\n"
    request = parse_sbatch(script).request
    assert [(d.kind, d.job_id) for d in request.dependencies] == [
        (K.AFTER, "5"),
        (K.SINGLETON, ""),
    ]
    spec = request.to_job_spec("9", 0.0)
    assert spec.dependencies == (Dependency(K.AFTER, "5"), Dependency(K.SINGLETON))
    assert spec.name == "nightly"


def test_sbatch_refusal_names_the_line() -> None:
    with pytest.raises(SubmitError, match=r"s\.sh:2: -d: dependency 'afternotok:5\+3'"):
        parse_sbatch("#!/bin/sh\n#SBATCH -d afternotok:5+3\n./run\n", source="s.sh")


def test_yaml_items_in_slurm_syntax_and_as_mappings() -> None:
    text = (
        "name: n\nresources: {cpu: 1}\ncommand: a\n"
        "dependencies: [afternotok:3, singleton, {kind: after, job_id: '4'}, {kind: singleton}]\n"
    )
    (request,) = parse_job_yaml(text)
    assert [(d.kind, d.job_id) for d in request.dependencies] == [
        (K.AFTER_NOT_OK, "3"),
        (K.SINGLETON, ""),
        (K.AFTER, "4"),
        (K.SINGLETON, ""),
    ]


def test_yaml_refusal_names_the_item() -> None:
    text = "resources: {cpu: 1}\ncommand: a\ndependencies:\n  - after:1\n  - singleton:2\n"
    with pytest.raises(SubmitError, match=r"f\.yaml:5: dependency 'singleton:2': singleton takes"):
        parse_job_yaml(text, source="f.yaml")


def minimal(*deps: dict[str, str]) -> dict[str, object]:
    return {"groups": [{"resources": {"cpu": 1}, "argv": ["x"]}], "dependencies": list(deps)}


def test_the_request_model_takes_every_kind_and_round_trips() -> None:
    request = parse_request(
        minimal(
            {"kind": "after", "job_id": "1"},
            {"kind": "afternotok", "job_id": "2"},
            {"kind": "singleton"},
        )
    )
    assert [d.kind for d in request.dependencies] == [K.AFTER, K.AFTER_NOT_OK, K.SINGLETON]
    # as the store keeps it (no nulls) and reads it back after a restart
    stored = request.model_dump(mode="json", exclude_none=True)
    assert stored["dependencies"][2] == {"kind": "singleton", "job_id": ""}
    assert parse_request(stored) == request


@pytest.mark.parametrize(
    ("dep", "message"),
    [
        ({"kind": "singleton", "job_id": "3"}, "dependencies[0]: singleton names no job_id"),
        ({"kind": "after"}, "dependencies[0]: after needs job_id, the id of the job it waits for"),
        ({"kind": "afternotok", "job_id": ""}, "afternotok needs job_id"),
        ({"kind": "before", "job_id": "1"}, "dependencies[0].kind: Input should be 'after'"),
    ],
)
def test_the_request_model_refuses_with_a_reason(dep: dict[str, str], message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_request(minimal(dep))
    assert message in str(caught.value)


def test_the_request_model_alone() -> None:
    assert DependencyRequest(kind=K.SINGLETON).job_id == ""
    with pytest.raises(ValueError, match="singleton names no job_id"):
        DependencyRequest(kind=K.SINGLETON, job_id="1")
