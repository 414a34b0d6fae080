"""fusesched's own YAML job files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.model.job import DependencyKind, JobType
from fusesched.submit import SubmitError, load_job_yaml, parse_job_yaml

FULL = """\
apiVersion: fusesched.io/v1
kind: Job
name: llm-pretrain
queue: gpu
qos: gold
walltime: 12h
placement:
  node_selector: {fusesched.io/gpu-model: H200}
  max_tasks_per_node: 1
  topology: {key: topology.fusesched.io/nvlink-domain, mode: preferred}
dependencies: [afterok:41, {kind: afterany, job_id: "40"}]
groups:
  - name: worker
    replicas: 4
    resources: {cpu: 32, memory: 512Gi, gpu: 8}
    command: torchrun --nnodes 4 --nproc-per-node 8 "train.py" --config cfg.yaml
    env: {NCCL_DEBUG: INFO}
  - name: eval
    resources: {cpu: 4, memory: 16Gi}
    argv: [python, eval.py]
"""


def test_full_file() -> None:
    (req,) = parse_job_yaml(FULL, "job.yaml")
    assert req.name == "llm-pretrain" and req.queue == "gpu" and req.walltime_s == 43200
    worker, evaluation = req.groups
    assert worker.argv == [
        "torchrun",
        "--nnodes",
        "4",
        "--nproc-per-node",
        "8",
        "train.py",
        "--config",
        "cfg.yaml",
    ]
    assert worker.resources == {"cpu": "32", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert evaluation.argv == ["python", "eval.py"]
    assert [(d.kind, d.job_id) for d in req.dependencies] == [
        (DependencyKind.AFTER_OK, "41"),
        (DependencyKind.AFTER_ANY, "40"),
    ]
    assert req.placement.topology is not None
    assert req.identified().type is JobType.AI_TRAIN


def test_one_group_shorthand_and_array_string() -> None:
    (req,) = parse_job_yaml(
        "name: sweep\narray: 0-99:3%10\nresources: {cpu: 2}\ncommand: [python, run.py]\n"
    )
    assert req.groups[0].name == "main" and req.groups[0].argv == ["python", "run.py"]
    assert req.array is not None
    assert (req.array.start, req.array.stop, req.array.step, req.array.max_parallel) == (
        0,
        99,
        3,
        10,
    )


def test_unquoted_clock_walltime_is_read_as_written() -> None:
    # YAML 1.1 would read 01:30:00 as the base-60 number 5400; the text is what counts.
    (req,) = parse_job_yaml("walltime: 01:30:00\nresources: {cpu: 1}\ncommand: x\n")
    assert req.walltime_s == 5400
    (req,) = parse_job_yaml("walltime: 2-00:00:00\nresources: {cpu: 1}\ncommand: x\n")
    assert req.walltime_s == 172800
    (req,) = parse_job_yaml("walltime: ~\nresources: {cpu: 1}\ncommand: x\n")
    assert req.walltime_s is None


def test_numbers_in_commands_and_env_are_words() -> None:
    (req,) = parse_job_yaml("resources: {cpu: 1}\ncommand: [sleep, 10]\nenv: {EPOCHS: 3}\n")
    assert req.groups[0].argv == ["sleep", "10"] and req.groups[0].env == {"EPOCHS": "3"}


def test_several_documents_are_several_jobs() -> None:
    one = "name: {0}\nresources: {{cpu: 1}}\ncommand: {0}\n"
    text = "---\n" + one.format("a") + "---\n---\n" + one.format("b")
    assert [r.name for r in parse_job_yaml(text)] == ["a", "b"]


def test_load_from_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: a\nresources: {cpu: 1}\ncommand: a\n", encoding="utf-8")
    assert load_job_yaml(path)[0].name == "a"
    path.write_text("name: a\nresources: {cpu: 1}\ncommand: a\nbogus: 1\n", encoding="utf-8")
    with pytest.raises(SubmitError, match=r"^job.yaml:4: bogus: unknown field 'bogus'"):
        load_job_yaml(path)
    with pytest.raises(SubmitError, match="cannot read the job file"):
        load_job_yaml(tmp_path / "missing.yaml")


BAD: list[tuple[str, str]] = [
    ("", "no job in the file (it is empty)"),
    ("name: [\n", "f.yaml:2: malformed YAML: expected the node content"),
    ("name: a\n  b: c\n", "f.yaml:2: malformed YAML: mapping values are not allowed here"),
    ("name: a\nname: b\n", "f.yaml:2: duplicate key 'name'"),
    ("- a\n- b\n", "f.yaml:1: a job must be a mapping of fields, not a list"),
    (  # (a batch script without its #! line, given to sbatch: what it lacks is said)
        "echo hi\n",
        "f.yaml:1: a job must be a mapping of fields, not a str (a batch script must start "
        "with #! and its interpreter, e.g. #!/bin/bash, as for sbatch)",
    ),
    ("name: x\n", "f.yaml:1: groups: required field is missing"),
    (
        "name: x\nresources:\n  cpu: 1\n  gpux: 1\ncommand: a\n",
        "f.yaml:2: resources: unknown resource 'gpux'; did you mean 'gpu' (nvidia.com/gpu)?",
    ),
    (
        "groups:\n- name: a\n  resources: {cpu: 1}\n  command: a\n- name: b\n  replicas: 0\n"
        "  resources: {cpu: 1}\n  command: b\n",
        "f.yaml:6: groups[1].replicas: Input should be greater than or equal to 1",
    ),
    ("resources: {cpu: 1}\ncommand: a\nqos: best\n", "f.yaml:3: qos: Input should be 'gold'"),
    ("resources: {cpu: 1}\ncommand: a\nwalltime: 90\n", "f.yaml:3: duration '90' has no unit"),
    ("resources: {cpu: 1}\ncommand: a\nwalltime: [1]\n", "f.yaml:3: walltime must be a duration"),
    (
        "resources: {cpu: 1}\ncommand: a\nwalltime: 1h\nwalltime_s: 60\n",
        "f.yaml:3: give walltime or walltime_s, not both",
    ),
    (
        "resources: {cpu: 1}\ngroups: []\n",
        "f.yaml:1: resources belong to a group: put them under groups",
    ),
    ("resources: {cpu: 1}\ncommand: a\nargv: [b]\n", "f.yaml:2: give command or argv, not both"),
    ("resources: {cpu: 1}\ncommand: 'a \"b'\n", "f.yaml:2: command: No closing quotation"),
    ("resources: {cpu: 1}\ncommand: ''\n", "f.yaml:2: command is empty"),
    (
        "resources: {cpu: 1}\ncommand: [a, true]\n",
        "f.yaml:2: command[1]: Input should be a valid string",
    ),
    ("resources: {cpu: 1}\ncommand: a\narray: 1,2,7\n", "f.yaml:3: array '1,2,7': indices"),
    (
        "resources: {cpu: 1}\ncommand: a\ndependencies:\n  - afterok:1\n  - expand:2\n",
        "f.yaml:5: dependency 'expand:2' is not supported",
    ),
    (
        "apiVersion: batch/v1\nkind: Job\n",
        "f.yaml:1: apiVersion must be 'fusesched.io/v1', not 'batch/v1'; this looks like a "
        "Kubernetes object",
    ),
    ("kind: Pod\nresources: {cpu: 1}\ncommand: a\n", "f.yaml:1: kind must be 'Job', not 'Pod'"),
    (
        "resources: {cpu: 1}\ncommand: a\nplacement:\n  required:\n    - {key: k, op: In}\n",
        "f.yaml:5: placement.required[0]: label 'k': In needs at least one value",
    ),
    (
        "resources: {cpu: 1}\ncommand: a\nenv: {A: [1]}\n",
        "f.yaml:3: env.A: Input should be a valid string",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_job_yaml(text, "f.yaml")
    assert message in str(caught.value)


def test_unprintable_characters_are_a_clear_error() -> None:
    with pytest.raises(SubmitError, match=r"job.yaml: malformed YAML: unacceptable character"):
        parse_job_yaml("name: a\x9a\n", source="job.yaml")
