"""Heterogeneous jobs in batch scripts (submit/sbatch_hetjob.py): ``#SBATCH hetjob`` lines
and ``:`` on the command line make one task group per component; the job's own options come
from the first component; what fusesched cannot honour per component is refused, located."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fusesched.submit.errors import SubmitError
from fusesched.submit.request import parse_request
from fusesched.submit.sbatch import command_flags, parse_sbatch
from fusesched.submit.sbatch_reader import split_components

SCRIPT = """#!/bin/bash
#SBATCH -J het -t 10 -n 1 -c 4 --mem=8G
#SBATCH hetjob
#SBATCH -n 2 -c 1 --gpus-per-task=1 --mem-per-cpu=1G
srun --het-group=1 hostname
"""
BODY = "#!/bin/bash\nsrun --het-group=1 hostname\n"


def groups(job: object) -> list[tuple[str, int, dict[str, str]]]:
    request = job.request  # type: ignore[attr-defined]
    return [(g.name, g.replicas, dict(g.resources)) for g in request.groups]


def test_a_hetjob_script_is_one_group_per_component() -> None:
    job = parse_sbatch(SCRIPT, source="het.sh")
    request = job.request
    assert request.hetjob and request.slurm_env
    assert groups(job) == [
        ("het0", 1, {"cpu": "4", "memory": "8Gi"}),
        ("het1", 2, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}),
    ]
    assert request.name == "het" and request.walltime_s == 600
    assert all(g.script == SCRIPT for g in request.groups)  # (run on component 0 only)
    assert job.warnings == ()


def test_packjob_and_the_command_line_say_the_same() -> None:
    old = parse_sbatch(SCRIPT.replace("hetjob", "packjob"), source="het.sh")
    args = ["-J", "het", "-t", "10", "-n1", "-c4", "--mem=8G", ":"]
    args += ["-n", "2", "-c", "1", "--gpus-per-task=1", "--mem-per-cpu=1G"]
    line = parse_sbatch(BODY, source="het.sh", args=args)
    assert groups(old) == groups(line) == groups(parse_sbatch(SCRIPT, source="het.sh"))
    assert line.request.hetjob and line.request.name == "het"


def test_a_colon_that_is_an_options_value_separates_nothing() -> None:
    assert split_components(["-J", ":", "-n", "2", ":", "-n1", "--comment", ":"]) == [
        ["-J", ":", "-n", "2"],
        ["-n1", "--comment", ":"],
    ]
    assert split_components(["-H", ":", "-n1"]) == [["-H"], ["-n1"]]  # (-H takes no value)
    job = parse_sbatch(BODY, args=["-J", ":", "-n", "2"])
    assert not job.request.hetjob and job.request.name == ":"


def test_the_command_line_without_colons_gives_the_first_components_options() -> None:
    job = parse_sbatch(SCRIPT, source="het.sh", args=["-n", "3", "-t", "20"])
    assert [g.replicas for g in job.request.groups] == [3, 2]
    assert job.request.walltime_s == 1200  # the command line wins over the script's, job-wide
    again = SCRIPT.replace("--mem-per-cpu=1G", "--mem-per-cpu=1G -t 10")  # repeated: the same
    assert parse_sbatch(again, args=["-t", "20"]).request.walltime_s == 1200


def test_mem_and_exclude_carry_on_to_the_next_components_as_in_slurm() -> None:
    job = parse_sbatch(BODY, args=["--mem=8G", "-x", "n9", ":", "-n", "2", ":", "--mem-per-cpu=1G"])
    assert [g.resources.get("memory") for g in job.request.groups] == ["8Gi", "4Gi", "1Gi"]
    (term,) = job.request.placement.required
    assert (term.key, term.op, term.values) == ("kubernetes.io/hostname", "NotIn", ["n9"])
    assert job.warnings == ()  # (given to every component by carrying on: nothing to tell)


def own_filters(job: object) -> list[dict[str, object]]:
    """Each group's own placement, as the request's JSON gives it ({} for none)."""
    request = job.request  # type: ignore[attr-defined]
    return [
        {} if g.placement is None else g.placement.model_dump(mode="json", exclude_defaults=True)
        for g in request.groups
    ]


def test_node_constraints_are_each_components_own() -> None:
    script = SCRIPT.replace("--mem-per-cpu=1G", "--mem-per-cpu=1G -C ib")
    job = parse_sbatch(script, source="het.sh")
    assert job.request.placement.required == [] and job.warnings == ()
    assert own_filters(job) == [
        {},
        {"required": [{"key": "feature.fusesched.io/ib", "op": "Exists"}]},
    ]
    typed = parse_sbatch(BODY, args=["-n1", ":", "--gpus-per-task=h200:1", "-C", "ib"])
    assert typed.request.placement.node_selector == {} and typed.warnings == ()
    assert own_filters(typed)[1] == {
        "node_selector": {"fusesched.io/gpu-model": "h200"},
        "required": [{"key": "feature.fusesched.io/ib", "op": "Exists"}],
    }


def test_the_typical_cpu_and_gpu_components() -> None:
    args = ["-n1", "-C", "pool=cpu", "-w", "c[1-2]", ":"]
    args += ["-n2", "-C", "pool=gpu", "--gpus-per-task=a100:1", "-x", "g9"]
    job = parse_sbatch(BODY, args=args)
    assert own_filters(job) == [
        {
            "node_selector": {"pool": "cpu"},
            "required": [{"key": "kubernetes.io/hostname", "op": "In", "values": ["c1", "c2"]}],
        },
        {
            "node_selector": {"pool": "gpu", "fusesched.io/gpu-model": "a100"},
            "required": [{"key": "kubernetes.io/hostname", "op": "NotIn", "values": ["g9"]}],
        },
    ]
    spec = job.request.to_job_spec("7", 0.0)
    cpu, gpu = spec.task_groups
    assert cpu.placement is not None and gpu.placement is not None
    assert cpu.placement.allows({"pool": "cpu", "kubernetes.io/hostname": "c2"})
    assert not cpu.placement.allows({"pool": "gpu", "kubernetes.io/hostname": "c2"})
    assert gpu.placement.allows({"pool": "gpu", "fusesched.io/gpu-model": "a100"})


def test_constraints_every_component_gives_alike_are_the_jobs() -> None:
    job = parse_sbatch(BODY, args=["-n1", "-C", "zone=a&ib", ":", "-n1", "-C", "zone=a&ib"])
    assert job.request.placement.node_selector == {"zone": "a"}
    assert [r.key for r in job.request.placement.required] == ["feature.fusesched.io/ib"]
    assert own_filters(job) == [{}, {}]
    # a part they share is the job's, the rest each component's
    mixed = parse_sbatch(BODY, args=["-C", "zone=a&pool=cpu", ":", "-C", "zone=a&pool=gpu"])
    assert mixed.request.placement.node_selector == {"zone": "a"}
    assert own_filters(mixed) == [
        {"node_selector": {"pool": "cpu"}},
        {"node_selector": {"pool": "gpu"}},
    ]


def test_exclusive_given_by_one_component_applies_to_all_with_a_warning() -> None:
    job = parse_sbatch(BODY, source="het.sh", args=["-n1", ":", "-n1", "--exclusive"])
    assert job.request.placement.exclusive
    (warning,) = job.warnings
    assert "--exclusive of component(s) 1 applies to every component" in warning


def test_spreading_is_one_cap_for_the_whole_job() -> None:
    job = parse_sbatch(BODY, args=["-N1", "-n1", ":", "-N2", "--ntasks-per-node=2"])
    assert job.request.placement.max_tasks_per_node == 2
    assert job.request.placement.nodes is None
    (warning,) = job.warnings  # (one cap: not exactly 2 nodes for component 1)
    assert "component 1's 4 tasks are not held to exactly 2 nodes" in warning
    looser = parse_sbatch(BODY, args=["-N2", "--ntasks-per-node=1", ":", "-N1", "-n", "4"])
    assert looser.request.placement.max_tasks_per_node == 4
    assert "component 0 asks for at most 1 task(s) a node" in looser.warnings[-1]
    one = parse_sbatch(BODY, args=["-N1", "-n", "3", ":", "-n", "2"])
    assert one.request.placement.topology is None
    assert "component 0's 3 tasks are not kept on one node" in one.warnings[0]


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (
            SCRIPT.replace("--mem-per-cpu=1G", "--mem-per-cpu=1G -t 20"),
            [],
            "het.sh:4: -t: component 1: fusesched runs a heterogeneous job as one job, whose -t "
            "is one for all its components: give it in the first component only",
        ),
        (SCRIPT, ["-n1", ":", "-n2", ":", "-n3"], "command line: the command line gives 3 "),
        (SCRIPT.replace("-J het", "-J het --array=1-3"), [], "het.sh:2: --array: job arrays"),
        (BODY, ["-n1", ":", "-p", "gpu"], "command line: -p: component 1: fusesched runs"),
        (BODY, ["-n1", ":", "--wrap=hostname"], "--wrap: give a batch script or --wrap"),
        ("", ["-n1", ":", "--wrap=hostname"], "--wrap: component 1: fusesched runs"),
        (SCRIPT.replace("#SBATCH hetjob", "#SBATCH hetjob -n 2"), [], "het.sh:3: hetjob sep"),
        (SCRIPT.replace("-c 1 --gpus", "-c one --gpus"), [], "het.sh:4: -c: expected a whole"),
    ],
)
def test_what_cannot_be_honoured_is_refused_where_it_is(
    script: str, args: list[str], message: str
) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_sbatch(script, source="het.sh", args=args)
    assert str(caught.value).startswith(message) or message in str(caught.value)


_NOTHING_AFTER = "gives no options (nothing follows its ':' or #SBATCH hetjob line)"
_ONE = "component 1 of the heterogeneous job "
_NOTHING_BEFORE = "component 0 of the heterogeneous job gives no options (the options begin"


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        (BODY, ["-n1", ":"], "command line: " + _ONE + _NOTHING_AFTER),
        (BODY, [":", "-n1"], "command line: " + _NOTHING_BEFORE),
        (BODY, ["-n1", ":", ":", "-n1"], "command line: component 1 of the heterogeneous job"),
        ("", ["--wrap=hostname", "-n1", ":"], "command line: component 1 "),
        ("#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\nhostname\n", [], "het.sh:3: component 1 "),
        ("#!/bin/sh\n#SBATCH hetjob\n#SBATCH -n1\nhostname\n", [], "het.sh:2: " + _NOTHING_BEFORE),
        (
            "#!/bin/sh\n#SBATCH -n1\n#SBATCH packjob\n#SBATCH hetjob\n#SBATCH -n1\nhostname\n",
            [],
            "het.sh:3: " + _ONE + _NOTHING_AFTER,
        ),
    ],
)
def test_an_empty_component_is_refused_where_it_is(
    script: str, args: list[str], message: str
) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_sbatch(script, source="het.sh", args=args)
    assert str(caught.value).startswith(message), str(caught.value)
    assert str(caught.value).endswith("give it its own, such as -n 1")


def test_a_component_given_on_the_command_line_alone_is_not_empty() -> None:
    script = "#!/bin/sh\n#SBATCH -J x\n#SBATCH hetjob\nhostname\n"  # (its options: below)
    job = parse_sbatch(script, source="het.sh", args=["-n1", ":", "-n2"])
    assert [(g.name, g.replicas) for g in job.request.groups] == [("het0", 1), ("het1", 2)]


def test_a_hetjob_after_the_first_command_is_ignored_as_any_late_directive() -> None:
    job = parse_sbatch(BODY + "#SBATCH hetjob\n#SBATCH -n 4\n", source="late.sh")
    assert not job.request.hetjob and len(job.request.groups) == 1
    assert "late.sh:3: #SBATCH after the first command is ignored" in job.warnings[0]


def test_a_later_components_command_flags_count() -> None:
    assert command_flags(SCRIPT.replace("--mem-per-cpu=1G", "--mem-per-cpu=1G --wait")) == {"wait"}


def test_the_request_says_what_a_hetjob_needs() -> None:
    job = parse_sbatch(SCRIPT).request.model_dump(mode="json")
    again = parse_request(job)
    assert again.hetjob and [g.name for g in again.groups] == ["het0", "het1"]
    for change, said in [
        ({"groups": job["groups"][:1]}, "needs two task groups or more"),
        ({"slurm_env": False}, "needs slurm_env: true"),
        ({"min_member": 1}, "min_member cannot be given with hetjob"),
        ({"array": {"start": 1, "stop": 2}}, "job arrays of heterogeneous jobs"),
    ]:
        with pytest.raises(SubmitError, match=said):
            parse_request({**job, **change})


def test_the_example_of_the_docs_reads_as_they_say() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "SUBMIT.md").read_text()
    (example,) = [b for b in re.findall(r"```sh\n(.*?)```", doc, re.DOTALL) if "hetjob" in b]
    job = parse_sbatch(example, source="run.sh")
    assert job.warnings == ()
    assert groups(job) == [
        ("het0", 1, {"cpu": "4", "memory": "8Gi"}),
        ("het1", 2, {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}),
    ]
    said = "fusesched sbatch -J coord -t 30 -n1 -c4 --mem=8G : -n2 -c1 --gpus-per-task=1"
    assert said in " ".join(doc.split())
    args = [*said.split()[2:], "--mem-per-cpu=4G"]
    body = "#!/bin/bash\n" + example.split("\n", 4)[4]
    assert groups(parse_sbatch(body, source="run.sh", args=args)) == groups(job)
