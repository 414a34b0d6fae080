"""#SBATCH batch scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.model.job import DependencyKind, JobType, LabelOp, QoS
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.submit import JobRequest, SubmitError, TopologyMode, load_sbatch, parse_sbatch

TRAIN = """\
#!/bin/bash
#SBATCH --job-name=llm
#SBATCH -N 2 --ntasks-per-node=4   # two nodes, four ranks each
#SBATCH --cpus-per-task=8 --mem=256G
#SBATCH --gres=gpu:h200:4
#SBATCH -t 1-12:00:00 -p gpu --qos=high -A ml
#SBATCH -o logs/%x-%j.out -e logs/%x-%j.err
#SBATCH --mail-type=END

module load cuda
srun torchrun --nproc-per-node 4 train.py
"""


def parse(directives: str, args: list[str] | None = None) -> JobRequest:
    return parse_sbatch("#!/bin/sh\n" + directives + "\n./run\n", args=args or []).request


def test_training_script() -> None:
    parsed = parse_sbatch(TRAIN, source="train.sh")
    req = parsed.request
    assert req.name == "llm" and req.queue == "gpu" and req.qos is QoS.GOLD
    assert req.tenant == "ml" and req.walltime_s == 129600
    assert (req.output, req.error) == ("logs/%x-%j.out", "logs/%x-%j.err")
    (group,) = req.groups
    assert group.name == "main" and group.replicas == 8 and group.script == TRAIN
    assert group.argv == []
    assert group.resources == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    assert req.placement.max_tasks_per_node == 4
    assert req.placement.node_selector == {"fusesched.io/gpu-model": "h200"}
    assert parsed.warnings == ()
    assert req.notify is not None and req.notify.describe() == "END"  # to the job's user
    assert req.identified().type is JobType.AI_TRAIN


@pytest.mark.parametrize(
    ("directives", "replicas", "max_per_node", "resources"),
    [
        ("", 1, None, {"cpu": "1"}),
        ("#SBATCH -n 16", 16, None, {"cpu": "1"}),
        ("#SBATCH -n16 -c4", 16, None, {"cpu": "4"}),
        ("#SBATCH --nodes=4", 4, 1, {"cpu": "1"}),
        ("#SBATCH -N 4 -n 10", 10, 3, {"cpu": "1"}),
        ("#SBATCH -N 3 --ntasks-per-node=2", 6, 2, {"cpu": "1"}),
        ("#SBATCH --ntasks-per-node=8", 8, 8, {"cpu": "1"}),
        ("#SBATCH -n 5 --ntasks-per-node 2", 5, 2, {"cpu": "1"}),
        ("#SBATCH -N 2 --mem=64G", 2, 1, {"cpu": "1", "memory": "64Gi"}),
        ("#SBATCH -n 4 --mem=8G", 4, None, {"cpu": "1", "memory": "2Gi"}),
        ("#SBATCH -c 4 --mem-per-cpu=2G", 1, None, {"cpu": "4", "memory": "8Gi"}),
        ("#SBATCH --mem=4000", 1, None, {"cpu": "1", "memory": "4000Mi"}),
        ("#SBATCH --gres=gpu:2", 1, None, {"cpu": "1", "nvidia.com/gpu": "2"}),
        ("#SBATCH --gres=gpu", 1, None, {"cpu": "1", "nvidia.com/gpu": "1"}),
        ("#SBATCH --gres=none", 1, None, {"cpu": "1"}),
        ("#SBATCH --gres=gpu:0", 1, None, {"cpu": "1"}),
        ("#SBATCH -N 2 -n 8 --gres=gpu:4", 8, 4, {"cpu": "1", "nvidia.com/gpu": "1"}),
        ("#SBATCH -n 4 --gpus=8", 4, None, {"cpu": "1", "nvidia.com/gpu": "2"}),
        ("#SBATCH -n 4 --gpus-per-task=2", 4, None, {"cpu": "1", "nvidia.com/gpu": "2"}),
        ("#SBATCH -N 2 --gpus-per-node=8", 2, 1, {"cpu": "1", "nvidia.com/gpu": "8"}),
        ("#SBATCH --gres=gpu:1,fpga:2", 1, None, {"cpu": "1", "nvidia.com/gpu": "1", "fpga": "2"}),
    ],
)
def test_tasks_and_resources(
    directives: str, replicas: int, max_per_node: int | None, resources: dict[str, str]
) -> None:
    req = parse(directives)
    assert req.groups[0].replicas == replicas
    assert req.placement.max_tasks_per_node == max_per_node
    assert req.groups[0].resources == resources


def test_one_node_keeps_tasks_on_one_host() -> None:
    req = parse("#SBATCH -N 1 -n 4")
    assert req.placement.topology is not None
    assert req.placement.topology.key == "kubernetes.io/hostname"
    assert req.placement.topology.mode is TopologyMode.REQUIRED


def test_gpu_type_from_gpus_option() -> None:
    req = parse("#SBATCH --gpus=a100:2")
    assert req.placement.node_selector == {"fusesched.io/gpu-model": "a100"}
    assert req.groups[0].resources["nvidia.com/gpu"] == "2"


def test_array_dependency_and_default_output() -> None:
    req = parse("#SBATCH --array=1-10:2%3\n#SBATCH -d afterok:12:13,afterany:14")
    assert req.array is not None
    assert (req.array.start, req.array.stop, req.array.step, req.array.max_parallel) == (
        1,
        9,
        2,
        3,
    )
    assert [(d.kind, d.job_id) for d in req.dependencies] == [
        (DependencyKind.AFTER_OK, "12"),
        (DependencyKind.AFTER_OK, "13"),
        (DependencyKind.AFTER_ANY, "14"),
    ]
    assert req.output == "slurm-%A_%a.out" and req.error is None
    assert parse("").output == "slurm-%j.out"


@pytest.mark.parametrize(
    ("time", "seconds"),
    [
        ("30", 1800),
        ("5:30", 330),
        ("2:00:00", 7200),
        ("2-6", 194400),
        ("2-6:30", 196200),
        ("2-6:30:10", 196210),
        ("UNLIMITED", None),
    ],
)
def test_time_formats(time: str, seconds: float | None) -> None:
    assert parse(f"#SBATCH --time={time}").walltime_s == seconds
    assert parse(f"#SBATCH -t {time}").walltime_s == seconds


def test_constraint_becomes_label_selectors() -> None:
    req = parse('#SBATCH --constraint="ib&arch=x86_64&[gpu=a100|gpu=h100]"')
    assert req.placement.node_selector == {"arch": "x86_64"}
    assert [(r.key, r.op, r.values) for r in req.placement.required] == [
        ("feature.fusesched.io/ib", LabelOp.EXISTS, []),
        ("gpu", LabelOp.IN, ["a100", "h100"]),
    ]


def test_exclusive_asks_for_whole_nodes() -> None:
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH --exclusive\n./a\n", source="x.sh")
    assert parsed.request.placement.exclusive
    assert parsed.request.to_job_spec("1", 0.0).placement.exclusive
    assert not parsed.warnings


@pytest.mark.parametrize("written", ["#SBATCH -H", "#SBATCH --hold"])
def test_hold_submits_the_job_held(written: str) -> None:
    parsed = parse_sbatch(f"#!/bin/sh\n{written}\n./a\n", source="x.sh")
    assert parsed.request.hold and not parsed.warnings
    assert not parse_sbatch("#!/bin/sh\n./a\n", source="x.sh").request.hold
    with pytest.raises(SubmitError, match="--hold takes no value"):
        parse_sbatch("#!/bin/sh\n#SBATCH --hold=yes\n./a\n", source="x.sh")


def test_qos_account_chdir_and_names() -> None:
    req = parse("#SBATCH -q bronze -A physics -D /scratch/run1 -J sim")
    assert (req.qos, req.tenant, req.groups[0].workdir, req.name) == (
        QoS.BRONZE,
        "physics",
        "/scratch/run1",
        "sim",
    )


def test_command_line_overrides_directives() -> None:
    parsed = parse_sbatch(TRAIN, source="train.sh", args=["-N", "4", "--time=30", "-pdebug"])
    req = parsed.request
    assert req.groups[0].replicas == 16 and req.walltime_s == 1800 and req.queue == "debug"


def test_directives_after_the_first_command_are_ignored_with_a_warning() -> None:
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH -n 2\necho hi\n#SBATCH -n 8\n", source="s.sh")
    assert parsed.request.groups[0].replicas == 2
    assert parsed.warnings == ("s.sh:4: #SBATCH after the first command is ignored (as by sbatch)",)


def test_other_comments_and_lookalikes_are_not_directives() -> None:
    req = parse("# SBATCH -n 8\n#SBATCHX -n 8\n#sbatch -n 8\n\n#SBATCH -n 2")
    assert req.groups[0].replicas == 2


def test_unknown_options_warn_and_skip_their_value() -> None:
    parsed = parse_sbatch(
        "#!/bin/sh\n#SBATCH --mcs-label lab -n 2 -S 1 --partiton=gpu\n./a\n", source="s.sh"
    )
    assert parsed.request.groups[0].replicas == 2
    assert parsed.warnings == (
        "s.sh:2: --mcs-label is not supported; ignored",
        "s.sh:2: -S is not supported; ignored",
        "s.sh:2: --partiton is not supported (did you mean --partition?); ignored",
    )


def test_node_range_uses_the_minimum_and_more_nodes_than_tasks_warn() -> None:
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH -N 2-4\n./a\n", source="s.sh")
    assert parsed.request.groups[0].replicas == 2
    assert parsed.warnings == ("s.sh:2: node range 2-4: using the minimum, 2",)
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH -N 4 -n 2\n./a\n", source="s.sh")
    assert parsed.request.groups[0].replicas == 2
    assert parsed.request.placement.max_tasks_per_node == 1
    assert parsed.warnings == ("s.sh:2: 2 task(s) cannot use 4 nodes; using 2",)


def test_tasks_per_node_needing_more_nodes_than_n_allows_are_refused() -> None:
    """As Slurm's (``Requested node configuration is not available``): ``-N 1 -n 2
    --ntasks-per-node=1`` needs two nodes; it ran on two (``-N`` ignored). In a range, the
    tasks' need picks the count, and the warning says so (it said "the minimum, 1")."""
    with pytest.raises(SubmitError, match=r"need 2 nodes; -N 1 allows at most 1"):
        parse_sbatch("#!/bin/sh\n#SBATCH -N 1 -n 2 --ntasks-per-node=1\n./a\n")
    with pytest.raises(SubmitError, match=r"need 3 nodes; -N 1-2 allows at most 2"):
        parse_sbatch("#!/bin/sh\n#SBATCH -N 1-2 -n 5 --ntasks-per-node=2\n./a\n")
    parsed = parse_sbatch(
        "#!/bin/sh\n#SBATCH -N 1-2 -n 3 --ntasks-per-node=2\n./a\n", source="s.sh"
    )
    assert parsed.warnings == ("s.sh:2: node range 1-2: using 2, what the tasks need",)
    assert parsed.request.groups[0].replicas == 3
    assert parsed.request.placement.max_tasks_per_node == 2
    fits = parse_sbatch("#!/bin/sh\n#SBATCH -N 2 -n 4 --ntasks-per-node=2\n./a\n")
    assert fits.warnings == () and fits.request.groups[0].replicas == 4


def test_one_node_with_tasks_per_node_keeps_the_tasks_on_one_host() -> None:
    """``-N 1 -n 3 --ntasks-per-node=3`` (or ``-N 1 --ntasks-per-node=3``) asks for one
    node, as ``-N 1 -n 3`` does: the cap of 3 a node alone let the tasks spread over three."""
    for options in ("-N 1 -n 3 --ntasks-per-node=3", "-N 1 --ntasks-per-node=3"):
        placement = parse_sbatch(f"#!/bin/sh\n#SBATCH {options}\n./a\n").request.placement
        assert placement.topology is not None, options
        assert placement.topology.key == LABEL_HOSTNAME
        assert placement.topology.mode is TopologyMode.REQUIRED
        assert placement.max_tasks_per_node == 3


def test_mem_zero_warns() -> None:
    parsed = parse_sbatch("#!/bin/sh\n#SBATCH --mem=0\n./a\n", source="s.sh")
    assert parsed.request.groups[0].resources == {"cpu": "1"}
    assert "--mem=0 (all of a node's memory) cannot be expressed" in parsed.warnings[0]


def test_load_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\n#SBATCH -n 2\n./a\n", encoding="utf-8")
    parsed = load_sbatch(path, ["-n", "3"])
    assert parsed.request.name == "job.sh" and parsed.request.groups[0].replicas == 3
    with pytest.raises(SubmitError, match="cannot read the batch script"):
        load_sbatch(tmp_path / "nope.sh")


BAD: list[tuple[str, list[str], str]] = [
    ("", [], "s.sh:1: the batch script is empty"),
    ("echo hi\n", [], "s.sh:1: the first line must start with #!"),
    ("#!/bin/sh\r\n#SBATCH -n 2\r\n", [], "s.sh:1: DOS line breaks"),
    ("#!/bin/sh\n\0", [], "contains NUL bytes"),
    ("#!/bin/sh\n#SBATCH -J 'a\n", [], "s.sh:2: cannot read the directive: No closing quotation"),
    ("#!/bin/sh\n#SBATCH -n\n", [], "s.sh:2: -n: -n needs a value"),
    ("#!/bin/sh\n#SBATCH -n 2 extra\n", [], "s.sh:2: unexpected word 'extra'"),
    ("#!/bin/sh\n#SBATCH -N two\n", [], "s.sh:2: -N: expected a node count such as 4 or 2-4"),
    ("#!/bin/sh\n#SBATCH -N 4-2\n", [], "s.sh:2: -N: expected a node count"),
    ("#!/bin/sh\n#SBATCH --ntasks=0\n", [], "s.sh:2: --ntasks: expected a whole number ≥ 1"),
    ("#!/bin/sh\n#SBATCH -c x\n", [], "s.sh:2: -c: expected a whole number ≥ 1, got 'x'"),
    ("#!/bin/sh\n#SBATCH --mem=4GiB\n", [], "s.sh:2: --mem: cannot read memory size '4GiB'"),
    (
        "#!/bin/sh\n#SBATCH --mem=4G\n#SBATCH --mem-per-cpu=1G\n",
        [],
        "s.sh:3: --mem-per-cpu: --mem and --mem-per-cpu cannot both be given",
    ),
    ("#!/bin/sh\n#SBATCH -t 1:2:3:4\n", [], "s.sh:2: -t: cannot read time '1:2:3:4'"),
    ("#!/bin/sh\n#SBATCH -p a,b\n", [], "s.sh:2: -p: one partition please, not 'a,b'"),
    ("#!/bin/sh\n#SBATCH --qos=normal2\n", [], "s.sh:2: --qos: unknown QoS 'normal2'"),
    ("#!/bin/sh\n#SBATCH -a 1,2,7\n", [], "s.sh:2: -a: array '1,2,7': indices must be evenly"),
    ("#!/bin/sh\n#SBATCH -d expand:5\n", [], "s.sh:2: -d: dependency 'expand:5'"),
    (
        "#!/bin/sh\n#SBATCH --gres=gpux:1\n",
        [],
        "s.sh:2: --gres: unknown resource 'gpux'; did you mean 'gpu' (nvidia.com/gpu)?",
    ),
    ("#!/bin/sh\n#SBATCH --gres=gpu:a:b:2\n", [], "s.sh:2: --gres: expected name[:type][:count]"),
    ("#!/bin/sh\n#SBATCH --gres=gpu:a100:x\n", [], "the count in 'gpu:a100:x' must be a whole"),
    ("#!/bin/sh\n#SBATCH --gres=fpga:big:1\n", [], "a type (big) is only understood for gpu"),
    ("#!/bin/sh\n#SBATCH --gres=gpu:1,gpu:2\n", [], "nvidia.com/gpu is asked for twice"),
    (
        "#!/bin/sh\n#SBATCH -n 2 --gres=gpu:3\n",
        [],
        "s.sh:2: --gres: 3 nvidia.com/gpu per node cannot be shared evenly by 2 tasks",
    ),
    ("#!/bin/sh\n#SBATCH -n 3 --gpus=4\n", [], "4 nvidia.com/gpu per job cannot be shared"),
    ("#!/bin/sh\n#SBATCH --gpus=0\n", [], "s.sh:2: --gpus: expected [type:]count, got '0'"),
    ("#!/bin/sh\n#SBATCH --gpus=2 --gres=gpu:2\n", [], "give the GPUs once, not with --gres"),
    (
        "#!/bin/sh\n#SBATCH --gpus-per-task=1 -G 2\n",
        [],
        "give the GPUs once, not with -G, --gpus-per-task",
    ),
    ("#!/bin/sh\n#SBATCH -C 'a|b'\n", [], "'a|b': 'or' is supported only between values"),
    ("#!/bin/sh\n#SBATCH -C 'a*2'\n", [], "-C: cannot read 'a*2'"),
    ("#!/bin/sh\n#SBATCH -C 'k=a&k=b'\n", [], "label k asked to be both a and b"),
    (
        "#!/bin/sh\n#SBATCH --gres=gpu:a100:1 -C fusesched.io/gpu-model=h100\n",
        [],
        "label fusesched.io/gpu-model asked to be both a100 and h100",
    ),
    ("#!/bin/sh\n./a\n", ["x.sh"], "command line: unexpected argument 'x.sh'"),
    ("#!/bin/sh\n./a\n", ["-t", "xx"], "command line: -t: cannot read time 'xx'"),
    ("#!/bin/sh\n./a\n", ["--nodes"], "command line: --nodes: --nodes needs a value"),
]


@pytest.mark.parametrize(("script", "args", "message"), BAD)
def test_errors_name_line_and_option(script: str, args: list[str], message: str) -> None:
    with pytest.raises(SubmitError) as caught:
        parse_sbatch(script, source="s.sh", args=args)
    assert message in str(caught.value)


def test_a_wrapped_command_may_be_an_array() -> None:
    """--wrap with --array is one job array (the check that refuses arrays of
    heterogeneous jobs is for jobs of several components only)."""
    req = parse_sbatch("", args=["-a", "0-2%2", "--wrap=exit $SLURM_ARRAY_TASK_ID"]).request
    assert req.array is not None and (req.array.start, req.array.stop) == (0, 2)
    assert req.array.max_parallel == 2 and not req.hetjob
