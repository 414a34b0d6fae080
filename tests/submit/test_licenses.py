"""Cluster licenses in submissions: sbatch ``-L/--licenses``, the job field ``licenses``
(fusesched YAML, REST JSON) and the Kubernetes annotation ``fusesched.io/licenses``."""

from __future__ import annotations

import pytest

from fusesched.submit import parse_submission
from fusesched.submit.errors import SubmitError
from fusesched.submit.request import JobRequest
from fusesched.submit.sbatch import parse_sbatch

SCRIPT = "#!/bin/bash\n#SBATCH {option}\nsrun ./model\n"


@pytest.mark.parametrize(
    ("option", "wanted"),
    [
        ("-L matlab:2", {"matlab": 2}),
        ("-Lmatlab", {"matlab": 1}),
        ("--licenses=matlab:2,ansys", {"matlab": 2, "ansys": 1}),
        ("--licenses ansys:4,matlab:10", {"ansys": 4, "matlab": 10}),
        ("--licenses=fluent.solver_x-2:3", {"fluent.solver_x-2": 3}),
    ],
)
def test_sbatch_licenses(option: str, wanted: dict[str, int]) -> None:
    parsed = parse_sbatch(SCRIPT.format(option=option), source="job.sh")
    assert parsed.request.licenses == wanted
    assert parsed.warnings == ()  # (no longer "not supported; ignored")
    spec = parsed.request.to_job_spec("1", 0.0)
    assert spec.licenses == tuple(sorted(wanted.items()))


def test_command_line_overrides_the_script() -> None:
    parsed = parse_sbatch(SCRIPT.format(option="-L matlab:2"), args=["-L", "ansys:1"])
    assert parsed.request.licenses == {"ansys": 1}


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("-L matlab:1|ansys:1", "'|' (any one of several licenses) is not supported"),
        ("--licenses=matlab:0", "license matlab: the count must be a whole number from 1"),
        ("--licenses=matlab:two", "the count must be a whole number, not 'two'"),
        ("--licenses=matlab:1,matlab:2", "license matlab is given twice"),
        ("--licenses=-x:1", "invalid license name '-x'"),
        ("--licenses=matlab:1,", "invalid license name ''"),
    ],
)
def test_sbatch_bad_licenses_say_where_and_why(option: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_sbatch(SCRIPT.format(option=option), source="job.sh")
    text = str(caught.value)
    assert text.startswith("job.sh:2: ")
    assert message in text


def test_yaml_field_and_json_round_trip() -> None:
    (parsed,) = parse_submission(
        'name: m\nlicenses: {matlab: 2, ansys: 1}\nresources: {cpu: 1}\ncommand: ["true"]\n'
    )
    request = parsed.request
    assert request.licenses == {"ansys": 1, "matlab": 2}
    again = JobRequest.from_json(request.to_json())
    assert again.licenses == request.licenses
    # an older stored request (no field) has none
    data = request.model_dump()
    del data["licenses"]
    assert JobRequest.model_validate(data).licenses == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{matlab: two}", "license matlab: the count must be a whole number"),
        ("{matlab: true}", "license matlab: the count must be a whole number"),
        ("{matlab: -1}", "license matlab: the count must be a whole number"),
        ("[matlab]", "give a mapping of license name to count"),
    ],
)
def test_yaml_bad_licenses(value: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_submission(f'licenses: {value}\nresources: {{cpu: 1}}\ncommand: ["true"]\n')
    assert message in str(caught.value)
    assert ":1: licenses" in str(caught.value)


KUBE = """apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {{fusesched.io/licenses: "{value}"}}
spec:
  schedulerName: fused-scheduler
  containers:
  - name: c
    image: busybox
    command: ["true"]
    resources: {{requests: {{cpu: 1}}}}
"""


def test_kube_annotation() -> None:
    (parsed,) = parse_submission(KUBE.format(value="matlab:2,ansys"))
    assert parsed.request.licenses == {"ansys": 1, "matlab": 2}


def test_kube_annotation_refuses_any_of() -> None:
    with pytest.raises(SubmitError) as caught:
        parse_submission(KUBE.format(value="matlab|ansys"))
    assert "metadata.annotations.fusesched.io/licenses" in str(caught.value)
    assert "'|'" in str(caught.value)
