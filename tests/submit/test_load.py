"""Format detection: one entry for every file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.submit import SubmitError, load_submission, parse_submission

OWN = "name: own\nresources: {cpu: 1}\ncommand: a\n"
KUBE = """\
apiVersion: v1
kind: Pod
metadata: {name: kube}
spec:
  schedulerName: fused-scheduler
  containers: [{name: a, command: [a], resources: {requests: {cpu: 1}}}]
"""
SCRIPT = "#!/bin/sh\n#SBATCH -J script -n 2\n./a\n"


def test_each_format_is_recognised(tmp_path: Path) -> None:
    assert [p.request.name for p in parse_submission(OWN)] == ["own"]
    assert [p.request.name for p in parse_submission(KUBE)] == ["kube"]
    assert [p.request.name for p in parse_submission(OWN + "---\n" + KUBE)] == ["own", "kube"]
    (parsed,) = parse_submission(SCRIPT, sbatch_args=["-n", "4"])
    assert parsed.request.name == "script" and parsed.request.groups[0].replicas == 4
    own = "apiVersion: fusesched.io/v1\nkind: Job\n" + OWN
    assert parse_submission(own)[0].request.name == "own"
    path = tmp_path / "job.sh"
    path.write_text(SCRIPT, encoding="utf-8")
    assert load_submission(path)[0].request.name == "script"


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        (OWN, ["-n", "2"], "f: sbatch options were given but the file is not a batch script"),
        ("", [], "f: no job in the file (it is empty)"),
        ("apiVersion: apps/v1\nkind: StatefulSet\n", [], "f:2: kind: 'StatefulSet' is not"),
        (
            "apiVersion: fusesched/v1\n" + OWN,
            [],
            "f:1: kind: None is not supported; submit a Pod (v1), Job (batch/v1), Deployment "
            "(apps/v1), PyTorchJob (kubeflow.org/v1), MPIJob (kubeflow.org/v2beta1) or Volcano Job "
            "(batch.volcano.sh/v1alpha1) (a fusesched job file has apiVersion fusesched.io/v1, not "
            "'fusesched/v1')",
        ),
    ],
)
def test_errors(text: str, args: list[str], message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_submission(text, source="f", sbatch_args=args)
    assert message in str(caught.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SubmitError, match="cannot read the file"):
        load_submission(tmp_path / "none.yaml")
